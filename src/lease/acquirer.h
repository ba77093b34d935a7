// Acquiring GPUs without a daemon: first come, first served among every
// process on the machine that asks. Each waiter holds a ticket (a locked file
// in the runtime directory's queue/); a request tries for GPUs when no live
// ticket is ahead of it, or when it is smaller than all of them and the oldest
// has waited less than the pass window (lease/waiting_line.h), so a wide request
// neither blocks small ones nor is overtaken forever. A waiter that dies
// releases its ticket with its lock.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "gpu/gpu_backend.h"
#include "lease/lease_directory.h"
#include "os/host_files.h"
#include "sched/allocation.h"

namespace gpupool {

// How long small requests may pass a wider one waiting in line; GPUPOOL_LINE_PASS (a duration,
// e.g. 10m or 0) overrides it.
inline constexpr double kDefaultLinePassWindowS = 600;
double line_pass_window_s();

struct AcquireOptions {
  GpuRequest request;
  LeaseHolder holder;
  std::optional<std::chrono::milliseconds> timeout;  // nullopt: wait as long as it takes
  std::chrono::milliseconds poll_interval{100};
  std::function<void(const std::string&)> on_wait;   // called when the reason for waiting changes
};

struct Acquired {
  HeldLeases leases;
  std::vector<unsigned> gpus;  // nvidia-smi indices, in placement order
  std::string mig_uuid;        // a --mig request's MIG device, on its one GPU
  Machine machine;             // the snapshot the choice was made on
};

Result<Acquired> acquire_gpus(GpuBackend& backend, const LeaseDirectory& leases, const HostFiles& host,
                              const AcquireOptions& options);

}  // namespace gpupool
