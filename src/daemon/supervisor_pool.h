// Supervisors started ahead of need (docs/daemon.md, "Start"), so a dispatch costs one message
// to a waiting supervisor rather than a process start.
#pragma once

#include <string>
#include <vector>

#include <asio.hpp>

#include "base/result.h"
#include "daemon/supervisor.h"

namespace gpupool {

class SupervisorPool {
 public:
  SupervisorPool(asio::io_context& io, std::string supervisor_program);

  // A waiting supervisor, or a new one when none is left (a burst of starts). The pool fills up
  // again after the current event, not in it.
  Result<StandbySupervisor> take();
  // One taken but not needed after all (its job's GPUs were taken by someone else meanwhile).
  void put_back(StandbySupervisor supervisor);
  // Starts supervisors until enough wait. A failure is said and left to the next start, which
  // reports it for its job.
  void fill();

 private:
  asio::io_context& io_;
  std::string program_;
  std::vector<StandbySupervisor> waiting_;
  bool fill_pending_ = false;
};

}  // namespace gpupool
