// Suspending and resuming a job's GPU processes through the CUDA driver's checkpoint API, one
// step at a time, by running gpupool-cuda-checkpoint (in lib/gpupool, os/host_files.h): a child
// process, so that a driver call that hangs is ended by the time limit, and the caller never
// loads libcuda. Synchronous: the daemon calls it from a worker thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "os/program.h"

namespace gpupool {

// The driver's calls, in its order: lock, checkpoint (GPU memory to host memory, the GPU
// released), then restore (back onto the GPU, still locked) and unlock. (The daemon's own steps
// are jobs/suspension.h's CheckpointStep, which this layer cannot see.)
enum class CudaCheckpointStep { Lock, Checkpoint, Restore, Unlock };

const char* to_string(CudaCheckpointStep step);  // "lock", ...: the helper's word for it

// Which libcuda the helper loads: the system's, or the simulated one (sim/open_backend.h).
struct CheckpointProgram {
  std::string library = "libcuda.so.1";
};

struct CudaPidOutcome {
  pid_t pid = 0;
  std::string result;  // "ok", or the driver's error: "CUDA_ERROR_ILLEGAL_STATE" (or "CUDA_ERROR_<n>")
  // After the call: "running", "locked", "checkpointed", "failed" (newer drivers also
  // "checkpointing", "restoring", others "state-<n>"); "unknown" when the driver cannot say.
  std::string state;
  double seconds = 0;  // the call's own time

  bool ok() const { return result == "ok"; }
};

// One step on some processes, in order: one outcome per process reached. The helper stops at
// the first that fails, so only the last can have failed, and those after it were not tried.
struct CudaStepOutcome {
  std::vector<CudaPidOutcome> pids;

  bool ok() const;
  // "pid 123: CUDA_ERROR_NOT_SUPPORTED (state locked)"; "" when ok.
  std::string failure() const;
};

// Runs one step on `pids` (at least one). An error only when the helper cannot run, outlives
// `timeout` (it is killed, and the processes stay wherever the driver left them), gives no
// answer that reads, or finds no usable driver or no checkpoint API (its one line says which); a
// step the driver refuses for a process is an outcome, not an error. `lock_timeout` (Lock only)
// is how long the driver may wait for the process's CUDA calls to stop, 0 for as long as they
// take; keep it below `timeout`.
Result<CudaStepOutcome> run_checkpoint_step(const CheckpointProgram& program, CudaCheckpointStep step,
                                            const std::vector<pid_t>& pids, std::chrono::milliseconds lock_timeout,
                                            std::chrono::milliseconds timeout);

// Each process's state, for the checks before a step: one outcome per process, each "ok" with
// its state, up to the first the driver cannot answer for (a process gone, or one without CUDA).
Result<CudaStepOutcome> read_checkpoint_states(const CheckpointProgram& program, const std::vector<pid_t>& pids,
                                               std::chrono::milliseconds timeout);

// --- pure, for the tests ---

// The helper's argument vector after its path.
std::vector<std::string> checkpoint_helper_arguments(const CheckpointProgram& program, std::string_view step,
                                                     const std::vector<pid_t>& pids,
                                                     std::chrono::milliseconds lock_timeout);

// Reads the helper's lines ("PID RESULT STATE SECONDS"): each must be the next of `pids`, and
// only the last may have failed.
Result<CudaStepOutcome> parse_checkpoint_output(std::string_view output, const std::vector<pid_t>& pids);

// The helper's exit status and output, as run_checkpoint_step answers: exit 0 with every pid
// done, exit 1 with a failed last line; anything else an error with its stderr line.
Result<CudaStepOutcome> checkpoint_answer(const ProgramOutcome& helper, const std::vector<pid_t>& pids);

}  // namespace gpupool
