#include "os/job_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace gpupool {
namespace {

constexpr const char* kProbeGroup = "probe";

class SystemCgroupFiles final : public CgroupFiles {
 public:
  Result<void> make_directory(const std::string& path) override {
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
      return fail("cannot create {}: {}", path, std::strerror(errno));
    }
    return {};
  }

  Result<bool> remove_directory(const std::string& path) override {
    if (rmdir(path.c_str()) == 0 || errno == ENOENT) return true;
    if (errno == EBUSY) return false;
    return fail("cannot remove {}: {}", path, std::strerror(errno));
  }

  std::vector<std::string> subdirectories(const std::string& path) const override {
    std::vector<std::string> names;
    DIR* dir = opendir(path.c_str());
    if (dir == nullptr) return names;
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (entry->d_type == DT_DIR && name != "." && name != "..") names.push_back(std::move(name));
    }
    closedir(dir);
    return names;
  }

  Result<void> write(const std::string& path, const std::string& text) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("cannot open {}: {}", path, std::strerror(errno));
    // cgroup files take one value per write(), whole.
    ssize_t written = ::write(fd, text.data(), text.size());
    int error = errno;
    ::close(fd);
    if (written != static_cast<ssize_t>(text.size())) {
      return fail("cannot write '{}' to {}: {}", text, path, std::strerror(written < 0 ? error : EIO));
    }
    return {};
  }

  Result<void> attach_device_filter(const std::string& directory, const std::vector<bpf_insn>& program) override {
    static const char kLicense[] = "GPL";  // the kernel asks every program for one
    bpf_attr load{};
    load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    load.insns = reinterpret_cast<uint64_t>(program.data());
    load.insn_cnt = static_cast<uint32_t>(program.size());
    load.license = reinterpret_cast<uint64_t>(kLicense);
    int prog = static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof load));
    if (prog < 0) return fail("cannot load the device filter (bpf): {}", std::strerror(errno));
    // With O_CLOEXEC so that a fork elsewhere in a threaded daemon never carries it.
    fcntl(prog, F_SETFD, FD_CLOEXEC);
    int cgroup = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cgroup < 0) {
      int error = errno;
      ::close(prog);
      return fail("cannot open {}: {}", directory, std::strerror(error));
    }
    bpf_attr attach{};
    attach.target_fd = static_cast<uint32_t>(cgroup);
    attach.attach_bpf_fd = static_cast<uint32_t>(prog);
    attach.attach_type = BPF_CGROUP_DEVICE;
    attach.attach_flags = BPF_F_ALLOW_MULTI;
    long attached = syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof attach);
    int error = errno;
    ::close(cgroup);
    ::close(prog);  // the attachment holds the program from here on
    if (attached != 0) return fail("cannot attach the device filter to {}: {}", directory, std::strerror(error));
    return {};
  }
};

// The directory of this process's cgroup under one mount, or why there is none.
Result<std::string> own_directory(const std::optional<CgroupMount>& mount, const std::optional<std::string>& cgroup,
                                  const char* what) {
  if (!mount) return fail("no {} is mounted", what);
  if (!cgroup) return fail("/proc/self/cgroup names no {} cgroup", what);
  auto directory = cgroup_directory(*mount, *cgroup);
  if (!directory) return fail("the daemon's cgroup {} is outside the {} mounted at {}", *cgroup, what, mount->mount_point);
  return *directory;
}

// Makes base and a probe cgroup in it with the rules, goes in and out, and removes it again.
Result<void> probe(CgroupFiles& files, const DeviceIsolation& isolation, const std::vector<DeviceNumber>& denied) {
  TRY(files.make_directory(isolation.base));
  std::string group = isolation.base + "/" + kProbeGroup;
  auto tried = [&]() -> Result<void> {
    TRY(create_attempt_group(files, isolation.mechanism, group, denied));
    TRY(join_group(files, group));
    return join_group(files, isolation.home);
  }();
  auto removed = files.remove_directory(group);
  TRY(tried);
  if (!removed) return removed.error();
  return {};
}

}  // namespace

const char* to_string(IsolationMechanism mechanism) {
  return mechanism == IsolationMechanism::CgroupV1 ? "cgroup v1" : "cgroup v2";
}

std::optional<IsolationMechanism> parse_isolation_mechanism(std::string_view text) {
  if (text == "cgroup v1") return IsolationMechanism::CgroupV1;
  if (text == "cgroup v2") return IsolationMechanism::CgroupV2;
  return std::nullopt;
}

std::unique_ptr<CgroupFiles> system_cgroup_files() { return std::make_unique<SystemCgroupFiles>(); }

Result<DeviceIsolation> find_device_isolation(const HostFiles& host, CgroupFiles& files, std::string_view group_name,
                                              const std::vector<DeviceNumber>& probe_denied) {
  auto mountinfo = host.read("/proc/self/mountinfo");
  auto own = host.read("/proc/self/cgroup");
  if (!mountinfo || !own) return fail("cannot read /proc/self/mountinfo and /proc/self/cgroup");
  CgroupMounts mounts = parse_cgroup_mounts(*mountinfo);
  ProcessCgroups cgroups = parse_process_cgroups(*own);
  // v1 first: on a hybrid hierarchy the devices controller is what the rest of the system uses.
  std::vector<std::string> why_not;
  const std::pair<IsolationMechanism, Result<std::string>> candidates[] = {
      {IsolationMechanism::CgroupV1, own_directory(mounts.devices_v1, cgroups.devices_v1, "cgroup v1 devices controller")},
      {IsolationMechanism::CgroupV2, own_directory(mounts.unified, cgroups.unified, "cgroup v2 hierarchy")},
  };
  for (const auto& [mechanism, home] : candidates) {
    if (!home) {
      why_not.push_back(home.error().message);
      continue;
    }
    DeviceIsolation isolation{mechanism, *home, *home + "/" + std::string(group_name)};
    if (auto works = probe(files, isolation, probe_denied); !works) {
      why_not.push_back(fmt::format("{}: {}", to_string(mechanism), works.error().message));
      continue;
    }
    return isolation;
  }
  std::string reasons;
  for (const std::string& reason : why_not) reasons += (reasons.empty() ? "" : "; ") + reason;
  return fail("{}", reasons);
}

Result<std::optional<MigCapabilities>> read_mig_capabilities(const HostFiles& host) {
  auto minors_text = host.read("/proc/driver/nvidia-caps/mig-minors");
  if (!minors_text) return std::optional<MigCapabilities>();
  auto devices = host.read("/proc/devices");
  auto major = devices ? character_device_major(*devices, "nvidia-caps") : std::nullopt;
  if (!major) return fail("/proc/driver/nvidia-caps/mig-minors is there, but /proc/devices has no nvidia-caps driver");
  TRY_ASSIGN(auto minors, parse_mig_minors(*minors_text));
  return std::optional<MigCapabilities>(MigCapabilities{*major, std::move(minors)});
}

Result<void> create_attempt_group(CgroupFiles& files, IsolationMechanism mechanism, const std::string& group,
                                  const std::vector<DeviceNumber>& denied) {
  // A fresh one: a group of the same name left by an attempt that never started (the daemon
  // starts it again under the same number) has the rules of other GPUs, and rules only add up.
  TRY_ASSIGN(bool gone, files.remove_directory(group));
  if (!gone) return fail("{} is still in use", group);
  TRY(files.make_directory(group));
  auto ruled = [&]() -> Result<void> {
    if (mechanism == IsolationMechanism::CgroupV2) return files.attach_device_filter(group, device_filter_program(denied));
    for (const std::string& rule : device_deny_rules(denied)) TRY(files.write(group + "/devices.deny", rule));
    return {};
  }();
  if (!ruled) (void)files.remove_directory(group);  // a cgroup without its rules must not be joined
  return ruled;
}

Result<void> join_group(CgroupFiles& files, const std::string& directory) {
  return files.write(directory + "/cgroup.procs", "0");  // 0: the writer
}

size_t remove_stale_groups(CgroupFiles& files, const DeviceIsolation& isolation, const std::set<std::string>& keep) {
  size_t in_use = 0;
  for (const std::string& name : files.subdirectories(isolation.base)) {
    if (keep.count(name) > 0) continue;
    auto gone = files.remove_directory(isolation.base + "/" + name);
    if (gone && !*gone) ++in_use;
  }
  return in_use;
}

}  // namespace gpupool
