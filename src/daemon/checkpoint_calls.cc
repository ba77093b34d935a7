#include "daemon/checkpoint_calls.h"

#include <charconv>
#include <utility>

#include <fmt/format.h>

#include "os/file_lock.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {
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
    Result<CheckpointOutcome> answer = run_checkpoint_step(program_, step, pids, kLockWait, kCallLimit);
    CheckpointOutcome outcome = answer ? std::move(*answer) : CheckpointOutcome{.pids = {}, .error = answer.error().message};
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

void CheckpointCalls::forget_ended_processes() {
  if (program_.lock_directory.empty()) return;
  Result<std::vector<std::string>> names = directory_entries(program_.lock_directory);
  if (!names) return fmt::print(stderr, "gpupoold: {}\n", names.error().message);
  for (const std::string& name : *names) {
    pid_t pid = 0;
    auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (error != std::errc() || end != name.data() + name.size() || process_exists(pid)) continue;
    Result<bool> removed = remove_unless_locked(program_.lock_directory + "/" + name);
    if (!removed) fmt::print(stderr, "gpupoold: {}\n", removed.error().message);
  }
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
