// The driver of the job lifecycle (jobs/lifecycle.h), in the manner of ninja's Builder: it hands
// the lifecycle what happened and carries out what it decides, asks the scheduler what may start,
// takes the GPUs' leases and starts attempts through an AttemptRunner. It keeps the jobs that
// have not ended (queued, held, running) and stores every change in the job store.
//
// It knows no socket: what concerns clients (an interactive job's leases handed to its client,
// a job's end told to those who wait) goes through the daemon's hooks. So the whole of a job's
// life, from submission through retries, cancels and restarts to its end, is tested with a fake
// runner and no process (dispatcher_test.cc).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/attempt_runner.h"
#include "daemon/state_space.h"
#include "jobs/job_store.h"
#include "jobs/lifecycle.h"
#include "lease/lease_directory.h"
#include "machine/gpu.h"
#include "os/host_files.h"
#include "sched/scheduler.h"
#include "sched/slice_watch.h"

namespace gpupool {

// What the scheduler needs to know of a job.
// `mps_slices`: the daemon holds slices with MPS, so the job's slice, where MPS can hold it, is an
// MPS one (JobRequest::mps).
JobRequest scheduler_request(const Job& job, bool mps_slices);

// When a suspended job is queued to resume.
enum class ResumeWhen {
  Asked,                // `gpupool resume JOB`
  Free,                 // at once, at its old place: once its GPUs are free (`drain --suspend`)
  FreeAfterTheWaiting,  // at once, behind the jobs queued now (suspended for them: idle_suspend_after)
};

struct DispatcherSettings {
  std::string state_dir;  // logs/ and attempts/ are in it
  double kill_grace_s = 10;
  pid_t daemon_pid = 0;  // holds the leases of an interactive job whose client's pid is unknown
  OutputLimits output_limits;  // of each batch attempt's output
  bool mps_slices = false;     // slices that MPS can hold run as MPS clients (sched/mps.h)
};

// What the dispatcher asks of the daemon's other parts.
struct DispatcherHooks {
  // Hands an interactive job's leases to its client (which waits on its connection), with what its
  // program's environment adds (an MPS slice's settings), or says that no client waits for it any
  // more.
  std::function<bool(const Job& job, const HeldLeases& held, const std::vector<std::string>& environment)>
      hand_to_client;
  // Whether an interactive job's client is still connected, and so reports the job's end itself.
  std::function<bool(JobId id)> client_connected;
  // The job has ended and is stored: its client and those waiting for it are told.
  std::function<void(const Job& job)> finished;
  // A GPU the scheduler took for free is held by someone else: the machine is to be looked at soon.
  std::function<void()> look_again_soon;
  // The queue may have changed (called on every dispatch).
  std::function<void()> queue_changed;
  // What an attempt in an MPS slice on `gpu` adds to its environment (its GPU's control daemon
  // started first); an error: the job does not start, and fails with it.
  std::function<Result<std::vector<std::string>>(const Job& job, unsigned gpu)> mps_environment;
  // Starting one job took this long (seconds).
  std::function<void(double seconds)> started_in;
  // Why a failed MPS job ended, when a fatal fault in its GPU's MPS server ended it ("ended by a
  // fault in job 12 on the same GPU"); nullopt otherwise.
  std::function<std::optional<std::string>(JobId id)> mps_fault_reason = {};
  // An attempt has started (its batch supervisor runs, or its client has its leases).
  std::function<void(const Job& job)> started = {};
  // A failed attempt with retries left: the job is queued again for its next one.
  std::function<void(const Job& job)> requeued = {};
  // Makes one checkpoint call on a job's processes (docs/suspend.md), without waiting: its
  // outcome comes back through Dispatcher::checkpoint_done.
  std::function<void(JobId id, CheckpointStep step, const std::vector<pid_t>& pids)> call_checkpoint = {};
  // The job is suspended (its GPUs let go), resumed, or a suspend or resume of it failed (`why`).
  std::function<void(const Job& job)> suspended = {};
  std::function<void(const Job& job)> resumed = {};
  std::function<void(const Job& job, const std::string& why)> suspend_failed = {};
  // Whether an MPS control daemon of the GPU with this UUID was found running at start: a slice
  // adopted on a GPU without one ran outside MPS (the daemon before held slices otherwise).
  std::function<bool(const std::string& gpu_uuid)> mps_control_found = {};
  // Whether the interactive job's client is connected and said it stops its time limit's clock
  // on the daemon's signals (its lease request's stops_the_clock).
  std::function<bool(JobId id)> client_stops_the_clock = {};
};

class Dispatcher {
 public:
  Dispatcher(DispatcherSettings settings, JobStore& store, LeaseDirectory& leases, const Machine& machine,
             Scheduler& scheduler, AttemptRunner& runner, const HostFiles& host, DispatcherHooks hooks);

  // At start: takes up the unfinished jobs a previous daemon left in the store. The running ones
  // first (adopt_running, which returns the others' ids), then, once what they ran is accounted
  // for, the queued and held ones (adopt_waiting).
  Result<std::vector<JobId>> adopt_running(std::vector<Job> jobs);
  void adopt_waiting(const std::vector<JobId>& ids);

  // A new job, stored (it has its id): queued, or held when its state says so.
  void submitted(Job job);
  // Hands the event to the lifecycle and carries out its effects; what refused it or went wrong
  // in carrying them out, for whoever asked.
  std::optional<std::string> feed(const lifecycle::Event& event);
  // Cancels every job (the daemon's session is ending); the running ones are stored as being
  // cancelled, by whom, until their attempts end.
  void cancel_all(const std::string& by);
  // Starts what the scheduler lets start now.
  void dispatch();
  // Called at every sample: what the daemon enforces itself, where no supervisor does.
  // - Running interactive jobs past their time limit and the grace period are told to end, as a
  //   cancel tells them (SIGTERM to the client), and the client is killed a grace period later.
  //   `gpupool run` and `launch` end their programs at the limit themselves; this is for a
  //   client that does not (acquire(), a stuck one).
  // - A batch attempt whose supervisor was killed while its processes live on ("lost") has its
  //   time limit and cancel carried out on its process group (SIGTERM, the grace period,
  //   SIGKILL), and its end recorded once no process of the group is left.
  void check_running(double now);
  // The slice watchdog's reading of a sample (each watched job's worst GPU): under "stop", a job
  // past its slice is told to end, once, and ends failed with the figures as its reason.
  void stop_slice_overruns(const std::map<JobId, SliceUse>& worst, SliceOverrunPolicy policy);
  // Under MPS, a slice job with a process outside MPS on its GPU (the same reading) is told to
  // end, once, and ends failed with why: its limit does not hold there.
  void stop_outside_mps(const std::map<JobId, SliceUse>& worst);
  // The lease directory was made again after it was deleted: the running jobs' locks went with
  // the old one, so the daemon takes their GPUs' locks in the new one for them, and holds them
  // until each job ends. A GPU someone else took meanwhile is said, loudly.
  void relock_running();
  // `gpupool suspend`: checkpoints the running batch job's processes `pids` (those NVML lists on
  // its GPUs, holding `gpu_mib` together), then lets its GPUs go. An error: nothing was touched.
  std::optional<std::string> suspend(JobId id, const std::string& by, std::vector<pid_t> pids, uint64_t gpu_mib,
                                     ResumeWhen resume_when = ResumeWhen::Asked);
  // `gpupool resume JOB`: the suspended job waits for its GPUs, then is restored on them.
  std::optional<std::string> resume(JobId id);
  // A job on loan that cannot be suspended is on loan no more (Scheduler::end_loan), in the
  // store too: the reservation waits for its end.
  void end_loan(JobId id);
  // A checkpoint call made through hooks.call_checkpoint ended.
  void checkpoint_done(JobId id, CheckpointOutcome outcome);
  // Called at every sample: each job whose processes are checkpointed has its GPUs let go once a
  // sample taken after the checkpoint no longer lists them there (`listed` gives the job's
  // processes NVML lists on its GPUs, "pid 12 on GPU 3"); while one is listed it is undone.
  void let_go_of_checkpointed(const std::function<std::vector<std::string>(const Job& job)>& listed);
  // The attempt (or the interactive job) has ended: its GPUs are free, and the lifecycle decides.
  void attempt_ended(JobId id, lifecycle::AttemptExited ended);
  // The watched process of a running job has ended (from the runner).
  void on_exit(JobId id);

  // Queued, held and running jobs.
  const std::map<JobId, Job>& active() const { return active_; }
  // The pid of a running batch job's program (the leader of its process group), as its attempt's
  // record says; nullopt for any other job, or when the record does not say.
  std::optional<uint32_t> program_pid(JobId id);
  // A job, ended or not; nullopt when there is none.
  Result<std::optional<Job>> find_job(JobId id) const;
  bool drained() const { return lifecycle_.drained(); }
  // The cgroup names of the running batch attempts (isolation/device_rules.h).
  std::set<std::string> running_batch_groups() const;
  // A batch job's logs are in the state directory, named after it.
  void fill_log_paths(Job& job) const;

  // Jobs whose latest change the store refused (the state file system full, an I/O error): kept
  // here, shown as they are (find_job, show_unsaved), and saved again by save_again until the
  // store takes them. A restart meanwhile loses nothing: a batch job's end is in its attempt
  // record, which the next daemon reads.
  const std::map<JobId, Job>& unsaved() const { return unsaved_; }
  // Listed jobs replaced by their unsaved versions.
  void show_unsaved(std::vector<Job>& listed) const;
  // Tries the store again when the backoff allows.
  void save_again(double now);

 private:
  // Not running, or already told to end (a cancel, its time limit, the watchdog).
  bool told_to_end(JobId id) const;
  std::optional<std::string> carry_out(const lifecycle::Effect& effect);
  void finished(JobId id, JobState state, std::string reason);
  void start(const JobStart& decision);
  void resume_on_its_gpus(Job& job, const JobStart& decision);
  // An adopted batch attempt whose record says its supervisor lives: watched, with what its record
  // says of the clock; true. Otherwise its end is recorded now (it exited, or was lost); false.
  bool watch_supervisor(Job& job, const AttemptRecord& record);
  // Tells a batch job's supervisor (kStopTheClock, kStartTheClock), or an interactive job's client
  // that listens (suspended_signal, resumed_signal), to stop or start its time limit's clock: a
  // suspended job's time does not count.
  void tell_the_clock(const Job& job, bool stop);
  // Whether the job's slice is held by MPS: the setting says so, and it did not run outside MPS
  // under the daemon before (without_mps_). What the scheduler is told of it follows.
  bool held_by_mps(const Job& job) const;
  JobRequest request_of(const Job& job) const;
  // An adopted running slice that MPS would hold but that was started without it (Job::
  // started_under_mps; for a job stored before that was, its GPU has no control daemon): it ran
  // under the watchdog, and is watched, not stopped for being outside MPS, until it ends.
  void note_if_outside_mps(const Job& job);
  // Puts a suspended job in the scheduler's queue for the GPUs it ran on.
  std::optional<std::string> queue_to_resume(Job& job);
  void start_attempt(const lifecycle::StartAttempt& start);
  void start_batch(Job& job, HeldLeases held, pid_t supervisor, const std::vector<std::string>& mps_environment);
  void start_interactive(Job& job, HeldLeases held, const std::vector<std::string>& mps_environment);
  std::optional<std::string> stop_attempt(const Job& job, lifecycle::SignalWhy why);
  // The supervisor of a running batch attempt has died while the job's processes (group `group`)
  // live on: from now on the daemon limits, cancels and ends them.
  void supervisor_lost(Job& job, pid_t group);
  // No process of a lost attempt's group is left: its end is recorded, its GPUs free.
  void lost_attempt_over(JobId id);
  // The attempt never ran (its record says so): the job is queued again as it was.
  void never_ran(Job& job);
  void adopt(const Job& job);
  std::string record_path(const Job& job) const;
  void save(const Job& job);

  DispatcherSettings settings_;
  JobStore& store_;
  LeaseDirectory& leases_;
  const Machine& machine_;
  Scheduler& scheduler_;
  AttemptRunner& runner_;
  const HostFiles& host_;
  DispatcherHooks hooks_;
  JobLifecycle lifecycle_;
  std::map<JobId, Job> active_;  // what the lifecycle tracks
  // What a granted job's attempt starts with, from the grant to the lifecycle's StartAttempt (or
  // its refusal).
  struct Reserved {
    HeldLeases held;
    std::optional<pid_t> supervisor;  // a batch job's, reserved from the runner
    std::vector<std::string> mps_environment;  // an MPS slice's client settings
    std::string mig_uuid;                      // a --mig job's MIG device
    bool on_loan = false;                      // on GPUs reserved for another job
  };
  std::optional<Reserved> reserved_;
  // Jobs whose processes are checkpointed, with the samples seen since: the first may have been
  // taken before the checkpoint ended, so the second decides.
  std::map<JobId, unsigned> checkpointed_samples_;
  std::set<JobId> without_mps_;  // note_if_outside_mps
  std::set<JobId> deaf_supervisors_;  // adopted attempts whose supervisor takes no clock signals
  // Suspended for the jobs waiting then: resumed behind them rather than at the old place.
  std::set<JobId> resume_behind_;
  bool taking_up_ = false;  // in adopt_waiting: the jobs queued keep the time they waited
  bool submitting_ = false;  // in submitted(): a job queued enters at its submission
  // Lost batch attempts: the job's process group, which the daemon limits and cancels itself.
  std::map<JobId, pid_t> lost_;
  // When the daemon itself SIGKILLs what it told to end with SIGTERM (a lost attempt's group, a
  // client past its time limit), in Unix seconds.
  std::map<JobId, double> kill_at_;
  // Locks the daemon took for running jobs in a remade lease directory (relock_running).
  std::map<JobId, HeldLeases> relocked_;
  std::map<JobId, Job> unsaved_;
  SaveRetry save_retry_;
};

}  // namespace gpupool
