// Device isolation of the daemon's jobs: each attempt runs in a cgroup of its own that may not
// open the /dev/nvidiaN nodes of the GPUs it does not lease (docs/daemon.md, "Device isolation").
// cgroup v1 says so with the devices controller's devices.deny; cgroup v2 has no devices
// controller, so an eBPF program (BPF_PROG_TYPE_CGROUP_DEVICE) attached to the cgroup decides.
// The rules and the program are isolation's (isolation/device_rules.h); this is the OS side, behind
// CgroupFiles so the logic runs against a fake in unit tests.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "isolation/device_rules.h"
#include "os/host_files.h"

namespace gpupool {

enum class IsolationMechanism { CgroupV1, CgroupV2 };

// "cgroup v1" / "cgroup v2", as the supervisor's attempt carries it.
const char* to_string(IsolationMechanism mechanism);
std::optional<IsolationMechanism> parse_isolation_mechanism(std::string_view text);

// The cgroup file system and the bpf(2) call.
class CgroupFiles {
 public:
  virtual ~CgroupFiles() = default;
  // An existing directory is fine.
  virtual Result<void> make_directory(const std::string& path) = 0;
  // Removes an empty cgroup; false while processes are in it (EBUSY). A missing one is removed.
  virtual Result<bool> remove_directory(const std::string& path) = 0;
  // The subdirectories' names; empty when it cannot be read.
  virtual std::vector<std::string> subdirectories(const std::string& path) const = 0;
  virtual Result<void> write(const std::string& path, const std::string& text) = 0;
  // Loads `program` as BPF_PROG_TYPE_CGROUP_DEVICE and attaches it to the cgroup at `directory`
  // (BPF_CGROUP_DEVICE, BPF_F_ALLOW_MULTI: it adds to the programs of the cgroups above, which
  // keep their say, rather than replacing them). The cgroup holds it until it is removed.
  virtual Result<void> attach_device_filter(const std::string& directory, const std::vector<bpf_insn>& program) = 0;
};

// The real one.
std::unique_ptr<CgroupFiles> system_cgroup_files();

// Where a daemon's jobs get their cgroups, and how.
struct DeviceIsolation {
  IsolationMechanism mechanism = IsolationMechanism::CgroupV1;
  std::string home;  // the daemon's own cgroup directory: a supervisor goes back there at the end
  std::string base;  // HOME/gpupoold.HASH (isolation_group_name): the jobs' cgroups
  // The MIG devices' capability nodes, kept to each job's own; nullopt where the driver has none.
  std::optional<MigCapabilities> mig_capabilities = std::nullopt;
};

// The MIG capability nodes, from /proc/devices and /proc/driver/nvidia-caps/mig-minors (read
// through `host`); nullopt where the driver makes none (no MIG support, or an older driver).
// An error when they are there but cannot be understood.
Result<std::optional<MigCapabilities>> read_mig_capabilities(const HostFiles& host);

// Finds a mechanism from /proc/self/mountinfo and /proc/self/cgroup (read through `host`): the
// devices controller of cgroup v1 when it is mounted, else cgroup v2. Proves it works by making
// a cgroup "probe" in `base` with `probe_denied` denied, moving this process in and back out,
// and removing it. The error says why neither works.
Result<DeviceIsolation> find_device_isolation(const HostFiles& host, CgroupFiles& files, std::string_view group_name,
                                              const std::vector<DeviceNumber>& probe_denied);

// Makes one attempt's cgroup at `group` (a directory in DeviceIsolation::base) with access to
// each of `denied` denied, replacing an empty one of that name. Nothing joins it yet.
Result<void> create_attempt_group(CgroupFiles& files, IsolationMechanism mechanism, const std::string& group,
                                  const std::vector<DeviceNumber>& denied);

// Moves the calling process (all its threads) into the cgroup at `directory`.
Result<void> join_group(CgroupFiles& files, const std::string& directory);

// Removes the cgroups of attempts that have ended from `isolation.base`, except those named in
// `keep` (attempts still running); one that still has processes stays. Returns how many stayed
// that way.
size_t remove_stale_groups(CgroupFiles& files, const DeviceIsolation& isolation, const std::set<std::string>& keep);

}  // namespace gpupool
