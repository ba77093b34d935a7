// Running one attempt of a batch job so that it outlives the daemon.
//
// The daemon does not run jobs itself: for each attempt it hands the attempt to a supervisor
// (gpupoold re-executed as `gpupoold supervise`, started ahead of need and waiting on a socket,
// so that a dispatch costs one message, not a process start), which leaves the daemon's
// session, starts the job as
// its owner in a process group of its own, enforces the time limit and cancellation
// (SIGTERM to the group, a grace period, SIGKILL), and writes how the attempt ended into the
// attempt's record file. Killing the daemon (even with SIGKILL) therefore stops no job, and a
// restarted daemon learns everything from the record file:
//
//   record file  STATE_DIR/attempts/<id>.<attempt>, root-owned, JSON lines:
//     {"event":"supervising","supervisor_pid":P,"time":T,"clock":true}
//                                                              written by the daemon before the
//                                                              supervisor has its attempt, so
//                                                              always first
//     {"event":"started","job_pid":P,"pgid":P,"time":T}        written before the job execs
//     {"event":"clock_stopped","time":T,"left_s":L}           the job suspended: its time limit's
//     {"event":"clock_started","time":T}                       clock stopped with L seconds left,
//                                                              and started again on its resume
//     {"event":"exited","exit_code":C|null,"signal":S|null,"reason":R,"time":T}
//   exit_code is null when the job never got to exec (its directory, identity or logs failed:
//   reason "could not start: ..."); a command not found is 127, one not runnable 126.
//   An OFD write lock on the record file is taken by the daemon before it hands the attempt over
//   and is held, through the descriptor sent with it, by the supervisor until it has written
//   "exited". So:
//     locked                      → the supervisor lives: adopt it
//     unlocked, "exited"          → the attempt ended: record it
//     unlocked, "started" only    → the supervisor died under the job: failed ("supervisor lost")
//     unlocked, no "started"      → the job never ran: safe to start it again
//     no file                     → the job never ran
//
// The record is written, not synced: it must outlive the daemon's death, which the page cache
// ensures, while a power loss ends every job anyway (a job whose "started" is lost with it is
// queued again, as after any crash before its start).
// The job's process never gets the record file's descriptor (close-on-exec), so it cannot
// forge its own outcome. It does inherit the lease descriptors, so its GPUs stay held for as
// long as it (or anything it left running) lives, even when the supervisor is killed.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "daemon/attempt_record.h"
#include "daemon/state_space.h"
#include "jobs/job.h"
#include "os/fd.h"
#include "os/files.h"
#include "os/job_cgroup.h"

namespace gpupool {

// The attempt's own cgroup, which keeps the job from opening the GPUs it does not lease
// (os/job_cgroup.h). The supervisor makes it and starts the job inside it (so the job and
// everything it starts are inside); the daemon removes it once the supervisor has exited.
struct AttemptIsolation {
  IsolationMechanism mechanism = IsolationMechanism::CgroupV1;
  std::string group;                    // this attempt's cgroup directory
  std::vector<DeviceNumber> denied;     // other GPUs' /dev/nvidiaN, other MIG devices' nodes
  bool required = false;                // device_isolation = "on": no start without it
};

// Everything the supervisor needs, passed to it as JSON on a pipe.
struct SupervisedAttempt {
  JobId id = 0;
  unsigned attempt = 1;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::vector<std::string> argv;         // argv[0] looked up on the job environment's PATH
  std::vector<std::string> environment;  // complete: the daemon has added CUDA_VISIBLE_DEVICES etc.
  std::string cwd;
  mode_t umask = 022;
  std::string stdout_path;  // appended to (attempts share one log), created 0600 owned by uid (check_job_log)
  std::string stderr_path;
  // The supervisor copies the job's output into the logs through pipes, within these
  // (state_space.h): the job never blocks on its output and is never killed for it.
  OutputLimits output_limits;
  std::optional<double> time_limit_s;
  double kill_grace_s = 10;
  std::string record_path;
  std::optional<AttemptIsolation> isolation;  // none: device isolation is off
};

// Whether the existing file `status` at `path` is job's log, made by the daemon for an earlier
// attempt of the job and handed to its owner `owner`: a regular file with one name, owned by
// them. Anything else there (left from a reset state directory, put there by an administrator)
// is not: the daemon never appends to it, hands it to the job's owner or changes its owner.
Result<void> check_job_log(const std::string& path, const FileStatus& status, uid_t owner);

// Daemon side: a supervisor started ahead of need, `supervisor_program supervise` already
// running and blocked on a socket until it is handed an attempt. It is the caller's child (reap
// it). One that is destroyed before it was handed an attempt sees the socket close and exits
// without recording anything; so does one whose daemon dies. Safe in a threaded daemon: the
// process is spawned without copying the caller's memory.
class StandbySupervisor {
 public:
  static Result<StandbySupervisor> spawn(const std::string& supervisor_program);
  StandbySupervisor(StandbySupervisor&& other) noexcept;
  StandbySupervisor& operator=(StandbySupervisor&& other) noexcept;
  StandbySupervisor(const StandbySupervisor&) = delete;
  StandbySupervisor& operator=(const StandbySupervisor&) = delete;
  ~StandbySupervisor();

  pid_t pid() const { return pid_; }

  // Creates the record file (O_EXCL: an existing one is refused), locks it, writes
  // "supervising", and sends the attempt with the record and lease descriptors. From then on the
  // process is the attempt's supervisor. On failure neither a record nor the process is left.
  Result<void> hand(const SupervisedAttempt& attempt, const std::vector<int>& lease_descriptors);

 private:
  StandbySupervisor(pid_t pid, Fd socket) : pid_(pid), socket_(std::move(socket)) {}
  void end();  // closes the socket and reaps the process, if it was never handed an attempt

  pid_t pid_ = -1;
  Fd socket_;  // to the supervisor's stdin; closed once handed
};

// Supervisor side: the body of `gpupoold supervise`; waits for its attempt on stdin.
// Returns the supervisor's exit status (0 once the outcome is recorded).
int supervise_main();

// What the daemon sends a supervisor when its job is suspended (the time limit's clock stops) and
// when it is resumed (the clock runs on from where it stopped). Each is idempotent.
constexpr int kStopTheClock = SIGUSR1;
constexpr int kStartTheClock = SIGUSR2;

// Asks the supervisor to cancel: it sends SIGTERM to the job's group, waits the grace period,
// then SIGKILL, and records reason "cancelled".
Result<void> cancel_supervised(pid_t supervisor_pid);

}  // namespace gpupool
