// Trace replay in virtual time: feeds a trace's jobs to the scheduler as they arrive, starts
// what it decides, and ends each job when its duration (or time limit) has passed. Only the
// replay knows the durations; the scheduler learns that a job ended when it ends.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "sched/scheduler.h"
#include "sched/trace.h"

namespace gpupool::sim {

// A spell in which a suspended job held no GPU: from the end of its checkpoint to its restart.
struct SuspendedSpell {
  double released_s = 0;
  double restarted_s = 0;
};

struct ScheduledJob {
  double start_s = 0;  // the first
  double end_s = 0;
  std::vector<unsigned> gpus;  // nvidia-smi indices
  std::vector<SuspendedSpell> suspensions = {};  // (SchedulerConfig::backfill_by_suspending)
};

struct UserFigures {
  std::string user;
  size_t jobs = 0;
  double gpu_hours = 0;  // slices as fractions of the GPU
  double mean_wait_s = 0;
  double max_wait_s = 0;
  double mean_completion_s = 0;
  // Themis' finish-time fairness: the user's mean completion time here over that on a private
  // machine of their share (the same machine, every duration stretched by the number of users).
  // Above 1: the user fared worse than alone on their share.
  double finish_time_fairness = 1;
};

struct ReplaySummary {
  size_t jobs = 0;
  double makespan_s = 0;     // from time 0 to the last job's end
  double lower_bound_s = 0;  // no schedule can end earlier (see docs/scheduling.md)
  double utilization = 0;    // GPU-seconds used / (GPUs x makespan)
  // Waits run from submission to the first start, and count the time suspended too.
  double mean_wait_s = 0;
  double p95_wait_s = 0;
  double max_wait_s = 0;
  double mean_completion_s = 0;  // submit to end
  double p99_completion_s = 0;
  // FGD's measure: of the GPU capacity while some job waited, the share nobody held (a slice
  // holds its fraction of the card).
  double unallocated_while_waiting = 0;
  // Jain's index over the active users' shares, time-averaged while some job waited: a user's
  // share is what they held over the lesser of their demand and an equal split. 1: all equal.
  double jain_index = 1;
  double max_finish_time_fairness = 1;  // the worst user's (UserFigures::finish_time_fairness)
  size_t ended_at_time_limit = 0;  // jobs that would have run longer than their limit
  size_t suspensions = 0;          // jobs on loan suspended for a reservation
  double max_suspended_s = 0;      // the longest a job held no GPU between its start and its end
  std::vector<UserFigures> users;  // sorted by name
};

struct ReplayResult {
  std::vector<ScheduledJob> schedule;  // one per trace job, in trace order
  ReplaySummary summary;
};

// With backfill_by_suspending, every one-GPU job (whole or slice) is suspendable; a suspension
// holds the job's GPUs while its memory is checkpointed and costs it the restore when it starts
// again (suspension_time()).
Result<ReplayResult> replay(const Machine& machine, const std::vector<TraceJob>& trace,
                            const SchedulerConfig& config);

// How long a job of `gpu_mib` on its GPU takes to checkpoint and to restore, at the rates
// measured on an H100 machine (docs/benchmarks.md, "Suspend and resume"): 1.8 GiB/s to host
// memory, 7 GiB/s back, and a second each for the calls.
struct SuspensionTime {
  double checkpoint_s = 0;
  double restore_s = 0;
};
SuspensionTime suspension_time(uint64_t gpu_mib);

// `id,start_s,end_s,gpus,suspended` with the GPUs joined by ';' and the suspensions as
// `released-restarted` joined by ';', one row per job in trace order.
std::string schedule_csv(const std::vector<TraceJob>& trace,
                         const std::vector<ScheduledJob>& schedule);

nlohmann::json summary_json(const ReplaySummary& summary);

}  // namespace gpupool::sim
