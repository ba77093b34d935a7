// The life of a queued job as pure logic (docs/daemon.md, "The life of a job"): events in,
// effects out, no processes, sockets, clocks or files. The daemon is its driver: it turns
// clients' messages, attempts' exits and its own decisions into events, and carries out the
// effects (queue for GPUs, start or signal an attempt, store the job, answer those waiting).
//
// The rules it owns: a held job waits for its release; a job whose --after jobs are not all
// done waits for them, and fails when one of them did not end done; a failed batch attempt runs
// again while --retries allow; a cancel wins over however the attempt ends, including an attempt
// that never ran; a job ends exactly once; a drained queue starts nothing; a suspended job holds
// no GPU, and is resumed only on its own GPUs, through the scheduler like any start.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"
#include "jobs/suspension.h"

namespace gpupool {

namespace lifecycle {

// --- Events ---------------------------------------------------------------------------------

// A new job, stored: queued, or held from the start by `submit --hold`.
struct Submitted {
  JobId id = 0;
  JobKind kind = JobKind::Batch;
  unsigned retries = 0;
  std::vector<JobId> after;
  std::optional<std::string> held_by;
};
// An unfinished job a previous daemon left in the store, taken up at start. A running one keeps
// running (its process is watched); a queued one is queued again.
struct Adopted {
  JobId id = 0;
  JobKind kind = JobKind::Batch;
  unsigned retries = 0;
  std::vector<JobId> after;
  JobState state = JobState::Queued;
  unsigned attempts = 0;
  std::string reason;
  // A suspended job's checkpoint (its processes, who suspended it, whether a resume was asked).
  std::optional<Suspension> suspension = std::nullopt;
};
// The scheduler refused a queued job for good (it can never run here).
struct Refused {
  JobId id = 0;
  std::string why;
};
// The scheduler gave a queued job its GPUs, and their leases are held.
struct Granted {
  JobId id = 0;
  std::vector<unsigned> gpus;
};
// What should have run the attempt could not be had (no supervisor): no attempt began.
struct StartFailed {
  JobId id = 0;
  std::string why;
};
// An attempt (or an interactive job's program) ended.
struct AttemptExited {
  JobId id = 0;
  std::optional<int> exit_code;  // nullopt: unknown, or the program never ran
  std::optional<int> signal;
  std::string reason;            // the supervisor's or the driver's words, may be empty
  bool cancelled = false;        // the attempt says it ended by a cancel
};
// The attempt's record proves it never ran (its supervisor ended before starting it).
struct AttemptNeverRan {
  JobId id = 0;
};
struct Cancel {
  JobId id = 0;
  std::string by;  // "alice", or what ended it ("its client, which disconnected")
};
struct Hold {
  JobId id = 0;
  std::string by;
};
struct Release {
  JobId id = 0;
};
struct Drain {};
struct Resume {};
struct TimeLimitReached {
  JobId id = 0;
};
// The slice watchdog saw the job's processes use more GPU memory than its slice, under
// slice_overrun = "stop": it ends failed, with `why` ("used 31.2 GiB of its 20 GiB slice").
struct SliceOverrun {
  JobId id = 0;
  std::string why;
};

// `gpupool suspend`: checkpoint the running batch job's processes that hold GPU state (`pids`, found
// on its GPUs by the daemon) and let its GPUs go.
struct Suspend {
  JobId id = 0;
  std::string by;
  std::vector<pid_t> pids;
  // Queued to resume as soon as it is suspended (`drain --suspend`): it runs again once its GPUs
  // are free (and no longer drained).
  bool resume_when_free = false;
};
// A checkpoint call made for the job (a CallCheckpoint effect) ended.
struct CheckpointDone {
  JobId id = 0;
  CheckpointOutcome outcome;
};
// After the checkpoint: a sample showed the job's processes gone from its GPUs and its leases
// were let go (`problem` nullopt), or one of them did not happen (`problem` says which).
struct GpusLetGo {
  JobId id = 0;
  std::optional<std::string> problem;
};
// `gpupool resume JOB`: the suspended job waits for its GPUs, then is restored on them.
struct ResumeJob {
  JobId id = 0;
};

using Event = std::variant<Submitted, Adopted, Refused, Granted, StartFailed, AttemptExited, AttemptNeverRan,
                           Cancel, Hold, Release, Drain, Resume, TimeLimitReached, SliceOverrun, Suspend,
                           CheckpointDone, GpusLetGo, ResumeJob>;

// --- Effects --------------------------------------------------------------------------------

// Put the job in the scheduler's queue; take it out again.
struct EnterQueue {
  JobId id = 0;
};
struct LeaveQueue {
  JobId id = 0;
};
// Start attempt `attempt` of the job on these GPUs (a batch job's supervisor, an interactive
// job's client).
struct StartAttempt {
  JobId id = 0;
  unsigned attempt = 0;
  std::vector<unsigned> gpus;
};
// The attempt the job is in should end: SIGTERM, the grace period, SIGKILL.
enum class SignalWhy { Cancel, TimeLimit, SliceOverrun, CheckpointFailed };
struct SignalAttempt {
  JobId id = 0;
  SignalWhy why = SignalWhy::Cancel;
};
// The job's state, reason or attempt count changed in a way that must be stored: as they are
// here (the reason a job waits with may change again before the event is done, unstored).
struct Record {
  JobId id = 0;
  JobState state = JobState::Queued;
  std::string reason;
  unsigned attempts = 0;
};
// The job has ended, once and for all: store it, answer whoever waits for it, forget it.
struct Finished {
  JobId id = 0;
  JobState state = JobState::Done;
  std::string reason;
};

// Make one checkpoint call on the job's processes (gpupool-cuda-checkpoint); its end comes back
// as CheckpointDone.
struct CallCheckpoint {
  JobId id = 0;
  CheckpointStep step = CheckpointStep::Lock;
  std::vector<pid_t> pids;
};
// The job's processes are checkpointed and its GPUs let go: the scheduler has its GPUs back, and
// keeps its place for its resumption.
struct Suspended {
  JobId id = 0;
};
// A suspend that did not happen (undone: the job runs on), or a suspension gone wrong (the job
// is told to end): `why`, for those told.
struct SuspendFailed {
  JobId id = 0;
  std::string why;
};
// The suspended job's processes are restored on its GPUs and run again.
struct Resumed {
  JobId id = 0;
};

using Effect = std::variant<EnterQueue, LeaveQueue, StartAttempt, SignalAttempt, Record, Finished, CallCheckpoint,
                            Suspended, SuspendFailed, Resumed>;

}  // namespace lifecycle

// What the lifecycle knows of a job that has not ended.
struct TrackedJob {
  JobKind kind = JobKind::Batch;
  JobState state = JobState::Queued;
  std::string reason;  // why it waits, or "retry N of M after: ...", or "cancelled by ..."
  unsigned attempts = 0;
  unsigned retries = 0;
  std::vector<JobId> after;
  bool in_queue = false;                 // the scheduler has it
  std::optional<std::string> cancel_by;  // cancelled while running: ends Cancelled however it ends
  // Its attempt was told to end at its time limit ("time limit") or past its slice: it ends
  // failed with this reason however it ends.
  std::optional<std::string> told_to_end_for;
  // Being suspended, suspended, or being resumed; by whom.
  std::optional<SuspensionSteps> suspension;
  std::string suspended_by;
  bool resume_when_free = false;
};

class JobLifecycle {
 public:
  // The state of a job the lifecycle does not track (ended, or never seen), for --after:
  // nullopt when there is no such job.
  using StoredState = std::function<std::optional<JobState>(JobId)>;
  explicit JobLifecycle(StoredState stored_state);

  // The effects of one event, in the order they are to be carried out. An error (nothing
  // changed) is a refusal for whoever asked: "job 3 is not held".
  Result<std::vector<lifecycle::Effect>> handle(const lifecycle::Event& event);

  const TrackedJob* find(JobId id) const;
  // The jobs whose state, reason or attempts the last event may have changed (those it ended
  // aside: their Finished effects say how they ended).
  const std::vector<JobId>& changed() const { return changed_; }
  const std::map<JobId, TrackedJob>& jobs() const { return jobs_; }
  // Drained: no job is granted GPUs until resumed.
  bool drained() const { return drained_; }

 private:
  using Effects = std::vector<lifecycle::Effect>;
  Result<void> on(const lifecycle::Submitted& e, Effects& out);
  Result<void> on(const lifecycle::Adopted& e, Effects& out);
  Result<void> on(const lifecycle::Refused& e, Effects& out);
  Result<void> on(const lifecycle::Granted& e, Effects& out);
  Result<void> on(const lifecycle::StartFailed& e, Effects& out);
  Result<void> on(const lifecycle::AttemptExited& e, Effects& out);
  Result<void> on(const lifecycle::AttemptNeverRan& e, Effects& out);
  Result<void> on(const lifecycle::Cancel& e, Effects& out);
  Result<void> on(const lifecycle::Hold& e, Effects& out);
  Result<void> on(const lifecycle::Release& e, Effects& out);
  Result<void> on(const lifecycle::Drain& e, Effects& out);
  Result<void> on(const lifecycle::Resume& e, Effects& out);
  Result<void> on(const lifecycle::TimeLimitReached& e, Effects& out);
  Result<void> on(const lifecycle::SliceOverrun& e, Effects& out);
  Result<void> on(const lifecycle::Suspend& e, Effects& out);
  Result<void> on(const lifecycle::CheckpointDone& e, Effects& out);
  Result<void> on(const lifecycle::GpusLetGo& e, Effects& out);
  Result<void> on(const lifecycle::ResumeJob& e, Effects& out);
  // Carries out what the suspension's steps decided.
  void follow(JobId id, TrackedJob& job, const SuspensionMove& move, Effects& out);
  Result<void> tell_to_end(JobId id, std::string why, lifecycle::SignalWhy signal_why, Effects& out);

  Result<TrackedJob*> tracked(JobId id, JobState expected);
  // A job whose attempt lives: running, or suspended.
  Result<TrackedJob*> with_attempt(JobId id);
  // Queues the job for GPUs once every job it runs after is done; fails it when one cannot be.
  void enqueue(JobId id, Effects& out);
  void finish(JobId id, JobState state, std::string reason, Effects& out);

  StoredState stored_state_;
  std::map<JobId, TrackedJob> jobs_;
  std::map<JobId, std::vector<JobId>> dependents_;  // job → jobs waiting for it
  // Jobs ended by the event being handled: the store has their end only once the effects are
  // carried out, and their dependents are decided before that.
  std::map<JobId, JobState> ended_now_;
  std::vector<JobId> changed_;
  bool drained_ = false;
};

}  // namespace gpupool
