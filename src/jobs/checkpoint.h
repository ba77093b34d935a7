// The vocabulary of the CUDA driver's checkpoint API (docs/suspend.md), shared by the code that
// runs the calls (gpu/process_checkpoint) and the logic that decides them (jobs/suspension): one
// definition of a step, a process's state and a call's outcome on both sides of the line.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

// The driver's calls, in its order: lock, checkpoint (GPU memory to host memory, the GPU
// released), then restore (back onto the GPU, still locked) and unlock. State only reads each
// process's state: a daemon that stopped during a call reads where the driver left it.
enum class CheckpointStep { State, Lock, Checkpoint, Restore, Unlock };
const char* to_string(CheckpointStep step);  // "lock", ...: gpupool-cuda-checkpoint's word for it

// A process's checkpoint state as the driver reports it (cuCheckpointProcessGetState).
// Checkpointing and restoring are newer drivers' passing states.
enum class ProcessCheckpointState { Running, Locked, Checkpointed, Failed, Checkpointing, Restoring, Unknown };
const char* to_string(ProcessCheckpointState state);
ProcessCheckpointState parse_process_checkpoint_state(std::string_view text);  // Unknown for anything else

// What one call on a list of processes did: the processes it reached, in order, each with the
// driver's answer and its state after the call. It stops at the first failure.
struct CheckpointPidOutcome {
  pid_t pid = 0;
  std::string result;  // "ok", or the driver's error ("CUDA_ERROR_NOT_SUPPORTED")
  ProcessCheckpointState state = ProcessCheckpointState::Unknown;
  double seconds = 0;  // the call's own time
  friend bool operator==(const CheckpointPidOutcome&, const CheckpointPidOutcome&) = default;
};
struct CheckpointOutcome {
  std::vector<CheckpointPidOutcome> pids;
  // Set when the call could not be made at all ("the CUDA driver has no checkpoint API", the
  // helper timed out): no process was reached, as far as anyone knows.
  std::optional<std::string> error = std::nullopt;

  bool ok(size_t expected) const;  // every one of `expected` processes reached, and each "ok"
  // "pid 123: CUDA_ERROR_NOT_SUPPORTED", or the error; empty when it went well.
  std::string failure() const;
  double seconds() const;  // of every call together
};

}  // namespace gpupool
