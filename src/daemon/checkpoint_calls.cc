#include "daemon/checkpoint_calls.h"

#include <utility>

#include <fmt/format.h>

namespace gpupool {
namespace {

CudaCheckpointStep cuda_step(CheckpointStep step) {
  switch (step) {
    case CheckpointStep::Lock: return CudaCheckpointStep::Lock;
    case CheckpointStep::Checkpoint: return CudaCheckpointStep::Checkpoint;
    case CheckpointStep::Restore: return CudaCheckpointStep::Restore;
    case CheckpointStep::Unlock: return CudaCheckpointStep::Unlock;
  }
  return CudaCheckpointStep::Lock;
}

}  // namespace

CheckpointOutcome checkpoint_outcome(const Result<CudaStepOutcome>& answer) {
  CheckpointOutcome outcome;
  if (!answer) {
    outcome.error = answer.error().message;
    return outcome;
  }
  for (const CudaPidOutcome& pid : answer->pids) {
    outcome.pids.push_back({pid.pid, pid.result, parse_process_checkpoint_state(pid.state), pid.seconds});
  }
  return outcome;
}

CheckpointCalls::CheckpointCalls(asio::io_context& io, CheckpointProgram program, Done done)
    : io_(io), program_(std::move(program)), done_(std::move(done)) {}

CheckpointCalls::~CheckpointCalls() {
  for (Worker& worker : workers_) worker.thread.join();
}

void CheckpointCalls::call(JobId id, CheckpointStep step, const std::vector<pid_t>& pids) {
  join_finished();
  std::lock_guard lock(mutex_);
  Worker& worker = workers_.emplace_back();
  worker.thread = std::thread([this, &worker, id, step, pids] {
    CheckpointOutcome outcome =
        checkpoint_outcome(run_checkpoint_step(program_, cuda_step(step), pids, kLockWait, kCallLimit));
    asio::post(io_, [this, id, step, outcome = std::move(outcome)]() mutable {
      // The driver's own time, beside what the job's owner sees end to end.
      fmt::print(stderr, "gpupoold: job {}: {} of {} process{}: {} in {:.2f} s\n", id, to_string(step),
                 outcome.pids.size(), outcome.pids.size() == 1 ? "" : "es",
                 outcome.failure().empty() ? "done" : outcome.failure(), outcome.seconds());
      done_(id, std::move(outcome));
    });
    std::lock_guard finished(mutex_);
    worker.finished = true;
  });
}

void CheckpointCalls::join_finished() {
  std::lock_guard lock(mutex_);
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (!it->finished) {
      ++it;
      continue;
    }
    it->thread.join();
    it = workers_.erase(it);
  }
}

}  // namespace gpupool
