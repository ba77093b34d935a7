// The driver of the job lifecycle (jobs/lifecycle.h): it hands the lifecycle what happened and
// carries out what it decides, asks the scheduler what may start, and starts attempts.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "base/text.h"
#include "daemon/daemon_impl.h"
#include "daemon/supervisor.h"
#include "isolation/device_rules.h"
#include "lease/gpu_pool.h"
#include "os/clock.h"
#include "sched/allocation.h"

namespace gpupool {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

std::optional<std::string> Daemon::Impl::feed(const lifecycle::Event& event) {
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

std::optional<std::string> Daemon::Impl::carry_out(const lifecycle::Effect& effect) {
  return std::visit(
      Overloaded{
          [&](const lifecycle::EnterQueue& e) -> std::optional<std::string> {
            if (auto submitted = scheduler_.submit(scheduler_request(active_.at(e.id)), unix_now()); !submitted) {
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
            return signal_attempt(active_.at(e.id));
          },
          [&](const lifecycle::Record& e) -> std::optional<std::string> {
            Job& job = active_.at(e.id);
            job.state = e.state;
            job.reason = e.reason;
            job.attempts = e.attempts;
            save(job);
            return std::nullopt;
          },
          [&](const lifecycle::Finished& e) -> std::optional<std::string> {
            finished(e.id, e.state, e.reason);
            return std::nullopt;
          },
      },
      effect);
}

// Stores the job's end, answers whoever waits for it, and forgets it.
void Daemon::Impl::finished(JobId id, JobState state, std::string reason) {
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
  if (auto session = lease_sessions_.find(id); session != lease_sessions_.end()) {
    // A `gpupool run` still waiting: tell it, and let it go.
    SessionPtr client = session->second;
    lease_sessions_.erase(session);
    client->lease_job.reset();
    if (!client->granted) {
      sessions_.send(client, protocol::ErrorResponse{fmt::format("job {} {}: {}", id, to_string(state), ended.reason)});
    }
  }
  if (ending_) asio::post(io_, [this] { stop_once_idle(); });
  // Answers the `wait`s that were waiting for this job last.
  auto waiting = waiters_.extract(id);
  if (waiting.empty()) return;
  for (auto& weak : waiting.mapped()) {
    SessionPtr session = weak.lock();
    if (!session || session->waiting_for.erase(id) == 0) continue;
    if (session->waiting_for.empty()) answer_wait(session);
  }
}

void Daemon::Impl::dispatch() {
  publish();
  if (lifecycle_.drained()) return;
  for (const JobStart& start_decision : scheduler_.schedule(unix_now())) {
    auto began = std::chrono::steady_clock::now();
    start(start_decision);
    monitor_->observe_dispatch(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
}

// The scheduler chose the job's GPUs: what will run it and their leases are taken, then the
// lifecycle grants them.
void Daemon::Impl::start(const JobStart& decision) {
  Job& job = active_.at(decision.id);
  // A batch job's leases name its supervisor from the start; a run's, its client.
  std::optional<StandbySupervisor> supervisor;
  if (job.spec.kind == JobKind::Batch) {
    auto standby = supervisors_.take();
    if (!standby) {
      (void)scheduler_.finish(job.id, unix_now());
      feed(lifecycle::StartFailed{job.id, "could not start: " + standby.error().message});
      return;
    }
    supervisor = std::move(*standby);
  }
  pid_t holder_pid = supervisor ? supervisor->pid() : job.pid ? *job.pid : getpid();
  LeaseHolder holder{holder_pid, job.owner.user, fmt::format("job-{}", job.id), static_cast<int64_t>(unix_now())};
  auto held = leases_.try_acquire(claims_for(machine_, decision.gpus, job.spec.gpus.slice_mib), holder);
  if (!held || !*held) {
    if (supervisor) supervisors_.put_back(std::move(*supervisor));
    // Someone outside the daemon took one of the GPUs since the last sample: look again soon.
    (void)scheduler_.requeue(job.id, unix_now());
    if (!held) fmt::print(stderr, "gpupoold: job {}: {}\n", job.id, held.error().message);
    schedule_sample(std::chrono::milliseconds(50));
    return;
  }
  reserved_ = Reserved{std::move(supervisor), std::move(**held)};
  if (auto refused = feed(lifecycle::Granted{decision.id, decision.gpus})) {
    fmt::print(stderr, "gpupoold: job {}: {}\n", decision.id, *refused);
  }
  reserved_.reset();  // not taken: the leases are released, the supervisor ends
}

void Daemon::Impl::start_attempt(const lifecycle::StartAttempt& start) {
  Job& job = active_.at(start.id);
  Reserved reserved = std::move(*reserved_);
  reserved_.reset();
  job.state = JobState::Running;
  job.attempts = start.attempt;
  job.gpus = start.gpus;
  job.gpu_uuids.clear();
  for (unsigned index : start.gpus) job.gpu_uuids.push_back(machine_.gpus.at(index).uuid);
  job.start_time = unix_now();
  job.end_time.reset();
  job.exit_code.reset();
  job.signal.reset();
  job.reason.clear();
  if (reserved.supervisor) {
    start_batch(job, std::move(reserved.held), std::move(*reserved.supervisor));
  } else {
    start_interactive(job, std::move(reserved.held));
  }
}

void Daemon::Impl::start_batch(Job& job, HeldLeases held, StandbySupervisor supervisor) {
  job.pid = supervisor.pid();
  job.pid_start_ticks = host_.process_start_ticks(static_cast<uint32_t>(supervisor.pid()));
  save(job);  // "running, attempt N, this supervisor" is stored before the attempt can begin
  SupervisedAttempt attempt;
  attempt.id = job.id;
  attempt.attempt = job.attempts;
  attempt.uid = job.owner.uid;
  attempt.gid = job.owner.gid;
  attempt.groups = job.owner.groups;
  attempt.argv = job.spec.argv;
  attempt.environment = with_overrides(
      job.spec.environment, gpu_environment(machine_, job.gpus, std::to_string(job.id), job.spec.gpus.slice_mib));
  attempt.cwd = job.spec.cwd;
  attempt.umask = job.spec.umask;
  fill_log_paths(job);
  attempt.stdout_path = job.stdout_path;
  attempt.stderr_path = job.stderr_path;
  attempt.time_limit_s = job.spec.time_limit_s;
  attempt.kill_grace_s = settings_.config.kill_grace_s;
  attempt.record_path = record_path(job);
  auto could_not_start = [&](const std::string& why) {
    held.release();
    attempt_ended(job.id, {job.id, std::nullopt, std::nullopt, "could not start: " + why, false});
  };
  if (const auto& isolation = groups_.isolation()) {
    auto minors = denied_minors(machine_, job.gpus);  // every GPU's minor number was there at start
    if (!minors) return could_not_start(minors.error().message);
    attempt.isolation = AttemptIsolation{isolation->mechanism,
                                         isolation->base + "/" + attempt_group_name(job.id, job.attempts),
                                         std::move(*minors),
                                         settings_.config.device_isolation == DeviceIsolationMode::On};
  }
  if (auto handed = supervisor.hand(attempt, held.descriptors()); !handed) {
    return could_not_start(handed.error().message);
  }
  held.hand_over();
  processes_.watch(job.id, supervisor.pid());
}

void Daemon::Impl::start_interactive(Job& job, HeldLeases held) {
  auto session = lease_sessions_.find(job.id);
  if (session == lease_sessions_.end()) {
    held.release();
    attempt_ended(job.id, {job.id, std::nullopt, std::nullopt, "its client disconnected", true});
    return;
  }
  std::vector<int> copies;
  for (int fd : held.descriptors()) copies.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 3));
  protocol::LeaseGranted granted{job.id, job.gpus, job.gpu_uuids, job.spec.gpus.slice_mib,
                                 static_cast<unsigned>(copies.size())};
  session->second->granted = true;
  sessions_.send(session->second, granted, std::move(copies));
  held.hand_over();
  save(job);
  // The client's exit (or its message) ends the job; its pid is watched for after a restart.
}

std::optional<std::string> Daemon::Impl::signal_attempt(const Job& job) {
  if (!job.pid) return std::nullopt;
  if (job.spec.kind == JobKind::Interactive) {
    // `gpupool run` passes SIGTERM on to the program in the user's terminal.
    if (kill(*job.pid, SIGTERM) != 0) return fmt::format("cannot signal the client: {}", std::strerror(errno));
    return std::nullopt;
  }
  if (auto sent = cancel_supervised(*job.pid); !sent) return sent.error().message;
  return std::nullopt;
}

void Daemon::Impl::attempt_ended(JobId id, lifecycle::AttemptExited ended) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = it->second;
  (void)scheduler_.finish(id, unix_now());
  processes_.forget(id);
  job.exit_code = ended.exit_code;
  job.signal = ended.signal;
  job.end_time = unix_now();
  job.pid.reset();
  feed(ended);
}

void Daemon::Impl::on_exit(JobId id) {
  auto it = active_.find(id);
  if (it == active_.end() || it->second.state != JobState::Running) return;
  Job& job = it->second;
  if (job.spec.kind == JobKind::Interactive) {
    if (lease_sessions_.count(id) > 0) return;  // the connection reports for it
    attempt_ended(id, {id, std::nullopt, std::nullopt, "exit status unknown: the daemon restarted while it ran", false});
    dispatch();
    return;
  }
  if (job.pid) {
    int status = 0;
    waitpid(*job.pid, &status, WNOHANG);  // reap our own child; an adopted one is init's
  }
  lifecycle::AttemptExited ended{id, std::nullopt, std::nullopt, "", false};
  auto record = read_attempt_record(record_path(job));
  if (!record) {
    ended.reason = record.error().message;
  } else if (record->progress == AttemptProgress::Exited) {
    ended.exit_code = record->exit_code;
    ended.signal = record->signal;
    ended.reason = record->reason;
    ended.cancelled = record->reason == "cancelled";
  } else if (record->progress == AttemptProgress::Lost) {
    ended.reason = "its supervisor was killed while it ran; its processes may still be running";
  } else if (record->progress == AttemptProgress::Running && record->supervisor_pid) {
    processes_.watch(id, *record->supervisor_pid);  // it still holds its record's lock: it has not ended
    return;
  } else {
    // The supervisor ended before starting the job (e.g. the daemon was killed before handing
    // it the attempt): the job never ran, so it goes back to the queue as it was.
    (void)scheduler_.finish(id, unix_now());
    unlink(record_path(job).c_str());
    job.gpus.clear();
    job.gpu_uuids.clear();
    job.start_time.reset();
    job.pid.reset();
    feed(lifecycle::AttemptNeverRan{id});
    dispatch();
    return;
  }
  std::string group = attempt_group_name(id, job.attempts);  // before the job may be forgotten
  attempt_ended(id, ended);
  groups_.remove_ended(group);
  dispatch();
}

std::set<std::string> Daemon::Impl::running_batch_groups() const {
  std::set<std::string> running;
  for (const auto& [id, job] : active_) {
    if (job.state == JobState::Running && job.spec.kind == JobKind::Batch) {
      running.insert(attempt_group_name(id, job.attempts));
    }
  }
  return running;
}

Result<std::optional<Job>> Daemon::Impl::find_job(JobId id) const {
  if (auto it = active_.find(id); it != active_.end()) return std::optional<Job>(it->second);
  TRY_ASSIGN(std::optional<Job> stored, store_.get(id));
  if (stored) fill_log_paths(*stored);
  return stored;
}

void Daemon::Impl::fill_log_paths(Job& job) const {
  if (job.spec.kind != JobKind::Batch || job.id == 0) return;
  job.stdout_path = fmt::format("{}/logs/{}.out", settings_.state_dir, job.id);
  job.stderr_path = fmt::format("{}/logs/{}.err", settings_.state_dir, job.id);
}

std::string Daemon::Impl::record_path(const Job& job) const {
  return fmt::format("{}/attempts/{}.{}", settings_.state_dir, job.id, job.attempts);
}

void Daemon::Impl::save(const Job& job) {
  if (auto saved = store_.update(job); !saved) {
    fmt::print(stderr, "gpupoold: cannot save job {}: {}\n", job.id, saved.error().message);
  }
}

}  // namespace gpupool
