// Who holds the GPUs, beyond what NVML says: the lease records and, when a daemon runs, its
// unfinished jobs. `top` and `list` read them here and name the holders through card_use.
#pragma once

#include <string>

#include "monitor/dashboard.h"

namespace gpupool::cli {

// Fills input.leases, input.jobs, input.idle_jobs, input.notices (a drained queue or GPU) and
// input.daemon_running; what cannot be read stays empty (no lease directory yet, no daemon).
void read_gpu_holders(DashboardInput& input);

// "14:03:07" in local time, as top's frame and notices show a time.
std::string clock_of_day(double unix_seconds);

}  // namespace gpupool::cli
