// Running several children as one job, all or nothing: each in its own process
// group, its output relayed line by line with a prefix, and every one of them
// stopped as soon as one fails or we are told to stop.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "os/child_process.h"

namespace gpupool {

struct GroupChild {
  ChildSpec spec;      // its output descriptors and process group are set by the group
  std::string prefix;  // put before each of its output lines, e.g. "[rank 3] "
};

struct GroupOptions {
  std::chrono::milliseconds grace{10000};  // between SIGTERM and SIGKILL when stopping
  std::optional<std::chrono::milliseconds> time_limit;  // the group is stopped once it has run this long
  int stdout_fd = STDOUT_FILENO;           // where the children's prefixed stdout lines go
  int stderr_fd = STDERR_FILENO;
  // Called once every child has started, with their pids in the order given.
  std::function<void(const std::vector<pid_t>&)> on_started;
};

struct GroupOutcome {
  int exit_code = 0;                   // 0, the failed child's code, or 128 + the signal to us
  std::optional<size_t> failed_child;  // the child whose failure stopped the group
  std::optional<int> failed_signal;    // the signal that killed it, when one did
  std::optional<int> signal;           // the SIGINT, SIGTERM or SIGHUP to us that stopped it
  size_t stopped = 0;                  // children still running when the group was stopped
  bool timed_out = false;              // stopped at the time limit (exit code 124, as timeout(1))
};

// Starts every child and relays their output until all have exited. When one exits non-zero or
// is killed, or we get SIGINT, SIGTERM or SIGHUP, or the time limit is reached, the process
// groups of the others get SIGTERM,
// then SIGKILL after the grace period (at once on a second such signal). An error means a child
// could not be started; those already started are killed then.
Result<GroupOutcome> run_child_group(std::vector<GroupChild> children, const GroupOptions& options);

}  // namespace gpupool
