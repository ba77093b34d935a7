#include "isolation/device_rules.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include <fmt/format.h>

namespace gpupool {
namespace {

// This machine's own files (a hybrid hierarchy: cgroup v1 controllers and the v2 mount beside them).
constexpr const char* kHybridMountinfo =
    "22 1 8:1 / / rw,relatime - ext4 /dev/root rw\n"
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 30 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

TEST(DeviceCgroupMounts, HybridHierarchy) {
  CgroupMounts mounts = parse_cgroup_mounts(kHybridMountinfo);
  ASSERT_TRUE(mounts.devices_v1);
  EXPECT_EQ(mounts.devices_v1->mount_point, "/sys/fs/cgroup/devices");
  EXPECT_EQ(mounts.devices_v1->root, "/");
  ASSERT_TRUE(mounts.unified);
  EXPECT_EQ(mounts.unified->mount_point, "/sys/fs/cgroup/unified");
}

TEST(DeviceCgroupMounts, UnifiedOnlyWithOptionalFieldsAndEscapes) {
  CgroupMounts mounts = parse_cgroup_mounts(
      "25 21 0:22 / /sys/fs/cgroup rw,nosuid shared:9 master:1 - cgroup2 cgroup2 rw,nsdelegate\n"
      "90 22 0:50 /a\\040b /mnt/x\\040y rw - cgroup2 none rw\n");
  EXPECT_FALSE(mounts.devices_v1);
  ASSERT_TRUE(mounts.unified);
  EXPECT_EQ(mounts.unified->mount_point, "/sys/fs/cgroup");  // the first one counts
  CgroupMounts escaped = parse_cgroup_mounts("90 22 0:50 /a\\040b /mnt/x\\040y rw - cgroup2 none rw\n");
  EXPECT_EQ(escaped.unified->mount_point, "/mnt/x y");
  EXPECT_EQ(escaped.unified->root, "/a b");
}

TEST(DeviceCgroupMounts, DevicesSharingAHierarchyAndGarbage) {
  CgroupMounts mounts = parse_cgroup_mounts(
      "garbage\n"
      "1 2 3\n"
      "36 30 0:33 / /sys/fs/cgroup/devices,memory rw - cgroup cgroup rw,memory,devices\n"
      "37 30 0:34 / /sys/fs/cgroup/devicesx rw - cgroup cgroup rw,devicesx\n");
  ASSERT_TRUE(mounts.devices_v1);
  EXPECT_EQ(mounts.devices_v1->mount_point, "/sys/fs/cgroup/devices,memory");
  EXPECT_FALSE(parse_cgroup_mounts("37 30 0:34 / /x rw - cgroup cgroup rw,devicesx\n").devices_v1);
  EXPECT_FALSE(parse_cgroup_mounts("").unified);
}

TEST(DeviceCgroupProcess, V1AndV2Lines) {
  ProcessCgroups cgroups = parse_process_cgroups(
      "9:name=systemd:/\n5:devices:/system.slice/gpupoold.service\n"
      "4:memory:/process_api/27c9\n0::/system.slice/gpupoold.service\n");
  EXPECT_EQ(cgroups.devices_v1, "/system.slice/gpupoold.service");
  EXPECT_EQ(cgroups.unified, "/system.slice/gpupoold.service");
  EXPECT_EQ(parse_process_cgroups("3:cpu,devices:/a:b\n").devices_v1, "/a:b");  // colons in the path
  ProcessCgroups none = parse_process_cgroups("0::\nrubbish\n7:devices:relative\n");
  EXPECT_FALSE(none.unified);
  EXPECT_FALSE(none.devices_v1);
}

TEST(DeviceCgroupDirectory, UnderTheMountsRoot) {
  CgroupMount host{"/sys/fs/cgroup/devices", "/"};
  EXPECT_EQ(cgroup_directory(host, "/"), "/sys/fs/cgroup/devices");
  EXPECT_EQ(cgroup_directory(host, "/system.slice/gpupoold.service"),
            "/sys/fs/cgroup/devices/system.slice/gpupoold.service");
  // A container's view: the mount shows only /docker/abc of the hierarchy.
  CgroupMount container{"/sys/fs/cgroup/devices/", "/docker/abc"};
  EXPECT_EQ(cgroup_directory(container, "/docker/abc"), "/sys/fs/cgroup/devices");
  EXPECT_EQ(cgroup_directory(container, "/docker/abc/sub"), "/sys/fs/cgroup/devices/sub");
  EXPECT_EQ(cgroup_directory(container, "/docker/abcd"), std::nullopt);
  EXPECT_EQ(cgroup_directory(container, "/"), std::nullopt);
  EXPECT_EQ(cgroup_directory(CgroupMount{"/", "/"}, "/x"), "/x");
}

Machine machine_with_minors(std::vector<std::optional<unsigned>> minors) {
  Machine machine;
  for (size_t i = 0; i < minors.size(); ++i) {
    Gpu gpu;
    gpu.index = static_cast<unsigned>(i);
    gpu.minor_number = minors[i];
    machine.gpus.push_back(gpu);
  }
  return machine;
}

// The GPU devices 195:N for minor numbers N.
std::vector<DeviceNumber> gpu_device_nodes(std::vector<unsigned> minors) {
  std::vector<DeviceNumber> nodes;
  for (unsigned minor : minors) nodes.push_back({kNvidiaMajor, minor});
  return nodes;
}

TEST(DeviceCgroupRules, DeniesEveryGpuButTheLeasedOnes) {
  Machine eight = machine_with_minors({0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_EQ(*denied_devices(eight, {3}, "", std::nullopt), gpu_device_nodes({0, 1, 2, 4, 5, 6, 7}));
  EXPECT_EQ(*denied_devices(eight, {0, 1, 2, 3, 4, 5, 6, 7}, "", std::nullopt), gpu_device_nodes({}));
  EXPECT_EQ(*denied_devices(eight, {}, "", std::nullopt), gpu_device_nodes({0, 1, 2, 3, 4, 5, 6, 7}));
  // Minor numbers need not follow the indices (they follow the driver's probe order).
  Machine shuffled = machine_with_minors({5, 2, 7});
  EXPECT_EQ(*denied_devices(shuffled, {1}, "", std::nullopt), gpu_device_nodes({5, 7}));
  auto unknown = denied_devices(machine_with_minors({0, std::nullopt}), {0}, "", std::nullopt);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().message, "GPU 1 has no minor number, so its device node is unknown");
}

// The start of a real /proc/devices, with the caps driver's major that an H100 machine gave.
constexpr const char* kProcDevicesWithCaps =
    "Character devices:\n  1 mem\n  4 /dev/vc/0\n195 nvidia-frontend\n234 nvidia-uvm\n"
    "237 nvidia-caps\n254 gpiochip\n\nBlock devices:\n  7 loop\n238 nvidia-caps\n";

TEST(MigCapabilityNodes, MajorFromProcDevices) {
  EXPECT_EQ(character_device_major(kProcDevicesWithCaps, "nvidia-caps"), 237u);  // not the block device's
  EXPECT_EQ(character_device_major(kProcDevicesWithCaps, "nvidia-uvm"), 234u);
  EXPECT_EQ(character_device_major(kProcDevicesWithCaps, "loop"), std::nullopt);
  EXPECT_EQ(character_device_major("Character devices:\nx nvidia-caps\n", "nvidia-caps"), std::nullopt);
  EXPECT_EQ(character_device_major("", "nvidia-caps"), std::nullopt);
}

TEST(MigCapabilityNodes, MinorsFile) {
  auto minors = parse_mig_minors("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n\n");
  ASSERT_TRUE(minors) << minors.error().message;
  EXPECT_EQ(*minors, (std::map<std::string, unsigned>{
                         {"config", 1}, {"monitor", 2}, {"gpu0/gi0/access", 3}, {"gpu0/gi0/ci0/access", 4}}));
  for (const char* bad : {"config\n", "config one\n", "config 1 2\n", "config -1\n", "config 99999999999\n"}) {
    auto refused = parse_mig_minors(bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_NE(refused.error().message.find("mig-minors: not \"NAME MINOR\""), std::string::npos);
  }
}

// Two GPUs (minor numbers 4 and 6): the first in MIG mode with GI 1 holding compute instances 0
// and 1, and GI 2 one; the second a whole GPU. The minors are what the driver's numbering gives:
// 3 + gpu * 135 + gi * 9 for a GPU instance's access, its compute instance ci's one more than ci.
Machine isolation_mig_machine() {
  Machine machine = machine_with_minors({4, 6});
  machine.gpus[0].mig_devices = {MigDevice{.index = 0, .uuid = "MIG-a", .gpu_instance_id = 1, .compute_instance_id = 0},
                                 MigDevice{.index = 1, .uuid = "MIG-b", .gpu_instance_id = 1, .compute_instance_id = 1},
                                 MigDevice{.index = 2, .uuid = "MIG-c", .gpu_instance_id = 2, .compute_instance_id = 0}};
  return machine;
}

MigCapabilities driver_mig_capabilities() {
  MigCapabilities capabilities{237, {{"config", 1}, {"monitor", 2}}};
  for (unsigned gpu : {4u, 6u}) {
    for (unsigned gi = 0; gi < 15; ++gi) {
      unsigned base = 3 + gpu * 135 + gi * 9;
      capabilities.minors[fmt::format("gpu{}/gi{}/access", gpu, gi)] = base;
      for (unsigned ci = 0; ci < 8; ++ci) capabilities.minors[fmt::format("gpu{}/gi{}/ci{}/access", gpu, gi, ci)] = base + 1 + ci;
    }
  }
  return capabilities;
}

std::vector<DeviceNumber> caps_nodes(std::vector<unsigned> minors) {
  std::vector<DeviceNumber> nodes;
  for (unsigned minor : minors) nodes.push_back({237, minor});
  return nodes;
}

std::vector<DeviceNumber> sorted_union(std::vector<DeviceNumber> a, const std::vector<DeviceNumber>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  return a;
}

TEST(MigCapabilityNodes, AJobOpensItsOwnInstancesAndNoOther) {
  Machine machine = isolation_mig_machine();
  MigCapabilities capabilities = driver_mig_capabilities();
  // gpu4's GI 1: 552 (access), 553 and 554 (its CIs 0 and 1); GI 2: 561, and 562 (its CI 0).
  auto on_a = denied_devices(machine, {0}, "MIG-a", capabilities);
  ASSERT_TRUE(on_a) << on_a.error().message;
  EXPECT_EQ(*on_a, sorted_union(gpu_device_nodes({6}), caps_nodes({1, 2, 554, 561, 562})));
  // Another compute instance of the same GPU instance: the GI's node is needed by both.
  EXPECT_EQ(*denied_devices(machine, {0}, "MIG-b", capabilities), sorted_union(gpu_device_nodes({6}), caps_nodes({1, 2, 553, 561, 562})));
  EXPECT_EQ(*denied_devices(machine, {0}, "MIG-c", capabilities),
            sorted_union(gpu_device_nodes({6}), caps_nodes({1, 2, 552, 553, 554})));
  // A whole GPU's job opens no MIG device at all.
  EXPECT_EQ(*denied_devices(machine, {1}, "", capabilities),
            sorted_union(gpu_device_nodes({4}), caps_nodes({1, 2, 552, 553, 554, 561, 562})));
  // A machine without MIG devices keeps its capability nodes open, as without MIG at all.
  EXPECT_EQ(*denied_devices(machine_with_minors({4, 6}), {1}, "", capabilities), gpu_device_nodes({4}));
  // Without capability nodes (an older driver, MIG never set up), only GPUs are denied.
  EXPECT_EQ(*denied_devices(machine, {0}, "MIG-a", std::nullopt), gpu_device_nodes({6}));
  // A name the driver's file does not list is left out rather than guessed.
  MigCapabilities without_config = capabilities;
  without_config.minors.erase("config");
  EXPECT_EQ(*denied_devices(machine, {0}, "MIG-a", without_config), sorted_union(gpu_device_nodes({6}), caps_nodes({2, 554, 561, 562})));
  auto gone = denied_devices(machine, {0}, "MIG-z", capabilities);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().message, "MIG device MIG-z is not on this machine");
}

TEST(DeviceCgroupRules, V1DenyLines) {
  EXPECT_EQ(device_deny_rules({{195, 0}, {195, 6}, {237, 12}}),
            (std::vector<std::string>{"c 195:0 rwm", "c 195:6 rwm", "c 237:12 rwm"}));
  EXPECT_TRUE(device_deny_rules({}).empty());
}

// A BPF interpreter for what device_filter_program emits (and nothing else): the program must
// reach `exit` through valid jumps, and its answer is r0.
std::optional<int64_t> run_filter(const std::vector<bpf_insn>& program, bpf_cgroup_dev_ctx context) {
  uint64_t r[11] = {};
  unsigned char memory[sizeof context];
  std::memcpy(memory, &context, sizeof context);
  size_t pc = 0;
  for (int steps = 0; steps < 10000 && pc < program.size(); ++steps) {
    const bpf_insn& in = program[pc];
    ++pc;
    if (in.code == (BPF_LDX | BPF_W | BPF_MEM)) {
      if (in.src_reg != BPF_REG_1 || in.off < 0 || static_cast<size_t>(in.off) + 4 > sizeof memory) return std::nullopt;
      uint32_t value = 0;
      std::memcpy(&value, memory + in.off, 4);
      r[in.dst_reg] = value;
    } else if (in.code == (BPF_ALU | BPF_AND | BPF_K)) {
      r[in.dst_reg] = static_cast<uint32_t>(r[in.dst_reg]) & static_cast<uint32_t>(in.imm);
    } else if (in.code == (BPF_ALU64 | BPF_MOV | BPF_K)) {
      r[in.dst_reg] = static_cast<uint64_t>(static_cast<int64_t>(in.imm));
    } else if (in.code == (BPF_JMP | BPF_JNE | BPF_K) || in.code == (BPF_JMP | BPF_JEQ | BPF_K)) {
      bool equal = r[in.dst_reg] == static_cast<uint64_t>(static_cast<int64_t>(in.imm));
      bool taken = (in.code == (BPF_JMP | BPF_JEQ | BPF_K)) == equal;
      if (taken) {
        int64_t target = static_cast<int64_t>(pc) + in.off;
        if (target < 0 || target >= static_cast<int64_t>(program.size())) return std::nullopt;
        pc = static_cast<size_t>(target);
      }
    } else if (in.code == (BPF_JMP | BPF_EXIT)) {
      return static_cast<int64_t>(r[BPF_REG_0]);
    } else {
      return std::nullopt;  // an instruction this interpreter (and the builder) does not use
    }
  }
  return std::nullopt;
}

bpf_cgroup_dev_ctx access(unsigned type, unsigned major, unsigned minor, unsigned how = BPF_DEVCG_ACC_READ) {
  return bpf_cgroup_dev_ctx{(how << 16) | type, major, minor};
}

// Every instruction is reachable (the verifier refuses a program with dead code).
void expect_all_reachable(const std::vector<bpf_insn>& program) {
  std::vector<bool> reached(program.size(), false);
  std::vector<size_t> todo = {0};
  while (!todo.empty()) {
    size_t pc = todo.back();
    todo.pop_back();
    if (pc >= program.size() || reached[pc]) continue;
    reached[pc] = true;
    const bpf_insn& in = program[pc];
    if (in.code == (BPF_JMP | BPF_EXIT)) continue;
    if ((in.code & 0x07) == BPF_JMP) todo.push_back(static_cast<size_t>(static_cast<int64_t>(pc) + 1 + in.off));
    todo.push_back(pc + 1);
  }
  EXPECT_TRUE(std::all_of(reached.begin(), reached.end(), [](bool b) { return b; }));
}

TEST(DeviceCgroupProgram, DeniesExactlyTheListedNvidiaMinors) {
  auto program = device_filter_program(gpu_device_nodes({1, 3, 7}));
  expect_all_reachable(program);
  for (unsigned minor = 0; minor < 10; ++minor) {
    bool denied = minor == 1 || minor == 3 || minor == 7;
    for (unsigned how : std::vector<unsigned>{BPF_DEVCG_ACC_READ, BPF_DEVCG_ACC_WRITE, BPF_DEVCG_ACC_MKNOD,
                                              BPF_DEVCG_ACC_READ | BPF_DEVCG_ACC_WRITE}) {
      EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 195, minor, how)), denied ? 0 : 1) << minor;
    }
    EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_BLOCK, 195, minor)), 1);  // a block device
    EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 196, minor)), 1);   // another major
  }
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 195, 255)), 1);  // /dev/nvidiactl
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 1, 3)), 1);      // /dev/null
}

TEST(DeviceCgroupProgram, KeepsEachMajorsMinorsApart) {
  auto program = device_filter_program({{195, 1}, {237, 2}, {237, 554}});
  expect_all_reachable(program);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 195, 1)), 0);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 237, 2)), 0);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 237, 554)), 0);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 195, 2)), 1);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 237, 1)), 1);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 237, 553)), 1);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_BLOCK, 237, 2)), 1);
}

TEST(DeviceCgroupProgram, EmptySetAllowsEverything) {
  auto program = device_filter_program({});
  expect_all_reachable(program);
  EXPECT_EQ(run_filter(program, access(BPF_DEVCG_DEV_CHAR, 195, 0)), 1);
}

RC_GTEST_PROP(DeviceCgroupProgram, AgreesWithTheSet,
              (std::vector<std::pair<bool, uint8_t>> raw, bool caps_major, uint8_t minor, bool block)) {
  // Two majors, so the blocks of each major and the jumps between them are exercised.
  std::vector<DeviceNumber> denied;
  for (auto [second_major, m] : raw) denied.push_back({second_major ? 237u : 195u, m});
  std::sort(denied.begin(), denied.end());
  denied.erase(std::unique(denied.begin(), denied.end()), denied.end());
  auto program = device_filter_program(denied);
  DeviceNumber asked{caps_major ? 237u : 195u, minor};
  bool listed = std::find(denied.begin(), denied.end(), asked) != denied.end();
  auto answer = run_filter(program, access(block ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR, asked.major, asked.minor));
  RC_ASSERT(answer.has_value());
  RC_ASSERT(*answer == (listed && !block ? 0 : 1));
}

TEST(DeviceCgroupNames, StablePerStateDirectory) {
  EXPECT_EQ(isolation_group_name("/var/lib/gpupool"), isolation_group_name("/var/lib/gpupool"));
  EXPECT_NE(isolation_group_name("/var/lib/gpupool"), isolation_group_name("/tmp/other/state"));
  EXPECT_EQ(isolation_group_name("/var/lib/gpupool").rfind("gpupoold.", 0), 0u);
  EXPECT_EQ(isolation_group_name("/var/lib/gpupool").size(), 17u);
  EXPECT_EQ(attempt_group_name(12, 2), "job-12.2");
}

}  // namespace
}  // namespace gpupool
