#include "jobs/lifecycle.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "jobs/job_text.h"

namespace gpupool {

using namespace lifecycle;

JobLifecycle::JobLifecycle(StoredState stored_state) : stored_state_(std::move(stored_state)) {}

Result<std::vector<Effect>> JobLifecycle::handle(const lifecycle::Event& event) {
  Effects out;
  ended_now_.clear();
  changed_.clear();
  TRY(std::visit([&](const auto& e) { return on(e, out); }, event));
  return out;
}

const TrackedJob* JobLifecycle::find(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

Result<TrackedJob*> JobLifecycle::tracked(JobId id, JobState expected) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return fail("no job {} is queued, held or running", id);
  if (it->second.state != expected) return fail("job {} is {}, not {}", id, to_string(it->second.state), to_string(expected));
  changed_.push_back(id);  // every caller changes it
  return &it->second;
}

Result<TrackedJob*> JobLifecycle::with_attempt(JobId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return fail("no job {} is queued, held or running", id);
  if (it->second.state != JobState::Running && it->second.state != JobState::Suspended) {
    return fail("job {} is {}, not running", id, to_string(it->second.state));
  }
  changed_.push_back(id);
  return &it->second;
}

Result<void> JobLifecycle::on(const Submitted& e, Effects& out) {
  if (jobs_.count(e.id) > 0) return fail("job {} exists already", e.id);
  TrackedJob job;
  job.kind = e.kind;
  job.retries = e.retries;
  job.after = e.after;
  changed_.push_back(e.id);
  if (e.held_by) {
    job.state = JobState::Held;
    job.reason = fmt::format("held by {}", *e.held_by);
  }
  jobs_[e.id] = std::move(job);
  enqueue(e.id, out);
  return {};
}

Result<void> JobLifecycle::on(const Adopted& e, Effects& out) {
  if (jobs_.count(e.id) > 0) return fail("job {} exists already", e.id);
  if (is_finished(e.state)) return fail("{}", already_ended_text(e.id, e.state));
  TrackedJob& job = jobs_[e.id];
  job.kind = e.kind;
  job.state = e.state;
  job.reason = e.reason;
  job.attempts = e.attempts;
  job.retries = e.retries;
  job.after = e.after;
  changed_.push_back(e.id);
  if (e.state == JobState::Suspended && !e.suspension) {
    return fail("job {} is suspended, but its checkpoint is not known", e.id);
  }
  // A suspend (the job still running) or a resume (its restore begun) that the daemon before
  // stopped during: the driver is asked where it left the processes, and it goes on from there.
  if (e.suspension && (e.state == JobState::Running || e.suspension->restoring)) {
    const bool resuming = e.suspension->restoring;  // stored running with it: resumed, its end unsaved
    job.suspension = SuspensionSteps::taken_up(e.suspension->pids, resuming);
    job.suspended_by = e.suspension->by;
    job.resume_when_free = e.suspension->resume;
    job.reason = resuming ? "resuming" : fmt::format("being suspended by {}", job.suspended_by);
    out.push_back(Record{e.id, job.state, job.reason, job.attempts});
    follow(e.id, job, job.suspension->first_call(), out);
    return {};
  }
  if (e.state == JobState::Suspended) {
    job.suspension = SuspensionSteps::suspended(e.suspension->pids);
    job.suspended_by = e.suspension->by;
    if (e.suspension->resume) {
      job.in_queue = true;
      out.push_back(EnterQueue{e.id});
    }
    return {};
  }
  enqueue(e.id, out);
  return {};
}

Result<void> JobLifecycle::on(const Refused& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Queued));
  job->in_queue = false;  // the scheduler never took it
  finish(e.id, JobState::Failed, e.why, out);
  return {};
}

Result<void> JobLifecycle::on(const Granted& e, Effects& out) {
  if (drained_) return fail("the queue is drained: job {} may not start", e.id);
  if (const TrackedJob* found = find(e.id); found && found->state == JobState::Suspended) {
    TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Suspended));
    if (!job->in_queue) return fail("job {} was not queued for GPUs", e.id);
    TRY_ASSIGN(SuspensionMove restore, job->suspension->resume());
    job->in_queue = false;
    job->reason = "resuming";
    out.push_back(Record{e.id, job->state, job->reason, job->attempts});
    follow(e.id, *job, restore, out);
    return {};
  }
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Queued));
  if (!job->in_queue) return fail("job {} was not queued for GPUs", e.id);
  job->in_queue = false;
  job->state = JobState::Running;
  job->reason.clear();
  // An interactive job runs once, in its client: only batch attempts are counted.
  if (job->kind == JobKind::Batch) job->attempts += 1;
  out.push_back(StartAttempt{e.id, job->attempts, e.gpus});
  return {};
}

Result<void> JobLifecycle::on(const StartFailed& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Queued));
  // Not a failed attempt, which a retry could mend: the daemon could not run one at all, and
  // would fail the same way again at once.
  job->in_queue = false;
  finish(e.id, JobState::Failed, e.why, out);
  return {};
}

Result<void> JobLifecycle::on(const AttemptExited& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, with_attempt(e.id));
  // However far a suspension got, the processes it was for are gone.
  job->suspension.reset();
  if (job->in_queue) out.push_back(LeaveQueue{e.id});
  job->in_queue = false;
  // A supervisor says "cancelled" of any stop it was asked for; one the daemon asked for at a
  // limit is that limit's end.
  if (job->cancel_by || (e.cancelled && !job->told_to_end_for)) {
    // "cancelled by USER" (said when the cancel was asked) over the supervisor's "cancelled".
    bool said_who = job->reason.rfind("cancelled by", 0) == 0;
    finish(e.id, JobState::Cancelled, said_who || e.reason.empty() ? job->reason : e.reason, out);
    return {};
  }
  if (job->told_to_end_for) {  // however it ended after being told to, as Slurm's TIMEOUT
    finish(e.id, JobState::Failed, *job->told_to_end_for, out);
    return {};
  }
  if (e.exit_code == 0 || (!e.exit_code && job->kind == JobKind::Interactive)) {
    // An interactive job whose end was not reported did run: done, with the reason saying so.
    finish(e.id, JobState::Done, e.reason, out);
    return {};
  }
  std::string why = !e.reason.empty() ? e.reason
                    : e.signal        ? fmt::format("killed by signal {}", *e.signal)
                                      : fmt::format("exit code {}", e.exit_code.value_or(-1));
  if (job->kind == JobKind::Batch && job->attempts <= job->retries) {
    job->state = JobState::Queued;
    job->reason = fmt::format("retry {} of {} after: {}", job->attempts, job->retries, why);
    out.push_back(Record{e.id, job->state, job->reason, job->attempts});
    enqueue(e.id, out);
    return {};
  }
  finish(e.id, JobState::Failed, why, out);
  return {};
}

Result<void> JobLifecycle::on(const AttemptNeverRan& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Running));
  if (job->cancel_by) {
    finish(e.id, JobState::Cancelled, job->reason, out);
    return {};
  }
  // Back to the queue as it was: the attempt is done again, under the same number.
  if (job->kind == JobKind::Batch && job->attempts > 0) job->attempts -= 1;
  job->state = JobState::Queued;
  out.push_back(Record{e.id, job->state, job->reason, job->attempts});
  enqueue(e.id, out);
  return {};
}

Result<void> JobLifecycle::on(const Cancel& e, Effects& out) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return fail("no job {} is queued, held or running", e.id);
  TrackedJob& job = it->second;
  changed_.push_back(e.id);
  if (job.state != JobState::Running && job.state != JobState::Suspended) {
    finish(e.id, JobState::Cancelled, fmt::format("cancelled by {}", e.by), out);
    return {};
  }
  // A suspended job's processes live, blocked: they are ended as a running job's are.
  if (job.in_queue) out.push_back(LeaveQueue{e.id});
  job.in_queue = false;
  // It ends cancelled however the attempt ends, even if it never ran.
  job.cancel_by = e.by;
  job.reason = fmt::format("cancelled by {}", e.by);
  out.push_back(SignalAttempt{e.id, SignalWhy::Cancel});
  return {};
}

Result<void> JobLifecycle::on(const Hold& e, Effects& out) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return fail("no job {} is queued, held or running", e.id);
  TrackedJob& job = it->second;
  if (job.state == JobState::Running) return fail("job {} is running: cancel it instead", e.id);
  if (job.state == JobState::Suspended) return fail("job {} is suspended: resume or cancel it instead", e.id);
  if (job.state == JobState::Held) return {};
  changed_.push_back(e.id);
  if (job.in_queue) out.push_back(LeaveQueue{e.id});
  job.in_queue = false;
  job.state = JobState::Held;
  job.reason = fmt::format("held by {}", e.by);
  out.push_back(Record{e.id, job.state, job.reason, job.attempts});
  return {};
}

Result<void> JobLifecycle::on(const Release& e, Effects& out) {
  auto it = jobs_.find(e.id);
  if (it == jobs_.end()) return fail("no job {} is queued, held or running", e.id);
  // As holding a held job does nothing, releasing a queued one does nothing: both ask for what is.
  if (it->second.state == JobState::Queued) return {};
  if (it->second.state != JobState::Held) return fail("job {} is {}, not held", e.id, to_string(it->second.state));
  changed_.push_back(e.id);
  it->second.state = JobState::Queued;
  it->second.reason.clear();
  out.push_back(Record{e.id, it->second.state, it->second.reason, it->second.attempts});
  enqueue(e.id, out);
  return {};
}

Result<void> JobLifecycle::on(const Drain&, Effects&) {
  drained_ = true;
  return {};
}

Result<void> JobLifecycle::on(const Resume&, Effects&) {
  drained_ = false;
  return {};
}

Result<void> JobLifecycle::on(const TimeLimitReached& e, Effects& out) {
  return tell_to_end(e.id, "time limit", SignalWhy::TimeLimit, out);
}

Result<void> JobLifecycle::on(const SliceOverrun& e, Effects& out) {
  return tell_to_end(e.id, e.why, SignalWhy::SliceOverrun, out);
}

Result<void> JobLifecycle::tell_to_end(JobId id, std::string why, SignalWhy signal_why, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, with_attempt(id));
  if (job->told_to_end_for) return fail("job {} has been told to end already", id);
  job->told_to_end_for = std::move(why);
  out.push_back(SignalAttempt{id, signal_why});
  return {};
}

Result<void> JobLifecycle::on(const Suspend& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Running));
  if (job->cancel_by || job->told_to_end_for) return fail("job {} is being ended", e.id);
  if (job->suspension) return fail("job {} is being suspended or resumed already ({})", e.id, to_string(job->suspension->phase()));
  if (e.pids.empty()) {
    return fail("no process of job {} holds GPU state yet: there is nothing to checkpoint, and once it started "
                "using its GPUs it would hold them unleased",
                e.id);
  }
  job->suspension = SuspensionSteps::suspend(e.pids);
  job->suspended_by = e.by;
  job->resume_when_free = e.resume_when_free;
  job->reason = fmt::format("being suspended by {}", e.by);
  out.push_back(Record{e.id, job->state, job->reason, job->attempts});
  follow(e.id, *job, job->suspension->first_call(), out);
  return {};
}

Result<void> JobLifecycle::on(const CheckpointDone& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, with_attempt(e.id));
  if (!job->suspension) return fail("job {} is not being suspended or resumed", e.id);
  // Told to end meanwhile: its processes are being ended, whatever state the driver left them in.
  if (job->cancel_by || job->told_to_end_for) return {};
  follow(e.id, *job, job->suspension->on_outcome(e.outcome), out);
  return {};
}

Result<void> JobLifecycle::on(const GpusLetGo& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Running));
  if (!job->suspension) return fail("job {} is not being suspended", e.id);
  if (e.problem) {
    TRY_ASSIGN(SuspensionMove undo, job->suspension->not_freed(*e.problem));
    follow(e.id, *job, undo, out);
    return {};
  }
  TRY(job->suspension->freed());
  job->state = JobState::Suspended;
  job->reason = fmt::format("suspended by {}", job->suspended_by);
  if (job->resume_when_free) job->reason += "; resumes when its GPUs are free";
  out.push_back(Record{e.id, job->state, job->reason, job->attempts});
  out.push_back(lifecycle::Suspended{e.id});
  if (job->resume_when_free) {
    job->in_queue = true;
    out.push_back(EnterQueue{e.id});
  }
  return {};
}

Result<void> JobLifecycle::on(const ResumeJob& e, Effects& out) {
  TRY_ASSIGN(TrackedJob * job, tracked(e.id, JobState::Suspended));
  if (job->suspension->phase() != SuspensionPhase::Suspended) return fail("job {} is being resumed already", e.id);
  if (job->in_queue) return {};  // as releasing a queued job: it asks for what is
  job->in_queue = true;
  job->reason = "waiting for its GPUs to resume";
  out.push_back(Record{e.id, job->state, job->reason, job->attempts});
  out.push_back(EnterQueue{e.id});
  return {};
}

void JobLifecycle::follow(JobId id, TrackedJob& job, const SuspensionMove& move, Effects& out) {
  switch (move.kind) {
    case SuspensionMove::Kind::Call:
      out.push_back(CallCheckpoint{id, move.call, move.pids});
      return;
    case SuspensionMove::Kind::Suspended:
      job.reason = fmt::format("being suspended by {}: checkpointed, its GPUs not yet seen free", job.suspended_by);
      out.push_back(Record{id, job.state, job.reason, job.attempts});
      return;
    case SuspensionMove::Kind::Undone:
      job.suspension.reset();
      job.reason = fmt::format("not suspended: {}", move.why);
      out.push_back(Record{id, job.state, job.reason, job.attempts});
      out.push_back(SuspendFailed{id, move.why});
      return;
    case SuspensionMove::Kind::Broken:
      out.push_back(SuspendFailed{id, move.why});
      (void)tell_to_end(id, move.why, SignalWhy::CheckpointFailed, out);
      return;
    case SuspensionMove::Kind::Resumed:
      job.suspension.reset();
      job.state = JobState::Running;
      job.reason.clear();
      out.push_back(Record{id, job.state, job.reason, job.attempts});
      out.push_back(lifecycle::Resumed{id});
      return;
  }
}

void JobLifecycle::enqueue(JobId id, Effects& out) {
  TrackedJob& job = jobs_.at(id);
  if (job.state != JobState::Queued || job.in_queue) return;
  changed_.push_back(id);
  for (JobId after : job.after) {
    const TrackedJob* waiting_for = find(after);
    auto ended = ended_now_.find(after);
    std::optional<JobState> state = waiting_for              ? std::optional(waiting_for->state)
                                    : ended != ended_now_.end() ? std::optional(ended->second)
                                                                : stored_state_(after);
    if (!state) {
      finish(id, JobState::Failed, fmt::format("job {}, which it runs after, cannot be found", after), out);
      return;
    }
    if (*state == JobState::Done) continue;
    if (is_finished(*state)) {
      finish(id, JobState::Failed, fmt::format("job {}, which it runs after, {}", after, to_string(*state)), out);
      return;
    }
    job.reason = fmt::format("waiting for job {}", after);
    auto& list = dependents_[after];
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
    return;
  }
  job.reason.clear();
  job.in_queue = true;
  out.push_back(EnterQueue{id});
}

void JobLifecycle::finish(JobId id, JobState state, std::string reason, Effects& out) {
  auto it = jobs_.find(id);
  if (it->second.in_queue) out.push_back(LeaveQueue{id});
  jobs_.erase(it);
  ended_now_[id] = state;
  out.push_back(Finished{id, state, std::move(reason)});
  auto dependents = dependents_.extract(id);
  if (dependents.empty()) return;
  for (JobId dependent : dependents.mapped()) {
    if (jobs_.count(dependent) > 0) enqueue(dependent, out);
  }
}

}  // namespace gpupool
