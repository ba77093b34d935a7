// The steps of suspending and resuming a job's GPU processes through the CUDA driver's
// checkpoint API (docs/suspend.md), as pure logic: the outcome of each call in, the next call
// out. No driver, no process: the daemon runs the calls (gpupool-cuda-checkpoint) and hands
// their outcomes here, so every failure path is tested without a GPU (suspension_test.cc).
//
// Suspending: lock every process (each then blocks at its next CUDA call), then checkpoint every
// one (its GPU memory goes to host memory and its GPU is released). Resuming: restore every one,
// then unlock it. A failure while suspending is undone (restore what was checkpointed, unlock
// what was locked) so the job runs on as before; a failure that cannot be undone, or one while
// resuming, leaves processes that cannot go on, and the job is to be ended.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/checkpoint.h"

namespace gpupool {

enum class SuspensionPhase {
  Locking,        // suspend: lock calls under way
  Checkpointing,  // suspend: checkpoint calls under way
  Checkpointed,   // every process checkpointed; its GPUs are let go once a sample shows them free
  Suspended,      // holds no GPU
  Restoring,      // resume: restore calls under way (its GPUs are held again)
  Unlocking,      // resume: unlock calls under way
  Undoing,        // a suspend that failed, being undone
  Reading,        // a restarted daemon reads where the driver left a suspend or resume it began
};
const char* to_string(SuspensionPhase phase);

// What to do after an outcome.
struct SuspensionMove {
  enum class Kind {
    Call,       // make `call` on `pids`
    Suspended,  // every process checkpointed: confirm the GPUs are free, then let them go
    Resumed,    // every process restored and unlocked: the job runs again
    Undone,     // the failed suspend is undone: the job runs on as before, `why` it was not suspended
    Broken,     // processes left unable to go on: the job is to be ended, `why`
  };
  Kind kind = Kind::Call;
  CheckpointStep call = CheckpointStep::Lock;
  std::vector<pid_t> pids;
  std::string why;
};

// One job's suspension, from the first lock to its resumption.
class SuspensionSteps {
 public:
  // A suspend of these processes, all running: the first move locks them.
  static SuspensionSteps suspend(std::vector<pid_t> pids);
  // A job found suspended (a restarted daemon): the processes checkpointed.
  static SuspensionSteps suspended(std::vector<pid_t> pids);
  // A suspend (or, `resuming`, a resume) that a daemon began and stopped during: the first move
  // reads each process's state; from there the suspend or resume goes on where it was.
  static SuspensionSteps taken_up(std::vector<pid_t> pids, bool resuming);

  SuspensionPhase phase() const { return phase_; }
  const std::vector<pid_t>& pids() const { return pids_; }
  // The call that starts the phase: lock (after suspend()), restore (after resume()) or state
  // (after taken_up()).
  SuspensionMove first_call() const;
  // Resuming a suspended job: its GPUs are held again; the first move restores the processes.
  Result<SuspensionMove> resume();
  // The outcome of the call last asked for.
  SuspensionMove on_outcome(const CheckpointOutcome& outcome);
  // The GPUs did not show the checkpointed processes gone (`why`): the suspend is undone.
  Result<SuspensionMove> not_freed(std::string why);
  // The GPUs showed them gone, and were let go.
  Result<void> freed();

 private:
  SuspensionSteps(SuspensionPhase phase, std::vector<pid_t> pids, ProcessCheckpointState state);

  // After the states were read: the call that carries the suspend (or resume) on from them.
  SuspensionMove carry_on();
  // A process in none of the states a suspend or resume passes through; nullopt if none is.
  std::optional<pid_t> astray() const;
  // Records the states the outcome reports.
  void note(const CheckpointOutcome& outcome);
  // The next call of an undo, or its end.
  SuspensionMove undo_move();
  std::vector<pid_t> in_state(ProcessCheckpointState state) const;
  // A call on `pids`, whose outcome is complete when it reached them all.
  SuspensionMove call(CheckpointStep step, std::vector<pid_t> pids);

  SuspensionPhase phase_;
  std::vector<pid_t> pids_;
  std::map<pid_t, ProcessCheckpointState> states_;
  std::string failure_;  // what an undo is undoing
  bool resuming_ = false;  // Reading: which way it was going
  size_t called_ = 0;    // how many processes the call under way was for
  CheckpointStep called_step_ = CheckpointStep::Lock;  // and which call it is
};

}  // namespace gpupool
