// The daemon's one object, shared by the files that make it up: daemon.cc (start-up, the loop,
// signals, samples) and requests.cc (the protocol's requests, and what clients are told of their
// jobs). Its parts with a job of their own are objects of their own: Dispatcher (the driver of
// the job lifecycle: scheduling, starting attempts, their ends), SupervisedRunner (what runs the
// attempts), Sessions (the socket), ProcessWatch (pidfds), JobGroups (device isolation's
// cgroups), SupervisorPool, FairShareKeeper, ServiceNotifier.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio.hpp>

#include "daemon/checkpoint_calls.h"
#include "daemon/daemon.h"
#include "daemon/dispatcher.h"
#include "daemon/event_stream.h"
#include "daemon/drain_state.h"
#include "health/quarantine.h"
#include "daemon/fair_share_keeper.h"
#include "daemon/http_server.h"
#include "daemon/job_groups.h"
#include "daemon/mps_controls.h"
#include "daemon/process_watch.h"
#include "daemon/service_notifier.h"
#include "daemon/session.h"
#include "daemon/supervised_runner.h"
#include "daemon/supervisor_pool.h"
#include "gpu/gpu_backend.h"
#include "jobs/job_store.h"
#include "lease/lease_directory.h"
#include "monitor/monitor.h"
#include "os/host_files.h"
#include "protocol/messages.h"
#include "sched/scheduler.h"

namespace gpupool {

// How many queued jobs, first in the scheduler's order, get an expected start: bounds the cost
// of planning for each `jobs` answer (as squeue --start, later ones show none).
inline constexpr size_t kPlannedJobs = 200;

class Daemon::Impl {
 public:
  Impl(DaemonSettings settings, JobStore store, LeaseDirectory leases, std::unique_ptr<GpuBackend> backend,
       Machine machine, Scheduler scheduler);

  Result<void> open_socket() { return sessions_.listen(settings_.state_dir, settings_.runtime_dir); }
  Result<void> watch_end_with();
  Result<void> isolate_devices();
  Result<void> open_monitor(UsageStore usage);
  void open_events(EventLog log);
  Result<void> recover();
  Result<void> run();

 private:
  // requests.cc: one handler per request of the protocol (docs/protocol.md).
  void handle(const SessionPtr& s, const protocol::SubmitRequest& r);
  void handle(const SessionPtr& s, const protocol::JobsRequest& r);
  void handle(const SessionPtr& s, const protocol::ShowRequest& r);
  void handle(const SessionPtr& s, const protocol::JobActionRequest& r);
  void handle(const SessionPtr& s, const protocol::WaitRequest& r);
  void handle(const SessionPtr& s, const protocol::LogsRequest& r);
  void handle(const SessionPtr& s, const protocol::AdminRequest& r);
  void handle(const SessionPtr& s, const protocol::StatusRequest& r);
  void handle(const SessionPtr& s, const protocol::LeaseRequest& r);
  void handle(const SessionPtr& s, const protocol::FinishedRequest& r);
  void handle(const SessionPtr& s, const protocol::ReportRequest& r);
  void handle(const SessionPtr& s, const protocol::EventsRequest& r);
  void on_disconnect(const SessionPtr& session);
  void commit_submissions();
  void submit_array(const SessionPtr& s, Job admitted, const ArraySpec& array);
  Result<Job> admit(const SessionPtr& session, const protocol::SubmitRequest& request, JobKind kind);
  size_t waiting_jobs_of(uid_t uid) const;
  bool may_act_on(const Session& session, const Job& job) const;
  // The job as `session` may see it; a queued one with why it waits and, when `expected_starts`
  // has it, when it is expected to start.
  Job for_client(Job job, const Session& session, const std::map<JobId, double>& expected_starts = {}) const;
  // Whether `shown` (from for_client) may go to this client at all: an older one cannot read a
  // job whose details are withheld.
  static bool may_receive(const Session& session, const Job& shown);
  void answer_wait(const SessionPtr& session);
  // Why a queued job waits, as everyone is told: the drain, a job it runs after, or what the
  // scheduler says.
  Scheduler::Waiting waiting_for(const Job& job) const;
  // When the first queued jobs in order are expected to start (none while drained).
  std::map<JobId, double> expected_starts();
  // Tells the client of interactive job `id` that it waits for `reason` if it has not been told
  // so; `starts` is planned on first use.
  void tell_lease_client(JobId id, const std::string& reason, std::optional<std::map<JobId, double>>& starts);
  // Hands the last survey, with the drained GPUs marked, to the monitor and (less the daemon's
  // own running jobs) to the scheduler as outside use, then starts what may start.
  void apply_survey();
  Result<void> recover_drain_of_an_older_daemon();
  // The dispatcher's hooks (DispatcherHooks).
  bool hand_to_client(const Job& job, const HeldLeases& held, const std::vector<std::string>& environment);
  void job_finished(const Job& job);

  // daemon.cc
  void wait_for_signal();
  void end_session(const std::string& by);
  void stop_once_idle();
  void schedule_sample(std::chrono::milliseconds delay);
  void on_sample(const Machine& machine, const std::vector<XidEvent>& xids);
  // The quarantine's view of a reading: takes GPUs out, returns them, stores and says so.
  void observe_health(const Machine& machine, const std::vector<XidEvent>& xids);
  void store_quarantine();  // and shows it
  void show_quarantine();   // to the monitor
  // What `gpupool drain --gpu` and the quarantine keep from new jobs, marked in `gpus`.
  void mark_out_of_service(std::vector<GpuAvailability>& gpus) const;
  // The slice watchdog on a sample: each running slice job's use, shown by the monitor, and the
  // jobs past their slice stopped under slice_overrun = "stop".
  void watch_slices(const Machine& sample);
  // The processes of `job` (its supervisor's descendants) that `sample` lists on its GPUs.
  std::vector<SliceUse> gpu_use_of(const Job& job, const Machine& sample) const;
  // `gpupool suspend`: the running job's GPU processes, as the latest sample lists them, are
  // checkpointed (within suspend_host_memory_mb); an error: nothing was touched.
  std::optional<std::string> suspend(JobId id, const std::string& by, ResumeWhen resume_when = ResumeWhen::Asked);
  // A queued job that waits for GPUs (its resources, a reservation, or jobs of higher priority).
  struct WaitingJob {
    const Job* job;
    WaitReason why;
  };
  std::vector<WaitingJob> jobs_waiting_for_gpus() const;
  // The running jobs the accounting flags idle, with since when (Unix seconds).
  std::map<JobId, double> idle_running_jobs() const;
  // idle_suspend_after: while jobs wait for GPUs, the jobs `idle` that long are suspended, to
  // resume behind them (each idle spell is tried once).
  void suspend_idle_jobs(const std::map<JobId, double>& idle, const std::vector<WaitingJob>& waiting);
  // preempt = "suspend": the first waiting job of the highest priority, waiting for whole GPUs,
  // has jobs of lower priority suspended to make room (sched/preemption.h).
  void preempt_by_suspending(const std::vector<WaitingJob>& waiting);
  // backfill = "suspend": the jobs on loan that keep the reservation's job from its GPUs are
  // suspended, to resume there at their old place (Scheduler::jobs_in_the_way).
  void suspend_jobs_on_loan();
  // The jobs whose processes are checkpointed have their GPUs let go once a sample shows them free.
  void let_go_of_checkpointed(const Machine& sample);
  // The MPS control daemons of GPUs where no MPS slice job runs any more, told to quit.
  void stop_unneeded_mps_controls();
  // Why a failed MPS job ended, when a fault in its GPU's MPS server did it (a dispatcher hook):
  // the servers' new faults are read first, and what they say of other jobs kept until they end.
  std::optional<std::string> mps_fault_reason(JobId id);
  // Running jobs newly flagged idle, or newly past their slice (`worst`), told as events once
  // each time it begins.
  void tell_idle_jobs(const std::map<JobId, double>& idle);
  void tell_slice_overruns(const std::map<JobId, SliceUse>& worst);
  // A GPU's event, with the jobs running on it and their owners.
  Event gpu_event(EventKind kind, unsigned index, std::string user, std::string detail) const;
  // The runtime directory, or the socket in it, deleted under the running daemon: made again.
  void keep_runtime_directory();
  // Hands the monitor the queue as it stands, at most a few times a second.
  void publish();

  DaemonSettings settings_;
  JobStore store_;
  LeaseDirectory leases_;
  std::unique_ptr<GpuBackend> backend_;
  Machine machine_;
  Scheduler scheduler_;
  HostFiles host_;
  // Before the dispatcher, which is told of it: whether slices MPS can hold are MPS slices.
  bool mps_slices_ = mps_in_effect(settings_.config.slice_enforcement);
  MpsControls mps_{settings_.runtime_dir, machine_};
  std::map<uint32_t, JobId> mps_clients_;             // pid → job: slice jobs' processes the watchdog saw
  std::map<JobId, std::string> mps_fault_reasons_;   // read from a server's log, until the job ends
  asio::io_context io_;
  // After io_, so they go before it: they hold its handlers and timers.
  Sessions sessions_{io_};
  asio::signal_set signals_{io_, SIGTERM, SIGINT};
  ProcessWatch processes_{io_, [this](JobId id) { dispatcher_.on_exit(id); }};
  JobGroups groups_{io_, [this] { return dispatcher_.running_batch_groups(); }};
  SupervisorPool supervisors_{io_, settings_.supervisor_program};
  FairShareKeeper fair_share_{io_, store_, scheduler_};
  ServiceNotifier service_{io_};
  SupervisedRunner runner_{supervisors_, processes_, groups_, machine_, settings_.config.device_isolation};
  // The checkpoint calls of suspend and resume, each on a thread, their ends posted to io_.
  CheckpointCalls checkpoints_{io_, settings_.checkpoint_program,
                               [this](JobId id, CheckpointOutcome outcome) {
                                 dispatcher_.checkpoint_done(id, std::move(outcome));
                               }};
  Dispatcher dispatcher_;
  std::optional<gid_t> admin_gid_;
  // What is drained (the queue, single GPUs), by whom, when and why: kept in the store's settings.
  DrainState drain_;
  // GPUs kept from new jobs for their health (health/quarantine.h), kept in the store's settings.
  QuarantineState quarantine_;
  Machine last_reading_;  // the latest sample: what an administrator's release accepts
  std::optional<EventStream> events_;  // from open_events on
  std::set<JobId> told_idle_;          // running jobs whose idle flag was told, while it lasts
  std::set<JobId> told_overrun_;       // and those past their slice
  std::set<JobId> idle_suspend_tried_;  // idle jobs the policy tried to suspend, while they stay idle
  std::set<JobId> preempt_tried_;       // jobs preemption tried to suspend (kept until they end)
  std::set<JobId> idle_told_before_restart_;  // told idle by the daemon before this one
  // The last survey of the GPUs (leases, outside use), before the daemon's own jobs are taken
  // out: a drain of a GPU applies to it at once, without waiting for the next sample.
  std::vector<GpuAvailability> survey_;
  bool ending_ = false;
  std::optional<std::string> fatal_;  // why the daemon stopped of itself  // end_session(): stopping once the cancelled jobs have ended

  std::vector<std::pair<SessionPtr, Job>> pending_submissions_;  // admitted, not yet stored
  std::unordered_map<JobId, SessionPtr> lease_sessions_;
  std::map<JobId, std::vector<std::weak_ptr<Session>>> waiters_;
  bool publish_pending_ = false;
  asio::steady_timer publish_timer_{io_};
  // Last, so they stop first: the HTTP threads read the monitor, whose thread posts to io_.
  std::unique_ptr<Monitor> monitor_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace gpupool
