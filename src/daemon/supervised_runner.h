// The daemon's AttemptRunner: each batch attempt handed to a supervisor from the pool (started
// ahead of need), inside its own cgroup when device isolation is on; the ends of processes
// through pidfds in the event loop (ProcessWatch); how an attempt ended from its record file.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "daemon/attempt_runner.h"
#include "daemon/job_groups.h"
#include "daemon/process_watch.h"
#include "daemon/supervisor_pool.h"
#include "isolation/device_rules.h"
#include "machine/gpu.h"

namespace gpupool {

class SupervisedRunner final : public AttemptRunner {
 public:
  SupervisedRunner(SupervisorPool& supervisors, ProcessWatch& processes, JobGroups& groups, const Machine& machine,
                   DeviceIsolationMode isolation_mode);

  Result<pid_t> reserve(JobId id) override;
  void unreserve(JobId id) override;
  Result<void> start(const SupervisedAttempt& attempt, const LeasedDevices& devices,
                     const std::vector<int>& lease_descriptors) override;
  Result<void> stop(JobKind kind, pid_t pid) override;
  Result<void> signal(pid_t pid, int signal_number, bool whole_group) override;
  void watch(JobId id, pid_t pid) override;
  void forget(JobId id) override;
  void reap(pid_t pid) override;
  Result<AttemptRecord> read_record(const std::string& record_path) override;
  void remove_record(const std::string& record_path) override;
  void attempt_over(JobId id, unsigned attempt) override;

 private:
  SupervisorPool& supervisors_;
  ProcessWatch& processes_;
  JobGroups& groups_;
  const Machine& machine_;
  DeviceIsolationMode isolation_mode_;
  std::map<JobId, StandbySupervisor> reserved_;
};

}  // namespace gpupool
