// Starting a job's processes and waiting for them: fork/exec with an exact
// environment, inherited lease descriptors, optional CPU and memory binding,
// and signals passed on to the job.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <initializer_list>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpupool {

struct ChildSpec {
  std::vector<std::string> argv;           // argv[0] is looked up on PATH
  std::vector<std::string> environment;    // "NAME=value", the whole environment
  std::vector<unsigned> cpus;              // CPU affinity; empty: unchanged
  std::optional<int> memory_node;          // bind memory allocations to this NUMA node
  int stdin_fd = -1;                       // -1: inherit
  int stdout_fd = -1;
  int stderr_fd = -1;
  bool own_process_group = false;          // so the group can be signalled as a unit
  bool own_session = false;                // no terminal: a Ctrl-C or hang-up is not for it
};

// Starts the child; exec failures show up as exit code 127 (not found) or 126.
Result<pid_t> spawn_child(const ChildSpec& spec);

// The shell-style exit code once `child` has ended (and is reaped); nullopt while it runs.
std::optional<int> exit_code_if_ended(pid_t child);

// Whether `child` has exited, leaving it unreaped: until it is reaped its pid and process group id
// cannot be reused, so its group can still be signalled safely. With `wait`, waits for the exit.
bool child_has_exited(pid_t child, bool wait);
// Waits for `child` to end and reaps it; its wait status (0 when there is no such child).
int reap_child(pid_t child);

// Starts argv (argv[0] a path, not looked up) in the background with posix_spawn, which shares
// our memory until the exec instead of copying the page tables (no copy-on-write faults in a big
// threaded caller afterwards): stdin from `stdin_fd` (above the standard streams, as duplicate()
// makes it), stdout and stderr to /dev/null, no other descriptor, every signal's action at its
// default and `blocked` blocked from the first instant (so none of them sent as soon as its pid is
// known is lost). The caller reaps it.
Result<pid_t> spawn_helper(const std::vector<std::string>& argv, int stdin_fd, std::initializer_list<int> blocked);

// The exit code a shell would report: the status, or 128 + the signal.
int exit_code_from_status(int wait_status);

// The real-time signals gpupoold sends an interactive job's client (one whose lease request said
// `stops_the_clock`) once its job is suspended and once it is resumed: the client's time limit
// does not count the time between. Never forwarded to the program.
int suspended_signal();
int resumed_signal();

// How long a child may run: SIGTERM once it has run `limit`, SIGKILL `grace` later; its clock
// stands still between suspended_signal() and resumed_signal().
struct RunTimeLimit {
  std::chrono::milliseconds limit{0};
  std::chrono::milliseconds grace{10000};
};

// A check made every `period` while the child runs: when `stop` answers true, the child is ended
// as at a time limit (SIGTERM, SIGKILL `grace` later), and the check is not made again.
struct ChildWatch {
  std::chrono::milliseconds period{1000};
  std::chrono::milliseconds grace{10000};
  std::function<bool()> stop;
};

struct ChildEnd {
  int exit_code = 0;       // shell-style: the status, or 128 + the signal
  bool timed_out = false;  // it was told to end at its time limit
  bool stopped = false;    // it was told to end because the watch said so
};

// Waits for `child`, passing on SIGTERM, SIGHUP, SIGUSR1/2 and SIGINT/SIGQUIT sent to us by
// another process (those from the terminal already reach the child, which shares our
// foreground process group), and ending it at `time_limit` or when `watch` says so. Takes
// suspended_signal() and resumed_signal() for the time limit's clock.
ChildEnd wait_forwarding_signals(pid_t child, std::optional<RunTimeLimit> time_limit = std::nullopt,
                                 std::optional<ChildWatch> watch = std::nullopt);

// This process's environment with `overrides` ("NAME=value") replacing or adding entries.
std::vector<std::string> environment_with(const std::vector<std::string>& overrides);

}  // namespace gpupool
