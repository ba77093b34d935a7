// The pure parts of device isolation (docs/daemon.md, "Device isolation"): where the cgroup
// hierarchies are mounted and which cgroup a process is in (the text of /proc/PID/mountinfo and
// /proc/PID/cgroup), which device nodes a job must not open (other GPUs', other MIG devices'), and the two ways of saying so
// to the kernel: the rules of cgroup v1's devices controller, and the eBPF program that cgroup v2
// runs on every device access (BPF_PROG_TYPE_CGROUP_DEVICE).
#pragma once

#include <linux/bpf.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool {

// The character device major of /dev/nvidia0, /dev/nvidia1, ... (the minor is NVML's minor number).
// /dev/nvidiactl (195:255) and /dev/nvidia-uvm (another major) are what every CUDA program needs.
inline constexpr unsigned kNvidiaMajor = 195;

// One cgroup hierarchy as mounted: where, and which of its cgroups is the mount's root (not "/"
// in a container that sees only its part of the hierarchy).
struct CgroupMount {
  std::string mount_point;
  std::string root;
};

struct CgroupMounts {
  std::optional<CgroupMount> devices_v1;  // a "cgroup" mount with the devices controller
  std::optional<CgroupMount> unified;     // the "cgroup2" mount
};

// From /proc/self/mountinfo; the first mount of each kind counts. Octal escapes (\040) decoded.
CgroupMounts parse_cgroup_mounts(std::string_view mountinfo);

struct ProcessCgroups {
  std::optional<std::string> devices_v1;  // "N:devices:/path" (the controller may share its line)
  std::optional<std::string> unified;     // "0::/path"
};

// From /proc/self/cgroup.
ProcessCgroups parse_process_cgroups(std::string_view proc_cgroup);

// The directory of `cgroup` (as /proc/PID/cgroup names it) under `mount`; nullopt when the
// cgroup is outside what the mount shows.
std::optional<std::string> cgroup_directory(const CgroupMount& mount, std::string_view cgroup);

// A character device's numbers.
struct DeviceNumber {
  unsigned major = 0;
  unsigned minor = 0;
  friend auto operator<=>(const DeviceNumber&, const DeviceNumber&) = default;
};

// The MIG capability nodes, /dev/nvidia-caps/nvidia-capN (docs/mig.md, "Device isolation"): the
// driver lets a process use a GPU or compute instance only with a descriptor it opened on that
// instance's node, so denying the node denies the instance.
struct MigCapabilities {
  unsigned major = 0;                      // the "nvidia-caps" line of /proc/devices; dynamic
  std::map<std::string, unsigned> minors;  // "gpu0/gi1/access" -> 12, "config" -> 1, "monitor" -> 2
};

// The major of the character device driver named `driver` in /proc/devices; nullopt when it is
// not loaded.
std::optional<unsigned> character_device_major(std::string_view proc_devices, std::string_view driver);

// /proc/driver/nvidia-caps/mig-minors: one "NAME MINOR" per line. An error names the bad line.
Result<std::map<std::string, unsigned>> parse_mig_minors(std::string_view text);

// The device nodes a job must not open, sorted: the /dev/nvidiaN (195:N, N the minor number) of
// every GPU but its `gpus` (indices; a memory slice counts as leasing its GPU), and, where the
// machine has MIG devices and capability nodes, every node of a MIG device on the machine but those of the
// job's own `mig_uuid` (its GPU instance's and its compute instance's), and "config" and "monitor".
// An error when a GPU has no minor number, or the job's MIG device is not on the machine.
Result<std::vector<DeviceNumber>> denied_devices(const Machine& machine, const std::vector<unsigned>& gpus,
                                                 std::string_view mig_uuid,
                                                 const std::optional<MigCapabilities>& capabilities);

// cgroup v1: one line for devices.deny per device, "c MAJOR:MINOR rwm".
std::vector<std::string> device_deny_rules(const std::vector<DeviceNumber>& denied);

// cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program that returns 0 (deny) for any access to a
// character device in `denied`, and 1 (allow) for everything else.
std::vector<bpf_insn> device_filter_program(const std::vector<DeviceNumber>& denied);

// The directory, below the daemon's own cgroup, that holds its jobs' cgroups: one per state
// directory, so that daemons of different state directories never touch each other's.
std::string isolation_group_name(std::string_view state_dir);
// One attempt's cgroup in that directory: "job-ID.ATTEMPT", as its record file is named.
std::string attempt_group_name(uint64_t job, unsigned attempt);

}  // namespace gpupool
