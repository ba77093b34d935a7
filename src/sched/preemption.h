// preempt = "suspend" (docs/suspend.md): which running jobs to suspend so that a job of higher
// priority, waiting for whole GPUs, can start. Pure: the daemon gives the waiting job, the free
// GPUs and the running jobs it could suspend, and suspends what this returns.
#pragma once

#include <vector>

#include "jobs/job.h"

namespace gpupool {

struct PreemptionCandidate {
  JobId id = 0;
  int priority = 0;
  unsigned gpus = 0;   // whole GPUs it holds
  double start_s = 0;  // when it started
};

// The jobs to suspend for a job of `priority` that waits for `needed` whole GPUs while `free`
// are free: only jobs of lower priority, the lowest first and, within a priority, the most
// recently started (it loses the least), until enough GPUs would be free; none when that is not
// enough, or when the free GPUs are enough already (it waits for something else).
std::vector<JobId> jobs_to_preempt(int priority, unsigned needed, unsigned free,
                                   std::vector<PreemptionCandidate> running);

}  // namespace gpupool
