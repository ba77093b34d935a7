#include "sched/scheduler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <set>
#include <tuple>
#include <utility>

#include "base/statistics.h"
#include "jobs/job_text.h"
#include "sched/mps.h"

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

Result<SlicePlacement> parse_slice_placement(std::string_view name) {
  if (name == "best-fit") return SlicePlacement::BestFit;
  if (name == "fragmentation") return SlicePlacement::Fragmentation;
  return fail("unknown slice placement '{}': expected best-fit or fragmentation", name);
}

const char* to_string(SlicePlacement placement) {
  return placement == SlicePlacement::BestFit ? "best-fit" : "fragmentation";
}

namespace {

bool restricted(const JobRequest& job) { return !job.gpus.allowed.empty() || !job.gpus.excluded.empty(); }

// Fewer ended jobs than this say too little of what a user's next job will run.
constexpr size_t kRunTimesForAnEstimate = 5;

double limit_or_never(const JobRequest& job) {
  return job.time_limit_s.value_or(std::numeric_limits<double>::infinity());
}

// Under MPS a GPU's server serves one user's slices at a time.
bool mps_serves_another(const GpuAvailability& on, const JobRequest& job) {
  if (!job.mps) return false;
  if (on.mps_slices > 0) return on.mps_user != job.user;
  return !on.mps_client_user.empty() && on.mps_client_user != job.user;
}

// The job's request with the GPUs it may not use for now left out.
GpuRequest without_others_mps(const std::vector<GpuAvailability>& state, const JobRequest& job) {
  GpuRequest request = job.gpus;
  for (unsigned gpu = 0; gpu < state.size(); ++gpu) {
    if (mps_serves_another(state[gpu], job)) request.excluded.push_back(gpu);
  }
  return request;
}

// Whether the job fits on one GPU in the state `on`, as one of its GPUs.
bool fits_on(const Gpu& gpu, const GpuAvailability& on, const JobRequest& job) {
  if (job.gpus.mig) return free_mig_device(gpu, on, *job.gpus.mig) != nullptr;
  return job.gpus.slice_mib ? slice_room(gpu, on) >= *job.gpus.slice_mib : whole_gpu_free(gpu, on);
}

// Marks the job's GPUs taken in `state`. A --mig job takes `mig_uuid`, or when it is empty (a
// plan) the MIG device it would be given.
void take(std::vector<GpuAvailability>& state, const Machine& machine, const JobRequest& job,
          const std::vector<unsigned>& gpus, const std::string& mig_uuid = {}) {
  for (unsigned gpu : gpus) {
    if (job.gpus.mig) {
      const MigDevice* device = free_mig_device(machine.gpus[gpu], state[gpu], *job.gpus.mig);
      std::string uuid = !mig_uuid.empty() ? mig_uuid : device != nullptr ? device->uuid : "";
      if (!uuid.empty()) state[gpu].mig_taken.push_back(uuid);
    } else if (job.gpus.slice_mib) {
      state[gpu].shared_mib += *job.gpus.slice_mib;
      if (job.mps) {
        state[gpu].mps_user = job.user;
        ++state[gpu].mps_slices;
      }
    } else {
      state[gpu].exclusive_held = true;
    }
  }
}

void give_back(std::vector<GpuAvailability>& state, const JobRequest& job, const std::vector<unsigned>& gpus,
               const std::string& mig_uuid) {
  for (unsigned gpu : gpus) {
    if (job.gpus.mig) {
      std::erase(state[gpu].mig_taken, mig_uuid);
    } else if (job.gpus.slice_mib) {
      state[gpu].shared_mib -= std::min(state[gpu].shared_mib, *job.gpus.slice_mib);
      if (job.mps && state[gpu].mps_slices > 0 && --state[gpu].mps_slices == 0) state[gpu].mps_user.clear();
    } else {
      state[gpu].exclusive_held = false;
    }
  }
}

}  // namespace

Scheduler::Scheduler(Machine machine, SchedulerConfig config)
    : machine_(std::move(machine)),
      config_(config),
      availability_(machine_.gpus.size()),
      recent_requests_(config.slice_placement == SlicePlacement::Fragmentation ? config.recent_requests : 0) {
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
  for (const auto& [user, quota] : config.user_quota_gpus) {
    if (!(quota > 0)) return fail("the quota of {} must be positive", user);
  }
  if (!(config.fair_share_half_life_s > 0))
    return fail("the fair-share half-life must be positive");
  if (!(config.overdue_after_s >= 0)) return fail("the overdue time must not be negative");
  return Scheduler(std::move(machine), config);
}

size_t Scheduler::user_index(const std::string& name) {
  auto [entry, inserted] = user_by_name_.try_emplace(name, users_.size());
  if (inserted) users_.push_back(UserState{.name = name, .quota = quota_of(name)});
  return entry->second;
}

std::optional<double> Scheduler::quota_of(const std::string& user) const {
  auto own = config_.user_quota_gpus.find(user);
  if (own != config_.user_quota_gpus.end()) return own->second;
  return config_.quota_gpus;
}

double Scheduler::weight_of(const JobRequest& request) const {
  if (const std::optional<MigRequest>& mig = request.gpus.mig) {
    // The largest MIG device it may get, as a share of the largest GPU (a slice's measure): a
    // quota then holds whichever device it gets.
    uint64_t largest_mib = 0;
    for (const Gpu& gpu : machine_.gpus) {
      if (!may_use(request.gpus, gpu.index)) continue;
      for (const MigDevice& device : gpu.mig_devices) {
        if (mig_device_matches(device, *mig)) largest_mib = std::max(largest_mib, device.memory_mib);
      }
    }
    return static_cast<double>(largest_mib) / static_cast<double>(std::max<uint64_t>(largest_gpu_mib_, 1));
  }
  if (!request.gpus.slice_mib) return request.gpus.count;
  return request.gpus.count * static_cast<double>(*request.gpus.slice_mib) /
         static_cast<double>(largest_gpu_mib_);
}

// Decayed usage: each GPU-second counts 2^(-age / half-life). Held GPUs accrue continuously,
// so one GPU held for `elapsed` seconds up to the last accounting adds the integral of that.
double Scheduler::accrued_per_gpu(double elapsed) const {
  double half_life = config_.fair_share_half_life_s;
  return (1 - std::exp2(-elapsed / half_life)) * half_life / std::numbers::ln2;
}

void Scheduler::account_usage(double now) {
  double elapsed = now - last_accounted_s_;
  if (elapsed <= 0) return;
  double decay = std::exp2(-elapsed / config_.fair_share_half_life_s);
  double accrued = accrued_per_gpu(elapsed);
  for (UserState& user : users_) user.usage = user.usage * decay + user.held * accrued;
  last_accounted_s_ = now;
}

bool Scheduler::over_quota(const QueuedJob& job) const {
  // A tolerance, so that slices adding up to a whole GPU are not refused for rounding.
  const std::optional<double>& quota = users_[job.user].quota;
  return quota && users_[job.user].held + job.weight > *quota + 1e-9;
}

bool Scheduler::at_array_limit(const QueuedJob& job) const {
  const std::optional<ArrayTask>& task = job.request.array;
  if (!task || task->limit == 0) return false;
  auto running = array_running_.find(task->array_id);
  return running != array_running_.end() && running->second >= task->limit;
}

bool Scheduler::held_back(const QueuedJob& job) const { return over_quota(job) || at_array_limit(job); }

Result<void> Scheduler::admissible(const JobRequest& request) const {
  if (request.gpus.count == 0) return fail("asks for no GPU");
  if (request.gpus.count > machine_.gpus.size()) {
    return fail("asks for {} GPUs, the machine has {}", request.gpus.count, machine_.gpus.size());
  }
  for (const std::vector<unsigned>* listed : {&request.gpus.allowed, &request.gpus.excluded}) {
    for (unsigned gpu : *listed) {
      if (gpu >= machine_.gpus.size()) {
        return fail("names GPU {}, which does not exist: the machine has GPUs 0 to {}", gpu, machine_.gpus.size() - 1);
      }
    }
  }
  bool some_in_mig_mode = std::ranges::any_of(machine_.gpus, [](const Gpu& gpu) { return gpu.mig_enabled.value_or(false); });
  if (request.gpus.mig || some_in_mig_mode) {
    // Whether the GPUs it may use could meet it at all, whatever is taken now: a MIG device of
    // its kind, or enough GPUs outside MIG mode.
    std::vector<GpuAvailability> idle(machine_.gpus.size());
    TRY(choose_gpus(machine_, idle, request.gpus));
  }
  if (restricted(request) && !request.gpus.mig) {
    std::vector<unsigned> usable;
    for (const Gpu& gpu : machine_.gpus) {
      bool large_enough = !request.gpus.slice_mib || gpu.memory_total_mib.value_or(0) >= *request.gpus.slice_mib;
      if (may_use(request.gpus, gpu.index) && large_enough) usable.push_back(gpu.index);
    }
    if (usable.size() < request.gpus.count) {
      return fail("asks for {} GPU{}{} but may use only {}{}", request.gpus.count, request.gpus.count == 1 ? "" : "s",
                  request.gpus.slice_mib ? fmt::format(" with {} MiB", *request.gpus.slice_mib) : "", usable.size(),
                  usable.empty() ? "" : fmt::format(" (GPU {})", fmt::join(usable, ",")));
    }
  }
  if (request.gpus.slice_mib) {
    size_t large_enough = static_cast<size_t>(
        std::count_if(machine_.gpus.begin(), machine_.gpus.end(), [&](const Gpu& gpu) {
          return gpu.memory_total_mib && *gpu.memory_total_mib >= *request.gpus.slice_mib;
        }));
    if (large_enough < request.gpus.count) {
      return fail("asks for {} MiB on {} GPU{}, only {} GPU{} that much memory", *request.gpus.slice_mib,
                  request.gpus.count, request.gpus.count == 1 ? "" : "s", large_enough,
                  large_enough == 1 ? " has" : "s have");
    }
  }
  double weight = weight_of(request);
  if (std::optional<double> quota = quota_of(request.user); quota && weight > *quota + 1e-9) {
    bool own = config_.user_quota_gpus.contains(request.user);
    return fail("asks for {:.2f} GPUs, above the quota of {:.2f} {}", weight, *quota,
                own ? "for " + request.user : std::string("per user"));
  }
  return {};
}

Result<void> Scheduler::submit(const JobRequest& request, double now, std::optional<double> queued_since) {
  TRY(admissible(request));
  if (queued_.contains(request.id) || running_.contains(request.id) || suspended_.contains(request.id)) {
    return fail("job {} is already submitted", request.id);
  }
  account_usage(now);
  recent_requests_.add(request.gpus);
  enqueue(QueuedJob{request, arrivals_++, std::min(now, queued_since.value_or(now)), user_index(request.user),
                    weight_of(request)});
  return {};
}

void Scheduler::enqueue(const QueuedJob& job) {
  const JobRequest& request = job.request;
  auto [entry, inserted] = group_index_.try_emplace({request.priority, job.user}, groups_.size());
  if (inserted) groups_.push_back(Group{request.priority, job.user, {}});
  groups_[entry->second].jobs.emplace(job.arrival, job);
  queued_.emplace(request.id, std::pair{entry->second, job.arrival});
  queued_limits_.insert(limit_or_never(request));
  if (!request.time_limit_s) ++users_[job.user].queued_without_limit;
  if (may_borrow(request)) ++queued_borrowers_;
}

Result<void> Scheduler::suspend(JobId id, double now) {
  auto job = running_.find(id);
  if (job == running_.end()) return fail("job {} is not running", id);
  if (job->second.request.gpus.mig) return fail("job {} holds a MIG device, which cannot be resumed on", id);
  account_usage(now);
  QueuedJob kept = job->second;
  // Its processes' state refers to these GPUs: it resumes on them.
  kept.request.gpus.allowed = job->second.gpus;
  kept.request.gpus.excluded.clear();
  // On loan again, it could be suspended over and over and never finish.
  kept.request.suspendable = false;
  if (job->second.giving_way) {
    gave_way_.insert(id);
  } else {
    gave_way_.erase(id);
  }
  release(job);
  suspended_.emplace(id, std::move(kept));
  return {};
}

Result<void> Scheduler::resume(JobId id, bool keep_place) {
  auto job = suspended_.find(id);
  if (job == suspended_.end()) return fail("job {} is not suspended", id);
  if (!keep_place) job->second.arrival = arrivals_++;
  enqueue(job->second);
  suspended_.erase(job);
  return {};
}

Result<void> Scheduler::remove(JobId id) {
  gave_way_.erase(id);
  if (suspended_.erase(id) > 0) return {};
  auto where = queued_.find(id);
  if (where == queued_.end()) return fail("job {} is not queued", id);
  auto [group, arrival] = where->second;
  auto job = groups_[group].jobs.find(arrival);
  queued_limits_.erase(queued_limits_.find(limit_or_never(job->second.request)));
  if (!job->second.request.time_limit_s) --users_[job->second.user].queued_without_limit;
  if (may_borrow(job->second.request)) --queued_borrowers_;
  groups_[group].jobs.erase(job);
  queued_.erase(where);
  if (reservation_ && reservation_->id == id) reservation_.reset();
  return {};
}

void Scheduler::release(std::unordered_map<JobId, RunningJob>::iterator job) {
  const RunningJob& ended = job->second;
  for (unsigned gpu : ended.request.mps ? ended.gpus : std::vector<unsigned>{}) {
    // The last MPS slice of its user there: its clients may outlive it (processes it left
    // running), so the server stays this user's until a reading of the GPUs says whose clients
    // are left (set_outside_use). Only in the live state: the plans never get such a reading.
    if (availability_[gpu].mps_slices == 1) availability_[gpu].mps_client_user = availability_[gpu].mps_user;
  }
  give_back(availability_, job->second.request, job->second.gpus, job->second.mig_uuid);
  UserState& user = users_[job->second.user];
  user.held = std::max(0.0, user.held - job->second.weight);
  if (const auto& task = job->second.request.array) {
    auto running = array_running_.find(task->array_id);
    if (running != array_running_.end() && --running->second == 0) array_running_.erase(running);
  }
  running_.erase(job);
}

Result<void> Scheduler::finish(JobId id, double now) {
  auto job = running_.find(id);
  if (job == running_.end()) return fail("job {} is not running", id);
  account_usage(now);
  record_run_time(users_[job->second.user], now - job->second.start_s);
  gave_way_.erase(id);
  release(job);
  return {};
}

void Scheduler::record_run_time(UserState& user, double run_time) {
  if (config_.runtime_history == 0) return;
  user.run_times.push_back(std::max(0.0, run_time));
  if (user.run_times.size() > config_.runtime_history) user.run_times.pop_front();
  if (user.run_times.size() < kRunTimesForAnEstimate) return;
  user.expected_run_time = nearest_rank({user.run_times.begin(), user.run_times.end()},
                                        config_.runtime_estimate_quantile);
}

std::optional<double> Scheduler::backfill_run_time(const QueuedJob& job) const {
  if (job.request.time_limit_s) return job.request.time_limit_s;
  return users_[job.user].expected_run_time;
}

double Scheduler::shortest_queued_run_time() const {
  double shortest = queued_limits_.empty() ? std::numeric_limits<double>::infinity() : *queued_limits_.begin();
  for (const UserState& user : users_) {
    if (user.queued_without_limit > 0 && user.expected_run_time)
      shortest = std::min(shortest, *user.expected_run_time);
  }
  return shortest;
}

Result<void> Scheduler::requeue(JobId id, double now) {
  auto job = running_.find(id);
  if (job == running_.end()) return fail("job {} is not running", id);
  account_usage(now);
  QueuedJob queued = job->second;
  release(job);
  enqueue(queued);
  // The job that waits first may be this one again: the next pass plans afresh.
  reservation_.reset();
  return {};
}

Result<void> Scheduler::adopt(const JobRequest& request, const std::vector<unsigned>& gpus,
                              double start_s, const std::string& mig_uuid, bool on_loan) {
  if (queued_.contains(request.id) || running_.contains(request.id)) {
    return fail("job {} is already submitted", request.id);
  }
  if (gpus.size() != request.gpus.count) {
    return fail("job {} asks for {} GPUs but runs on {}", request.id, request.gpus.count, gpus.size());
  }
  for (unsigned gpu : gpus) {
    if (gpu >= machine_.gpus.size()) {
      return fail("job {} runs on GPU {}, the machine has {}", request.id, gpu,
                  machine_.gpus.size());
    }
    if (std::count(gpus.begin(), gpus.end(), gpu) > 1) {
      return fail("job {} lists GPU {} twice", request.id, gpu);
    }
    const GpuAvailability& on = availability_[gpu];
    if (request.gpus.mig) {
      // A device the GPU no longer has (MIG reconfigured while the daemon was down) is taken up
      // all the same: the job still ends, and nothing else can be given that device.
      if (std::ranges::find(on.mig_taken, mig_uuid) != on.mig_taken.end()) {
        return fail("job {} runs on MIG device {}, which another job holds", request.id, mig_uuid);
      }
      continue;
    }
    if (on.exclusive_held || (!request.gpus.slice_mib && on.shared_mib > 0)) {
      return fail("job {} runs on GPU {}, which another job holds", request.id, gpu);
    }
    uint64_t memory = machine_.gpus[gpu].memory_total_mib.value_or(0);
    if (request.gpus.slice_mib && on.shared_mib + *request.gpus.slice_mib > memory) {
      return fail("job {} takes {} MiB of GPU {}, which has {} MiB left", request.id,
                  *request.gpus.slice_mib, gpu, memory - std::min(memory, on.shared_mib));
    }
  }
  take(availability_, machine_, request, gpus, mig_uuid);
  account_usage(start_s);
  size_t user = user_index(request.user);
  double weight = weight_of(request);
  // What it has run before the last accounting counts as if it had been accounted all along.
  if (start_s < last_accounted_s_) {
    users_[user].usage += weight * accrued_per_gpu(last_accounted_s_ - start_s);
  }
  users_[user].held += weight;
  if (request.array) ++array_running_[request.array->array_id];
  QueuedJob as_queued{request, arrivals_++, start_s, user, weight};
  running_.emplace(request.id, RunningJob{as_queued, start_s, gpus, mig_uuid, on_loan && config_.backfill_by_suspending});
  return {};
}

Result<void> Scheduler::set_outside_use(const std::vector<GpuAvailability>& outside) {
  if (outside.size() != machine_.gpus.size()) {
    return fail("outside use lists {} GPUs, the machine has {}", outside.size(),
                machine_.gpus.size());
  }
  for (const Gpu& gpu : machine_.gpus) {
    const GpuAvailability& from = outside[gpu.index];
    GpuAvailability& state = availability_[gpu.index];
    state.usable = !gpu.fault && from.usable;
    state.external_busy = from.exclusive_held || from.shared_mib > 0 || from.external_busy;
    // Nothing fits beside an exclusive lease, not even a slice.
    state.external_mib = from.exclusive_held ? gpu.memory_total_mib.value_or(0)
                                             : from.shared_mib + from.external_mib;
    state.holders = from.holders;
    state.mig_external = from.mig_taken;
    state.mps_client_user = from.mps_client_user;
  }
  return {};
}

std::optional<Scheduler::Waiting> Scheduler::waiting(JobId id, double now) const {
  auto where = queued_.find(id);
  if (where == queued_.end()) return std::nullopt;
  const QueuedJob& job = groups_[where->second.first].jobs.at(where->second.second);
  const UserState& user = users_[job.user];
  if (over_quota(job)) {
    return Waiting{WaitReason::QuotaLimit,
                   fmt::format("over quota: {} holds {:g} of {:g} GPUs", user.name, user.held, user.quota.value_or(0))};
  }
  if (at_array_limit(job)) {
    return Waiting{WaitReason::ArrayLimit, fmt::format("array limit: {} of array {} running", job.request.array->limit,
                                                       job.request.array->array_id)};
  }
  std::string starts_in = reservation_ ? rough_duration_text(reservation_->start_s - now) : "";
  GpuRequest request = without_others_mps(availability_, job.request);
  auto fits = choose_gpus(machine_, availability_, request);
  if (request.excluded.size() > job.request.gpus.excluded.size() && !(fits && *fits)) {
    // No room but where another user's MPS slices run (with every GPU left out, no room at all).
    auto beside_others = choose_gpus(machine_, availability_, job.request.gpus);
    if (beside_others && *beside_others && !(*beside_others)->empty()) {
      unsigned gpu = (*beside_others)->front();  // an MPS job asks for one GPU
      const GpuAvailability& on = availability_[gpu];
      return Waiting{WaitReason::Resources, on.mps_slices > 0 ? mps_one_user_text(gpu, on.mps_user)
                                                              : mps_other_clients_text(gpu, on.mps_client_user)};
    }
    fits = std::move(beside_others);
  }
  if (reservation_ && reservation_->id == id) {
    return Waiting{WaitReason::Resources, fmt::format("next in line: GPU {} reserved for it, expected to start in {}",
                                                      gpu_list_text(reservation_->gpus), starts_in)};
  }
  if (fits && !*fits) return Waiting{WaitReason::Resources, describe_wait(machine_, availability_, job.request.gpus)};
  if (reservation_ && queued_.contains(reservation_->id)) {
    auto [group, arrival] = queued_.at(reservation_->id);
    const QueuedJob& holder = groups_[group].jobs.at(arrival);
    // It would fit but for the reservation: only a job that ends before the holder starts may
    // use the reserved GPUs (backfill), which its time limit, or its user's recent jobs, must say.
    std::optional<double> expected = backfill_run_time(job);
    std::string how =
        job.request.time_limit_s
            ? fmt::format("its time limit ({}) ends after that", rough_duration_text(*job.request.time_limit_s))
        : expected ? fmt::format("{}'s recent jobs ran up to {}; with a time limit (--time) under {} it could start now",
                                 user.name, rough_duration_text(*expected), starts_in)
                   : fmt::format("with a time limit (--time) under {} it could start now", starts_in);
    return Waiting{WaitReason::Reservation,
                   fmt::format("GPU {} reserved for job {} of {}, expected to start in {}; {}",
                               gpu_list_text(reservation_->gpus), reservation_->id, users_[holder.user].name,
                               starts_in, how)};
  }
  return Waiting{WaitReason::Priority, "behind jobs that go first (priority, fair share)"};
}

double Scheduler::held_gpus(const std::string& user) const {
  auto entry = user_by_name_.find(user);
  return entry == user_by_name_.end() ? 0 : users_[entry->second].held;
}

double Scheduler::fair_share_usage(const std::string& user) const {
  auto entry = user_by_name_.find(user);
  return entry == user_by_name_.end() ? 0 : users_[entry->second].usage;
}

FairShareUsage Scheduler::export_fair_share(double now) {
  account_usage(now);
  FairShareUsage saved{last_accounted_s_, {}};
  for (const UserState& user : users_) {
    if (user.usage > 0) saved.usage[user.name] = user.usage;
  }
  return saved;
}

Result<void> Scheduler::import_fair_share(const FairShareUsage& saved, double now) {
  if (!std::isfinite(saved.as_of_s)) return fail("the fair-share usage has no valid time");
  for (const auto& [user, usage] : saved.usage) {
    if (!std::isfinite(usage) || usage < 0) return fail("the fair-share usage of {} is not a valid number", user);
  }
  account_usage(now);
  double decay = std::exp2(-std::max(0.0, last_accounted_s_ - saved.as_of_s) / config_.fair_share_half_life_s);
  for (UserState& user : users_) user.usage = 0;
  for (const auto& [user, usage] : saved.usage) users_[user_index(user)].usage = usage * decay;
  for (const auto& [id, job] : running_) {
    double ran_since = last_accounted_s_ - std::max(job.start_s, saved.as_of_s);
    if (ran_since > 0) users_[job.user].usage += job.weight * accrued_per_gpu(ran_since);
  }
  return {};
}

void Scheduler::import_run_times(const std::map<std::string, std::vector<double>>& by_user) {
  for (const auto& [user, run_times] : by_user) {
    UserState& state = users_[user_index(user)];
    for (double run_time : run_times) {
      if (std::isfinite(run_time) && run_time >= 0) record_run_time(state, run_time);
    }
  }
}

std::string Scheduler::start(const QueuedJob& job, std::vector<unsigned> gpus, double now, bool on_loan) {
  std::string mig_uuid;
  if (job.request.gpus.mig && gpus.size() == 1) {
    const MigDevice* device = free_mig_device(machine_.gpus[gpus[0]], availability_[gpus[0]], *job.request.gpus.mig);
    if (device != nullptr) mig_uuid = device->uuid;
  }
  take(availability_, machine_, job.request, gpus, mig_uuid);
  users_[job.user].held += job.weight;
  queued_.erase(job.request.id);
  queued_limits_.erase(queued_limits_.find(limit_or_never(job.request)));
  if (!job.request.time_limit_s) --users_[job.user].queued_without_limit;
  if (may_borrow(job.request)) --queued_borrowers_;
  if (job.request.array) ++array_running_[job.request.array->array_id];
  running_.emplace(job.request.id, RunningJob{job, now, std::move(gpus), mig_uuid, on_loan});
  return mig_uuid;
}

// One scheduling pass: walks the queue in policy order, merging the (priority, user) groups.
class Scheduler::Pass {
 public:
  Pass(Scheduler& scheduler, double now) : s_(scheduler), now_(now) {
    if (s_.reservation_) holder_ = s_.reservation_->id;
    for (size_t group = 0; group < s_.groups_.size(); ++group) {
      Cursor cursor{group, s_.groups_[group].jobs.begin()};
      if (skip_alone(cursor)) push(cursor);
    }
    // The holder is visited on its own, ahead of its priority level, even of its own user's
    // earlier jobs, and so are the jobs that gave way to a reservation; their groups' cursors
    // pass over them.
    std::set<JobId> alone = s_.gave_way_;
    if (holder_) alone.insert(*holder_);
    for (JobId id : alone) {
      if (auto where = s_.queued_.find(id); where != s_.queued_.end()) {
        auto [group, arrival] = where->second;
        push(Cursor{group, s_.groups_[group].jobs.find(arrival), true});
      }
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
      std::optional<Choice> chosen;
      if (!s_.held_back(job)) chosen = choose(job);
      if (chosen) {
        bool drained_for_it = holder_ == job.request.id && !tried_reservation_;
        unsigned width = job.request.gpus.slice_mib || job.request.gpus.mig ? 0 : job.request.gpus.count;
        if (chosen->gpus.empty()) {
          unplaced_.push_back(started_.size());
          unplaced_gpus_ += job.request.gpus.count;
        }
        std::string mig_uuid = s_.start(job, chosen->gpus, now_, chosen->on_loan);
        room_.reset();
        shortest_run_time_.reset();
        started_.push_back(JobStart{job.request.id, std::move(chosen->gpus), std::move(mig_uuid), chosen->on_loan});
        cursor.job = s_.groups_[cursor.group].jobs.erase(cursor.job);
        if (drained_for_it && width > 1) hand_over(width);
      } else {
        if (s_.config_.policy == Policy::Fifo) break;  // the head blocks everyone
        if (examined_behind)
          ++*examined_behind;
        else
          examined_behind = 0;
        // One reservation per pass, for the first job in order that only lacks GPUs. A MIG
        // device is not reserved: a reservation keeps others off whole GPUs, and a job waiting
        // for one MIG device would keep every job off its GPU's other devices.
        if (s_.config_.policy == Policy::Gpupool && !tried_reservation_ && !s_.held_back(job) &&
            !job.request.gpus.mig) {
          tried_reservation_ = true;
          if (holder_ != job.request.id) s_.chain_before_.reset();
          reserve(job);
        }
        ++cursor.job;
      }
      if (!cursor.alone && skip_alone(cursor)) push(cursor);
    }
    place_unplaced();
    bool holder_waits = holder_ && s_.queued_.contains(*holder_);
    if (!tried_reservation_ && !holder_waits && s_.config_.policy == Policy::Gpupool) {
      // Nothing more could start: the first job in order that waits gets its plan all the same,
      // so that it keeps its place when GPUs free up.
      for (; !heads_.empty() && !tried_reservation_; heads_.pop_back()) {
        std::pop_heap(heads_.begin(), heads_.end(), later);
        const QueuedJob& job = heads_.back().cursor.job->second;
        if (s_.held_back(job) || job.request.gpus.mig) continue;
        tried_reservation_ = true;
        s_.chain_before_.reset();
        reserve(job);
      }
    }
    // A pass that stopped before planning keeps the last plan for the job that still waits.
    if (tried_reservation_ || !holder_waits) s_.reservation_ = reservation_;
    return std::move(started_);
  }

  // Stands in for a pass: the queued jobs in the same order, each planned at the earliest of
  // now and the moments running or planned jobs are expected to end where it fits, and does not
  // meet a job planned to start later on its GPUs before its own expected end (conservative
  // backfilling). Nothing starts.
  std::map<JobId, double> plan(size_t limit) {
    std::vector<std::pair<double, const RunningJob*>> ends;
    for (const auto& [id, running] : s_.running_) ends.emplace_back(expected_end(running), &running);
    std::sort(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::set<double> moments = {now_};
    for (const auto& [end, running] : ends) moments.insert(end);
    std::vector<Planned> planned;
    std::map<JobId, double> starts;
    for (size_t examined = 0; !heads_.empty() && examined < limit; ++examined) {
      std::pop_heap(heads_.begin(), heads_.end(), later);
      Cursor cursor = heads_.back().cursor;
      heads_.pop_back();
      const QueuedJob& job = cursor.job->second;
      if (!s_.held_back(job)) {
        if (std::optional<Planned> placed = earliest(job.request, ends, moments, planned)) {
          starts[job.request.id] = placed->start;
          moments.insert(placed->end);
          planned.push_back(std::move(*placed));
        }
      }
      ++cursor.job;
      if (!cursor.alone && skip_alone(cursor)) push(cursor);
    }
    return starts;
  }

 private:
  using JobIterator = std::map<uint64_t, QueuedJob>::iterator;
  struct Cursor {
    size_t group;
    JobIterator job;
    bool alone = false;  // a visit of its own: not followed by the rest of its group
  };

  // Moves a group's cursor past the jobs that have cursors of their own; false at the end.
  bool skip_alone(Cursor& cursor) const {
    auto end = s_.groups_[cursor.group].jobs.end();
    auto alone = [&](JobId id) { return holder_ == id || s_.gave_way_.contains(id); };
    while (cursor.job != end && alone(cursor.job->second.request.id)) ++cursor.job;
    return cursor.job != end;
  }
  // Policy order, smallest first: gpupool by priority, then the holder of the reservation, then
  // the jobs that gave way to a reservation, then overdue jobs, then fair-share usage, then
  // arrival; the others by arrival alone.
  using Key = std::tuple<int, int, double, uint64_t>;
  struct Head {
    Key key;
    Cursor cursor;
  };
  static bool later(const Head& a, const Head& b) { return a.key > b.key; }

  Key order_key(const QueuedJob& job) const {
    if (s_.config_.policy != Policy::Gpupool) return {0, 0, 0.0, job.arrival};
    // The job that holds the reservation stays ahead of its priority level until it starts:
    // were fair share to reorder it behind others, they would take the GPUs it was waiting for
    // and the drain would start over. A group's jobs stay in arrival order (earlier ones are
    // overdue first), which the merge of the groups relies on.
    if (holder_ == job.request.id) return {-job.request.priority, 0, 0.0, job.arrival};
    if (s_.gave_way_.contains(job.request.id)) return {-job.request.priority, 1, 0.0, job.arrival};
    if (now_ - job.submit_s >= s_.config_.overdue_after_s) {
      return {-job.request.priority, 2, 0.0, job.arrival};
    }
    return {-job.request.priority, 3, s_.users_[job.user].usage, job.arrival};
  }

  void push(Cursor cursor) {
    heads_.push_back(Head{order_key(cursor.job->second), cursor});
    std::push_heap(heads_.begin(), heads_.end(), later);
  }

  // The holder has started on GPUs drained for it: the first waiting job in order that is at
  // least as wide inherits the reservation, so drained GPUs pass from one wide job to the next
  // instead of being refilled with small jobs and drained all over again.
  // The jobs on loan suspended for the holder go first, though: they ran before it.
  void hand_over(unsigned width) {
    bool gave_way_waits = std::ranges::any_of(s_.gave_way_, [&](JobId id) { return s_.queued_.contains(id); });
    if (gave_way_waits) {
      s_.chain_before_.reset();
      return;
    }
    if (!s_.chain_before_) s_.chain_before_ = s_.arrivals_;
    const QueuedJob* next = nullptr;
    Key best;
    size_t examined = 0;  // bounded like a pass's walk
    for (const Group& group : s_.groups_) {
      for (const auto& [arrival, queued] : group.jobs) {
        if (arrival >= *s_.chain_before_ || ++examined > s_.config_.backfill_depth) break;
        if (queued.request.gpus.slice_mib || queued.request.gpus.count < width || s_.held_back(queued)) continue;
        Key key = order_key(queued);
        if (!next || key < best) std::tie(next, best) = std::pair{&queued, key};
        break;  // the group's later jobs come after this one
      }
    }
    if (!next) {
      s_.chain_before_.reset();
      return;
    }
    tried_reservation_ = true;
    reserve(*next);
  }

  // False when no queued job can start: no GPU has room, or only reserved ones do and even the
  // shortest run time queued (limit or estimate) would not end before the reservation.
  bool anything_can_start() {
    const Room& room = this->room();
    if (room.shared_outside || room.mig_free || room.whole_outside > unplaced_gpus_) return true;
    const std::optional<Reservation>& reservation = reservation_;
    if (!room.inside || !reservation || s_.queued_.empty()) return room.inside;
    if (s_.queued_borrowers_ > 0 && reservation->start_s > now_) return true;  // it may go on loan
    if (!shortest_run_time_) shortest_run_time_ = s_.shortest_queued_run_time();
    return now_ + *shortest_run_time_ <= reservation->start_s;
  }

  // What has room, outside the reserved GPUs and on all of them: worked out once per change of
  // state, since a pass may examine a thousand jobs that do not fit.
  struct Room {
    unsigned whole_outside = 0;    // whole GPUs free
    unsigned whole_all = 0;
    uint64_t slice_outside = 0;    // the most memory free on one GPU
    uint64_t slice_all = 0;
    bool shared_outside = false;   // a GPU that slices share has memory free
    bool mig_free = false;         // a MIG device is free (MIG devices are never reserved)
    bool inside = false;           // a reserved GPU has room
  };
  const Room& room() const {
    if (room_) return *room_;
    Room& room = room_.emplace(Room{});
    for (const Gpu& gpu : s_.machine_.gpus) {
      const GpuAvailability& state = s_.availability_[gpu.index];
      room.mig_free = room.mig_free || free_mig_device(gpu, state, MigRequest{}) != nullptr;
      bool whole = whole_gpu_free(gpu, state);
      uint64_t memory = slice_room(gpu, state);
      if (!whole && memory == 0) continue;
      room.whole_all += whole;
      room.slice_all = std::max(room.slice_all, memory);
      if (!reserved_mask_.empty() && reserved_mask_[gpu.index]) {
        room.inside = true;
        continue;
      }
      room.whole_outside += whole;
      room.slice_outside = std::max(room.slice_outside, memory);
      room.shared_outside = room.shared_outside || !whole;
    }
    return room;
  }

  // False when the job certainly does not fit (on the GPUs outside the reservation, or on all).
  bool may_fit(const JobRequest& job, bool outside_only) const {
    const Room& room = this->room();
    if (job.gpus.mig) return true;  // MIG devices are not counted in the room: placement decides
    if (!job.gpus.slice_mib) {
      return (outside_only ? room.whole_outside : room.whole_all) >= job.gpus.count + unplaced_gpus_;
    }
    return job.gpus.count > 1 || (outside_only ? room.slice_outside : room.slice_all) >= *job.gpus.slice_mib;
  }

  // Enough GPUs for the job in `state`, leaving out `excluded` (a mask, or empty) and the whole
  // GPUs promised to unplaced jobs.
  bool enough(const std::vector<GpuAvailability>& state, const JobRequest& job,
              const std::vector<bool>& excluded) const {
    unsigned needed = job.gpus.count + (job.gpus.slice_mib || job.gpus.mig ? 0 : unplaced_gpus_);
    unsigned suitable = 0;
    for (const Gpu& gpu : s_.machine_.gpus) {
      if ((!excluded.empty() && excluded[gpu.index]) || !may_use(job.gpus, gpu.index)) continue;
      const GpuAvailability& on = state[gpu.index];
      if (mps_serves_another(on, job)) continue;
      if (fits_on(gpu, on, job) && ++suitable == needed) return true;
    }
    return false;
  }

  // Until a job has to wait, gpupool's whole-GPU jobs only count GPUs as they start; they are
  // placed together when someone waits or the pass ends, widest first (first fit decreasing):
  // a wide job then still finds a whole NVSwitch island free, which is both the better place
  // and far the cheaper search than among the leftovers of narrower jobs.
  bool defers_placement(const JobRequest& job) const {
    return s_.config_.policy == Policy::Gpupool && !reservation_ && !job.gpus.slice_mib && !job.gpus.mig &&
           !restricted(job);
  }

  void place_unplaced() {
    std::stable_sort(unplaced_.begin(), unplaced_.end(), [&](size_t a, size_t b) {
      return s_.running_.at(started_[a].id).request.gpus.count > s_.running_.at(started_[b].id).request.gpus.count;
    });
    unplaced_gpus_ = 0;
    for (size_t position : unplaced_) {
      JobStart& start = started_[position];
      RunningJob& job = s_.running_.at(start.id);
      // The GPUs were counted when it started, so there is room.
      start.gpus = *place_in(s_.availability_, job.request, {});
      take(s_.availability_, s_.machine_, job.request, start.gpus);
      job.gpus = start.gpus;
    }
    unplaced_.clear();
    room_.reset();
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
        if ((!excluded.empty() && excluded[gpu.index]) || !may_use(job.gpus, gpu.index)) continue;
        const GpuAvailability& on = state[gpu.index];
        if (mps_serves_another(on, job)) continue;
        if (fits_on(gpu, on, job)) gpus.push_back(gpu.index);
        if (gpus.size() == job.gpus.count) break;
      }
      return gpus;
    }
    GpuRequest request = without_others_mps(state, job);
    for (unsigned gpu = 0; gpu < excluded.size(); ++gpu) {
      if (excluded[gpu]) request.excluded.push_back(gpu);
    }
    Result<std::optional<std::vector<unsigned>>> chosen = choose_gpus(s_.machine_, state, request, &s_.recent_requests_);
    return chosen.ok() ? *chosen : std::nullopt;
  }

  // Where a job that can start now goes: its GPUs (none yet when it is placed later), and
  // whether it goes there on loan.
  struct Choice {
    std::vector<unsigned> gpus;
    bool on_loan = false;
  };
  static std::optional<Choice> choice_of(std::optional<std::vector<unsigned>> gpus, bool on_loan = false) {
    if (!gpus) return std::nullopt;
    return Choice{std::move(*gpus), on_loan};
  }
  std::optional<Choice> choose(const QueuedJob& job) {
    const std::optional<Reservation>& reservation = reservation_;
    const JobRequest& request = job.request;
    if (defers_placement(request)) {
      if (!may_fit(request, false)) return std::nullopt;
      return Choice{};
    }
    if (request.gpus.slice_mib && !unplaced_.empty()) {
      // Beside other slices while whole GPUs are promised; a fresh GPU only once those are placed.
      std::vector<bool> fresh(s_.availability_.size());
      for (unsigned gpu = 0; gpu < fresh.size(); ++gpu) fresh[gpu] = whole_gpu_free(s_.machine_.gpus[gpu], s_.availability_[gpu]);
      if (std::optional<std::vector<unsigned>> gpus = place_in(s_.availability_, request, fresh)) return choice_of(gpus);
      place_unplaced();
    }
    // A whole-GPU job kept to some GPUs is placed at once; those promised to the deferred jobs
    // are placed first, so that it cannot take one of theirs.
    if (!request.gpus.slice_mib && !unplaced_.empty()) place_unplaced();
    std::optional<double> run_time = s_.backfill_run_time(job);
    bool ends_in_time = reservation && run_time && now_ + *run_time <= reservation->start_s;
    bool anywhere = !reservation || ends_in_time || reservation->id == request.id;
    // A reservation due now (only jobs on loan, or their checkpoints, in its way) lends nothing:
    // a job on loan there would only be suspended at once.
    if (!anywhere && s_.may_borrow(request) && reservation->start_s > now_) {
      // Off the reserved GPUs where it fits there; on them, on loan, where it does not.
      if (may_fit(request, true)) {
        if (std::optional<std::vector<unsigned>> gpus = place_in(s_.availability_, request, reserved_mask_)) {
          return choice_of(gpus);
        }
      }
      if (!may_fit(request, false)) return std::nullopt;
      std::optional<std::vector<unsigned>> gpus = place_in(s_.availability_, request, {});
      return choice_of(gpus, gpus && std::ranges::any_of(*gpus, [&](unsigned gpu) { return reserved_mask_[gpu]; }));
    }
    if (!may_fit(request, !anywhere)) return std::nullopt;
    return choice_of(place_in(s_.availability_, request, anywhere ? std::vector<bool>{} : reserved_mask_));
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
    place_unplaced();  // where the jobs started so far run decides what frees up first
    std::vector<std::pair<double, const RunningJob*>> by_end;
    // A job on loan is out of the way whenever the reservation needs its GPUs: it is suspended then.
    for (const auto& [id, running] : s_.running_)
      by_end.emplace_back(running.on_loan ? now_ : expected_end(running), &running);
    std::sort(by_end.begin(), by_end.end(), [](const auto& a, const auto& b) {
      return std::tie(a.first, a.second->request.id) < std::tie(b.first, b.second->request.id);
    });
    std::vector<GpuAvailability> future = s_.availability_;
    for (size_t i = 0; i < by_end.size(); ++i) {
      give_back(future, by_end[i].second->request, by_end[i].second->gpus, by_end[i].second->mig_uuid);
      if (i + 1 < by_end.size() && by_end[i + 1].first == by_end[i].first) continue;
      if (std::optional<std::vector<unsigned>> gpus = place_in(future, job.request, {})) {
        reserved_mask_.assign(s_.availability_.size(), false);
        for (unsigned gpu : *gpus) reserved_mask_[gpu] = true;
        room_.reset();
        reservation_ = Reservation{job.request.id, by_end[i].first, std::move(*gpus)};
        return;
      }
    }
  }

  struct Planned {
    double start = 0, end = 0;
    const JobRequest* request = nullptr;
    std::vector<unsigned> gpus;
    std::string mig_uuid = {};  // a --mig job's device
  };
  std::optional<Planned> earliest(const JobRequest& job, const std::vector<std::pair<double, const RunningJob*>>& ends,
                                  const std::set<double>& moments, const std::vector<Planned>& planned) const {
    double run_time = job.time_limit_s.value_or(s_.config_.default_runtime_s);
    for (double moment : moments) {
      std::vector<GpuAvailability> state = s_.availability_;
      for (auto end = ends.begin(); end != ends.end() && end->first <= moment; ++end) {
        give_back(state, end->second->request, end->second->gpus, end->second->mig_uuid);
      }
      for (const Planned& other : planned) {
        if (other.start <= moment && moment < other.end) {
          take(state, s_.machine_, *other.request, other.gpus, other.mig_uuid);
        }
      }
      std::optional<std::vector<unsigned>> gpus = place_in(state, job, {});
      if (!gpus) continue;
      std::string mig_uuid;
      if (job.gpus.mig) {
        const MigDevice* device = free_mig_device(s_.machine_.gpus[gpus->front()], state[gpus->front()], *job.gpus.mig);
        if (device != nullptr) mig_uuid = device->uuid;
      }
      // Two MIG jobs meet only on one device (GPUs in MIG mode run no other job).
      auto meets = [&](const Planned& later_one) {
        bool same_place = job.gpus.mig || later_one.request->gpus.mig
                              ? !mig_uuid.empty() && later_one.mig_uuid == mig_uuid
                              : std::find_first_of(later_one.gpus.begin(), later_one.gpus.end(), gpus->begin(),
                                                   gpus->end()) != later_one.gpus.end();
        return later_one.start > moment && later_one.start < moment + run_time && same_place;
      };
      if (std::none_of(planned.begin(), planned.end(), meets)) {
        return Planned{moment, moment + run_time, &job, std::move(*gpus), std::move(mig_uuid)};
      }
    }
    return std::nullopt;
  }

  Scheduler& s_;
  double now_;
  std::vector<Head> heads_;
  std::vector<JobStart> started_;
  std::vector<bool> reserved_mask_;
  mutable std::optional<Room> room_;
  std::optional<double> shortest_run_time_;  // of the queued jobs, while none starts
  std::vector<size_t> unplaced_;  // positions in started_ of jobs not yet given GPUs
  unsigned unplaced_gpus_ = 0;    // the whole GPUs they need
  std::optional<JobId> holder_;             // of the last pass's reservation
  std::optional<Reservation> reservation_;  // this pass's
  bool tried_reservation_ = false;
};

std::vector<JobStart> Scheduler::schedule(double now) {
  account_usage(now);
  return Pass(*this, now).run();
}

std::map<JobId, double> Scheduler::expected_starts(double now, size_t limit) { return Pass(*this, now).plan(limit); }

std::vector<JobId> Scheduler::jobs_in_the_way() const {
  if (!config_.backfill_by_suspending || !reservation_) return {};
  auto where = queued_.find(reservation_->id);
  if (where == queued_.end()) return {};
  const JobRequest& holder = groups_[where->second.first].jobs.at(where->second.second).request;
  std::vector<const RunningJob*> on_loan;
  for (const auto& [id, job] : running_) {
    bool on_reserved = std::ranges::find_first_of(job.gpus, reservation_->gpus) != job.gpus.end();
    if (job.on_loan && on_reserved) on_loan.push_back(&job);
  }
  // The largest first, so that as few as possible are suspended; then the most recently
  // started, which have the least to lose.
  auto size = [&](const RunningJob* job) {
    return job->request.gpus.slice_mib.value_or(machine_.gpus[job->gpus.front()].memory_total_mib.value_or(0));
  };
  std::ranges::sort(on_loan, [&](const RunningJob* a, const RunningJob* b) {
    return std::tuple(size(a), a->start_s, a->request.id) > std::tuple(size(b), b->start_s, b->request.id);
  });
  std::vector<GpuAvailability> state = availability_;
  auto fits = [&] {
    return std::ranges::all_of(reservation_->gpus, [&](unsigned gpu) {
      return fits_on(machine_.gpus[gpu], state[gpu], holder) && !mps_serves_another(state[gpu], holder);
    });
  };
  std::vector<const RunningJob*> suspend;
  for (const RunningJob* job : on_loan) {
    if (fits()) break;
    give_back(state, job->request, job->gpus, job->mig_uuid);
    suspend.push_back(job);
  }
  if (!fits()) return {};  // something else is still in the way: it ends in its own time
  // One suspended early may have made room that later ones made anyway: it stays.
  std::vector<JobId> needed;
  for (const RunningJob* job : suspend) {
    take(state, machine_, job->request, job->gpus, job->mig_uuid);
    if (fits()) continue;
    give_back(state, job->request, job->gpus, job->mig_uuid);
    needed.push_back(job->request.id);
  }
  return needed;
}

Result<void> Scheduler::give_way(JobId id) {
  auto job = running_.find(id);
  if (job == running_.end() || !job->second.on_loan) return fail("job {} is not running on loan", id);
  job->second.giving_way = true;
  return {};
}

bool Scheduler::giving_way(JobId id) const {
  auto job = running_.find(id);
  return job != running_.end() && job->second.giving_way;
}

Result<void> Scheduler::gave_way(JobId id) {
  if (!queued_.contains(id)) return fail("job {} is not queued", id);
  gave_way_.insert(id);
  return {};
}

void Scheduler::end_loan(JobId id) {
  if (auto job = running_.find(id); job != running_.end()) {
    job->second.on_loan = false;
    job->second.giving_way = false;
  }
}

}  // namespace gpupool
