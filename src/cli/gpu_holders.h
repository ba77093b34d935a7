// Who holds the GPUs, beyond what NVML says: the lease records and, when a daemon runs, its
// unfinished jobs. `top` and `list` read them here and name the holders through card_use.
#pragma once

#include "monitor/dashboard.h"

namespace gpupool::cli {

// Fills input.leases, input.jobs, input.idle_jobs and input.daemon_running; what cannot be read
// stays empty (no lease directory yet, no daemon).
void read_gpu_holders(DashboardInput& input);

}  // namespace gpupool::cli
