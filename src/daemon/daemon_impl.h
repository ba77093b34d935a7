// The daemon's one object, shared by the files that make it up: daemon.cc (start-up, the
// restart's adoption, the loop, signals, samples), requests.cc (the protocol's requests) and
// dispatcher.cc (the driver of the job lifecycle: scheduling, starting attempts, their ends).
// Its parts with a job of their own are objects of their own: Sessions (the socket),
// ProcessWatch (pidfds), JobGroups (device isolation's cgroups), SupervisorPool,
// FairShareKeeper, ServiceNotifier.
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

#include "daemon/daemon.h"
#include "daemon/fair_share_keeper.h"
#include "daemon/http_server.h"
#include "daemon/job_groups.h"
#include "daemon/process_watch.h"
#include "daemon/service_notifier.h"
#include "daemon/session.h"
#include "daemon/supervisor_pool.h"
#include "gpu/gpu_backend.h"
#include "jobs/job_store.h"
#include "jobs/lifecycle.h"
#include "lease/lease_directory.h"
#include "monitor/monitor.h"
#include "os/host_files.h"
#include "protocol/messages.h"
#include "sched/scheduler.h"

namespace gpupool {

// What the scheduler needs to know of a job.
inline JobRequest scheduler_request(const Job& job) {
  return JobRequest{job.id, job.owner.user, job.spec.gpus, job.spec.priority, job.spec.time_limit_s};
}

class Daemon::Impl {
 public:
  Impl(DaemonSettings settings, JobStore store, LeaseDirectory leases, std::unique_ptr<GpuBackend> backend,
       Machine machine, Scheduler scheduler);

  Result<void> open_socket() { return sessions_.listen(settings_.state_dir, settings_.runtime_dir); }
  Result<void> watch_end_with();
  Result<void> isolate_devices();
  Result<void> open_monitor(UsageStore usage);
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
  void on_disconnect(const SessionPtr& session);
  void commit_submissions();
  Result<Job> admit(const SessionPtr& session, const protocol::SubmitRequest& request, JobKind kind);
  size_t waiting_jobs_of(uid_t uid) const;
  bool may_act_on(const Session& session, const Job& job) const;
  Job for_client(Job job, const Session& session) const;
  void answer_wait(const SessionPtr& session);

  // dispatcher.cc: the lifecycle's driver.
  // Hands the event to the lifecycle and carries out its effects; what refused it or went
  // wrong in carrying them out, for whoever asked.
  std::optional<std::string> feed(const lifecycle::Event& event);
  std::optional<std::string> carry_out(const lifecycle::Effect& effect);
  void finished(JobId id, JobState state, std::string reason);
  void dispatch();
  void start(const JobStart& decision);
  void start_attempt(const lifecycle::StartAttempt& start);
  void start_batch(Job& job, HeldLeases held, StandbySupervisor supervisor);
  void start_interactive(Job& job, HeldLeases held);
  // The attempt (or the interactive job) has ended: its GPUs are free, and the lifecycle decides.
  void attempt_ended(JobId id, lifecycle::AttemptExited ended);
  // The watched process of a running job has ended.
  void on_exit(JobId id);
  std::optional<std::string> signal_attempt(const Job& job);
  std::set<std::string> running_batch_groups() const;
  Result<std::optional<Job>> find_job(JobId id) const;
  void save(const Job& job);
  std::string record_path(const Job& job) const;
  void fill_log_paths(Job& job) const;

  // daemon.cc
  void wait_for_signal();
  void end_session(const std::string& by);
  void stop_once_idle();
  void schedule_sample(std::chrono::milliseconds delay);
  void on_sample(const Machine& machine);
  // Hands the monitor the queue as it stands, at most a few times a second.
  void publish();

  DaemonSettings settings_;
  JobStore store_;
  LeaseDirectory leases_;
  std::unique_ptr<GpuBackend> backend_;
  Machine machine_;
  Scheduler scheduler_;
  HostFiles host_;
  asio::io_context io_;
  // After io_, so they go before it: they hold its handlers and timers.
  Sessions sessions_{io_};
  asio::signal_set signals_{io_, SIGTERM, SIGINT};
  ProcessWatch processes_{io_, [this](JobId id) { on_exit(id); }};
  JobGroups groups_{io_, [this] { return running_batch_groups(); }};
  SupervisorPool supervisors_{io_, settings_.supervisor_program};
  FairShareKeeper fair_share_{io_, store_, scheduler_};
  ServiceNotifier service_{io_};
  std::optional<gid_t> admin_gid_;
  bool ending_ = false;  // end_session(): stopping once the cancelled jobs have ended

  JobLifecycle lifecycle_{[this](JobId id) -> std::optional<JobState> {
    auto stored = store_.get(id);
    return stored && *stored ? std::optional((*stored)->state) : std::nullopt;
  }};
  std::map<JobId, Job> active_;  // queued, held and running jobs: what the lifecycle tracks
  // What a granted job's attempt starts with, from the grant to the lifecycle's StartAttempt.
  struct Reserved {
    std::optional<StandbySupervisor> supervisor;  // a batch job's
    HeldLeases held;
  };
  std::optional<Reserved> reserved_;
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
