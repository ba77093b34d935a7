#include "core/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <tuple>

namespace gpupool {

Result<Policy> parse_policy(std::string_view name) {
  if (name == "fifo") return Policy::Fifo;
  if (name == "backfill") return Policy::Backfill;
  if (name == "gpupool") return Policy::Gpupool;
  return fail("unknown policy '{}': expected fifo, backfill or gpupool", name);
}

const char* to_string(Policy policy) {
  switch (policy) {
    case Policy::Fifo:
      return "fifo";
    case Policy::Backfill:
      return "backfill";
    case Policy::Gpupool:
      return "gpupool";
  }
  return "unknown";
}

namespace {

double limit_or_never(const JobRequest& job) {
  return job.time_limit_s.value_or(std::numeric_limits<double>::infinity());
}

bool whole_gpu_free(const GpuAvailability& gpu) {
  return gpu.usable && !gpu.exclusive_held && gpu.shared_mib == 0;
}

uint64_t slice_room(const Gpu& gpu, const GpuAvailability& state) {
  if (!state.usable || state.exclusive_held || !gpu.memory_total_mib) return 0;
  return *gpu.memory_total_mib - std::min(*gpu.memory_total_mib, state.shared_mib);
}

void take(std::vector<GpuAvailability>& state, const JobRequest& job,
          const std::vector<unsigned>& gpus) {
  for (unsigned gpu : gpus) {
    if (job.slice_mib) {
      state[gpu].shared_mib += *job.slice_mib;
    } else {
      state[gpu].exclusive_held = true;
    }
  }
}

void give_back(std::vector<GpuAvailability>& state, const JobRequest& job,
               const std::vector<unsigned>& gpus) {
  for (unsigned gpu : gpus) {
    if (job.slice_mib) {
      state[gpu].shared_mib -= std::min(state[gpu].shared_mib, *job.slice_mib);
    } else {
      state[gpu].exclusive_held = false;
    }
  }
}

}  // namespace

Scheduler::Scheduler(Machine machine, SchedulerConfig config)
    : machine_(std::move(machine)), config_(config), availability_(machine_.gpus.size()) {
  for (const Gpu& gpu : machine_.gpus) {
    availability_[gpu.index].usable = !gpu.fault.has_value();
    largest_gpu_mib_ = std::max(largest_gpu_mib_, gpu.memory_total_mib.value_or(0));
  }
}

Result<Scheduler> Scheduler::create(Machine machine, SchedulerConfig config) {
  if (machine.gpus.empty()) return fail("the machine has no GPU to schedule");
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    if (machine.gpus[i].index != i) {
      return fail("GPU {} is listed at position {}: expected indices 0 to {} in order",
                  machine.gpus[i].index, i, machine.gpus.size() - 1);
    }
  }
  if (machine.links.size() != machine.gpus.size()) {
    return fail("the link matrix has {} rows for {} GPUs", machine.links.size(),
                machine.gpus.size());
  }
  if (config.quota_gpus && !(*config.quota_gpus > 0)) return fail("a quota must be positive");
  if (!(config.fair_share_half_life_s > 0))
    return fail("the fair-share half-life must be positive");
  return Scheduler(std::move(machine), config);
}

size_t Scheduler::user_index(const std::string& name) {
  auto [entry, inserted] = user_by_name_.try_emplace(name, users_.size());
  if (inserted) users_.push_back(UserState{name, 0, 0});
  return entry->second;
}

double Scheduler::weight_of(const JobRequest& request) const {
  if (!request.slice_mib) return request.gpus;
  return request.gpus * static_cast<double>(*request.slice_mib) /
         static_cast<double>(largest_gpu_mib_);
}

// Decayed usage: each GPU-second counts 2^(-age / half-life). Held GPUs accrue continuously.
void Scheduler::account_usage(double now) {
  double elapsed = now - last_accounted_s_;
  if (elapsed <= 0) return;
  double half_life = config_.fair_share_half_life_s;
  double decay = std::exp2(-elapsed / half_life);
  double accrued_per_gpu = (1 - decay) * half_life / std::numbers::ln2;
  for (UserState& user : users_) user.usage = user.usage * decay + user.held * accrued_per_gpu;
  last_accounted_s_ = now;
}

bool Scheduler::over_quota(const QueuedJob& job) const {
  // A tolerance, so that slices adding up to a whole GPU are not refused for rounding.
  return config_.quota_gpus && users_[job.user].held + job.weight > *config_.quota_gpus + 1e-9;
}

Result<void> Scheduler::submit(const JobRequest& request, double now) {
  if (request.gpus == 0) return fail("asks for no GPU");
  if (request.gpus > machine_.gpus.size()) {
    return fail("asks for {} GPUs, the machine has {}", request.gpus, machine_.gpus.size());
  }
  if (request.slice_mib) {
    size_t large_enough = static_cast<size_t>(
        std::count_if(machine_.gpus.begin(), machine_.gpus.end(), [&](const Gpu& gpu) {
          return gpu.memory_total_mib && *gpu.memory_total_mib >= *request.slice_mib;
        }));
    if (large_enough < request.gpus) {
      return fail("asks for {} MiB on {} GPU{}, only {} GPU{} that much memory", *request.slice_mib,
                  request.gpus, request.gpus == 1 ? "" : "s", large_enough,
                  large_enough == 1 ? " has" : "s have");
    }
  }
  double weight = weight_of(request);
  if (config_.quota_gpus && weight > *config_.quota_gpus + 1e-9) {
    return fail("asks for {:.2f} GPUs, above the quota of {:.2f} per user", weight,
                *config_.quota_gpus);
  }
  if (queued_ids_.contains(request.id) || running_.contains(request.id)) {
    return fail("job {} is already submitted", request.id);
  }
  account_usage(now);
  size_t user = user_index(request.user);
  auto [entry, inserted] = group_index_.try_emplace({request.priority, user}, groups_.size());
  if (inserted) groups_.push_back(Group{request.priority, user, {}});
  uint64_t arrival = arrivals_++;
  groups_[entry->second].jobs.emplace(arrival, QueuedJob{request, arrival, user, weight});
  queued_ids_.insert(request.id);
  queued_limits_.insert(limit_or_never(request));
  return {};
}

Result<void> Scheduler::finish(JobId id, double now) {
  auto job = running_.find(id);
  if (job == running_.end()) return fail("job {} is not running", id);
  account_usage(now);
  give_back(availability_, job->second.request, job->second.gpus);
  users_[job->second.user].held = std::max(0.0, users_[job->second.user].held - job->second.weight);
  running_.erase(job);
  return {};
}

double Scheduler::held_gpus(const std::string& user) const {
  auto entry = user_by_name_.find(user);
  return entry == user_by_name_.end() ? 0 : users_[entry->second].held;
}

double Scheduler::fair_share_usage(const std::string& user) const {
  auto entry = user_by_name_.find(user);
  return entry == user_by_name_.end() ? 0 : users_[entry->second].usage;
}

void Scheduler::start(const QueuedJob& job, std::vector<unsigned> gpus, double now) {
  take(availability_, job.request, gpus);
  users_[job.user].held += job.weight;
  queued_ids_.erase(job.request.id);
  queued_limits_.erase(queued_limits_.find(limit_or_never(job.request)));
  running_.emplace(job.request.id,
                   RunningJob{job.request, job.user, job.weight, now, std::move(gpus)});
}

// One scheduling pass: walks the queue in policy order, merging the (priority, user) groups.
class Scheduler::Pass {
 public:
  Pass(Scheduler& scheduler, double now) : s_(scheduler), now_(now) {
    for (size_t group = 0; group < s_.groups_.size(); ++group) {
      auto& jobs = s_.groups_[group].jobs;
      if (!jobs.empty()) push(Cursor{group, jobs.begin()});
    }
  }

  std::vector<JobStart> run() {
    std::optional<size_t> examined_behind;  // jobs examined since the first one that waits
    while (!heads_.empty() && anything_can_start() &&
           (!examined_behind || *examined_behind < s_.config_.backfill_depth)) {
      std::pop_heap(heads_.begin(), heads_.end(), later);
      Cursor cursor = heads_.back().cursor;
      heads_.pop_back();
      const QueuedJob& job = cursor.job->second;
      std::optional<std::vector<unsigned>> gpus;
      if (!s_.over_quota(job)) gpus = choose(job);
      if (gpus) {
        s_.start(job, *gpus, now_);
        started_.push_back(JobStart{job.request.id, std::move(*gpus)});
        cursor.job = s_.groups_[cursor.group].jobs.erase(cursor.job);
      } else {
        if (s_.config_.policy == Policy::Fifo) break;  // the head blocks everyone
        if (examined_behind)
          ++*examined_behind;
        else
          examined_behind = 0;
        // One reservation per pass, for the first job in order that only lacks GPUs.
        if (s_.config_.policy == Policy::Gpupool && !tried_reservation_ && !s_.over_quota(job)) {
          tried_reservation_ = true;
          reserve(job);
        }
        ++cursor.job;
      }
      if (cursor.job != s_.groups_[cursor.group].jobs.end()) push(cursor);
    }
    return std::move(started_);
  }

 private:
  using JobIterator = std::map<uint64_t, QueuedJob>::iterator;
  struct Cursor {
    size_t group;
    JobIterator job;
  };
  // Policy order, smallest first: gpupool by priority, then fair-share usage, then arrival;
  // the others by arrival alone.
  using Key = std::tuple<int, double, uint64_t>;
  struct Head {
    Key key;
    Cursor cursor;
  };
  static bool later(const Head& a, const Head& b) { return a.key > b.key; }

  void push(Cursor cursor) {
    const QueuedJob& job = cursor.job->second;
    Key key{0, 0.0, job.arrival};
    if (s_.config_.policy == Policy::Gpupool) {
      key = {-job.request.priority, s_.users_[job.user].usage, job.arrival};
    }
    heads_.push_back(Head{key, cursor});
    std::push_heap(heads_.begin(), heads_.end(), later);
  }

  // False when no queued job can start: no GPU has room, or only reserved ones do and even the
  // shortest time limit queued would not end before the reservation.
  bool anything_can_start() const {
    bool room_outside = false;
    bool room_inside = false;
    for (const Gpu& gpu : s_.machine_.gpus) {
      const GpuAvailability& state = s_.availability_[gpu.index];
      if (!whole_gpu_free(state) && slice_room(gpu, state) == 0) continue;
      bool reserved = !reserved_mask_.empty() && reserved_mask_[gpu.index];
      (reserved ? room_inside : room_outside) = true;
    }
    if (room_outside) return true;
    const std::optional<Reservation>& reservation = s_.reservation_;
    return room_inside && (!reservation || s_.queued_limits_.empty() ||
                           now_ + *s_.queued_limits_.begin() <= reservation->start_s);
  }

  // Enough GPUs for the job in `state`, leaving out `excluded` (a mask, or empty).
  bool enough(const std::vector<GpuAvailability>& state, const JobRequest& job,
              const std::vector<bool>& excluded) const {
    unsigned suitable = 0;
    for (const Gpu& gpu : s_.machine_.gpus) {
      if (!excluded.empty() && excluded[gpu.index]) continue;
      const GpuAvailability& on = state[gpu.index];
      if (job.slice_mib ? slice_room(gpu, on) >= *job.slice_mib : whole_gpu_free(on)) {
        if (++suitable == job.gpus) return true;
      }
    }
    return false;
  }

  // The baselines take the lowest-numbered GPUs that fit; gpupool places by topology and packs
  // slices best-fit, as `gpupool run` does.
  std::optional<std::vector<unsigned>> place_in(const std::vector<GpuAvailability>& state,
                                                const JobRequest& job,
                                                const std::vector<bool>& excluded) const {
    if (!enough(state, job, excluded)) return std::nullopt;
    if (s_.config_.policy != Policy::Gpupool) {
      std::vector<unsigned> gpus;
      for (const Gpu& gpu : s_.machine_.gpus) {
        const GpuAvailability& on = state[gpu.index];
        if (job.slice_mib ? slice_room(gpu, on) >= *job.slice_mib : whole_gpu_free(on)) {
          gpus.push_back(gpu.index);
        }
        if (gpus.size() == job.gpus) break;
      }
      return gpus;
    }
    GpuRequest request{job.gpus, job.slice_mib, {}, {}};
    for (unsigned gpu = 0; gpu < excluded.size(); ++gpu) {
      if (excluded[gpu]) request.excluded.push_back(gpu);
    }
    Result<std::optional<std::vector<unsigned>>> chosen = choose_gpus(s_.machine_, state, request);
    return chosen.ok() ? *chosen : std::nullopt;
  }

  std::optional<std::vector<unsigned>> choose(const QueuedJob& job) const {
    const std::optional<Reservation>& reservation = s_.reservation_;
    const JobRequest& request = job.request;
    bool ends_in_time =
        reservation && request.time_limit_s && now_ + *request.time_limit_s <= reservation->start_s;
    if (!reservation || ends_in_time) return place_in(s_.availability_, request, {});
    return place_in(s_.availability_, request, reserved_mask_);
  }

  // When a running job is expected to end: at its time limit, else after the default run time
  // or twice what it has run so far (a job that has run long tends to run long).
  double expected_end(const RunningJob& job) const {
    double run_time = job.request.time_limit_s.value_or(
        std::max(s_.config_.default_runtime_s, 2 * (now_ - job.start_s)));
    return std::max(now_, job.start_s + run_time);
  }

  // EASY backfilling: the first job that cannot start gets the GPUs that free up first for it.
  void reserve(const QueuedJob& job) {
    std::vector<std::pair<double, const RunningJob*>> by_end;
    for (const auto& [id, running] : s_.running_)
      by_end.emplace_back(expected_end(running), &running);
    std::sort(by_end.begin(), by_end.end(), [](const auto& a, const auto& b) {
      return std::tie(a.first, a.second->request.id) < std::tie(b.first, b.second->request.id);
    });
    std::vector<GpuAvailability> future = s_.availability_;
    for (size_t i = 0; i < by_end.size(); ++i) {
      give_back(future, by_end[i].second->request, by_end[i].second->gpus);
      if (i + 1 < by_end.size() && by_end[i + 1].first == by_end[i].first) continue;
      if (std::optional<std::vector<unsigned>> gpus = place_in(future, job.request, {})) {
        reserved_mask_.assign(s_.availability_.size(), false);
        for (unsigned gpu : *gpus) reserved_mask_[gpu] = true;
        s_.reservation_ = Reservation{job.request.id, by_end[i].first, std::move(*gpus)};
        return;
      }
    }
  }

  Scheduler& s_;
  double now_;
  std::vector<Head> heads_;
  std::vector<JobStart> started_;
  std::vector<bool> reserved_mask_;
  bool tried_reservation_ = false;
};

std::vector<JobStart> Scheduler::schedule(double now) {
  account_usage(now);
  reservation_.reset();
  return Pass(*this, now).run();
}

}  // namespace gpupool
