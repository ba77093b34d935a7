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

struct ScheduledJob {
  double start_s = 0;
  double end_s = 0;
  std::vector<unsigned> gpus;  // nvidia-smi indices
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
  std::vector<UserFigures> users;  // sorted by name
};

struct ReplayResult {
  std::vector<ScheduledJob> schedule;  // one per trace job, in trace order
  ReplaySummary summary;
};

Result<ReplayResult> replay(const Machine& machine, const std::vector<TraceJob>& trace,
                            const SchedulerConfig& config);

// `id,start_s,end_s,gpus` with the GPUs joined by ';', one row per job in trace order.
std::string schedule_csv(const std::vector<TraceJob>& trace,
                         const std::vector<ScheduledJob>& schedule);

nlohmann::json summary_json(const ReplaySummary& summary);

}  // namespace gpupool::sim
