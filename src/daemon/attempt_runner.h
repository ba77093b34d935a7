// What runs the attempts the dispatcher (daemon/dispatcher.h) starts: the one place where a
// job's attempt meets processes. The daemon's implementation (SupervisedRunner) hands each batch
// attempt to a supervisor and watches processes through pidfds; the dispatcher's tests use a fake
// that records what it was asked and ends attempts when the test says so.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/result.h"
#include "daemon/attempt_record.h"
#include "daemon/supervisor.h"
#include "jobs/job.h"
#include "sched/allocation.h"

namespace gpupool {

class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;

  // Makes ready what will run the job's next batch attempt (a waiting supervisor) before the
  // job's GPUs are leased, so that the leases name its pid as their holder from the start.
  virtual Result<pid_t> reserve(JobId id) = 0;
  // What reserve() made ready is not needed after all (the GPUs were taken meanwhile, or the
  // lifecycle did not start the attempt).
  virtual void unreserve(JobId id) = 0;
  // Hands the reserved runner the attempt on `devices` and the leases' descriptors, and watches it.
  // An error: no attempt began, no record of it is left, and nothing is watched.
  virtual Result<void> start(const SupervisedAttempt& attempt, const LeasedDevices& devices,
                             const std::vector<int>& lease_descriptors) = 0;
  // Asks a running attempt to end (SIGTERM, the grace period, SIGKILL): a batch job's supervisor
  // does so; an interactive job's client passes SIGTERM on to its program.
  virtual Result<void> stop(JobKind kind, pid_t pid) = 0;
  // Sends `signal_number` to `pid`, or to every process of the group it leads (`whole_group`):
  // what the daemon does itself where no supervisor does (the group of an attempt whose
  // supervisor was killed, a client that outlives its time limit).
  virtual Result<void> signal(pid_t pid, int signal_number, bool whole_group) = 0;

  // Reports the end of `pid` as the end of job `id`'s attempt (to Dispatcher::on_exit), once;
  // a process that is gone already counts as ended. Watching again replaces the watch.
  virtual void watch(JobId id, pid_t pid) = 0;
  virtual void forget(JobId id) = 0;
  // Collects the exit of a watched process that was the daemon's child (an adopted one is not).
  virtual void reap(pid_t pid) = 0;

  // How far an attempt got, from its record file (supervisor.h).
  virtual Result<AttemptRecord> read_record(const std::string& record_path) = 0;
  // The record of an attempt that never ran, so the attempt can run again under its number.
  virtual void remove_record(const std::string& record_path) = 0;
  // Attempt `attempt` of job `id` is over (its supervisor has exited): what was made for it
  // alone (its cgroup) can go.
  virtual void attempt_over(JobId id, unsigned attempt) = 0;
};

}  // namespace gpupool
