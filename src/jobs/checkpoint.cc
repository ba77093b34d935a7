#include "jobs/checkpoint.h"

#include <fmt/format.h>

namespace gpupool {

const char* to_string(CheckpointStep step) {
  switch (step) {
    case CheckpointStep::State: return "state";
    case CheckpointStep::Lock: return "lock";
    case CheckpointStep::Checkpoint: return "checkpoint";
    case CheckpointStep::Restore: return "restore";
    case CheckpointStep::Unlock: return "unlock";
  }
  return "unknown";
}

const char* to_string(ProcessCheckpointState state) {
  switch (state) {
    case ProcessCheckpointState::Running: return "running";
    case ProcessCheckpointState::Locked: return "locked";
    case ProcessCheckpointState::Checkpointed: return "checkpointed";
    case ProcessCheckpointState::Failed: return "failed";
    case ProcessCheckpointState::Checkpointing: return "checkpointing";
    case ProcessCheckpointState::Restoring: return "restoring";
    case ProcessCheckpointState::Unknown: return "unknown";
  }
  return "unknown";
}

ProcessCheckpointState parse_process_checkpoint_state(std::string_view text) {
  for (auto state : {ProcessCheckpointState::Running, ProcessCheckpointState::Locked,
                     ProcessCheckpointState::Checkpointed, ProcessCheckpointState::Failed,
                     ProcessCheckpointState::Checkpointing, ProcessCheckpointState::Restoring}) {
    if (text == to_string(state)) return state;
  }
  return ProcessCheckpointState::Unknown;
}

bool CheckpointOutcome::ok(size_t expected) const {
  if (error || pids.size() != expected) return false;
  for (const CheckpointPidOutcome& pid : pids) {
    if (pid.result != "ok") return false;
  }
  return true;
}

std::string CheckpointOutcome::failure() const {
  if (error) return *error;
  for (const CheckpointPidOutcome& pid : pids) {
    if (pid.result != "ok") return fmt::format("pid {}: {}", pid.pid, pid.result);
  }
  return "";
}

double CheckpointOutcome::seconds() const {
  double total = 0;
  for (const CheckpointPidOutcome& pid : pids) total += pid.seconds;
  return total;
}

}  // namespace gpupool
