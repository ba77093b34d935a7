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

// What stands on every GPU of `machine` (indexed like machine.gpus).
Result<std::vector<GpuAvailability>> survey_pool(const Machine& machine, const LeaseDirectory& leases,
                                                 const HostFiles& host, uint64_t busy_memory_mib);

// The claims that lease `gpus` for a request (exclusive, or slices of `slice_mib`).
std::vector<LeaseClaim> claims_for(const Machine& machine, const std::vector<unsigned>& gpus,
                                   const std::optional<uint64_t>& slice_mib);

}  // namespace gpupool
