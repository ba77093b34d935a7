// The pool as a job sees it: the machine, the leases on it, and the GPUs that
// processes outside gpupool occupy. Ties the GPU backend, the lease directory
// and /proc together for `run`, `launch` and `leases`.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "lease/lease_directory.h"
#include "machine/gpu.h"
#include "os/host_files.h"
#include "sched/allocation.h"

namespace gpupool {

// Memory in use by processes we cannot see (another container, another PID namespace) above
// which a GPU counts as busy. GPUPOOL_BUSY_MEMORY_MIB overrides it.
inline constexpr uint64_t kDefaultBusyMemoryMib = 1024;
uint64_t busy_memory_threshold_mib();

// The memory on one GPU that gpupool's leases do not explain. NVML's readings: `used_mib` on the
// GPU, `listed_mib` by the processes it lists, `gpupool_listed_mib` by those gpupool started,
// `unseen_listed_mib` by listed processes this PID namespace cannot see (another container's
// view of ours, or others'). `leased_mib` is what gpupool's leases hold there (all of it for an
// exclusive lease, the slices' sum for shared ones). Memory nobody accounts for, and listed
// processes we cannot see, are taken for the leases' processes up to what the leases hold; only
// the rest is someone else's.
uint64_t unexplained_memory_mib(uint64_t used_mib, uint64_t listed_mib, uint64_t gpupool_listed_mib,
                                uint64_t unseen_listed_mib, uint64_t leased_mib);

// What stands on every GPU of `machine` (indexed like machine.gpus).
Result<std::vector<GpuAvailability>> survey_pool(const Machine& machine, const LeaseDirectory& leases,
                                                 const HostFiles& host, uint64_t busy_memory_mib);

// The claims that lease what a request takes: its GPUs (exclusive, or slices), or its MIG device
// (its own lock file, taken whole).
std::vector<LeaseClaim> claims_for(const Machine& machine, const LeasedDevices& leased);

}  // namespace gpupool
