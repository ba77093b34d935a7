// The pure parts of device isolation (docs/daemon.md, "Device isolation"): where the cgroup
// hierarchies are mounted and which cgroup a process is in (the text of /proc/PID/mountinfo and
// /proc/PID/cgroup), which /dev/nvidiaN nodes a job must not open, and the two ways of saying so
// to the kernel: the rules of cgroup v1's devices controller, and the eBPF program that cgroup v2
// runs on every device access (BPF_PROG_TYPE_CGROUP_DEVICE).
#pragma once

#include <linux/bpf.h>

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

// The minor numbers of the machine's GPUs that a job leasing `leased` (GPU indices; a memory
// slice counts as leasing its GPU) must not open, sorted. An error when a GPU has no minor number.
Result<std::vector<unsigned>> denied_minors(const Machine& machine, const std::vector<unsigned>& leased);

// cgroup v1: one line for devices.deny per minor, "c 195:N rwm".
std::vector<std::string> device_deny_rules(const std::vector<unsigned>& minors);

// cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program that returns 0 (deny) for any access to a
// character device 195:N with N in `minors`, and 1 (allow) for everything else.
std::vector<bpf_insn> device_filter_program(const std::vector<unsigned>& minors);

// The directory, below the daemon's own cgroup, that holds its jobs' cgroups: one per state
// directory, so that daemons of different state directories never touch each other's.
std::string isolation_group_name(std::string_view state_dir);
// One attempt's cgroup in that directory: "job-ID.ATTEMPT", as its record file is named.
std::string attempt_group_name(uint64_t job, unsigned attempt);

}  // namespace gpupool
