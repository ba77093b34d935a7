// Acquiring GPUs without a daemon: first come, first served among every
// process on the machine that asks. Each waiter holds a ticket (a locked file
// in the runtime directory's queue/); only the oldest live ticket may take
// GPUs, so a large request is not overtaken forever by small ones. A waiter
// that dies releases its ticket with its lock.
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
  Machine machine;             // the snapshot the choice was made on
};

Result<Acquired> acquire_gpus(GpuBackend& backend, const LeaseDirectory& leases, const HostFiles& host,
                              const AcquireOptions& options);

}  // namespace gpupool
