#include "daemon/dispatcher.h"

#include <chrono>
#include <csignal>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/text.h"
#include "daemon/supervisor.h"
#include "isolation/device_rules.h"
#include "jobs/job_text.h"
#include "lease/gpu_pool.h"
#include "os/child_process.h"
#include "os/clock.h"
#include "sched/allocation.h"
#include "sched/mps.h"

namespace gpupool {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Forgets where and when an attempt that never ran was to run.
void clear_attempt(Job& job) {
  job.gpus.clear();
  job.gpu_uuids.clear();
  job.start_time.reset();
  job.pid.reset();
  job.suspended_s = 0;
  job.started_under_mps.reset();
  job.started_on_loan = false;
}

bool never_suspended(const Job& job) { return !job.suspension && job.suspended_s == 0; }

// Since when a queued job has waited: its last entry to the queue, stored; else (its entry was
// its submission, or a row of schema < 9) its submission, or the end of its last attempt (a retry).
double queued_since(const Job& job) {
  if (job.queued_at) return *job.queued_at;
  return job.attempts > 0 && job.end_time ? *job.end_time : job.submit_time;
}

// Started on loan and never suspended since: the scheduler may still have it suspended.
bool still_on_loan(const Job& job) { return job.started_on_loan && never_suspended(job); }

}  // namespace

LeasedDevices leased_devices(const Job& job) {
  LeasedDevices leased{job.gpus, job.spec.gpus.slice_mib};
  if (job.spec.gpus.mig && !job.gpu_uuids.empty()) leased.mig_uuid = job.gpu_uuids.front();
  return leased;
}

JobRequest scheduler_request(const Job& job, bool mps_slices) {
  bool under_mps = mps_slices && runs_under_mps(job.spec.gpus);
  // The processes of one GPU are checkpointed alone (the driver refuses jobs that talk to other
  // GPUs through NCCL); whether MPS clients can be is unknown. A job suspended once is not put on
  // loan again (SchedulerConfig::backfill_by_suspending).
  bool suspendable = job.spec.gpus.count == 1 && !job.spec.gpus.mig && !under_mps && never_suspended(job);
  return JobRequest{job.id,         job.owner.user,
                    job.spec.gpus,  job.spec.priority,
                    job.spec.time_limit_s, job.array,
                    under_mps, suspendable};
}

Dispatcher::Dispatcher(DispatcherSettings settings, JobStore& store, LeaseDirectory& leases, const Machine& machine,
                       Scheduler& scheduler, AttemptRunner& runner, const HostFiles& host, DispatcherHooks hooks)
    : settings_(std::move(settings)),
      store_(store),
      leases_(leases),
      machine_(machine),
      scheduler_(scheduler),
      runner_(runner),
      host_(host),
      hooks_(std::move(hooks)),
      lifecycle_([this](JobId id) -> std::optional<JobState> {
        if (auto unsaved = unsaved_.find(id); unsaved != unsaved_.end()) return unsaved->second.state;
        auto stored = store_.get(id);
        return stored && *stored ? std::optional((*stored)->state) : std::nullopt;
      }) {}

// ---------------------------------------------------------------------------------------------
// Taking up a previous daemon's jobs

Result<std::vector<JobId>> Dispatcher::adopt_running(std::vector<Job> jobs) {
  double now = unix_now();
  std::vector<JobId> waiting;  // queued and held: taken up once the running jobs are
  for (Job& job : jobs) {
    JobId id = job.id;
    Job& stored = active_[id] = std::move(job);
    if (stored.state == JobState::Suspended) {
      // Its processes live on, checkpointed; it holds no GPU, so the scheduler has nothing of it
      // until it is resumed, unless its restore had begun: then its GPUs are its again.
      TRY_ASSIGN(AttemptRecord record, runner_.read_record(record_path(stored)));
      note_if_outside_mps(stored);
      if (stored.suspension && stored.suspension->restoring) {
        TRY(scheduler_.adopt(request_of(stored), stored.gpus,
                             stored.start_time.value_or(now), leased_devices(stored).mig_uuid));
      }
      adopt(stored);
      // The daemon before may have stopped before it could stop the clock.
      if (watch_supervisor(stored, record) && !record.clock_stopped) tell_the_clock(stored, true);
      continue;
    }
    if (stored.state != JobState::Running) {
      waiting.push_back(id);
      continue;
    }
    if (stored.spec.kind == JobKind::Interactive) {
      bool alive = stored.pid && stored.pid_start_ticks &&
                   host_.process_start_ticks(static_cast<uint32_t>(*stored.pid)) == stored.pid_start_ticks;
      note_if_outside_mps(stored);
      TRY(scheduler_.adopt(request_of(stored), stored.gpus, stored.start_time.value_or(now),
                           leased_devices(stored).mig_uuid, still_on_loan(stored)));
      adopt(stored);
      if (alive) {
        runner_.watch(id, *stored.pid);
      } else {
        attempt_ended(id, {id, std::nullopt, std::nullopt, "exit status unknown: the daemon restarted while it ran", false});
      }
      continue;
    }
    TRY_ASSIGN(AttemptRecord record, runner_.read_record(record_path(stored)));
    if (record.progress == AttemptProgress::NeverStarted) {
      // The daemon died between recording the start and the supervisor starting the job: the
      // attempt is done again, under the same number, so its record must go.
      runner_.remove_record(record_path(stored));
      stored.state = JobState::Queued;
      stored.attempts -= 1;
      clear_attempt(stored);
      save(stored);
      waiting.push_back(id);
      continue;
    }
    note_if_outside_mps(stored);
    TRY(scheduler_.adopt(request_of(stored), stored.gpus, stored.start_time.value_or(now),
                           leased_devices(stored).mig_uuid, still_on_loan(stored)));
    adopt(stored);
    // Resumed as the daemon before stopped, before it could start the clock.
    if (watch_supervisor(stored, record) && record.clock_stopped) tell_the_clock(stored, false);
  }
  return waiting;
}

bool Dispatcher::watch_supervisor(Job& job, const AttemptRecord& record) {
  if (record.progress != AttemptProgress::Running || !record.supervisor_pid) {
    on_exit(job.id);  // Exited or Lost: record it now
    return false;
  }
  job.pid = record.supervisor_pid;
  job.suspended_s = record.clock_stopped_s;
  if (!record.takes_the_clock) deaf_supervisors_.insert(job.id);
  runner_.watch(job.id, *record.supervisor_pid);
  return true;
}

bool Dispatcher::held_by_mps(const Job& job) const {
  return settings_.mps_slices && runs_under_mps(job.spec.gpus) && !without_mps_.contains(job.id);
}

JobRequest Dispatcher::request_of(const Job& job) const {
  return scheduler_request(job, settings_.mps_slices && !without_mps_.contains(job.id));
}

void Dispatcher::note_if_outside_mps(const Job& job) {
  if (!settings_.mps_slices || !runs_under_mps(job.spec.gpus) || job.gpu_uuids.empty()) return;
  // Stored since it started; a job stored before that was is judged by whether its GPU has a
  // control daemon (which another job's slice may have started since).
  bool outside = job.started_under_mps ? !*job.started_under_mps
                                       : hooks_.mps_control_found && !hooks_.mps_control_found(job.gpu_uuids.front());
  if (!outside) return;
  without_mps_.insert(job.id);
  fmt::print(stderr, "gpupoold: job {} ran without MPS under the daemon before ({}): its slice is watched, not held, "
             "until it ends\n", job.id,
             job.started_under_mps ? "it was started without MPS" : "no control daemon of its GPU is running");
}

void Dispatcher::adopt_waiting(const std::vector<JobId>& ids) {
  taking_up_ = true;
  for (JobId id : ids) {
    if (auto it = active_.find(id); it != active_.end()) adopt(it->second);
  }
  taking_up_ = false;
}

void Dispatcher::adopt(const Job& job) {
  feed(lifecycle::Adopted{job.id, job.spec.kind, job.spec.retries, job.spec.after, job.state, job.attempts,
                          job.reason, job.suspension});
}

void Dispatcher::submitted(Job job) {
  std::optional<std::string> held_by;
  if (job.state == JobState::Held) held_by = job.owner.user;
  JobId id = job.id;
  lifecycle::Submitted event{id, job.spec.kind, job.spec.retries, job.spec.after, std::move(held_by)};
  active_[id] = std::move(job);
  submitting_ = true;
  feed(event);
  submitting_ = false;
}

// ---------------------------------------------------------------------------------------------
// The lifecycle's events and effects

std::optional<std::string> Dispatcher::feed(const lifecycle::Event& event) {
  auto effects = lifecycle_.handle(event);
  if (!effects) return effects.error().message;
  std::vector<JobId> changed = lifecycle_.changed();  // carrying out the effects may feed more
  std::optional<std::string> trouble;
  for (const lifecycle::Effect& effect : *effects) {
    if (auto error = carry_out(effect); error && !trouble) trouble = std::move(error);
  }
  // The jobs as the lifecycle left them, once all is done (a reason a job waits with is not
  // stored: it changes too often).
  for (JobId id : changed) {
    const TrackedJob* tracked = lifecycle_.find(id);
    auto job = active_.find(id);
    if (tracked == nullptr || job == active_.end()) continue;
    job->second.state = tracked->state;
    job->second.reason = tracked->reason;
    job->second.attempts = tracked->attempts;
  }
  return trouble;
}

std::optional<std::string> Dispatcher::carry_out(const lifecycle::Effect& effect) {
  return std::visit(
      Overloaded{
          [&](const lifecycle::EnterQueue& e) -> std::optional<std::string> {
            Job& job = active_.at(e.id);
            if (job.state == JobState::Suspended) return queue_to_resume(job);
            double now = unix_now();
            std::optional<double> since = taking_up_ ? std::optional(queued_since(job)) : std::nullopt;
            // Stored, so that a restarted daemon queues it as waiting since now; a submission's
            // entry is its submit_time already, and is not written again.
            if (!taking_up_ && !submitting_) {
              job.queued_at = now;
              save(job);
            }
            if (auto submitted = scheduler_.submit(request_of(job), now, since); !submitted) {
              return feed(lifecycle::Refused{e.id, submitted.error().message});
            }
            return std::nullopt;
          },
          [&](const lifecycle::LeaveQueue& e) -> std::optional<std::string> {
            (void)scheduler_.remove(e.id);
            return std::nullopt;
          },
          [&](const lifecycle::StartAttempt& e) -> std::optional<std::string> {
            start_attempt(e);
            return std::nullopt;
          },
          [&](const lifecycle::SignalAttempt& e) -> std::optional<std::string> {
            return stop_attempt(active_.at(e.id), e.why);
          },
          [&](const lifecycle::Record& e) -> std::optional<std::string> {
            Job& job = active_.at(e.id);
            // A retry keeps the attempt's number; an attempt that never ran gives its number back
            // (and an interactive job has no retries).
            const bool requeued = job.state == JobState::Running && e.state == JobState::Queued &&
                                  job.spec.kind == JobKind::Batch && e.attempts == job.attempts;
            const bool resumed = job.state == JobState::Suspended && e.state == JobState::Running;
            job.state = e.state;
            job.reason = e.reason;
            job.attempts = e.attempts;
            // In the same write: a suspension ended (resumed, undone) or whose processes are gone.
            const TrackedJob* tracked = lifecycle_.find(e.id);
            if (job.suspension && (e.state == JobState::Queued || tracked == nullptr || !tracked->suspension)) {
              if (resumed) job.suspended_s += unix_now() - job.suspension->since;  // not counted by its limit
              job.suspension.reset();
            }
            save(job);
            if (requeued && hooks_.requeued) hooks_.requeued(job);
            return std::nullopt;
          },
          [&](const lifecycle::Finished& e) -> std::optional<std::string> {
            finished(e.id, e.state, e.reason);
            return std::nullopt;
          },
          [&](const lifecycle::CallCheckpoint& e) -> std::optional<std::string> {
            hooks_.call_checkpoint(e.id, e.step, e.pids);
            return std::nullopt;
          },
          [&](const lifecycle::Suspended& e) -> std::optional<std::string> {
            Job& job = active_.at(e.id);
            checkpointed_samples_.erase(e.id);
            if (auto suspended = scheduler_.suspend(e.id, unix_now()); !suspended) return suspended.error().message;
            tell_the_clock(job, true);
            if (hooks_.suspended) hooks_.suspended(job);
            return std::nullopt;
          },
          [&](const lifecycle::SuspendFailed& e) -> std::optional<std::string> {
            const Job& job = active_.at(e.id);  // an undone one stored without its suspension by the Record before
            checkpointed_samples_.erase(e.id);
            fmt::print(stderr, "gpupoold: job {}: {}\n", e.id, e.why);
            if (job.started_on_loan) end_loan(e.id);
            if (hooks_.suspend_failed) hooks_.suspend_failed(job, e.why);
            return std::nullopt;
          },
          [&](const lifecycle::Resumed& e) -> std::optional<std::string> {
            const Job& job = active_.at(e.id);  // stored running by the Record before this
            tell_the_clock(job, false);
            if (hooks_.resumed) hooks_.resumed(job);
            return std::nullopt;
          },
      },
      effect);
}

void Dispatcher::tell_the_clock(const Job& job, bool stop) {
  // A lost attempt has no one to tell; a supervisor of an older release would die of the word
  // (its clock runs on); an interactive job's client is told only if it said it listens.
  if (!job.pid || lost_.count(job.id) > 0 || deaf_supervisors_.contains(job.id)) return;
  int word = stop ? kStopTheClock : kStartTheClock;
  if (job.spec.kind == JobKind::Interactive) {
    if (!hooks_.client_stops_the_clock || !hooks_.client_stops_the_clock(job.id)) return;
    word = stop ? suspended_signal() : resumed_signal();
  }
  if (auto told = runner_.signal(*job.pid, word, false); !told) {
    fmt::print(stderr, "gpupoold: job {}: cannot tell its {} to {} the time limit's clock: {}\n", job.id,
               job.spec.kind == JobKind::Batch ? "supervisor" : "client", stop ? "stop" : "start", told.error().message);
  }
}

void Dispatcher::cancel_all(const std::string& by) {
  std::vector<JobId> ids;
  for (const auto& [id, job] : active_) ids.push_back(id);
  for (JobId id : ids) {
    if (active_.count(id) == 0) continue;
    if (auto error = feed(lifecycle::Cancel{id, by})) fmt::print(stderr, "gpupoold: job {}: {}\n", id, *error);
    if (auto still = active_.find(id); still != active_.end()) save(still->second);
  }
}

// Stores the job's end, tells whoever waits for it, and forgets it.
void Dispatcher::finished(JobId id, JobState state, std::string reason) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = it->second;
  job.state = state;
  job.reason = std::move(reason);
  if (!job.end_time) job.end_time = unix_now();
  job.pid.reset();
  save(job);
  Job ended = std::move(job);
  active_.erase(it);
  hooks_.finished(ended);
}

// ---------------------------------------------------------------------------------------------
// Starting attempts

void Dispatcher::dispatch() {
  hooks_.queue_changed();
  if (lifecycle_.drained()) return;
  for (const JobStart& start_decision : scheduler_.schedule(unix_now())) {
    auto began = std::chrono::steady_clock::now();
    start(start_decision);
    hooks_.started_in(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
}

void Dispatcher::check_running(double now) {
  std::vector<JobId> overdue, to_kill, gone;
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::Running || !job.start_time || !job.spec.time_limit_s) continue;
    // A client ends its program at the limit itself, so it gets the grace period first; a lost
    // attempt has nobody else to end it.
    double grace = job.spec.kind == JobKind::Interactive ? settings_.kill_grace_s : 0;
    bool enforced_here = job.spec.kind == JobKind::Interactive || lost_.count(id) != 0;
    if (!enforced_here || now < *job.start_time + *job.spec.time_limit_s + job.suspended_s + grace) continue;
    const TrackedJob* tracked = lifecycle_.find(id);
    if (tracked != nullptr && !tracked->told_to_end_for) overdue.push_back(id);
  }
  // Before this sample's SIGTERMs, so that each has its grace period.
  for (const auto& [id, at] : kill_at_) {
    if (now >= at) to_kill.push_back(id);
  }
  for (JobId id : to_kill) {
    kill_at_.erase(id);
    const Job& job = active_.at(id);
    auto lost = lost_.find(id);
    auto killed = lost != lost_.end() ? runner_.signal(lost->second, SIGKILL, true)
                  : job.pid             ? runner_.signal(*job.pid, SIGKILL, false)
                                        : Result<void>();
    if (!killed) fmt::print(stderr, "gpupoold: job {}: {}\n", id, killed.error().message);
  }
  for (JobId id : overdue) {
    if (auto problem = feed(lifecycle::TimeLimitReached{id})) fmt::print(stderr, "gpupoold: job {}: {}\n", id, *problem);
  }
  for (const auto& [id, group] : lost_) {
    if (!host_.group_has_living_process(static_cast<uint32_t>(group))) gone.push_back(id);
  }
  for (JobId id : gone) lost_attempt_over(id);
  if (!gone.empty()) dispatch();
}

bool Dispatcher::told_to_end(JobId id) const {
  const TrackedJob* tracked = lifecycle_.find(id);
  return tracked == nullptr || tracked->state != JobState::Running || tracked->cancel_by || tracked->told_to_end_for;
}

void Dispatcher::stop_outside_mps(const std::map<JobId, SliceUse>& worst) {
  auto is_mps_job = [this](JobId id) {
    auto job = active_.find(id);
    return job != active_.end() && held_by_mps(job->second);
  };
  for (JobId id : jobs_outside_mps(worst, is_mps_job, [this](JobId id) { return told_to_end(id); })) {
    const SliceUse& use = worst.at(id);
    std::string why = outside_mps_text(use.outside_mps_pid, use.gpu);
    fmt::print(stderr, "gpupoold: job {}: {}: stopping it\n", id, why);
    if (auto problem = feed(lifecycle::SliceOverrun{id, why})) {
      fmt::print(stderr, "gpupoold: job {}: {}\n", id, *problem);
    }
  }
}

void Dispatcher::stop_slice_overruns(const std::map<JobId, SliceUse>& worst, SliceOverrunPolicy policy) {
  for (JobId id : jobs_to_stop(worst, policy, [this](JobId id) { return told_to_end(id); })) {
    const SliceUse& use = worst.at(id);
    std::string why = slice_overrun_text(use.used_mib, use.slice_mib);
    fmt::print(stderr, "gpupoold: job {} {} on GPU {}: stopping it (slice_overrun = \"stop\")\n", id, why, use.gpu);
    if (auto problem = feed(lifecycle::SliceOverrun{id, why})) {
      fmt::print(stderr, "gpupoold: job {}: {}\n", id, *problem);
    }
  }
}

// The scheduler chose the job's GPUs: what will run it and their leases are taken, then the
// lifecycle grants them.
void Dispatcher::start(const JobStart& decision) {
  Job& job = active_.at(decision.id);
  if (job.state == JobState::Suspended) {
    resume_on_its_gpus(job, decision);
    return;
  }
  // A batch job's leases name its supervisor from the start; a run's, its client.
  std::optional<pid_t> supervisor;
  if (job.spec.kind == JobKind::Batch) {
    auto reserved = runner_.reserve(job.id);
    if (!reserved) {
      (void)scheduler_.finish(job.id, unix_now());
      feed(lifecycle::StartFailed{job.id, "could not start: " + reserved.error().message});
      return;
    }
    supervisor = *reserved;
  }
  LeaseHolder holder{supervisor.value_or(job.pid.value_or(settings_.daemon_pid)), job.owner.user, lease_job_name(job.id), static_cast<int64_t>(unix_now())};
  LeasedDevices devices{decision.gpus, job.spec.gpus.slice_mib, decision.mig_uuid};
  if (job.spec.gpus.mig && devices.mig_uuid.empty()) {  // never claim a MIG job's GPU whole
    if (supervisor) runner_.unreserve(job.id);
    (void)scheduler_.requeue(job.id, unix_now());
    fmt::print(stderr, "gpupoold: job {}: the scheduler chose no MIG device for it\n", job.id);
    return;
  }
  auto held = leases_.try_acquire(claims_for(machine_, devices), holder);
  if (!held || !*held) {
    if (supervisor) runner_.unreserve(job.id);
    // Someone outside the daemon took one of the GPUs since the last sample: look again soon.
    (void)scheduler_.requeue(job.id, unix_now());
    if (!held) fmt::print(stderr, "gpupoold: job {}: {}\n", job.id, held.error().message);
    hooks_.look_again_soon();
    return;
  }
  // An MPS slice's control daemon is started before the grant: a job it fails for never starts.
  std::vector<std::string> mps_environment;
  if (held_by_mps(job)) {
    auto mps = hooks_.mps_environment(job, decision.gpus.at(0));
    if (!mps) {
      (**held).release();
      if (supervisor) runner_.unreserve(job.id);
      (void)scheduler_.finish(job.id, unix_now());
      feed(lifecycle::StartFailed{job.id, "could not start: " + mps.error().message});
      return;
    }
    mps_environment = std::move(*mps);
  }
  reserved_ = Reserved{std::move(**held), supervisor, std::move(mps_environment), decision.mig_uuid, decision.on_loan};
  if (auto refused = feed(lifecycle::Granted{decision.id, decision.gpus})) {
    fmt::print(stderr, "gpupoold: job {}: {}\n", decision.id, *refused);
  }
  if (reserved_) {  // not taken: the leases are released, the supervisor ends
    reserved_.reset();
    if (supervisor) runner_.unreserve(decision.id);
  }
}

// A suspended job's turn: the locks of the leases its processes still hold are taken again, then
// the lifecycle restores them.
void Dispatcher::resume_on_its_gpus(Job& job, const JobStart& decision) {
  LeaseHolder holder{job.pid.value_or(0), job.owner.user, lease_job_name(job.id), static_cast<int64_t>(unix_now())};
  auto taken = job.pid ? leases_.take_again(*job.pid, claims_for(machine_, leased_devices(job)), holder)
                       : Result<bool>(fail("it has no process holding its leases"));
  if (!taken || !*taken) {
    (void)scheduler_.requeue(job.id, unix_now());
    if (!taken) fmt::print(stderr, "gpupoold: job {}: cannot lease its GPUs again: {}\n", job.id, taken.error().message);
    hooks_.look_again_soon();
    return;
  }
  if (job.suspension) job.suspension->restoring = true;  // stored with the grant's record
  if (auto refused = feed(lifecycle::Granted{decision.id, decision.gpus})) {
    if (job.suspension) job.suspension->restoring = false;
    fmt::print(stderr, "gpupoold: job {}: {}\n", decision.id, *refused);
  }
}

void Dispatcher::end_loan(JobId id) {
  auto job = active_.find(id);
  if (job == active_.end() || !job->second.started_on_loan) return;
  job->second.started_on_loan = false;
  save(job->second);
  scheduler_.end_loan(id);
}

std::optional<std::string> Dispatcher::queue_to_resume(Job& job) {
  if (job.suspension && !job.suspension->resume) {
    job.suspension->resume = true;
    save(job);
  }
  if (!scheduler_.resume(job.id, resume_behind_.erase(job.id) == 0)) {
    // Suspended before a restart: the scheduler learns of it now, for the GPUs it ran on, as
    // queued since its last queue entry, as a job suspended keeps its place.
    JobRequest request = request_of(job);
    request.gpus.allowed = job.gpus;
    request.gpus.excluded.clear();
    if (auto submitted = scheduler_.submit(request, unix_now(), queued_since(job)); !submitted) {
      return submitted.error().message;
    }
  }
  // Its suspension, stored, says so when the scheduler cannot: the daemon restarted before or
  // while it was suspended (a restarted daemon adopts a job mid-checkpoint as running, not on loan).
  if (job.suspension && job.suspension->gave_way) (void)scheduler_.gave_way(job.id);
  return std::nullopt;
}

std::optional<std::string> Dispatcher::suspend(JobId id, const std::string& by, std::vector<pid_t> pids,
                                               uint64_t gpu_mib, ResumeWhen resume_when) {
  auto it = active_.find(id);
  if (it == active_.end()) return fmt::format("no job {} is queued, held or running", id);
  Job& job = it->second;
  if (job.state != JobState::Running) return fmt::format("job {} is {}, not running", id, to_string(job.state));
  if (job.spec.gpus.mig) return fmt::format("job {} holds a MIG device: suspending one is not supported", id);
  if (lost_.count(id) > 0 || !job.pid) {
    return fmt::format("no process of job {} is known to hold its leases (its supervisor or client): it cannot be "
                       "suspended",
                       id);
  }
  std::optional<Suspension> before = job.suspension;
  // Stored from the first call: a daemon that stops during it reads where it got to.
  job.suspension = Suspension{pids,  by,    unix_now(), gpu_mib, resume_when != ResumeWhen::Asked,
                              false, scheduler_.giving_way(id)};
  if (auto refused = feed(lifecycle::Suspend{id, by, std::move(pids), resume_when != ResumeWhen::Asked})) {
    job.suspension = before;
    return refused;
  }
  if (resume_when == ResumeWhen::FreeAfterTheWaiting) resume_behind_.insert(id);
  return std::nullopt;
}

std::optional<std::string> Dispatcher::resume(JobId id) {
  if (auto refused = feed(lifecycle::ResumeJob{id})) return refused;
  dispatch();
  return std::nullopt;
}

void Dispatcher::checkpoint_done(JobId id, CheckpointOutcome outcome) {
  if (auto problem = feed(lifecycle::CheckpointDone{id, std::move(outcome)})) {
    fmt::print(stderr, "gpupoold: job {}: {}\n", id, *problem);
  }
  dispatch();
}

void Dispatcher::let_go_of_checkpointed(const std::function<std::vector<std::string>(const Job& job)>& listed) {
  std::vector<JobId> ready;
  for (const auto& [id, tracked] : lifecycle_.jobs()) {
    if (!tracked.suspension || tracked.suspension->phase() != SuspensionPhase::Checkpointed) continue;
    if (tracked.cancel_by || tracked.told_to_end_for) continue;
    if (++checkpointed_samples_[id] >= 2) ready.push_back(id);
  }
  for (JobId id : ready) {
    checkpointed_samples_.erase(id);
    const Job& job = active_.at(id);
    std::optional<std::string> problem;
    if (std::vector<std::string> still = listed(job); !still.empty()) {
      problem = fmt::format("its processes were still on its GPUs after their checkpoint ({})", fmt::join(still, ", "));
    } else if (auto let = leases_.let_go(*job.pid, claims_for(machine_, leased_devices(job))); !let) {
      problem = fmt::format("its GPUs could not be let go: {}", let.error().message);
    } else if (active_.at(id).suspension) {
      // Suspended from now, stored with the suspended record: its time limit's clock stops now.
      active_.at(id).suspension->since = unix_now();
    }
    if (auto refused = feed(lifecycle::GpusLetGo{id, problem})) fmt::print(stderr, "gpupoold: job {}: {}\n", id, *refused);
  }
  if (!ready.empty()) dispatch();
}

void Dispatcher::start_attempt(const lifecycle::StartAttempt& start) {
  Job& job = active_.at(start.id);
  Reserved reserved = std::move(*reserved_);
  reserved_.reset();
  job.state = JobState::Running;
  job.attempts = start.attempt;
  job.gpus = start.gpus;
  job.gpu_uuids.clear();
  for (unsigned index : start.gpus) job.gpu_uuids.push_back(machine_.gpus.at(index).uuid);
  if (!reserved.mig_uuid.empty()) job.gpu_uuids = {reserved.mig_uuid};
  job.start_time = unix_now();
  job.end_time.reset();
  job.exit_code.reset();
  job.signal.reset();
  job.reason.clear();
  job.started_under_mps = !reserved.mps_environment.empty();
  job.started_on_loan = reserved.on_loan;
  if (reserved.supervisor) {
    start_batch(job, std::move(reserved.held), *reserved.supervisor, reserved.mps_environment);
  } else {
    start_interactive(job, std::move(reserved.held), reserved.mps_environment);
  }
}

void Dispatcher::start_batch(Job& job, HeldLeases held, pid_t supervisor,
                             const std::vector<std::string>& mps_environment) {
  job.pid = supervisor;
  job.pid_start_ticks = host_.process_start_ticks(static_cast<uint32_t>(*job.pid));
  save(job);  // "running, attempt N, this supervisor" is stored before the attempt can begin
  SupervisedAttempt attempt;
  attempt.id = job.id;
  attempt.attempt = job.attempts;
  attempt.uid = job.owner.uid;
  attempt.gid = job.owner.gid;
  attempt.groups = job.owner.groups;
  attempt.argv = job.spec.argv;
  const LeasedDevices devices = leased_devices(job);
  attempt.environment = lease_environment(job.spec.environment, machine_, devices, std::to_string(job.id));
  attempt.environment = with_overrides(attempt.environment, mps_environment);
  if (job.array) {
    // Slurm's SLURM_ARRAY_TASK_ID is left alone: inside a Slurm allocation it is the allocation's.
    attempt.environment =
        with_overrides(attempt.environment, {fmt::format("GPUPOOL_ARRAY_JOB_ID={}", job.array->array_id),
                                             fmt::format("GPUPOOL_ARRAY_TASK_ID={}", job.array->index)});
  }
  attempt.cwd = job.spec.cwd;
  attempt.umask = job.spec.umask;
  fill_log_paths(job);
  attempt.stdout_path = job.stdout_path;
  attempt.stderr_path = job.stderr_path;
  attempt.output_limits = settings_.output_limits;
  attempt.time_limit_s = job.spec.time_limit_s;
  attempt.kill_grace_s = settings_.kill_grace_s;
  attempt.record_path = record_path(job);
  if (auto started = runner_.start(attempt, devices, held.descriptors()); !started) {
    held.release();
    attempt_ended(job.id, {job.id, std::nullopt, std::nullopt, "could not start: " + started.error().message, false});
    return;
  }
  held.hand_over();
  if (hooks_.started) hooks_.started(job);
}

void Dispatcher::start_interactive(Job& job, HeldLeases held, const std::vector<std::string>& mps_environment) {
  if (!hooks_.hand_to_client(job, held, with_overrides(mps_environment, mig_environment(machine_, leased_devices(job))))) {
    held.release();
    attempt_ended(job.id, {job.id, std::nullopt, std::nullopt, "its client disconnected", true});
    return;
  }
  held.hand_over();
  save(job);
  if (hooks_.started) hooks_.started(job);
  // The client's exit (or its message) ends the job; its pid is watched for after a restart.
}

std::optional<std::string> Dispatcher::stop_attempt(const Job& job, lifecycle::SignalWhy why) {
  auto lost = lost_.find(job.id);
  if (lost != lost_.end()) {
    // What its supervisor would have done: SIGTERM to the group, SIGKILL after the grace period.
    kill_at_.try_emplace(job.id, unix_now() + settings_.kill_grace_s);
    if (auto sent = runner_.signal(lost->second, SIGTERM, true); !sent) return sent.error().message;
    return std::nullopt;
  }
  if (!job.pid) return std::nullopt;
  if (auto stopped = runner_.stop(job.spec.kind, *job.pid); !stopped) return stopped.error().message;
  // A client past its time limit or slice that did not end its program is killed after the grace
  // period (a cancelled one is not: it is ending its program, and killing it would leave that
  // running).
  if (job.spec.kind == JobKind::Interactive && why != lifecycle::SignalWhy::Cancel) {
    kill_at_.try_emplace(job.id, unix_now() + settings_.kill_grace_s);
  }
  return std::nullopt;
}

void Dispatcher::relock_running() {
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::Running || job.gpus.empty()) continue;
    relocked_.erase(id);  // a second remake: those locks are in a deleted directory too
    LeaseHolder holder{job.pid.value_or(settings_.daemon_pid), job.owner.user, lease_job_name(id),
                       static_cast<int64_t>(job.start_time.value_or(unix_now()))};
    auto held = leases_.try_acquire(claims_for(machine_, leased_devices(job)), holder);
    if (held && *held) {
      relocked_.emplace(id, std::move(**held));
    } else {
      // Taken between the deletion and now, by a `gpupool run` that did not find the daemon.
      fmt::print(stderr, "gpupoold: job {}: cannot lock its GPUs again: {}\n", id,
                 held ? "someone else leased one of them while the lease directory was gone" : held.error().message);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ends of attempts

std::optional<uint32_t> Dispatcher::program_pid(JobId id) {
  auto job = active_.find(id);
  if (job == active_.end() || job->second.state != JobState::Running || job->second.spec.kind != JobKind::Batch) {
    return std::nullopt;
  }
  auto record = runner_.read_record(record_path(job->second));
  if (!record || !record->job_pid) return std::nullopt;
  return static_cast<uint32_t>(*record->job_pid);
}

void Dispatcher::attempt_ended(JobId id, lifecycle::AttemptExited ended) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = it->second;
  // A suspended job's place, if it has one, goes too.
  if (!scheduler_.finish(id, unix_now())) (void)scheduler_.remove(id);
  checkpointed_samples_.erase(id);
  resume_behind_.erase(id);
  runner_.forget(id);
  lost_.erase(id);
  kill_at_.erase(id);
  relocked_.erase(id);
  job.exit_code = ended.exit_code;
  job.signal = ended.signal;
  job.end_time = unix_now();
  job.pid.reset();
  // A failed MPS client: a fatal fault in its GPU's server ends every client there (sched/mps.h).
  bool failed = ended.signal || ended.exit_code.value_or(1) != 0;
  if (failed && !ended.cancelled && held_by_mps(job) && hooks_.mps_fault_reason) {
    if (std::optional<std::string> why = hooks_.mps_fault_reason(id)) {
      ended.reason = ended.signal ? fmt::format("{} (killed by signal {})", *why, *ended.signal)
                                  : fmt::format("{} (exit code {})", *why, ended.exit_code.value_or(-1));
    }
  }
  without_mps_.erase(id);  // a next attempt runs as the setting says, under a supervisor of ours
  deaf_supervisors_.erase(id);
  feed(ended);
}

void Dispatcher::on_exit(JobId id) {
  auto it = active_.find(id);
  if (it == active_.end() || (it->second.state != JobState::Running && it->second.state != JobState::Suspended)) return;
  Job& job = it->second;
  if (job.spec.kind == JobKind::Interactive) {
    if (hooks_.client_connected(id)) return;  // the connection reports for it
    attempt_ended(id, {id, std::nullopt, std::nullopt, "exit status unknown: the daemon restarted while it ran", false});
    dispatch();
    return;
  }
  if (job.pid) runner_.reap(*job.pid);
  lifecycle::AttemptExited ended{id, std::nullopt, std::nullopt, "", false};
  auto record = runner_.read_record(record_path(job));
  if (!record) {
    ended.reason = record.error().message;
  } else if (record->progress == AttemptProgress::Exited) {
    ended.exit_code = record->exit_code;
    ended.signal = record->signal;
    ended.reason = record->reason;
    ended.cancelled = record->reason == "cancelled";
  } else if (record->progress == AttemptProgress::Lost) {
    // The job's leader leads its group (the record's job_pid is its pgid).
    if (record->job_pid && host_.group_has_living_process(static_cast<uint32_t>(*record->job_pid))) {
      supervisor_lost(job, *record->job_pid);
      return;
    }
    ended.reason = "supervisor lost";
  } else if (record->progress == AttemptProgress::Running && record->supervisor_pid) {
    runner_.watch(id, *record->supervisor_pid);  // it still holds its record's lock: it has not ended
    return;
  } else {
    never_ran(job);
    dispatch();
    return;
  }
  unsigned attempt = job.attempts;  // before the job may be forgotten
  attempt_ended(id, ended);
  runner_.attempt_over(id, attempt);
  dispatch();
}

void Dispatcher::supervisor_lost(Job& job, pid_t group) {
  fmt::print(stderr, "gpupoold: job {}: its supervisor was killed while it ran; the daemon now ends its process group {} "
             "at its time limit or a cancel\n", job.id, group);
  runner_.forget(job.id);
  lost_[job.id] = group;
  // Told to end before its supervisor died: the supervisor may not have got to it.
  const TrackedJob* tracked = lifecycle_.find(job.id);
  if (tracked != nullptr && (tracked->cancel_by || tracked->told_to_end_for)) {
    auto why = tracked->cancel_by ? lifecycle::SignalWhy::Cancel : lifecycle::SignalWhy::TimeLimit;
    if (auto problem = stop_attempt(job, why)) fmt::print(stderr, "gpupoold: job {}: {}\n", job.id, *problem);
  }
}

void Dispatcher::lost_attempt_over(JobId id) {
  unsigned attempt = active_.at(id).attempts;  // before the job may be forgotten
  attempt_ended(id, {id, std::nullopt, std::nullopt, "supervisor lost", false});
  runner_.attempt_over(id, attempt);
}

// The supervisor ended before starting the job (e.g. the daemon was killed before handing it the
// attempt): the job never ran, so it goes back to the queue as it was.
void Dispatcher::never_ran(Job& job) {
  (void)scheduler_.finish(job.id, unix_now());
  runner_.remove_record(record_path(job));
  clear_attempt(job);
  feed(lifecycle::AttemptNeverRan{job.id});
}

// ---------------------------------------------------------------------------------------------
// The jobs

std::set<std::string> Dispatcher::running_batch_groups() const {
  std::set<std::string> running;
  for (const auto& [id, job] : active_) {
    // A suspended job's processes live on in their cgroup.
    if ((job.state == JobState::Running || job.state == JobState::Suspended) && job.spec.kind == JobKind::Batch) {
      running.insert(attempt_group_name(id, job.attempts));
    }
  }
  return running;
}

Result<std::optional<Job>> Dispatcher::find_job(JobId id) const {
  if (auto it = active_.find(id); it != active_.end()) return std::optional<Job>(it->second);
  if (auto it = unsaved_.find(id); it != unsaved_.end()) return std::optional<Job>(it->second);
  TRY_ASSIGN(std::optional<Job> stored, store_.get(id));
  if (stored) fill_log_paths(*stored);
  return stored;
}

void Dispatcher::fill_log_paths(Job& job) const {
  if (job.spec.kind != JobKind::Batch || job.id == 0) return;
  job.stdout_path = fmt::format("{}/logs/{}.out", settings_.state_dir, job.id);
  job.stderr_path = fmt::format("{}/logs/{}.err", settings_.state_dir, job.id);
}

std::string Dispatcher::record_path(const Job& job) const {
  return fmt::format("{}/attempts/{}.{}", settings_.state_dir, job.id, job.attempts);
}

void Dispatcher::save(const Job& job) {
  if (auto saved = store_.update(job); !saved) {
    fmt::print(stderr, "gpupoold: cannot save job {} (trying again until it is saved): {}\n", job.id,
               saved.error().message);
    unsaved_.insert_or_assign(job.id, job);
    save_retry_.failed(unix_now());
    return;
  }
  unsaved_.erase(job.id);  // an older refused version, superseded
}

void Dispatcher::save_again(double now) {
  if (unsaved_.empty() || !save_retry_.due(now)) return;
  for (auto it = unsaved_.begin(); it != unsaved_.end();) {
    if (auto saved = store_.update(it->second); !saved) {
      save_retry_.failed(now);
      return;
    }
    fmt::print(stderr, "gpupoold: job {} is saved now\n", it->first);
    it = unsaved_.erase(it);
  }
  save_retry_.succeeded();
}

void Dispatcher::show_unsaved(std::vector<Job>& listed) const {
  for (Job& job : listed) {
    auto unsaved = unsaved_.find(job.id);
    if (unsaved == unsaved_.end()) continue;
    std::vector<std::string> environment = std::move(job.spec.environment);  // as the listing left it
    job = unsaved->second;
    job.spec.environment = std::move(environment);
  }
}

}  // namespace gpupool
