// The checkpoint calls of `gpupool suspend` and `resume` (docs/suspend.md), each run on a thread
// of its own through gpupool-cuda-checkpoint (gpu/process_checkpoint.h): a call takes seconds to
// a minute (about 1.8 GiB/s to host memory on an H100), which the event loop must not wait for.
// Each outcome is handed back on the event loop.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <asio.hpp>

#include "gpu/process_checkpoint.h"
#include "jobs/job.h"
#include "jobs/suspension.h"

namespace gpupool {

class CheckpointCalls {
 public:
  using Done = std::function<void(JobId id, CheckpointOutcome outcome)>;
  // How long one call may take before the helper is killed: a checkpoint of a whole H200's
  // memory takes over a minute. Lock waits at most kLockWait for the process's CUDA work to stop.
  static constexpr std::chrono::seconds kCallLimit{600};
  static constexpr std::chrono::seconds kLockWait{30};

  CheckpointCalls(asio::io_context& io, CheckpointProgram program, Done done);
  // Waits for the calls under way: a process left half checkpointed is worse than a slow stop.
  ~CheckpointCalls();
  CheckpointCalls(const CheckpointCalls&) = delete;
  CheckpointCalls& operator=(const CheckpointCalls&) = delete;

  void call(JobId id, CheckpointStep step, const std::vector<pid_t>& pids);
  // Removes the lock files (CheckpointProgram::lock_directory) of processes that have ended and
  // that no helper holds: every process ever suspended gets one.
  void forget_ended_processes();

 private:
  void join_finished();

  asio::io_context& io_;
  CheckpointProgram program_;
  Done done_;
  std::mutex mutex_;
  struct Worker {
    std::thread thread;
    bool finished = false;
  };
  std::list<Worker> workers_;  // a list: a worker's flag stays where its thread wrote it
};

}  // namespace gpupool
