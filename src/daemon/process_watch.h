// The ends of processes, in the event loop, through pidfds: each running job's (its supervisor,
// or an interactive job's client after a restart), and the process a daemon lives for
// (--end-with, docs/slurm.md).
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include <asio.hpp>

#include "base/result.h"
#include "jobs/job.h"

namespace gpupool {

class ProcessWatch {
 public:
  // `ended` is called with the job's id once its watched process has ended.
  ProcessWatch(asio::io_context& io, std::function<void(JobId)> ended);

  // Watches `pid` for job `id` (instead of what it watched before). A process that is gone
  // already counts as ended: `ended` comes from the event loop, not from here.
  void watch(JobId id, pid_t pid);
  void forget(JobId id);

  // Calls `ended` once when `pid` exits; an error when it cannot be watched (no such process).
  Result<void> watch_end_with(pid_t pid, std::function<void()> ended);

 private:
  void await(JobId id);

  asio::io_context& io_;
  std::function<void(JobId)> ended_;
  std::unordered_map<JobId, std::unique_ptr<asio::posix::stream_descriptor>> watchers_;
  std::optional<asio::posix::stream_descriptor> end_with_;
};

}  // namespace gpupool
