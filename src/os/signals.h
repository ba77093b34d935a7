// Signals: blocked and taken synchronously from a descriptor or as pending, or caught by a
// handler; and every signal held back from the threads a library starts.
#pragma once

#include <signal.h>

#include <initializer_list>
#include <optional>

#include "base/result.h"
#include "os/fd.h"

namespace gpupool {

// Blocks `signals` in the calling thread (the process's mask, for a single-threaded program), so
// they stay pending until taken by signal_descriptor() or take_pending_signal().
void block_signals(std::initializer_list<int> signals);

// A non-blocking descriptor that turns readable while one of `signals` is pending (a signalfd);
// block them first, or their default action comes first.
Result<Fd> signal_descriptor(std::initializer_list<int> signals);
// The next signal pending on a signal_descriptor(), taken; nullopt when none is.
std::optional<int> read_signal(int signal_fd);

// Takes `signal` if it is pending (and blocked), without waiting.
bool take_pending_signal(int signal);

// Calls `handler` on each of `signals`; a system call it interrupts fails with EINTR.
void set_signal_handler(std::initializer_list<int> signals, void (*handler)(int));

// Every signal's action back to its default, and none blocked: handlers do not survive exec, but
// ignored signals and the mask do, and a program started from here should inherit neither.
// Async-signal-safe, for a forked child before it execs.
void reset_signal_dispositions();
void unblock_all_signals();

// Ignores `signals` (SIG_IGN): e.g. SIGPIPE, so a write to a closed pipe is an error, not death.
void ignore_signals(std::initializer_list<int> signals);

// Blocks every signal in the calling thread while it lives. Threads inherit their creator's
// mask: threads started meanwhile (by a library being loaded) never take a signal meant for the
// program's own signal handling.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked();
  ~AllSignalsBlocked();
  AllSignalsBlocked(const AllSignalsBlocked&) = delete;
  AllSignalsBlocked& operator=(const AllSignalsBlocked&) = delete;

 private:
  sigset_t previous_{};
};

}  // namespace gpupool
