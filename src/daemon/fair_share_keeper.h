// Fair share outlives a restart: the scheduler's decayed usage per user is saved in the job
// store every minute and when the daemon stops, and taken up at the next start (decayed over
// the time the daemon was down), so a heavy user does not go back to the front of the queue.
#pragma once

#include <asio.hpp>

#include "jobs/job_store.h"
#include "sched/scheduler.h"

namespace gpupool {

class FairShareKeeper {
 public:
  FairShareKeeper(asio::io_context& io, JobStore& store, Scheduler& scheduler);

  // After adoption: the adopted jobs add what they ran while no daemon ran. Not worth refusing
  // to start over: a saved usage that cannot be read is said and ignored.
  void restore();
  void save();
  // Every minute from now on: after a kill -9, at most the last minute is lost.
  void save_periodically();

 private:
  JobStore& store_;
  Scheduler& scheduler_;
  asio::steady_timer timer_;
};

}  // namespace gpupool
