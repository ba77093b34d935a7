// How `gpupool wait` reports the jobs it waited for: an exit status for scripts, one line for
// people, however many jobs (docs/daemon.md, "Waiting for jobs").
#pragma once

#include <string>
#include <vector>

#include "jobs/job.h"

namespace gpupool::cli {

struct WaitedJob {
  std::string id;     // "42", or "slurm:42"
  Job job;            // as it ended, or as it stood when the wait gave up
  bool known = true;  // false: a Slurm job Slurm has forgotten
};

// The exit status: 124 (as timeout(1)) when a job had not ended when the wait gave up; else 0
// when every job is done, or the highest exit code among the others, at least 1.
int wait_exit_code(const std::vector<WaitedJob>& jobs);

// One job: "job 7 failed(3): reason". Several: "300 jobs: 297 done, 3 failed (ids 7, 9, 12)",
// the ids of each group that is not done (at most kIdsShown of them, then how many more).
std::string wait_summary(const std::vector<WaitedJob>& jobs);
constexpr size_t kIdsShown = 10;

// The one line `--verbose` prints for each job: as wait_summary() says a single job.
std::string waited_job_line(const WaitedJob& waited);

}  // namespace gpupool::cli
