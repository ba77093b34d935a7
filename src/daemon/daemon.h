// gpupoold: the shared, durable job queue. One thread runs an Asio event loop: clients'
// messages, the exits of watched processes, the monitor's samples, timers and signals become
// events of the job lifecycle (jobs/lifecycle.h), whose effects the daemon carries out, and
// after each one the scheduler is asked what may start now. daemon_impl.h lists the parts.
// docs/daemon.md describes the life of a job; docs/protocol.md the socket protocol.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "daemon/config.h"
#include "gpu/process_checkpoint.h"

namespace gpupool {

struct DaemonSettings {
  std::string runtime_dir;         // the lease directory; the socket is gpupoold.sock in it
  std::string state_dir;           // gpupool.db, logs/, attempts/
  std::string supervisor_program;  // this binary, re-executed as `gpupoold supervise`
  DaemonConfig config;
  // The process this daemon lives for (a Slurm job's shell, docs/slurm.md): when it exits, every
  // job is cancelled and the daemon stops once none runs. nullopt: serve until a signal.
  std::optional<pid_t> end_with;
  // The CUDA driver that suspends and resumes jobs: the system's, or the simulated one.
  CheckpointProgram checkpoint_program = {};
};

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

}  // namespace gpupool
