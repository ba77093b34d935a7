#include "jobs/suspension.h"

#include <fmt/format.h>

namespace gpupool {

const char* to_string(SuspensionPhase phase) {
  switch (phase) {
    case SuspensionPhase::Locking: return "locking";
    case SuspensionPhase::Checkpointing: return "checkpointing";
    case SuspensionPhase::Checkpointed: return "checkpointed";
    case SuspensionPhase::Suspended: return "suspended";
    case SuspensionPhase::Restoring: return "restoring";
    case SuspensionPhase::Unlocking: return "unlocking";
    case SuspensionPhase::Undoing: return "undoing";
    case SuspensionPhase::Reading: return "reading its state";
  }
  return "unknown";
}

SuspensionSteps::SuspensionSteps(SuspensionPhase phase, std::vector<pid_t> pids, ProcessCheckpointState state)
    : phase_(phase), pids_(std::move(pids)), called_(pids_.size()) {
  for (pid_t pid : pids_) states_[pid] = state;
}

SuspensionSteps SuspensionSteps::suspend(std::vector<pid_t> pids) {
  return SuspensionSteps(SuspensionPhase::Locking, std::move(pids), ProcessCheckpointState::Running);
}

SuspensionSteps SuspensionSteps::suspended(std::vector<pid_t> pids) {
  return SuspensionSteps(SuspensionPhase::Suspended, std::move(pids), ProcessCheckpointState::Checkpointed);
}

SuspensionSteps SuspensionSteps::taken_up(std::vector<pid_t> pids, bool resuming) {
  SuspensionSteps steps(SuspensionPhase::Reading, std::move(pids), ProcessCheckpointState::Unknown);
  steps.resuming_ = resuming;
  steps.called_step_ = CheckpointStep::State;
  return steps;
}

SuspensionMove SuspensionSteps::first_call() const {
  CheckpointStep step = phase_ == SuspensionPhase::Restoring ? CheckpointStep::Restore
                        : phase_ == SuspensionPhase::Reading ? CheckpointStep::State
                                                             : CheckpointStep::Lock;
  return SuspensionMove{SuspensionMove::Kind::Call, step, pids_, ""};
}

SuspensionMove SuspensionSteps::call(CheckpointStep step, std::vector<pid_t> pids) {
  called_ = pids.size();
  called_step_ = step;
  if (pids.empty()) {  // the states the driver reported leave none to call on: nothing to trust
    return SuspensionMove{SuspensionMove::Kind::Broken, step, {},
                          fmt::format("no process of the job is in the state to {} (the driver said otherwise)",
                                      to_string(step))};
  }
  return SuspensionMove{SuspensionMove::Kind::Call, step, std::move(pids), ""};
}

Result<SuspensionMove> SuspensionSteps::resume() {
  if (phase_ != SuspensionPhase::Suspended) return fail("it is {}, not suspended", to_string(phase_));
  phase_ = SuspensionPhase::Restoring;
  called_ = pids_.size();
  called_step_ = CheckpointStep::Restore;
  return first_call();
}

void SuspensionSteps::note(const CheckpointOutcome& outcome) {
  // A state the driver did not report is taken to be what the call leaves it in when it went
  // well, and what it was when it was refused (a refused call changes nothing).
  for (const CheckpointPidOutcome& reached : outcome.pids) {
    if (states_.count(reached.pid) == 0) continue;
    if (reached.state != ProcessCheckpointState::Unknown) {
      states_[reached.pid] = reached.state;
    } else if (reached.result == "ok" && called_step_ != CheckpointStep::State) {
      states_[reached.pid] = called_step_ == CheckpointStep::Lock         ? ProcessCheckpointState::Locked
                             : called_step_ == CheckpointStep::Checkpoint ? ProcessCheckpointState::Checkpointed
                             : called_step_ == CheckpointStep::Restore    ? ProcessCheckpointState::Locked
                                                                          : ProcessCheckpointState::Running;
    }
  }
}

std::vector<pid_t> SuspensionSteps::in_state(ProcessCheckpointState state) const {
  std::vector<pid_t> found;
  for (pid_t pid : pids_) {
    if (states_.at(pid) == state) found.push_back(pid);
  }
  return found;
}

SuspensionMove SuspensionSteps::on_outcome(const CheckpointOutcome& outcome) {
  note(outcome);
  const bool ok = outcome.ok(called_);
  switch (phase_) {
    case SuspensionPhase::Locking:
      if (ok) {
        // All of them, unless a restarted daemon found some checkpointed already.
        phase_ = SuspensionPhase::Checkpointing;
        return call(CheckpointStep::Checkpoint, in_state(ProcessCheckpointState::Locked));
      }
      failure_ = fmt::format("lock failed: {}", outcome.failure());
      phase_ = SuspensionPhase::Undoing;
      return undo_move();
    case SuspensionPhase::Checkpointing:
      if (ok) {
        phase_ = SuspensionPhase::Checkpointed;
        return SuspensionMove{SuspensionMove::Kind::Suspended, CheckpointStep::Checkpoint, {}, ""};
      }
      failure_ = fmt::format("checkpoint failed: {}", outcome.failure());
      phase_ = SuspensionPhase::Undoing;
      return undo_move();
    case SuspensionPhase::Undoing:
      if (!ok) {
        return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::Lock, {},
                              fmt::format("{}, and undoing it failed: {}", failure_, outcome.failure())};
      }
      return undo_move();
    case SuspensionPhase::Restoring:
      if (ok) {
        phase_ = SuspensionPhase::Unlocking;
        return call(CheckpointStep::Unlock, in_state(ProcessCheckpointState::Locked));
      }
      return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::Restore, {},
                            fmt::format("restore failed: {}", outcome.failure())};
    case SuspensionPhase::Unlocking:
      if (ok) return SuspensionMove{SuspensionMove::Kind::Resumed, CheckpointStep::Unlock, {}, ""};
      return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::Unlock, {},
                            fmt::format("unlock failed: {}", outcome.failure())};
    case SuspensionPhase::Reading:
      if (ok) return carry_on();
      return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::State, {},
                            fmt::format("the daemon stopped during its {}, and its state cannot be read: {}",
                                        resuming_ ? "resume" : "suspend", outcome.failure())};
    case SuspensionPhase::Checkpointed:
    case SuspensionPhase::Suspended:
      break;
  }
  return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::Lock, {},
                        fmt::format("a checkpoint call ended while {}", to_string(phase_))};
}

SuspensionMove SuspensionSteps::carry_on() {
  if (std::optional<pid_t> pid = astray()) {
    return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::State, {},
                          fmt::format("the daemon stopped during its {}, and pid {} is left {}",
                                      resuming_ ? "resume" : "suspend", *pid, to_string(states_.at(*pid)))};
  }
  auto running = in_state(ProcessCheckpointState::Running);
  auto locked = in_state(ProcessCheckpointState::Locked);
  auto checkpointed = in_state(ProcessCheckpointState::Checkpointed);
  if (resuming_) {
    if (!checkpointed.empty()) {
      phase_ = SuspensionPhase::Restoring;
      return call(CheckpointStep::Restore, checkpointed);
    }
    phase_ = SuspensionPhase::Unlocking;
    if (!locked.empty()) return call(CheckpointStep::Unlock, locked);
    return SuspensionMove{SuspensionMove::Kind::Resumed, CheckpointStep::Unlock, {}, ""};
  }
  if (!running.empty()) {
    phase_ = SuspensionPhase::Locking;
    return call(CheckpointStep::Lock, running);
  }
  if (!locked.empty()) {
    phase_ = SuspensionPhase::Checkpointing;
    return call(CheckpointStep::Checkpoint, locked);
  }
  phase_ = SuspensionPhase::Checkpointed;
  return SuspensionMove{SuspensionMove::Kind::Suspended, CheckpointStep::Checkpoint, {}, ""};
}

std::optional<pid_t> SuspensionSteps::astray() const {
  for (pid_t pid : pids_) {
    ProcessCheckpointState state = states_.at(pid);
    if (state != ProcessCheckpointState::Running && state != ProcessCheckpointState::Locked &&
        state != ProcessCheckpointState::Checkpointed) {
      return pid;
    }
  }
  return std::nullopt;
}

SuspensionMove SuspensionSteps::undo_move() {
  // Restore before unlock: a checkpointed process must get its GPU memory back before it may run.
  if (auto checkpointed = in_state(ProcessCheckpointState::Checkpointed); !checkpointed.empty()) {
    return call(CheckpointStep::Restore, checkpointed);
  }
  if (auto locked = in_state(ProcessCheckpointState::Locked); !locked.empty()) {
    return call(CheckpointStep::Unlock, locked);
  }
  // A process the driver reports failed (or in a state it did not say) cannot be trusted to run on.
  for (pid_t pid : pids_) {
    if (states_.at(pid) != ProcessCheckpointState::Running) {
      return SuspensionMove{SuspensionMove::Kind::Broken, CheckpointStep::Lock, {},
                            fmt::format("{}, and pid {} is left {}", failure_, pid, to_string(states_.at(pid)))};
    }
  }
  return SuspensionMove{SuspensionMove::Kind::Undone, CheckpointStep::Lock, {}, failure_};
}

Result<SuspensionMove> SuspensionSteps::not_freed(std::string why) {
  if (phase_ != SuspensionPhase::Checkpointed) return fail("it is {}, not checkpointed", to_string(phase_));
  failure_ = std::move(why);
  phase_ = SuspensionPhase::Undoing;
  return undo_move();
}

Result<void> SuspensionSteps::freed() {
  if (phase_ != SuspensionPhase::Checkpointed) return fail("it is {}, not checkpointed", to_string(phase_));
  phase_ = SuspensionPhase::Suspended;
  return {};
}

}  // namespace gpupool
