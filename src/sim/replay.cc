#include "sim/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <utility>

namespace gpupool::sim {
namespace {

// How long a job runs: its duration, cut short at its time limit as the daemon would.
double run_time(const TraceJob& job) {
  return job.time_limit_s ? std::min(job.duration_s, *job.time_limit_s) : job.duration_s;
}

// GPUs a job occupies, a slice counting as its share of the largest GPU (as quotas count it).
double gpu_weight(const TraceJob& job, uint64_t largest_gpu_mib) {
  if (!job.gpu_mem_mib) return job.gpus;
  return job.gpus * static_cast<double>(*job.gpu_mem_mib) / static_cast<double>(largest_gpu_mib);
}

ReplaySummary summarize(const Machine& machine, const std::vector<TraceJob>& trace,
                        const std::vector<ScheduledJob>& schedule) {
  uint64_t largest_gpu_mib = 0;
  for (const Gpu& gpu : machine.gpus) {
    largest_gpu_mib = std::max(largest_gpu_mib, gpu.memory_total_mib.value_or(0));
  }
  ReplaySummary summary;
  summary.jobs = trace.size();
  std::vector<double> waits;
  waits.reserve(trace.size());
  double gpu_seconds = 0;
  double latest_possible_end = 0;
  std::map<std::string, UserFigures> users;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceJob& job = trace[i];
    double wait = schedule[i].start_s - job.submit_s;
    double used = gpu_weight(job, largest_gpu_mib) * run_time(job);
    waits.push_back(wait);
    gpu_seconds += used;
    latest_possible_end = std::max(latest_possible_end, job.submit_s + run_time(job));
    summary.makespan_s = std::max(summary.makespan_s, schedule[i].end_s);
    if (job.time_limit_s && job.duration_s > *job.time_limit_s) ++summary.ended_at_time_limit;
    UserFigures& user = users[job.user];
    user.user = job.user;
    ++user.jobs;
    user.gpu_hours += used / 3600;
    user.mean_wait_s += wait;  // a sum until divided below
    user.max_wait_s = std::max(user.max_wait_s, wait);
  }
  double gpus = static_cast<double>(machine.gpus.size());
  summary.lower_bound_s = std::max(gpu_seconds / gpus, latest_possible_end);
  summary.utilization = summary.makespan_s > 0 ? gpu_seconds / (gpus * summary.makespan_s) : 0;
  if (!waits.empty()) {
    summary.mean_wait_s =
        std::accumulate(waits.begin(), waits.end(), 0.0) / static_cast<double>(waits.size());
    // Nearest rank: the smallest wait that at least 95 % of the jobs do not exceed.
    size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(waits.size())));
    std::nth_element(waits.begin(), waits.begin() + (rank - 1), waits.end());
    summary.p95_wait_s = waits[rank - 1];
    summary.max_wait_s = *std::max_element(waits.begin(), waits.end());
  }
  for (auto& [name, user] : users) {
    user.mean_wait_s /= static_cast<double>(user.jobs);
    summary.users.push_back(std::move(user));
  }
  return summary;
}

}  // namespace

Result<ReplayResult> replay(const Machine& machine, const std::vector<TraceJob>& trace,
                            const SchedulerConfig& config) {
  TRY_ASSIGN(Scheduler scheduler, Scheduler::create(machine, config));
  std::vector<size_t> arrivals(trace.size());
  std::iota(arrivals.begin(), arrivals.end(), 0);
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [&](size_t a, size_t b) { return trace[a].submit_s < trace[b].submit_s; });
  // The durations stay here: the scheduler hears of an end only when it happens.
  using Completion = std::pair<double, size_t>;  // end, trace position
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions;
  std::vector<ScheduledJob> schedule(trace.size());
  std::vector<bool> started(trace.size(), false);
  size_t next_arrival = 0;
  while (next_arrival < arrivals.size() || !completions.empty()) {
    double now = std::numeric_limits<double>::infinity();
    if (next_arrival < arrivals.size()) now = trace[arrivals[next_arrival]].submit_s;
    if (!completions.empty()) now = std::min(now, completions.top().first);
    while (!completions.empty() && completions.top().first <= now) {
      TRY(scheduler.finish(completions.top().second, now));
      completions.pop();
    }
    for (; next_arrival < arrivals.size() && trace[arrivals[next_arrival]].submit_s <= now;
         ++next_arrival) {
      const TraceJob& job = trace[arrivals[next_arrival]];
      JobRequest request{arrivals[next_arrival], job.user, {job.gpus, job.gpu_mem_mib}, job.priority,
                         job.time_limit_s};
      Result<void> submitted = scheduler.submit(request, now);
      if (!submitted) return fail("trace job '{}': {}", job.id, submitted.error().message);
    }
    for (JobStart& start : scheduler.schedule(now)) {
      double end = now + run_time(trace[start.id]);
      schedule[start.id] = ScheduledJob{now, end, std::move(start.gpus)};
      started[start.id] = true;
      completions.emplace(end, start.id);
    }
  }
  auto never = std::find(started.begin(), started.end(), false);
  if (never != started.end()) {
    return fail("trace job '{}' was never scheduled",
                trace[static_cast<size_t>(never - started.begin())].id);
  }
  ReplaySummary summary = summarize(machine, trace, schedule);
  return ReplayResult{std::move(schedule), std::move(summary)};
}

std::string schedule_csv(const std::vector<TraceJob>& trace,
                         const std::vector<ScheduledJob>& schedule) {
  std::string out = "id,start_s,end_s,gpus\n";
  for (size_t i = 0; i < trace.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{}\n", trace[i].id, schedule[i].start_s,
                   schedule[i].end_s, fmt::join(schedule[i].gpus, ";"));
  }
  return out;
}

nlohmann::json summary_json(const ReplaySummary& summary) {
  nlohmann::json users = nlohmann::json::array();
  for (const UserFigures& user : summary.users) {
    users.push_back({{"user", user.user},
                     {"jobs", user.jobs},
                     {"gpu_hours", user.gpu_hours},
                     {"mean_wait_s", user.mean_wait_s},
                     {"max_wait_s", user.max_wait_s}});
  }
  return {{"jobs", summary.jobs},
          {"makespan_s", summary.makespan_s},
          {"lower_bound_s", summary.lower_bound_s},
          {"utilization", summary.utilization},
          {"mean_wait_s", summary.mean_wait_s},
          {"p95_wait_s", summary.p95_wait_s},
          {"max_wait_s", summary.max_wait_s},
          {"ended_at_time_limit", summary.ended_at_time_limit},
          {"users", users}};
}

}  // namespace gpupool::sim
