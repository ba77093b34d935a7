#include <fcntl.h>
#include <malloc.h>

#include <map>

#include <fmt/format.h>

#include "daemon/daemon_impl.h"
#include "daemon/supervisor.h"
#include "jobs/job_text.h"
#include "jobs/private_data.h"
#include "os/accounts.h"
#include "os/clock.h"
#include "os/files.h"
#include "os/process.h"
#include "sched/mps.h"

namespace gpupool {

// ---------------------------------------------------------------------------------------------
// Sessions and their requests

void Daemon::Impl::on_disconnect(const SessionPtr& session) {
  events_->forget(session);
  if (!session->lease_job) return;
  JobId id = *session->lease_job;
  session->lease_job.reset();
  lease_sessions_.erase(id);
  auto it = dispatcher_.active().find(id);
  if (it == dispatcher_.active().end()) return;
  if (it->second.state == JobState::Running) {
    // The client went away without reporting: its program may live on and keep the lease
    // (the locks say so at the next sample), but the job as the queue knows it is over.
    dispatcher_.attempt_ended(id, {id, std::nullopt, std::nullopt, "exit status unknown: the client disconnected", false});
  } else {
    dispatcher_.feed(lifecycle::Cancel{id, "its client, which disconnected"});
  }
  dispatcher_.dispatch();
}

Result<Job> Daemon::Impl::admit(const SessionPtr& session, const protocol::SubmitRequest& request, JobKind kind) {
  Job job;
  job.spec = request.spec;
  job.spec.kind = kind;
  job.owner = session->owner;
  if (uid_t daemon_uid = effective_user_id(); daemon_uid != 0 && job.owner.uid != daemon_uid) {
    return fail("this gpupoold runs as {} and can only run {}'s jobs", user_name(daemon_uid), user_name(daemon_uid));
  }
  if (job.spec.priority > 0 && !session->admin) {
    return fail("only an administrator may submit with a priority above 0");
  }
  if (job.spec.gpus.sm_percent && !(mps_slices_ && runs_under_mps(job.spec.gpus))) {
    return fail("--sm needs MPS, {}", mps_slices_ ? "which holds a slice of one GPU only"
                                                  : "which this gpupoold does not use (slice_enforcement is not \"mps\", "
                                                    "or \"auto\" found no nvidia-cuda-mps-control)");
  }
  if (!job.spec.time_limit_s) job.spec.time_limit_s = settings_.config.default_time_limit_s;
  if (job.spec.time_limit_s && settings_.config.max_time_limit_s &&
      *job.spec.time_limit_s > *settings_.config.max_time_limit_s) {
    return fail("time limit {} s is above this machine's maximum of {} s", *job.spec.time_limit_s,
                *settings_.config.max_time_limit_s);
  }
  // An array counts as all its tasks: it is stored whole or not at all.
  size_t adding = request.array ? request.array->indices.size() : 1;
  size_t waiting = waiting_jobs_of(job.owner.uid);
  if (waiting + adding > settings_.config.max_queued_jobs_per_user) {
    if (adding == 1) {
      return fail("user {} already has {} jobs queued (max_queued_jobs_per_user = {})", job.owner.user, waiting,
                  settings_.config.max_queued_jobs_per_user);
    }
    return fail("user {} has {} jobs queued: {} tasks more would be above max_queued_jobs_per_user = {}",
                job.owner.user, waiting, adding, settings_.config.max_queued_jobs_per_user);
  }
  // Refused now, rather than stored to fail or wait for ever: more GPUs than the machine, the
  // user's quota or its --gpus/--exclude can ever give it.
  if (auto admissible = scheduler_.admissible(scheduler_request(job, mps_slices_)); !admissible) {
    return fail("this job {}", admissible.error().message);
  }
  for (JobId after : job.spec.after) {
    TRY_ASSIGN(auto found, dispatcher_.find_job(after));
    if (!found) return fail("job {} (in --after) does not exist", after);
  }
  job.submit_time = unix_now();
  return job;
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::SubmitRequest& r) {
  if (r.token) {
    // Sent again after a lost answer: what the first one stored is the answer.
    auto stored = store_.find_submission(s->owner.uid, *r.token);
    if (!stored) return sessions_.send(s, protocol::ErrorResponse{stored.error().message});
    if (*stored) {
      std::optional<unsigned> tasks = r.array ? std::optional((*stored)->count) : std::nullopt;
      return sessions_.send(s, protocol::SubmitResponse{(*stored)->first_id, tasks});
    }
  }
  auto admitted = admit(s, r, JobKind::Batch);
  if (!admitted) return sessions_.send(s, protocol::ErrorResponse{admitted.error().message});
  admitted->submit_token = r.token;
  if (r.hold) {
    // Stored held: no window in which it could start before the hold.
    admitted->state = JobState::Held;
    admitted->reason = fmt::format("held by {}", s->owner.user);
  }
  if (r.array) return submit_array(s, std::move(*admitted), *r.array);
  // Group commit: the submissions that arrive while the loop is busy share one sync to disk.
  pending_submissions_.emplace_back(s, std::move(*admitted));
  if (pending_submissions_.size() == 1) asio::post(io_, [this] { commit_submissions(); });
}

// One job per index, stored in one transaction of their own: all or none.
void Daemon::Impl::submit_array(const SessionPtr& s, Job admitted, const ArraySpec& array) {
  std::vector<Job> tasks(array.indices.size(), admitted);
  for (size_t i = 0; i < tasks.size(); ++i) tasks[i].array = ArrayTask{0, array.indices[i], array.limit};
  auto ids = store_.insert_array(tasks);
  if (!ids) return sessions_.send(s, protocol::ErrorResponse{ids.error().message});
  for (size_t i = 0; i < tasks.size(); ++i) {
    tasks[i].id = (*ids)[i];
    tasks[i].array->array_id = ids->front();
    dispatcher_.fill_log_paths(tasks[i]);
    dispatcher_.submitted(std::move(tasks[i]));
  }
  sessions_.send(s, protocol::SubmitResponse{ids->front(), static_cast<unsigned>(ids->size())});
  dispatcher_.dispatch();
}

void Daemon::Impl::commit_submissions() {
  auto pending = std::move(pending_submissions_);
  pending_submissions_.clear();
  // A submission sent again while the first is still pending here is the same job: stored once.
  std::map<std::pair<uid_t, std::string>, size_t> first_with_token;
  std::vector<size_t> stored_as;  // per pending submission, its job's place in `jobs`
  std::vector<Job> jobs;
  for (const auto& [session, job] : pending) {
    if (job.submit_token) {
      auto [first, added] = first_with_token.emplace(std::pair(job.owner.uid, *job.submit_token), jobs.size());
      if (!added) {
        stored_as.push_back(first->second);
        continue;
      }
    }
    stored_as.push_back(jobs.size());
    jobs.push_back(job);
  }
  auto ids = store_.insert_all(jobs);  // durable before the clients hear their ids
  std::vector<bool> handed(jobs.size(), false);
  for (size_t i = 0; i < pending.size(); ++i) {
    auto& [session, job] = pending[i];
    if (!ids) {
      sessions_.send(session, protocol::ErrorResponse{ids.error().message});
      continue;
    }
    JobId id = (*ids)[stored_as[i]];
    if (!handed[stored_as[i]]) {
      handed[stored_as[i]] = true;
      job.id = id;
      dispatcher_.fill_log_paths(job);
      dispatcher_.submitted(std::move(job));
    }
    sessions_.send(session, protocol::SubmitResponse{id});
  }
  dispatcher_.dispatch();
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::LeaseRequest& r) {
  if (s->lease_job) return sessions_.send(s, protocol::ErrorResponse{"this connection already has a lease request"});
  auto admitted = admit(s, protocol::SubmitRequest{r.spec}, JobKind::Interactive);
  if (!admitted) return sessions_.send(s, protocol::ErrorResponse{admitted.error().message});
  Job job = std::move(*admitted);
  job.pid = s->peer.pid;
  job.pid_start_ticks = host_.process_start_ticks(static_cast<uint32_t>(s->peer.pid));
  auto id = store_.insert(job);
  if (!id) return sessions_.send(s, protocol::ErrorResponse{id.error().message});
  job.id = *id;
  s->lease_job = job.id;
  s->stops_the_clock = r.stops_the_clock;
  lease_sessions_[job.id] = s;
  dispatcher_.submitted(std::move(job));
  dispatcher_.dispatch();
  // Not there: it has ended already, and its client was told.
  auto queued = dispatcher_.active().find(*id);
  if (queued != dispatcher_.active().end() &&
      (queued->second.state == JobState::Queued || queued->second.state == JobState::Held)) {
    Job waiting = for_client(queued->second, *s, expected_starts());
    s->told_reason = waiting.reason;
    sessions_.send(s, protocol::LeaseQueued{*id, waiting.reason, waiting.expected_start});
  }
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::FinishedRequest& r) {
  if (!s->lease_job || !s->granted) return sessions_.send(s, protocol::ErrorResponse{"no lease was granted on this connection"});
  JobId id = *s->lease_job;
  s->lease_job.reset();
  lease_sessions_.erase(id);
  dispatcher_.attempt_ended(id, {id, r.exit_code, r.signal, r.timed_out ? "time limit" : "", false});
  sessions_.send(s, protocol::Ack{});
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::JobsRequest& r) {
  // One page: the client asks for the next after the last job of this one. The store leaves
  // the environments out (listings stay small; `show` gives the owner everything).
  JobFilter filter;
  filter.include_finished = r.all;
  filter.user = r.user;
  filter.state = r.state;
  filter.after_id = r.after_id;
  if (r.submitted_since) {
    auto before = store_.last_submitted_before(*r.submitted_since);
    if (!before) return sessions_.send(s, protocol::ErrorResponse{before.error().message});
    filter.after_id = std::max(filter.after_id, *before);
  }
  filter.limit = size_t{r.limit} + 1;  // the one past the page says whether more remain
  size_t listed = 0;
  {
    auto jobs = store_.list(filter);
    if (!jobs) return sessions_.send(s, protocol::ErrorResponse{jobs.error().message});
    dispatcher_.show_unsaved(*jobs);  // the truth, such as an end the store has not taken yet
    listed = jobs->size();
    protocol::JobsResponse response;
    size_t bytes = 0;
    bool any_queued = std::any_of(jobs->begin(), jobs->end(), [](const Job& job) { return job.state == JobState::Queued; });
    std::map<JobId, double> starts = any_queued ? expected_starts() : std::map<JobId, double>{};
    for (Job& job : *jobs) {
      if (response.jobs.size() == r.limit) {
        response.more = true;
        break;
      }
      Job shown = for_client(std::move(job), *s, starts);
      if (!may_receive(*s, shown)) continue;
      bytes += protocol::encoded_size(shown);
      // Long commands could make a full page too long for one message: end it sooner. (64:
      // room for what the answer holds besides its jobs, `{"jobs":[` and `],"more":true,"ok":true}`.)
      if (!response.jobs.empty() && bytes > protocol::kMaxMessageBytes - 64) {
        response.more = true;
        break;
      }
      response.jobs.push_back(std::move(shown));
    }
    sessions_.send(s, response);
  }
  // Give what the page took back to the system, rather than keep the peak of the largest
  // listing for the daemon's lifetime.
  if (listed > 100) malloc_trim(0);
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::ShowRequest& r) {
  auto job = dispatcher_.find_job(r.id);
  if (!job) return sessions_.send(s, protocol::ErrorResponse{job.error().message});
  if (!*job) return sessions_.send(s, protocol::ErrorResponse{fmt::format("no job {}", r.id)});
  bool queued = (*job)->state == JobState::Queued;
  Job shown = for_client(std::move(**job), *s, queued ? expected_starts() : std::map<JobId, double>{});
  if (!may_receive(*s, shown)) return sessions_.send(s, protocol::ErrorResponse{fmt::format("no job {}", r.id)});
  sessions_.send(s, protocol::JobsResponse{{std::move(shown)}});
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::LogsRequest& r) {
  auto job = dispatcher_.find_job(r.id);
  if (!job) return sessions_.send(s, protocol::ErrorResponse{job.error().message});
  if (!*job) return sessions_.send(s, protocol::ErrorResponse{fmt::format("no job {}", r.id)});
  if (!may_act_on(*s, **job)) {
    return sessions_.send(s, protocol::ErrorResponse{fmt::format("job {} belongs to {}: only they may read its logs", r.id,
                                                    (*job)->owner.user)});
  }
  if ((*job)->spec.kind != JobKind::Batch) {
    return sessions_.send(s, protocol::ErrorResponse{fmt::format("job {} ran in its user's terminal: it has no logs", r.id)});
  }
  Job shown = for_client(std::move(**job), *s);
  if (!r.open) return sessions_.send(s, protocol::JobsResponse{{std::move(shown)}});
  // The daemon opens the log for the client, who may not be able to (an administrator reading
  // another user's, which is theirs alone). The job's user owns the file: O_NOFOLLOW, the type
  // check and O_NONBLOCK (a FIFO would block the open) keep them from passing off a link to a
  // file only root may read, or a device, as their log.
  const std::string& path = *r.open == protocol::LogStream::Stderr ? shown.stderr_path : shown.stdout_path;
  // Only a log the daemon made for this job: not a file left under its name by a reset.
  auto log = open_regular_file(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!log) return sessions_.send(s, protocol::ErrorResponse{log.error().message});
  if (!*log) return sessions_.send(s, protocol::JobsResponse{{std::move(shown)}, false, 0u});
  auto status = file_status((*log)->get());
  if (!status) return sessions_.send(s, protocol::ErrorResponse{status.error().message});
  if (auto its_own = check_job_log(path, *status, shown.owner.uid); !its_own) {
    return sessions_.send(s, protocol::ErrorResponse{its_own.error().message});
  }
  sessions_.send(s, protocol::JobsResponse{{std::move(shown)}, false, 1u}, {(*log)->release()});
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::JobActionRequest& r) {
  protocol::JobActionResponse response;
  for (JobId id : r.ids) {
    protocol::ActionOutcome outcome{id, std::nullopt, std::nullopt};
    auto it = dispatcher_.active().find(id);
    if (it == dispatcher_.active().end()) {
      auto stored = dispatcher_.find_job(id);
      if (!stored) {
        outcome.error = stored.error().message;
      } else if (!*stored) {
        outcome.error = fmt::format("no job {}", id);
      } else {
        outcome.error = already_ended_text(id, (*stored)->state);
        outcome.state = (*stored)->state;
      }
      response.outcomes.push_back(outcome);
      continue;
    }
    const Job& job = it->second;
    if (!may_act_on(*s, job)) {
      outcome.error = fmt::format("job {} belongs to {}: only they or an administrator may change it", id,
                                  job.owner.user);
      outcome.state = job.state;
      response.outcomes.push_back(outcome);
      continue;
    }
    switch (r.action) {
      case protocol::JobAction::Cancel:
        outcome.error = dispatcher_.feed(lifecycle::Cancel{id, s->owner.user});
        break;
      case protocol::JobAction::Hold:
        outcome.error = dispatcher_.feed(lifecycle::Hold{id, s->owner.user});
        break;
      case protocol::JobAction::Release:
        outcome.error = dispatcher_.feed(lifecycle::Release{id});
        break;
      case protocol::JobAction::Suspend:
        outcome.error = suspend(id, s->owner.user);
        break;
      case protocol::JobAction::Resume:
        outcome.error = dispatcher_.resume(id);
        break;
    }
    auto after = dispatcher_.active().find(id);
    outcome.state = after != dispatcher_.active().end() ? after->second.state : JobState::Cancelled;
    if (outcome.state == JobState::Suspended && s->protocol < 3) outcome.state = JobState::Running;
    response.outcomes.push_back(outcome);
  }
  sessions_.send(s, response);
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::WaitRequest& r) {
  // Each id once, in the order asked: copies would only make the answer longer.
  std::vector<JobId> ids;
  std::set<JobId> seen;
  for (JobId id : r.ids) {
    if (seen.insert(id).second) ids.push_back(id);
  }
  if (ids.size() > protocol::kMaxJobsPage) {
    return sessions_.send(s, protocol::ErrorResponse{fmt::format(
                                 "wait takes at most {} jobs at a time, not {}", protocol::kMaxJobsPage, ids.size())});
  }
  s->waiting_for.clear();
  s->wait_ids = ids;
  for (JobId id : ids) {
    auto job = dispatcher_.find_job(id);
    if (!job) return sessions_.send(s, protocol::ErrorResponse{job.error().message});
    if (!*job) return sessions_.send(s, protocol::ErrorResponse{fmt::format("no job {}", id)});
    if (!is_finished((*job)->state)) {
      s->waiting_for.insert(id);
      waiters_[id].push_back(s);
    }
  }
  if (s->waiting_for.empty()) answer_wait(s);
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::AdminRequest& r) {
  if (!s->admin) return sessions_.send(s, protocol::ErrorResponse{"only root or the admin group may drain or resume"});
  bool drain = r.action == protocol::AdminAction::Drain;
  for (unsigned index : r.gpus) {
    if (index >= machine_.gpus.size()) {
      return sessions_.send(s, protocol::ErrorResponse{fmt::format("there is no GPU {}: the machine has {}", index,
                                                                   machine_.gpus.size())});
    }
  }
  DrainState changed = drain_;
  DrainNote note{s->owner.user, unix_now(), r.reason};
  if (r.gpus.empty()) {
    changed.queue = drain ? std::optional(note) : std::nullopt;
  }
  for (unsigned index : r.gpus) {
    if (drain) {
      changed.gpus[index] = note;
    } else {
      changed.gpus.erase(index);
    }
  }
  // Stored first, in one piece: a drain the store could not keep would end with the next restart unsaid.
  if (auto stored = store_.set_setting("drain", encode(changed)); !stored) {
    return sessions_.send(s, protocol::ErrorResponse{stored.error().message});
  }
  bool queue_changed = changed.queue.has_value() != drain_.queue.has_value();
  for (unsigned index : r.gpus) {
    if ((changed.gpus.count(index) > 0) != (drain_.gpus.count(index) > 0)) {
      events_->add(gpu_event(drain ? EventKind::GpuDrained : EventKind::GpuResumed, index, s->owner.user, r.reason));
    }
  }
  if (queue_changed) {
    Event event;
    event.time = unix_now();
    event.kind = drain ? EventKind::QueueDrained : EventKind::QueueResumed;
    event.user = s->owner.user;
    event.detail = r.reason;
    events_->add(std::move(event));
  }
  drain_ = std::move(changed);
  if (!drain) {  // `resume --gpu` also returns a quarantined GPU, its faults seen now accepted
    bool released = false;
    for (unsigned index : r.gpus) {
      const Gpu& reading = index < last_reading_.gpus.size() ? last_reading_.gpus[index] : machine_.gpus[index];
      if (release_from_quarantine(quarantine_, reading)) {
        fmt::print(stderr, "gpupoold: GPU {} returned from quarantine by {}\n", index, s->owner.user);
        events_->add(gpu_event(EventKind::GpuReturned, index, s->owner.user, "released by " + s->owner.user));
      }
      released = true;
    }
    if (released) store_quarantine();
  }
  if (queue_changed) dispatcher_.feed(drain ? lifecycle::Event(lifecycle::Drain{}) : lifecycle::Event(lifecycle::Resume{}));
  if (!r.gpus.empty()) apply_survey();  // the GPUs are kept from jobs (or given back) at once
  if (!r.suspend) return sessions_.send(s, protocol::Ack{});
  // Emptied for maintenance without ending anything: each job there suspended, queued to resume.
  protocol::JobActionResponse suspended;
  std::vector<JobId> there;
  for (const auto& [id, job] : dispatcher_.active()) {
    bool on_drained = r.gpus.empty() || std::ranges::any_of(job.gpus, [&](unsigned gpu) {
                        return std::ranges::find(r.gpus, gpu) != r.gpus.end();
                      });
    if (job.state == JobState::Running && on_drained) there.push_back(id);
  }
  for (JobId id : there) {
    protocol::ActionOutcome outcome{id, suspend(id, s->owner.user, ResumeWhen::Free), JobState::Running};
    suspended.outcomes.push_back(std::move(outcome));
  }
  sessions_.send(s, suspended);
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::EventsRequest& r) { events_->answer(s, r); }

void Daemon::Impl::handle(const SessionPtr& s, const protocol::StatusRequest&) {
  protocol::StatusResponse status;
  status.software = std::string("gpupoold ") + GPUPOOL_VERSION;
  status.pid = own_pid();
  status.drained = dispatcher_.drained();
  if (drain_.queue) {
    status.drained_by = drain_.queue->by;
    status.drained_at = drain_.queue->at;
    status.drain_reason = drain_.queue->reason;
  }
  for (const auto& [index, note] : drain_.gpus) status.drained_gpus.push_back({index, note.by, note.at, note.reason});
  for (const auto& [uuid, note] : quarantine_.gpus) {
    status.quarantined_gpus.push_back({note.index, "", note.since, note.reason});
  }
  std::ranges::sort(status.quarantined_gpus, {}, &protocol::DrainedGpu::index);
  std::string host = host_name();
  std::string simulated = backend_->simulated_machine();
  status.machine = simulated.empty() ? host : fmt::format("{} (simulated {})", host, simulated);
  status.gpus = static_cast<unsigned>(machine_.gpus.size());
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state == JobState::Queued) ++status.queued;
    if (job.state == JobState::Held) ++status.held;
    if (job.state == JobState::Running) ++status.running;
  }
  status.samples = monitor_->samples_surveyed();
  status.slice_enforcement = mps_slices_                                                      ? "mps"
                             : settings_.config.slice_enforcement == SliceEnforcement::Off ? "off"
                                                                                           : "watch";
  if (auto free = free_bytes(settings_.state_dir)) {
    status.state_space = protocol::StateSpace{*free, settings_.config.state_reserve_bytes, dispatcher_.unsaved().size()};
  }
  sessions_.send(s, status);
}

void Daemon::Impl::handle(const SessionPtr& s, const protocol::ReportRequest& r) {
  auto report = monitor_->report(r.since);
  if (!report) return sessions_.send(s, protocol::ErrorResponse{report.error().message});
  if (!s->admin) withhold_from_report(*report, s->owner.user, settings_.config.private_data);
  sessions_.send(s, std::move(*report));
}

// ---------------------------------------------------------------------------------------------
// What clients are told of their jobs (the dispatcher's hooks)

bool Daemon::Impl::hand_to_client(const Job& job, const HeldLeases& held, const std::vector<std::string>& environment) {
  auto session = lease_sessions_.find(job.id);
  if (session == lease_sessions_.end()) return false;
  std::vector<Fd> copies;
  for (int fd : held.descriptors()) {
    auto copy = duplicate(fd);
    if (!copy) {
      fmt::print(stderr, "gpupoold: job {}: {}\n", job.id, copy.error().message);
      return false;
    }
    copies.push_back(std::move(*copy));
  }
  std::vector<int> descriptors;  // the session closes them once sent
  for (Fd& copy : copies) descriptors.push_back(copy.release());
  protocol::LeaseGranted granted{job.id, job.gpus, job.gpu_uuids, job.spec.gpus.slice_mib, environment,
                                 static_cast<unsigned>(descriptors.size())};
  session->second->granted = true;
  sessions_.send(session->second, granted, std::move(descriptors));
  return true;
}

void Daemon::Impl::job_finished(const Job& job) {
  monitor_->job_ended(queue_entry(job), job.end_time.value_or(unix_now()));
  events_->add(job_finished_event(job, unix_now()));
  told_idle_.erase(job.id);
  told_overrun_.erase(job.id);
  idle_told_before_restart_.erase(job.id);
  preempt_tried_.erase(job.id);
  std::erase_if(mps_clients_, [&](const auto& client) { return client.second == job.id; });
  mps_fault_reasons_.erase(job.id);
  if (job.attempts > 0) checkpoints_.forget_ended_processes();  // its processes may have been suspended
  if (auto session = lease_sessions_.find(job.id); session != lease_sessions_.end()) {
    // A `gpupool run` still waiting: tell it, and let it go.
    SessionPtr client = session->second;
    lease_sessions_.erase(session);
    client->lease_job.reset();
    if (!client->granted) {
      sessions_.send(client,
                     protocol::ErrorResponse{fmt::format("job {} {}: {}", job.id, to_string(job.state), job.reason)});
    }
  }
  if (ending_) asio::post(io_, [this] { stop_once_idle(); });
  // Answers the `wait`s that were waiting for this job last.
  auto waiting = waiters_.extract(job.id);
  if (waiting.empty()) return;
  for (auto& weak : waiting.mapped()) {
    SessionPtr session = weak.lock();
    if (!session || session->waiting_for.erase(job.id) == 0) continue;
    if (session->waiting_for.empty()) answer_wait(session);
  }
}

Scheduler::Waiting Daemon::Impl::waiting_for(const Job& job) const {
  if (drain_.queue) {
    return {WaitReason::Drained, DrainState::describe(*drain_.queue) + " (starts after `gpupool resume`)"};
  }
  // The lifecycle's reason, which the store does not keep: a job it runs after has not finished
  // (it is not in the scheduler's queue).
  auto active = dispatcher_.active().find(job.id);
  if (active != dispatcher_.active().end() && !active->second.reason.empty()) {
    return {WaitReason::Dependency, active->second.reason};
  }
  return scheduler_.waiting(job.id, unix_now()).value_or(Scheduler::Waiting{WaitReason::Priority, ""});
}

std::map<JobId, double> Daemon::Impl::expected_starts() {
  if (drain_.queue) return {};
  return scheduler_.expected_starts(unix_now(), kPlannedJobs);
}

// Queued and held, submitted but not yet stored included. A walk over the active jobs (the limit
// bounds them too), simpler than keeping a count right through every change of state.
size_t Daemon::Impl::waiting_jobs_of(uid_t uid) const {
  auto waiting = [uid](const Job& job) {
    return job.owner.uid == uid && (job.state == JobState::Queued || job.state == JobState::Held);
  };
  size_t count = 0;
  for (const auto& [id, job] : dispatcher_.active()) count += waiting(job) ? 1 : 0;
  for (const auto& [session, job] : pending_submissions_) count += waiting(job) ? 1 : 0;
  return count;
}

bool Daemon::Impl::may_act_on(const Session& session, const Job& job) const {
  return session.admin || session.owner.uid == job.owner.uid;
}

Job Daemon::Impl::for_client(Job job, const Session& session, const std::map<JobId, double>& expected_starts) const {
  bool theirs = may_act_on(session, job);
  // Another user's environment may hold their secrets.
  if (!theirs) job.spec.environment.clear();
  if (!theirs && settings_.config.private_data.jobs) {
    withhold_details(job);
  } else {
    dispatcher_.fill_log_paths(job);
  }
  if (job.state == JobState::Queued) {
    Scheduler::Waiting waiting = waiting_for(job);
    job.wait_reason = waiting.reason;
    job.reason = std::move(waiting.detail);
    if (auto start = expected_starts.find(job.id); start != expected_starts.end()) job.expected_start = start->second;
  } else if (job.state == JobState::Held) {
    job.wait_reason = WaitReason::Held;
  } else if (job.start_time && (theirs || !settings_.config.private_data.usage)) {
    job.usage = monitor_->usage_of(job.id);  // running, suspended, or what it used when it ran
  }
  // An older client knows no suspended state: running, as the reason says ("suspended by ana").
  if (job.state == JobState::Suspended && session.protocol < 3) job.state = JobState::Running;
  return job;
}

bool Daemon::Impl::may_receive(const Session& session, const Job& shown) {
  // Protocol 1 has no withheld jobs: such a client never learns that the job exists.
  return !shown.details_withheld || session.protocol >= 2;
}

void Daemon::Impl::answer_wait(const SessionPtr& session) {
  protocol::JobsResponse response;
  size_t bytes = 0;
  for (JobId id : session->wait_ids) {
    auto job = dispatcher_.find_job(id);
    if (!job || !*job) return sessions_.send(session, protocol::ErrorResponse{fmt::format("job {} has disappeared", id)});
    Job found = std::move(**job);
    found.spec.environment.clear();
    Job shown = for_client(std::move(found), *session);
    if (!may_receive(*session, shown)) return sessions_.send(session, protocol::ErrorResponse{fmt::format("no job {}", id)});
    // The answer is one message: once long commands would take it past the message limit, the
    // remaining jobs come without theirs (`show` has them).
    size_t size = protocol::encoded_size(shown);
    if (bytes + size > protocol::kMaxMessageBytes - 64) {
      shown.spec.argv.clear();
      size = protocol::encoded_size(shown);
    }
    bytes += size;
    response.jobs.push_back(std::move(shown));
  }
  sessions_.send(session, response);
}

}  // namespace gpupool
