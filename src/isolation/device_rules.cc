#include "isolation/device_rules.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/text.h"

namespace gpupool {
namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ and three octal digits.
std::string unescape_octal(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size()) {
      std::string_view digits = text.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out += static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += text[i];
  }
  return out;
}

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  for (const std::string& word : split(line, ' ')) {
    if (!word.empty()) out.push_back(word);
  }
  return out;
}

bool has_option(std::string_view options, std::string_view wanted) {
  for (const std::string& option : split(options, ',')) {
    if (option == wanted) return true;
  }
  return false;
}

// Instruction encodings (the kernel's BPF_* macros of linux/filter.h, which userspace lacks).
bpf_insn instruction(int code, int dst, int src, int16_t offset, int32_t value) {
  bpf_insn insn{};
  insn.code = static_cast<uint8_t>(code);
  insn.dst_reg = static_cast<uint8_t>(dst & 0xf) & 0xfu;  // registers are 4-bit fields
  insn.src_reg = static_cast<uint8_t>(src & 0xf) & 0xfu;
  insn.off = offset;
  insn.imm = value;
  return insn;
}
bpf_insn load_u32(int dst, int src, size_t offset) {
  return instruction(BPF_LDX | BPF_W | BPF_MEM, dst, src, static_cast<int16_t>(offset), 0);
}
bpf_insn and_imm32(int dst, int32_t value) { return instruction(BPF_ALU | BPF_AND | BPF_K, dst, 0, 0, value); }
bpf_insn move_imm(int dst, int32_t value) { return instruction(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, value); }
// `offset` counts instructions from the one after the jump.
bpf_insn jump_imm(int op, int dst, int32_t value, int16_t offset) {
  return instruction(BPF_JMP | op | BPF_K, dst, 0, offset, value);
}
bpf_insn exit_insn() { return instruction(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

}  // namespace

CgroupMounts parse_cgroup_mounts(std::string_view mountinfo) {
  CgroupMounts mounts;
  for (const std::string& line : split(mountinfo, '\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL FIELDS...] - FSTYPE SOURCE SUPER_OPTIONS
    std::vector<std::string> fields = words(line);
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 6 || dash == fields.end() || fields.end() - dash < 4 || dash - fields.begin() < 6) continue;
    const std::string& type = *(dash + 1);
    const std::string& super_options = *(dash + 3);
    CgroupMount mount{unescape_octal(fields[4]), unescape_octal(fields[3])};
    if (type == "cgroup" && has_option(super_options, "devices") && !mounts.devices_v1) {
      mounts.devices_v1 = std::move(mount);
    } else if (type == "cgroup2" && !mounts.unified) {
      mounts.unified = std::move(mount);
    }
  }
  return mounts;
}

ProcessCgroups parse_process_cgroups(std::string_view proc_cgroup) {
  ProcessCgroups cgroups;
  for (const std::string& line : split(proc_cgroup, '\n')) {
    // HIERARCHY:CONTROLLERS:PATH, where PATH may itself hold colons.
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string_view hierarchy = std::string_view(line).substr(0, first);
    std::string_view controllers = std::string_view(line).substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path.front() != '/') continue;
    if (hierarchy == "0" && controllers.empty()) {
      cgroups.unified = std::move(path);
    } else if (has_option(controllers, "devices")) {
      cgroups.devices_v1 = std::move(path);
    }
  }
  return cgroups;
}

std::optional<std::string> cgroup_directory(const CgroupMount& mount, std::string_view cgroup) {
  std::string_view root = mount.root;
  if (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  std::string_view below;
  if (root == "/") {
    below = cgroup;
  } else if (cgroup == root) {
    below = "";
  } else if (cgroup.substr(0, root.size()) == root && cgroup.size() > root.size() && cgroup[root.size()] == '/') {
    below = cgroup.substr(root.size());
  } else {
    return std::nullopt;
  }
  while (!below.empty() && below.front() == '/') below.remove_prefix(1);
  while (!below.empty() && below.back() == '/') below.remove_suffix(1);
  std::string directory = mount.mount_point;
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  if (!below.empty()) directory += (directory == "/" ? "" : "/") + std::string(below);
  return directory;
}

std::optional<unsigned> character_device_major(std::string_view proc_devices, std::string_view driver) {
  bool in_character_section = false;
  for (const std::string& line : split(proc_devices, '\n')) {
    if (line == "Character devices:") {
      in_character_section = true;
    } else if (line == "Block devices:") {
      in_character_section = false;
    } else if (in_character_section) {
      std::vector<std::string> fields = words(line);
      if (fields.size() == 2 && fields[1] == driver) {
        if (auto major = parse_decimal(fields[0])) return static_cast<unsigned>(*major);
      }
    }
  }
  return std::nullopt;
}

Result<std::map<std::string, unsigned>> parse_mig_minors(std::string_view text) {
  std::map<std::string, unsigned> minors;
  for (const std::string& line : split(text, '\n')) {
    std::vector<std::string> fields = words(line);
    if (fields.empty()) continue;
    auto minor = fields.size() == 2 ? parse_decimal(fields[1]) : std::nullopt;
    if (!minor || *minor > 0xfffff) return fail("mig-minors: not \"NAME MINOR\": \"{}\"", line);
    minors.emplace(fields[0], static_cast<unsigned>(*minor));
  }
  return minors;
}

Result<std::vector<DeviceNumber>> denied_devices(const Machine& machine, const std::vector<unsigned>& gpus,
                                                 std::string_view mig_uuid,
                                                 const std::optional<MigCapabilities>& capabilities) {
  std::vector<DeviceNumber> denied;
  std::vector<std::string> own_capabilities;
  bool own_mig_device_found = mig_uuid.empty();
  for (const Gpu& gpu : machine.gpus) {
    if (!gpu.minor_number) return fail("GPU {} has no minor number, so its device node is unknown", gpu.index);
    if (std::find(gpus.begin(), gpus.end(), gpu.index) == gpus.end()) denied.push_back({kNvidiaMajor, *gpu.minor_number});
    if (const MigDevice* own = mig_device_with_uuid(gpu, mig_uuid)) {
      own_mig_device_found = true;
      std::string instance = fmt::format("gpu{}/gi{}", *gpu.minor_number, own->gpu_instance_id);
      own_capabilities = {instance + "/access", fmt::format("{}/ci{}/access", instance, own->compute_instance_id)};
    }
  }
  if (!own_mig_device_found) return fail("MIG device {} is not on this machine", mig_uuid);
  bool has_mig_devices = std::any_of(machine.gpus.begin(), machine.gpus.end(),
                                     [](const Gpu& gpu) { return !gpu.mig_devices.empty(); });
  if (capabilities && has_mig_devices) {
    // Every instance on the machine as discovered, rather than every minor the driver could hand
    // out (thousands): instances made later are nobody's lease until gpupoold starts again.
    std::vector<std::string> names = {"config", "monitor"};
    for (const Gpu& gpu : machine.gpus) {
      for (const MigDevice& device : gpu.mig_devices) {
        std::string instance = fmt::format("gpu{}/gi{}", *gpu.minor_number, device.gpu_instance_id);
        names.push_back(instance + "/access");
        names.push_back(fmt::format("{}/ci{}/access", instance, device.compute_instance_id));
      }
    }
    for (const std::string& name : names) {
      auto minor = capabilities->minors.find(name);
      if (minor == capabilities->minors.end()) continue;
      if (std::find(own_capabilities.begin(), own_capabilities.end(), name) != own_capabilities.end()) continue;
      denied.push_back({capabilities->major, minor->second});
    }
  }
  std::sort(denied.begin(), denied.end());
  denied.erase(std::unique(denied.begin(), denied.end()), denied.end());
  return denied;
}

std::vector<std::string> device_deny_rules(const std::vector<DeviceNumber>& denied) {
  std::vector<std::string> rules;
  for (const DeviceNumber& device : denied) rules.push_back(fmt::format("c {}:{} rwm", device.major, device.minor));
  return rules;
}

std::vector<bpf_insn> device_filter_program(const std::vector<DeviceNumber>& denied) {
  // The verifier refuses unreachable instructions: without a device to deny, allow everything.
  if (denied.empty()) return {move_imm(BPF_REG_0, 1), exit_insn()};
  std::map<unsigned, std::vector<unsigned>> minors_by_major;
  for (const DeviceNumber& device : denied) minors_by_major[device.major].push_back(device.minor);
  // r1 is the context, struct bpf_cgroup_dev_ctx {u32 access_type, major, minor}; access_type is
  // (access << 16) | device type. After the type test, r3 holds the major and r2 the minor; each
  // major's block is "if r3 != MAJOR skip the block", then "if r2 == MINOR goto deny" per minor.
  // Jumps are written with their targets as indices first and made relative at the end.
  std::vector<bpf_insn> program;
  std::vector<std::pair<size_t, int>> jumps;  // (instruction, target index; -1 allow, -2 deny)
  constexpr int kAllow = -1, kDeny = -2;
  program.push_back(load_u32(BPF_REG_2, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, access_type)));
  program.push_back(and_imm32(BPF_REG_2, 0xffff));
  jumps.emplace_back(program.size(), kAllow);
  program.push_back(jump_imm(BPF_JNE, BPF_REG_2, BPF_DEVCG_DEV_CHAR, 0));
  program.push_back(load_u32(BPF_REG_3, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, major)));
  program.push_back(load_u32(BPF_REG_2, BPF_REG_1, offsetof(bpf_cgroup_dev_ctx, minor)));
  for (const auto& [major, minors] : minors_by_major) {
    size_t next_block = program.size() + 1 + minors.size();
    jumps.emplace_back(program.size(), static_cast<int>(next_block));
    program.push_back(jump_imm(BPF_JNE, BPF_REG_3, static_cast<int32_t>(major), 0));
    for (unsigned minor : minors) {
      jumps.emplace_back(program.size(), kDeny);
      program.push_back(jump_imm(BPF_JEQ, BPF_REG_2, static_cast<int32_t>(minor), 0));
    }
  }
  const size_t allow = program.size();
  program.push_back(move_imm(BPF_REG_0, 1));
  program.push_back(exit_insn());
  const size_t deny = program.size();
  program.push_back(move_imm(BPF_REG_0, 0));
  program.push_back(exit_insn());
  for (auto [at, target] : jumps) {
    size_t to = target == kAllow ? allow : target == kDeny ? deny : static_cast<size_t>(target);
    program[at].off = static_cast<int16_t>(static_cast<int64_t>(to) - static_cast<int64_t>(at) - 1);
  }
  return program;
}

std::string isolation_group_name(std::string_view state_dir) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a: stable across builds and machines
  for (char c : state_dir) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return fmt::format("gpupoold.{:08x}", static_cast<uint32_t>(hash ^ (hash >> 32)));
}

std::string attempt_group_name(uint64_t job, unsigned attempt) { return fmt::format("job-{}.{}", job, attempt); }

}  // namespace gpupool
