// gpupoold: the shared, durable job queue. One thread runs an Asio event loop that reacts to
// exactly four kinds of event — a client's message, a watched process's exit (pidfd), the
// sampling timer, a signal — and after each one asks the scheduler what may start now.
// docs/daemon.md describes the life of a job; docs/protocol.md the socket protocol.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "daemon/config.h"

namespace gpupool {

struct DaemonSettings {
  std::string runtime_dir;         // the lease directory; the socket is gpupoold.sock in it
  std::string state_dir;           // gpupool.db, logs/, attempts/
  std::string supervisor_program;  // this binary, re-executed as `gpupoold supervise`
  DaemonConfig config;
  // The process this daemon lives for (a Slurm job's shell, docs/slurm.md): when it exits, every
  // job is cancelled and the daemon stops once none runs. nullopt: serve until a signal.
  std::optional<pid_t> end_with;
};

// GPUPOOL_STATE_DIR, else /var/lib/gpupool for root, else $XDG_STATE_HOME/gpupool or
// ~/.local/state/gpupool (a personal daemon).
std::string default_state_dir();

class Daemon {
 public:
  // Opens the store and the socket, and adopts the jobs a previous daemon left running.
  static Result<std::unique_ptr<Daemon>> create(DaemonSettings settings);
  ~Daemon();
  // Serves until SIGTERM or SIGINT. Running jobs keep running after it returns.
  Result<void> run();

 private:
  class Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The body of gpupoold's main: options, then `Daemon::run` (or `supervise`).
int daemon_main(int argc, char** argv);

}  // namespace gpupool
