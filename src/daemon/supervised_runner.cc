#include "daemon/supervised_runner.h"

#include <csignal>
#include <utility>

#include "os/child_process.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {

SupervisedRunner::SupervisedRunner(SupervisorPool& supervisors, ProcessWatch& processes, JobGroups& groups,
                                   const Machine& machine, DeviceIsolationMode isolation_mode)
    : supervisors_(supervisors),
      processes_(processes),
      groups_(groups),
      machine_(machine),
      isolation_mode_(isolation_mode) {}

Result<pid_t> SupervisedRunner::reserve(JobId id) {
  TRY_ASSIGN(StandbySupervisor supervisor, supervisors_.take());
  pid_t pid = supervisor.pid();
  reserved_.insert_or_assign(id, std::move(supervisor));
  return pid;
}

void SupervisedRunner::unreserve(JobId id) {
  auto it = reserved_.find(id);
  if (it == reserved_.end()) return;
  supervisors_.put_back(std::move(it->second));
  reserved_.erase(it);
}

Result<void> SupervisedRunner::start(const SupervisedAttempt& attempt, const LeasedDevices& devices,
                                     const std::vector<int>& lease_descriptors) {
  auto reserved = reserved_.extract(attempt.id);
  if (reserved.empty()) return fail("no supervisor was made ready for job {}", attempt.id);
  // Not handed the attempt, it sees its socket close and exits: nothing is left to undo.
  StandbySupervisor supervisor = std::move(reserved.mapped());
  SupervisedAttempt isolated = attempt;
  if (const auto& isolation = groups_.isolation()) {
    // Every GPU's minor number was there at start.
    TRY_ASSIGN(auto denied, denied_devices(machine_, devices.gpus, devices.mig_uuid, isolation->mig_capabilities));
    isolated.isolation = AttemptIsolation{isolation->mechanism,
                                          isolation->base + "/" + attempt_group_name(attempt.id, attempt.attempt),
                                          std::move(denied), isolation_mode_ == DeviceIsolationMode::On};
  }
  TRY(supervisor.hand(isolated, lease_descriptors));
  processes_.watch(attempt.id, supervisor.pid());
  return {};
}

Result<void> SupervisedRunner::stop(JobKind kind, pid_t pid) {
  if (kind == JobKind::Batch) return cancel_supervised(pid);
  // `gpupool run` passes SIGTERM on to the program in the user's terminal.
  if (auto sent = send_signal(pid, SIGTERM); !sent) return fail("cannot signal the client: {}", sent.error().message);
  return {};
}

Result<void> SupervisedRunner::signal(pid_t pid, int signal_number, bool whole_group) {
  return whole_group ? signal_process_group(pid, signal_number) : send_signal(pid, signal_number);
}

void SupervisedRunner::watch(JobId id, pid_t pid) { processes_.watch(id, pid); }

void SupervisedRunner::forget(JobId id) { processes_.forget(id); }

void SupervisedRunner::reap(pid_t pid) { (void)exit_code_if_ended(pid); }

Result<AttemptRecord> SupervisedRunner::read_record(const std::string& record_path) {
  return read_attempt_record(record_path);
}

void SupervisedRunner::remove_record(const std::string& record_path) { (void)remove_file(record_path); }

void SupervisedRunner::attempt_over(JobId id, unsigned attempt) { groups_.remove_ended(attempt_group_name(id, attempt)); }

}  // namespace gpupool
