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
};

struct ReplaySummary {
  size_t jobs = 0;
  double makespan_s = 0;     // from time 0 to the last job's end
  double lower_bound_s = 0;  // no schedule can end earlier (see docs/scheduling.md)
  double utilization = 0;    // GPU-seconds used / (GPUs x makespan)
  double mean_wait_s = 0;
  double p95_wait_s = 0;
  double max_wait_s = 0;
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
