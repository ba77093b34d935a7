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

#include "base/statistics.h"

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

struct Contention {
  double unallocated_while_waiting = 0;
  double jain_index = 1;
};

// Sweeps the schedule in time order, integrating over the spans in which some job waits how
// much of the GPUs nobody held and how evenly the users with work shared them.
Contention measure_contention(const std::vector<TraceJob>& trace,
                              const std::vector<ScheduledJob>& schedule, double gpus,
                              uint64_t largest_gpu_mib) {
  // A suspended job gives its GPUs back and waits again (Release) until it starts again (Start).
  enum class Change { Submit, Start, Release, End };
  struct Event {
    double at;
    Change change;
    size_t job;
  };
  std::vector<Event> events;
  events.reserve(3 * trace.size());
  std::map<std::string, size_t> user_numbers;
  std::vector<size_t> user_of(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    events.push_back({trace[i].submit_s, Change::Submit, i});
    events.push_back({schedule[i].start_s, Change::Start, i});
    events.push_back({schedule[i].end_s, Change::End, i});
    for (const SuspendedSpell& suspension : schedule[i].suspensions) {
      events.push_back({suspension.released_s, Change::Release, i});
      events.push_back({suspension.restarted_s, Change::Start, i});
    }
    user_of[i] = user_numbers.try_emplace(trace[i].user, user_numbers.size()).first->second;
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.at < b.at; });
  struct UserLoad {
    double held = 0, waiting = 0;  // GPUs
    size_t running_jobs = 0, waiting_jobs = 0;
  };
  std::vector<UserLoad> users(user_numbers.size());
  size_t waiting_jobs = 0;
  double held = 0, contended_time = 0, capacity = 0, allocated = 0, jain_time = 0;
  for (size_t e = 0; e < events.size();) {
    double now = events[e].at;
    for (; e < events.size() && events[e].at == now; ++e) {
      size_t job = events[e].job;
      double weight = gpu_weight(trace[job], largest_gpu_mib);
      UserLoad& user = users[user_of[job]];
      switch (events[e].change) {
        case Change::Submit:
          ++waiting_jobs, ++user.waiting_jobs, user.waiting += weight;
          break;
        case Change::Start:
          --waiting_jobs, --user.waiting_jobs, user.waiting -= weight;
          ++user.running_jobs, user.held += weight, held += weight;
          break;
        case Change::Release:
          ++waiting_jobs, ++user.waiting_jobs, user.waiting += weight;
          [[fallthrough]];
        case Change::End:
          --user.running_jobs, user.held -= weight, held -= weight;
          break;
      }
    }
    if (waiting_jobs == 0 || e == events.size()) continue;
    double span = events[e].at - now;
    contended_time += span;
    capacity += gpus * span;
    allocated += std::min(held, gpus) * span;
    size_t active = 0;
    for (const UserLoad& user : users) active += user.running_jobs + user.waiting_jobs > 0;
    double equal_split = gpus / static_cast<double>(active), sum = 0, sum_of_squares = 0;
    for (const UserLoad& user : users) {
      if (user.running_jobs + user.waiting_jobs == 0) continue;
      double share = std::max(0.0, user.held) / std::min(user.held + user.waiting, equal_split);
      sum += share;
      sum_of_squares += share * share;
    }
    double jain = sum_of_squares > 0 ? sum * sum / (static_cast<double>(active) * sum_of_squares) : 1;
    jain_time += jain * span;
  }
  Contention contention;
  if (contended_time > 0) {
    contention.unallocated_while_waiting = 1 - allocated / capacity;
    contention.jain_index = jain_time / contended_time;
  }
  return contention;
}

ReplaySummary summarize(const Machine& machine, const std::vector<TraceJob>& trace,
                        const std::vector<ScheduledJob>& schedule) {
  uint64_t largest_gpu_mib = 0;
  for (const Gpu& gpu : machine.gpus) {
    largest_gpu_mib = std::max(largest_gpu_mib, gpu.memory_total_mib.value_or(0));
  }
  ReplaySummary summary;
  summary.jobs = trace.size();
  std::vector<double> waits, completions;
  waits.reserve(trace.size());
  completions.reserve(trace.size());
  double gpu_seconds = 0;
  double latest_possible_end = 0;
  std::map<std::string, UserFigures> users;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceJob& job = trace[i];
    double suspended = 0;
    for (const SuspendedSpell& suspension : schedule[i].suspensions) {
      suspended += suspension.restarted_s - suspension.released_s;
    }
    // A suspended job waits again, for its GPUs.
    double wait = schedule[i].start_s - job.submit_s + suspended;
    double used = gpu_weight(job, largest_gpu_mib) * run_time(job);
    waits.push_back(wait);
    completions.push_back(schedule[i].end_s - job.submit_s);
    gpu_seconds += used;
    latest_possible_end = std::max(latest_possible_end, job.submit_s + run_time(job));
    summary.makespan_s = std::max(summary.makespan_s, schedule[i].end_s);
    if (job.time_limit_s && job.duration_s > *job.time_limit_s) ++summary.ended_at_time_limit;
    summary.suspensions += schedule[i].suspensions.size();
    summary.max_suspended_s = std::max(summary.max_suspended_s, suspended);
    UserFigures& user = users[job.user];
    user.user = job.user;
    ++user.jobs;
    user.gpu_hours += used / 3600;
    user.mean_wait_s += wait;  // a sum until divided below
    user.max_wait_s = std::max(user.max_wait_s, wait);
    user.mean_completion_s += completions.back();  // a sum until divided below
  }
  double gpus = static_cast<double>(machine.gpus.size());
  summary.lower_bound_s = std::max(gpu_seconds / gpus, latest_possible_end);
  summary.utilization = summary.makespan_s > 0 ? gpu_seconds / (gpus * summary.makespan_s) : 0;
  summary.mean_wait_s = mean(waits);
  summary.p95_wait_s = nearest_rank(waits, 0.95);
  summary.max_wait_s = waits.empty() ? 0 : *std::max_element(waits.begin(), waits.end());
  summary.mean_completion_s = mean(completions);
  summary.p99_completion_s = nearest_rank(completions, 0.99);
  Contention contention = measure_contention(trace, schedule, gpus, largest_gpu_mib);
  summary.unallocated_while_waiting = contention.unallocated_while_waiting;
  summary.jain_index = contention.jain_index;
  for (auto& [name, user] : users) {
    user.mean_wait_s /= static_cast<double>(user.jobs);
    user.mean_completion_s /= static_cast<double>(user.jobs);
    summary.users.push_back(std::move(user));
  }
  return summary;
}

// The schedule the scheduler makes of the trace; the durations stay here.
Result<std::vector<ScheduledJob>> run_schedule(const Machine& machine,
                                               const std::vector<TraceJob>& trace,
                                               const SchedulerConfig& config) {
  TRY_ASSIGN(Scheduler scheduler, Scheduler::create(machine, config));
  std::vector<size_t> arrivals(trace.size());
  std::iota(arrivals.begin(), arrivals.end(), 0);
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [&](size_t a, size_t b) { return trace[a].submit_s < trace[b].submit_s; });
  auto gpu_mib = [&](size_t job, unsigned gpu) {
    return trace[job].gpu_mem_mib.value_or(machine.gpus[gpu].memory_total_mib.value_or(0));
  };
  // What only the replay knows: when each job ends, or its checkpoint does. An event counts
  // only while it is its job's latest (a suspension replaces the end it had).
  struct Progress {
    double left_s = 0;         // run time still to go
    double running_since = 0;  // since its last (re)start, restore done
    uint64_t latest = 0;       // its event's number
    bool suspending = false;
  };
  struct Event {
    double at;
    size_t job;
    uint64_t number;
    bool operator>(const Event& other) const { return std::tie(at, number) > std::tie(other.at, other.number); }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  uint64_t numbered = 0;
  std::vector<Progress> progress(trace.size());
  std::vector<ScheduledJob> schedule(trace.size());
  std::vector<bool> started(trace.size(), false), ended(trace.size(), false);
  size_t next_arrival = 0;
  while (next_arrival < arrivals.size() || !events.empty()) {
    double now = std::numeric_limits<double>::infinity();
    if (next_arrival < arrivals.size()) now = trace[arrivals[next_arrival]].submit_s;
    if (!events.empty()) now = std::min(now, events.top().at);
    for (; !events.empty() && events.top().at <= now; events.pop()) {
      const Event& event = events.top();
      Progress& job = progress[event.job];
      if (event.number != job.latest) continue;
      if (job.suspending) {
        job.suspending = false;
        TRY(scheduler.suspend(event.job, now));
        TRY(scheduler.resume(event.job));
        schedule[event.job].suspensions.push_back({now, now});
      } else {
        TRY(scheduler.finish(event.job, now));
        schedule[event.job].end_s = now;
        ended[event.job] = true;
      }
    }
    for (; next_arrival < arrivals.size() && trace[arrivals[next_arrival]].submit_s <= now;
         ++next_arrival) {
      const TraceJob& job = trace[arrivals[next_arrival]];
      // The daemon suspends multi-GPU jobs too, but the driver refuses those that talk through
      // NCCL: the replay counts on one-GPU jobs only.
      JobRequest request{arrivals[next_arrival], job.user, {job.gpus, job.gpu_mem_mib}, job.priority,
                         job.time_limit_s, std::nullopt, false, job.gpus == 1};
      Result<void> submitted = scheduler.submit(request, now);
      if (!submitted) return fail("trace job '{}': {}", job.id, submitted.error().message);
    }
    for (JobStart& start : scheduler.schedule(now)) {
      Progress& job = progress[start.id];
      ScheduledJob& scheduled = schedule[start.id];
      job.running_since = now;
      if (!started[start.id]) {
        started[start.id] = true;
        job.left_s = run_time(trace[start.id]);
        scheduled = ScheduledJob{now, now, std::move(start.gpus)};
      } else {
        if (start.gpus != scheduled.gpus) {
          return fail("trace job '{}' was resumed on other GPUs than it ran on", trace[start.id].id);
        }
        scheduled.suspensions.back().restarted_s = now;
        job.running_since += suspension_time(gpu_mib(start.id, scheduled.gpus.front())).restore_s;
      }
      job.latest = ++numbered;
      events.push({job.running_since + job.left_s, start.id, job.latest});
    }
    for (JobId id : scheduler.jobs_in_the_way()) {
      Progress& job = progress[id];
      if (job.suspending) continue;
      // Its processes stop at the lock; its GPU is free once the checkpoint is done.
      TRY(scheduler.give_way(id));
      job.suspending = true;
      job.left_s -= std::max(0.0, now - job.running_since);
      job.latest = ++numbered;
      events.push({now + suspension_time(gpu_mib(id, schedule[id].gpus.front())).checkpoint_s, id, job.latest});
    }
  }
  auto never = std::find(started.begin(), started.end(), false);
  if (never != started.end()) {
    return fail("trace job '{}' was never scheduled",
                trace[static_cast<size_t>(never - started.begin())].id);
  }
  auto unfinished = std::find(ended.begin(), ended.end(), false);
  if (unfinished != ended.end()) {
    return fail("trace job '{}' was suspended and never resumed",
                trace[static_cast<size_t>(unfinished - ended.begin())].id);
  }
  return schedule;
}

// Each user's mean completion time alone on a private machine of their share: their jobs only,
// on the same machine, every duration (and limit) stretched by the number of users.
Result<void> measure_finish_time_fairness(const Machine& machine,
                                          const std::vector<TraceJob>& trace,
                                          const SchedulerConfig& config, ReplaySummary& summary) {
  double stretch = static_cast<double>(summary.users.size());
  for (UserFigures& user : summary.users) {
    std::vector<TraceJob> own;
    for (const TraceJob& job : trace) {
      if (job.user != user.user) continue;
      TraceJob& alone = own.emplace_back(job);
      alone.duration_s *= stretch;
      if (alone.time_limit_s) *alone.time_limit_s *= stretch;
    }
    TRY_ASSIGN(std::vector<ScheduledJob> schedule, run_schedule(machine, own, config));
    double private_completion = 0;
    for (size_t i = 0; i < own.size(); ++i) private_completion += schedule[i].end_s - own[i].submit_s;
    private_completion /= static_cast<double>(own.size());
    user.finish_time_fairness =
        private_completion > 0 ? user.mean_completion_s / private_completion : 1;
    summary.max_finish_time_fairness =
        std::max(summary.max_finish_time_fairness, user.finish_time_fairness);
  }
  return {};
}

}  // namespace

SuspensionTime suspension_time(uint64_t gpu_mib) {
  double gib = static_cast<double>(gpu_mib) / 1024;
  return {1 + gib / 1.8, 1 + gib / 7};
}

Result<ReplayResult> replay(const Machine& machine, const std::vector<TraceJob>& trace,
                            const SchedulerConfig& config) {
  TRY_ASSIGN(std::vector<ScheduledJob> schedule, run_schedule(machine, trace, config));
  ReplaySummary summary = summarize(machine, trace, schedule);
  if (summary.users.size() > 1) {
    summary.max_finish_time_fairness = 0;
    TRY(measure_finish_time_fairness(machine, trace, config, summary));
  }
  return ReplayResult{std::move(schedule), std::move(summary)};
}

std::string schedule_csv(const std::vector<TraceJob>& trace,
                         const std::vector<ScheduledJob>& schedule) {
  std::string out = "id,start_s,end_s,gpus,suspended\n";
  for (size_t i = 0; i < trace.size(); ++i) {
    std::vector<std::string> suspended;
    for (const SuspendedSpell& suspension : schedule[i].suspensions) {
      suspended.push_back(fmt::format("{}-{}", suspension.released_s, suspension.restarted_s));
    }
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{}\n", trace[i].id, schedule[i].start_s,
                   schedule[i].end_s, fmt::join(schedule[i].gpus, ";"), fmt::join(suspended, ";"));
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
                     {"max_wait_s", user.max_wait_s},
                     {"mean_completion_s", user.mean_completion_s},
                     {"finish_time_fairness", user.finish_time_fairness}});
  }
  return {{"jobs", summary.jobs},
          {"makespan_s", summary.makespan_s},
          {"lower_bound_s", summary.lower_bound_s},
          {"utilization", summary.utilization},
          {"mean_wait_s", summary.mean_wait_s},
          {"p95_wait_s", summary.p95_wait_s},
          {"max_wait_s", summary.max_wait_s},
          {"mean_completion_s", summary.mean_completion_s},
          {"p99_completion_s", summary.p99_completion_s},
          {"unallocated_while_waiting", summary.unallocated_while_waiting},
          {"jain_index", summary.jain_index},
          {"max_finish_time_fairness", summary.max_finish_time_fairness},
          {"ended_at_time_limit", summary.ended_at_time_limit},
          {"suspensions", summary.suspensions},
          {"max_suspended_s", summary.max_suspended_s},
          {"users", users}};
}

}  // namespace gpupool::sim
