#include "os/job_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Records what is asked of the cgroup file system; `refuse` makes the calls on one path fail.
class FakeCgroupFiles : public CgroupFiles {
 public:
  Result<void> make_directory(const std::string& path) override {
    if (refuse.count(path) > 0) return fail("cannot create {}: Permission denied", path);
    directories.insert(path);
    return {};
  }
  Result<bool> remove_directory(const std::string& path) override {
    if (busy.count(path) > 0) return false;
    if (directories.erase(path) > 0) removed.push_back(path);
    return true;
  }
  std::vector<std::string> subdirectories(const std::string& path) const override {
    std::vector<std::string> names;
    for (const std::string& dir : directories) {
      if (dir.rfind(path + "/", 0) == 0 && dir.find('/', path.size() + 1) == std::string::npos) {
        names.push_back(dir.substr(path.size() + 1));
      }
    }
    return names;
  }
  Result<void> write(const std::string& path, const std::string& text) override {
    if (refuse.count(path) > 0) return fail("cannot write '{}' to {}: Invalid argument", text, path);
    writes.emplace_back(path, text);
    return {};
  }
  Result<void> attach_device_filter(const std::string& directory, const std::vector<bpf_insn>& program) override {
    if (refuse.count(directory + "#bpf") > 0) return fail("cannot load the device filter (bpf): Operation not permitted");
    attached[directory] = program.size();
    return {};
  }

  std::set<std::string> directories, refuse, busy;
  std::vector<std::string> removed;
  std::vector<std::pair<std::string, std::string>> writes;
  std::map<std::string, size_t> attached;
};

// A fake root with /proc/self/mountinfo and /proc/self/cgroup.
class FakeProc {
 public:
  FakeProc(const std::string& mountinfo, const std::string& cgroup) {
    char pattern[] = "/tmp/gpupool-device-cgroup-test-XXXXXX";
    root_ = mkdtemp(pattern);
    std::filesystem::create_directories(root_ + "/proc/self");
    std::ofstream(root_ + "/proc/self/mountinfo") << mountinfo;
    std::ofstream(root_ + "/proc/self/cgroup") << cgroup;
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }
  HostFiles host() const { return HostFiles(root_); }

 private:
  std::string root_;
};

constexpr const char* kHybridMounts =
    "35 30 0:32 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
constexpr const char* kHybridCgroups = "5:devices:/system.slice/gpupoold.service\n0::/system.slice/gpupoold.service\n";

TEST(DeviceIsolationFind, PrefersCgroupV1AndProbesIt) {
  FakeProc proc(kHybridMounts, kHybridCgroups);
  FakeCgroupFiles files;
  auto found = find_device_isolation(proc.host(), files, "gpupoold.0000abcd", {{195, 0}, {195, 1}});
  ASSERT_TRUE(found) << found.error().message;
  const std::string home = "/sys/fs/cgroup/devices/system.slice/gpupoold.service";
  EXPECT_EQ(found->mechanism, IsolationMechanism::CgroupV1);
  EXPECT_EQ(found->home, home);
  EXPECT_EQ(found->base, home + "/gpupoold.0000abcd");
  const std::string probe = home + "/gpupoold.0000abcd/probe";
  EXPECT_EQ(files.writes, (std::vector<std::pair<std::string, std::string>>{
                              {probe + "/devices.deny", "c 195:0 rwm"},
                              {probe + "/devices.deny", "c 195:1 rwm"},
                              {probe + "/cgroup.procs", "0"},
                              {home + "/cgroup.procs", "0"}}));
  EXPECT_EQ(files.directories, std::set<std::string>{found->base});  // the probe is gone
}

TEST(DeviceIsolationFind, FallsBackToCgroupV2WithAFilterProgram) {
  FakeProc proc(kHybridMounts, kHybridCgroups);
  FakeCgroupFiles files;
  files.refuse.insert("/sys/fs/cgroup/devices/system.slice/gpupoold.service/g");
  auto found = find_device_isolation(proc.host(), files, "g", {{195, 4}});
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->mechanism, IsolationMechanism::CgroupV2);
  EXPECT_EQ(found->base, "/sys/fs/cgroup/unified/system.slice/gpupoold.service/g");
  EXPECT_EQ(files.attached.at(found->base + "/probe"), device_filter_program({{195, 4}}).size());
}

TEST(DeviceIsolationFind, SaysWhyNothingWorks) {
  FakeProc proc("40 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/a\n");
  FakeCgroupFiles files;
  files.refuse.insert("/sys/fs/cgroup/a/g/probe#bpf");
  auto found = find_device_isolation(proc.host(), files, "g", {{195, 0}});
  ASSERT_FALSE(found);
  EXPECT_EQ(found.error().message,
            "no cgroup v1 devices controller is mounted; cgroup v2: cannot load the device filter (bpf): "
            "Operation not permitted");
  EXPECT_EQ(files.removed, std::vector<std::string>{"/sys/fs/cgroup/a/g/probe"});  // nothing left behind
  FakeProc outside("35 30 0:32 /docker/x /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", "5:devices:/other\n");
  auto not_ours = find_device_isolation(outside.host(), files, "g", {{195, 0}});
  ASSERT_FALSE(not_ours);
  EXPECT_EQ(not_ours.error().message,
            "the daemon's cgroup /other is outside the cgroup v1 devices controller mounted at "
            "/sys/fs/cgroup/devices; no cgroup v2 hierarchy is mounted");
  FakeCgroupFiles unread;
  EXPECT_FALSE(find_device_isolation(HostFiles("/nonexistent-root"), unread, "g", {{195, 0}}));
}

TEST(DeviceIsolationGroups, AnAttemptsGroupWithoutItsRulesIsRemoved) {
  FakeCgroupFiles files;
  ASSERT_TRUE(create_attempt_group(files, IsolationMechanism::CgroupV1, "/cg/base/job-1.1", {{195, 2}}));
  EXPECT_EQ(files.writes.back(), (std::pair<std::string, std::string>{"/cg/base/job-1.1/devices.deny", "c 195:2 rwm"}));
  // One left with other rules (an attempt that never started) is replaced; one in use is refused.
  files.writes.clear();
  ASSERT_TRUE(create_attempt_group(files, IsolationMechanism::CgroupV1, "/cg/base/job-1.1", {{195, 3}}));
  EXPECT_EQ(files.removed, std::vector<std::string>{"/cg/base/job-1.1"});
  EXPECT_EQ(files.writes, (std::vector<std::pair<std::string, std::string>>{{"/cg/base/job-1.1/devices.deny", "c 195:3 rwm"}}));
  files.busy.insert("/cg/base/job-1.1");
  auto in_use = create_attempt_group(files, IsolationMechanism::CgroupV1, "/cg/base/job-1.1", {{195, 3}});
  ASSERT_FALSE(in_use);
  EXPECT_EQ(in_use.error().message, "/cg/base/job-1.1 is still in use");
  files.refuse.insert("/cg/base/job-2.1/devices.deny");
  EXPECT_FALSE(create_attempt_group(files, IsolationMechanism::CgroupV1, "/cg/base/job-2.1", {{195, 2}}));
  EXPECT_EQ(files.directories, std::set<std::string>{"/cg/base/job-1.1"});
}

TEST(DeviceIsolationMig, CapabilityNodesFromTheDriversFiles) {
  FakeProc proc("", "");
  const std::string root = proc.host().root();
  // No mig-minors: a driver without MIG capability nodes.
  auto none = read_mig_capabilities(proc.host());
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_EQ(*none, std::nullopt);
  std::filesystem::create_directories(root + "/proc/driver/nvidia-caps");
  std::ofstream(root + "/proc/driver/nvidia-caps/mig-minors") << "config 1\nmonitor 2\ngpu0/gi1/access 12\n";
  auto no_major = read_mig_capabilities(proc.host());
  ASSERT_FALSE(no_major);
  EXPECT_EQ(no_major.error().message,
            "/proc/driver/nvidia-caps/mig-minors is there, but /proc/devices has no nvidia-caps driver");
  std::ofstream(root + "/proc/devices") << "Character devices:\n195 nvidia-frontend\n237 nvidia-caps\n";
  auto found = read_mig_capabilities(proc.host());
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->major, 237u);
  EXPECT_EQ((*found)->minors.at("gpu0/gi1/access"), 12u);
  std::ofstream(root + "/proc/driver/nvidia-caps/mig-minors") << "config\n";
  EXPECT_FALSE(read_mig_capabilities(proc.host()));
}

TEST(DeviceIsolationGroups, StaleGroupsGoExceptRunningAndBusyOnes) {
  FakeCgroupFiles files;
  DeviceIsolation isolation{IsolationMechanism::CgroupV1, "/cg", "/cg/base"};
  files.directories = {"/cg/base", "/cg/base/job-1.1", "/cg/base/job-2.3", "/cg/base/job-4.1", "/cg/base/probe"};
  files.busy.insert("/cg/base/job-4.1");  // its supervisor was killed; its processes live on
  EXPECT_EQ(remove_stale_groups(files, isolation, {"job-2.3"}), 1u);  // job-4.1
  EXPECT_EQ(files.directories, (std::set<std::string>{"/cg/base", "/cg/base/job-2.3", "/cg/base/job-4.1"}));
}

// --- against the kernel: root only, with fake device nodes ------------------------------------

// A directory where a device node made with mknod can be opened (not on a nodev mount), and the
// error of opening 195:N there when the cgroup allows it: ENXIO without the NVIDIA driver, ENODEV
// with it (no GPU of that minor). A cgroup that denies it gives EPERM.
struct DeviceNodes {
  std::string directory;
  int allowed_errno = 0;
};

std::optional<DeviceNodes> device_node_directory() {
  for (const char* parent : {"/tmp", "/dev/shm", "/dev"}) {
    std::string pattern = std::string(parent) + "/gpupool-devnodes-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) continue;
    std::string node = pattern + "/probe";
    int error = 0;
    // A high minor: no GPU answers it, with or without the driver.
    if (mknod(node.c_str(), S_IFCHR | 0600, makedev(kNvidiaMajor, 200)) == 0) {
      int fd = ::open(node.c_str(), O_RDWR | O_CLOEXEC);
      error = fd < 0 ? errno : 0;
      if (fd >= 0) ::close(fd);
      unlink(node.c_str());
    }
    if (error == ENXIO || error == ENODEV) return DeviceNodes{pattern, error};
    rmdir(pattern.c_str());
  }
  return std::nullopt;
}

// errno of opening the device from inside `group` (0: it opened).
int open_errno_inside(CgroupFiles& files, const std::string& group, const std::string& nodes, DeviceNumber device) {
  std::string node = fmt::format("{}/node-{}-{}", nodes, device.major, device.minor);
  mknod(node.c_str(), S_IFCHR | 0600, makedev(device.major, device.minor));
  pid_t child = fork();
  if (child == 0) {
    if (!join_group(files, group)) _exit(255);
    int fd = ::open(node.c_str(), O_RDWR);
    _exit(fd >= 0 ? 0 : errno);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void expect_kernel_denies(IsolationMechanism mechanism) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to make cgroups";
  auto files = system_cgroup_files();
  HostFiles host;
  auto mounts = parse_cgroup_mounts(host.read("/proc/self/mountinfo").value_or(""));
  auto own = parse_process_cgroups(host.read("/proc/self/cgroup").value_or(""));
  const auto& mount = mechanism == IsolationMechanism::CgroupV1 ? mounts.devices_v1 : mounts.unified;
  const auto& cgroup = mechanism == IsolationMechanism::CgroupV1 ? own.devices_v1 : own.unified;
  auto home = mount && cgroup ? cgroup_directory(*mount, *cgroup) : std::nullopt;
  if (!home) GTEST_SKIP() << "no " << to_string(mechanism) << " hierarchy here";
  auto nodes = device_node_directory();
  if (!nodes) GTEST_SKIP() << "no directory where device nodes can be opened";
  std::string group = fmt::format("{}/gpupool-unit-test-{}", *home, getpid());
  // Minors above any real GPU's, so a GPU of this machine is never touched; and a second major as
  // MIG capability nodes have (240, for local use, whatever answers it here).
  auto created = create_attempt_group(*files, mechanism, group, {{kNvidiaMajor, 201}, {kNvidiaMajor, 203}, {240, 7}});
  if (!created) {
    std::filesystem::remove_all(nodes->directory);
    GTEST_SKIP() << created.error().message;  // e.g. a container without the right to
  }
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {kNvidiaMajor, 203}), EPERM);
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {kNvidiaMajor, 201}), EPERM);
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {kNvidiaMajor, 202}), nodes->allowed_errno);
  EXPECT_EQ(open_errno_inside(*files, home.value(), nodes->directory, {kNvidiaMajor, 203}), nodes->allowed_errno);  // outside
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {240, 7}), EPERM);
  int other_minor_outside = open_errno_inside(*files, home.value(), nodes->directory, {240, 8});
  EXPECT_NE(other_minor_outside, EPERM);
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {240, 8}), other_minor_outside);
  EXPECT_EQ(open_errno_inside(*files, group, nodes->directory, {kNvidiaMajor, 7}), nodes->allowed_errno);
  auto removed = files->remove_directory(group);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(*removed);
  std::filesystem::remove_all(nodes->directory);
}

TEST(DeviceIsolationKernel, CgroupV1DevicesDeny) { expect_kernel_denies(IsolationMechanism::CgroupV1); }
TEST(DeviceIsolationKernel, CgroupV2FilterProgram) { expect_kernel_denies(IsolationMechanism::CgroupV2); }

}  // namespace
}  // namespace gpupool
