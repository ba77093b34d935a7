// Suspending and resuming a job's GPU processes through the CUDA driver's checkpoint API, one
// step at a time, by running gpupool-cuda-checkpoint (in lib/gpupool, os/host_files.h): a child
// process, so that a driver call that hangs is ended by the time limit, and the caller never
// loads libcuda. Synchronous: the daemon calls it from a worker thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/checkpoint.h"
#include "os/program.h"

namespace gpupool {

// Which libcuda the helper loads: the system's, or the simulated one (sim/open_backend.h).
struct CheckpointProgram {
  std::string library = "libcuda.so.1";
  // Where the helper locks a file per process for the length of its call ("" for none): a call
  // waits for one that a daemon killed mid-call left running on the same process.
  std::string lock_directory = "";
};

// Runs one step on `pids` (at least one). An error only when the helper cannot run, outlives
// `timeout` (it is killed, and the processes stay wherever the driver left them), gives no
// answer that reads, or finds no usable driver or no checkpoint API (its one line says which); a
// step the driver refuses for a process is an outcome, not an error. `lock_timeout` (Lock only)
// is how long the driver may wait for the process's CUDA calls to stop, 0 for as long as they
// take; keep it below `timeout`. The State step answers each process's state, up to the first the
// driver cannot answer for (a process gone, or one without CUDA).
Result<CheckpointOutcome> run_checkpoint_step(const CheckpointProgram& program, CheckpointStep step,
                                              const std::vector<pid_t>& pids, std::chrono::milliseconds lock_timeout,
                                              std::chrono::milliseconds timeout);

// --- pure, for the tests ---

// The helper's argument vector after its path.
std::vector<std::string> checkpoint_helper_arguments(const CheckpointProgram& program, CheckpointStep step,
                                                     const std::vector<pid_t>& pids,
                                                     std::chrono::milliseconds lock_timeout);

// Reads the helper's lines ("PID RESULT STATE SECONDS"): each must be the next of `pids`, and
// only the last may have failed.
Result<CheckpointOutcome> parse_checkpoint_output(std::string_view output, const std::vector<pid_t>& pids);

// The helper's exit status and output, as run_checkpoint_step answers: exit 0 with every pid
// done, exit 1 with a failed last line; anything else an error with its stderr line.
Result<CheckpointOutcome> checkpoint_answer(const ProgramOutcome& helper, const std::vector<pid_t>& pids);

}  // namespace gpupool
