#include "daemon/daemon.h"

#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "daemon/attempt_record.h"
#include "daemon/daemon_impl.h"
#include "daemon/supervisor.h"
#include "jobs/job_text.h"
#include "lease/gpu_pool.h"
#include "os/accounts.h"
#include "os/clock.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/process.h"
#include "sched/mps.h"
#include "sched/preemption.h"
#include "sched/slice_watch.h"
#include "sim/open_backend.h"

namespace gpupool {
namespace {

// How stale the monitor's view of the queue (/api/jobs, the dashboard, top) may be.
constexpr auto kPublishEvery = std::chrono::milliseconds(100);

}  // namespace

Daemon::Impl::Impl(DaemonSettings settings, JobStore store, LeaseDirectory leases, std::unique_ptr<GpuBackend> backend,
                   Machine machine, Scheduler scheduler)
    : settings_(std::move(settings)),
      store_(std::move(store)),
      leases_(std::move(leases)),
      backend_(std::move(backend)),
      machine_(std::move(machine)),
      scheduler_(std::move(scheduler)),
      dispatcher_(DispatcherSettings{settings_.state_dir, settings_.config.kill_grace_s, own_pid(),
                                     OutputLimits{settings_.config.max_log_bytes, settings_.config.state_reserve_bytes},
                                     mps_slices_},
                  store_, leases_,
                  machine_, scheduler_, runner_, host_,
                  DispatcherHooks{
                      .hand_to_client =
                          [this](const Job& job, const HeldLeases& held, const std::vector<std::string>& environment) {
                            return hand_to_client(job, held, environment);
                          },
                      .client_connected = [this](JobId id) { return lease_sessions_.count(id) > 0; },
                      .finished = [this](const Job& job) { job_finished(job); },
                      .look_again_soon = [this] { schedule_sample(std::chrono::milliseconds(50)); },
                      .queue_changed = [this] { publish(); },
                      .mps_environment =
                          [this](const Job& job, unsigned gpu) {
                            return mps_.client_environment(machine_.gpus.at(gpu).uuid, *job.spec.gpus.slice_mib,
                                                           job.spec.gpus.sm_percent);
                          },
                      .started_in = [this](double seconds) { monitor_->observe_dispatch(seconds); },
                      .mps_fault_reason = [this](JobId id) { return mps_fault_reason(id); },
                      .started = [this](const Job& job) { events_->add(job_started_event(job, unix_now())); },
                      .requeued = [this](const Job& job) { events_->add(job_requeued_event(job, unix_now())); },
                      .call_checkpoint =
                          [this](JobId id, CheckpointStep step, const std::vector<pid_t>& pids) {
                            checkpoints_.call(id, step, pids);
                          },
                      .suspended =
                          [this](const Job& job) {
                            events_->add(job_event(EventKind::JobSuspended, job, unix_now(), suspension_text(job)));
                          },
                      .resumed =
                          [this](const Job& job) {
                            preempt_tried_.erase(job.id);  // it may give way again
                            events_->add(job_event(EventKind::JobResumed, job, unix_now(), ""));
                          },
                      .suspend_failed =
                          [this](const Job& job, const std::string& why) {
                            events_->add(job_event(EventKind::JobSuspendFailed, job, unix_now(), why));
                          },
                      .mps_control_found = [this](const std::string& gpu_uuid) { return mps_.controls(gpu_uuid); },
                      .client_stops_the_clock =
                          [this](JobId id) {
                            auto session = lease_sessions_.find(id);
                            return session != lease_sessions_.end() && session->second->stops_the_clock;
                          },
                  }) {}

// ---------------------------------------------------------------------------------------------
// Start-up

Result<void> Daemon::Impl::isolate_devices() {
  return groups_.set_up(settings_.config.device_isolation, machine_, settings_.state_dir);
}

Result<void> Daemon::Impl::recover() {
  if (settings_.config.admin_group) {
    auto admins = group_id(*settings_.config.admin_group);
    if (!admins) return fail("admin_group: {}", admins.error().message);
    admin_gid_ = *admins;
  }
  TRY_ASSIGN(auto drained, store_.setting("drain"));
  if (drained) {
    auto state = parse_drain_state(*drained);
    if (!state) return fail("the job store's drain setting: {}", state.error().message);
    drain_ = std::move(*state);
  } else {
    TRY(recover_drain_of_an_older_daemon());
  }
  if (drain_.queue) dispatcher_.feed(lifecycle::Drain{});
  TRY_ASSIGN(auto quarantined, store_.setting("quarantine"));
  if (quarantined) {
    auto state = parse_quarantine_state(*quarantined);
    if (!state) return fail("the job store's quarantine setting: {}", state.error().message);
    quarantine_ = std::move(*state);
  }
  if (!drain_.gpus.empty() || !quarantine_.gpus.empty()) {
    // Kept from jobs before the first sample, which may come after a dispatch.
    std::vector<GpuAvailability> unsurveyed(machine_.gpus.size());
    mark_out_of_service(unsurveyed);
    TRY(scheduler_.set_outside_use(unsurveyed));
  }
  // Before a job's attempt could start another control daemon. Also where this daemon holds
  // slices without MPS: one started under an earlier setting is still ours to quit.
  mps_.adopt();
  // Before adoption: jobs that ended while no daemon ran are recorded as adoption finds them.
  if (auto run_times = store_.recent_run_times(settings_.config.scheduler.runtime_history)) {
    scheduler_.import_run_times(*run_times);
  } else {
    fmt::print(stderr, "gpupoold: run-time estimates start afresh: {}\n", run_times.error().message);
  }
  TRY_ASSIGN(std::vector<Job> jobs, store_.unfinished());
  TRY_ASSIGN(std::vector<JobId> waiting, dispatcher_.adopt_running(std::move(jobs)));
  fair_share_.restore();  // after adoption: the adopted jobs add what they ran while it was down
  groups_.remove_finished();  // also those of attempts that ended while no daemon ran
  checkpoints_.forget_ended_processes();  // and lock files of processes that ended meanwhile
  dispatcher_.adopt_waiting(waiting);
  fair_share_.save_periodically();
  // An idle or overrunning job told before the restart is not told again while it lasts.
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running || !job.start_time) continue;
    if (events_->told_since(id, EventKind::JobIdle, *job.start_time)) idle_told_before_restart_.insert(id);
    if (events_->told_since(id, EventKind::SliceOverrun, *job.start_time)) told_overrun_.insert(id);
  }
  return {};
}

Result<void> Daemon::Impl::run() {
  wait_for_signal();
  sessions_.serve(
      admin_gid_,
      [this](const SessionPtr& session, const protocol::Request& request) {
        std::visit([&](const auto& r) { handle(session, r); }, request);
        dispatcher_.dispatch();
      },
      [this](const SessionPtr& session) { on_disconnect(session); });
  show_quarantine();
  monitor_->start();
  supervisors_.fill();
  dispatcher_.dispatch();
  fmt::print(stderr, "gpupoold: serving {} GPUs on {} (state in {}); memory slices held by {}\n", machine_.gpus.size(),
             sessions_.socket_path(), settings_.state_dir,
             mps_slices_ ? "MPS where it can, the watchdog"
             : watches_slices(settings_.config.slice_enforcement) ? "the watchdog"
                                                                  : "nothing (slice_enforcement = \"off\")");
  // The socket accepts clients from here on: only now may systemd start the units ordered after us.
  service_.tell(fmt::format("READY=1\nSTATUS=serving {} GPUs on {}", machine_.gpus.size(), sessions_.socket_path()));
  service_.feed_watchdog_periodically();
  io_.run();
  stop_unneeded_mps_controls();  // those of running slices stay, for them and the next daemon
  http_.reset();
  monitor_->stop();
  monitor_->save_usage();
  fair_share_.save();
  sessions_.stop_listening();
  groups_.remove_at_stop();
  fmt::print(stderr, "gpupoold: stopped; {} running jobs keep running\n", scheduler_.running());
  if (fatal_) return fail("{}", *fatal_);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Stopping

Result<void> Daemon::Impl::watch_end_with() {
  if (!settings_.end_with) return {};
  return processes_.watch_end_with(*settings_.end_with, [this] {
    fmt::print(stderr, "gpupoold: process {} has exited: cancelling every job and stopping\n", *settings_.end_with);
    end_session(fmt::format("the exit of process {}", *settings_.end_with));
  });
}

// SIGTERM leaves the jobs running for the next daemon, except for a daemon that lives for a
// process (--end-with): it has no next one, so it ends its jobs first; a second signal stops it
// at once.
void Daemon::Impl::wait_for_signal() {
  signals_.async_wait([this](const asio::error_code& error, int) {
    if (error) return;
    if (settings_.end_with && !ending_) {
      fmt::print(stderr, "gpupoold: signalled: cancelling every job and stopping\n");
      end_session("gpupoold stopping");
      return wait_for_signal();
    }
    service_.tell("STOPPING=1");
    io_.stop();
  });
}

void Daemon::Impl::end_session(const std::string& by) {
  ending_ = true;
  dispatcher_.feed(lifecycle::Drain{});  // not stored: a daemon started again later starts what is queued then
  dispatcher_.cancel_all(by);
  stop_once_idle();
}

void Daemon::Impl::stop_once_idle() {
  if (scheduler_.running() > 0) return;
  service_.tell("STOPPING=1");
  io_.stop();
}

// ---------------------------------------------------------------------------------------------
// Sampling: what stands on the GPUs apart from the daemon's own jobs

Result<void> Daemon::Impl::open_monitor(UsageStore usage) {
  MonitorSettings settings{settings_.config.sample_interval_s, settings_.config.history_s,
                           settings_.config.idle_flag_after_s, host_name(), settings_.state_dir,
                           settings_.config.state_reserve_bytes, settings_.config.private_data,
                           settings_.config.job_mapping_dir, settings_.config.profiling};
  monitor_ = std::make_unique<Monitor>(settings, machine_, *backend_, std::move(usage),
                                       [this](Machine machine, std::vector<XidEvent> xids) {
                                         asio::post(io_, [this, machine = std::move(machine), xids = std::move(xids)] {
                                           on_sample(machine, xids);
                                         });
                                       });
  if (settings_.config.http) {
    // Monitoring is not worth refusing jobs over: without its address the daemon serves on.
    HttpLimits limits;
    limits.max_connections = settings_.config.http_max_connections;
    limits.max_connections_per_peer = settings_.config.http_max_connections_per_address;
    auto http = HttpServer::start(*settings_.config.http, *monitor_, limits);
    if (http) {
      http_ = std::move(*http);
      fmt::print(stderr,
                 "gpupoold: HTTP on http://{}/ (/metrics, /api/gpus, /api/jobs, /api/history, /api/dashboard)\n",
                 http_->address());
    } else {
      fmt::print(stderr, "gpupoold: {}; serving without HTTP\n", http.error().message);
    }
  }
  return {};
}

void Daemon::Impl::open_events(EventLog log) {
  events_.emplace(sessions_, std::move(log), settings_.config.events, settings_.config.private_data);
  events_->trim(unix_now());
}

void Daemon::Impl::schedule_sample(std::chrono::milliseconds delay) { monitor_->sample_within(delay); }

// One copy per burst of events, not one per event.
void Daemon::Impl::publish() {
  if (publish_pending_) return;
  publish_pending_ = true;
  // At most a few times a second: every queued job's reason is worked out, and a busy queue
  // dispatches far more often than anyone reads the view.
  publish_timer_.expires_after(kPublishEvery);
  publish_timer_.async_wait([this](const asio::error_code& error) {
    if (error) return;
    publish_pending_ = false;
    QueueView view;
    view.drained = dispatcher_.drained();
    size_t queued = 0;
    std::optional<std::map<JobId, double>> starts;  // planned once, when a waiting client is told
    for (const auto& [id, job] : dispatcher_.active()) {
      QueueEntry entry = queue_entry(job);
      if (entry.state == JobState::Queued) {
        Scheduler::Waiting waiting = waiting_for(job);
        entry.wait_reason = waiting.reason;
        entry.reason = std::move(waiting.detail);
        tell_lease_client(id, entry.reason, starts);
      }
      queued += entry.state == JobState::Queued;
      view.jobs.push_back(std::move(entry));
    }
    monitor_->publish(std::move(view));
    service_.tell_status(fmt::format("STATUS={} running, {} queued{}", scheduler_.running(), queued,
                                     dispatcher_.drained() ? ", drained" : ""));
  });
}

// A `run` or `launch` waiting for its lease hears why whenever that changes, with when it is
// expected to start.
void Daemon::Impl::tell_lease_client(JobId id, const std::string& reason,
                                     std::optional<std::map<JobId, double>>& starts) {
  auto session = lease_sessions_.find(id);
  if (session == lease_sessions_.end() || session->second->granted || session->second->told_reason == reason) return;
  if (!starts) starts = expected_starts();
  session->second->told_reason = reason;
  auto start = starts->find(id);
  sessions_.send(session->second, protocol::LeaseQueued{id, reason, start == starts->end() ? std::nullopt
                                                                                          : std::optional(start->second)});
}

// Before the drain was one setting, it was four: read once, written back as one.
Result<void> Daemon::Impl::recover_drain_of_an_older_daemon() {
  TRY_ASSIGN(auto drained, store_.setting("drained"));
  if (!drained || *drained != "1") return {};
  TRY_ASSIGN(auto by, store_.setting("drained_by"));
  TRY_ASSIGN(auto at, store_.setting("drained_at"));
  TRY_ASSIGN(auto reason, store_.setting("drain_reason"));
  drain_.queue = DrainNote{by.value_or(""), at ? std::strtod(at->c_str(), nullptr) : 0, reason.value_or("")};
  TRY(store_.set_setting("drain", encode(drain_)));
  return store_.set_setting("drained", "0");
}

// A reading from the monitor's thread, posted to the loop.
void Daemon::Impl::on_sample(const Machine& machine, const std::vector<XidEvent>& xids) {
  keep_runtime_directory();
  if (fatal_) return;
  observe_health(machine, xids);
  auto survey = survey_pool(machine, leases_, host_, busy_memory_threshold_mib());
  if (!survey) {
    fmt::print(stderr, "gpupoold: cannot read the leases: {}\n", survey.error().message);
    return;
  }
  survey_ = std::move(*survey);
  watch_slices(machine);
  let_go_of_checkpointed(machine);
  stop_unneeded_mps_controls();
  apply_survey();
  const std::map<JobId, double> idle = idle_running_jobs();
  tell_idle_jobs(idle);
  // Each queued job's wait explained once a sample, for both policies (off by default).
  if (settings_.config.idle_suspend_after_s || settings_.config.preempt_by_suspending) {
    const std::vector<WaitingJob> waiting = jobs_waiting_for_gpus();
    suspend_idle_jobs(idle, waiting);
    preempt_by_suspending(waiting);
  }
  suspend_jobs_on_loan();
}

std::map<JobId, double> Daemon::Impl::idle_running_jobs() const {
  std::map<JobId, double> idle;
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running) continue;
    std::optional<JobUsage> usage = monitor_->usage_of(id);
    if (usage && usage->idle_since) idle[id] = *usage->idle_since;
  }
  return idle;
}

std::vector<Daemon::Impl::WaitingJob> Daemon::Impl::jobs_waiting_for_gpus() const {
  std::vector<WaitingJob> waiting;
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Queued) continue;
    WaitReason why = waiting_for(job).reason;
    if (why == WaitReason::Resources || why == WaitReason::Reservation || why == WaitReason::Priority) {
      waiting.push_back({&job, why});
    }
  }
  return waiting;
}

void Daemon::Impl::suspend_idle_jobs(const std::map<JobId, double>& idle, const std::vector<WaitingJob>& waiting) {
  const std::optional<double> after = settings_.config.idle_suspend_after_s;
  if (!after) return;
  const double now = unix_now();
  std::vector<std::pair<JobId, double>> due;  // and how long each has been idle
  for (const auto& [id, idle_since] : idle) {
    if (dispatcher_.active().at(id).suspension) continue;  // being suspended already
    if (now - idle_since >= *after && idle_suspend_tried_.count(id) == 0) due.emplace_back(id, now - idle_since);
  }
  std::erase_if(idle_suspend_tried_, [&](JobId id) { return idle.count(id) == 0; });
  // An idle job costs nothing on a machine that nobody waits for.
  if (due.empty() || waiting.empty()) return;
  for (const auto& [id, idle_for] : due) {
    idle_suspend_tried_.insert(id);
    std::string by = fmt::format("gpupoold (idle for {}, jobs waiting)", rough_duration_text(idle_for));
    if (auto refused = suspend(id, by, ResumeWhen::FreeAfterTheWaiting)) {
      fmt::print(stderr, "gpupoold: job {} is idle but cannot be suspended: {}\n", id, *refused);
    }
  }
}

void Daemon::Impl::preempt_by_suspending(const std::vector<WaitingJob>& queued) {
  if (!settings_.config.preempt_by_suspending) return;
  // One preemption at a time: the GPUs it frees are seen before more is suspended.
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state == JobState::Running && job.suspension) return;
  }
  // The first waiting job of the highest priority that waits for whole GPUs.
  const Job* waiting = nullptr;
  for (const auto& [job, why] : queued) {
    if (job->spec.gpus.slice_mib || job->spec.gpus.mig || why == WaitReason::Priority) continue;
    if (waiting == nullptr || job->spec.priority > waiting->spec.priority) waiting = job;
  }
  if (waiting == nullptr) return;
  unsigned free = 0;
  const std::vector<GpuAvailability>& availability = scheduler_.availability();
  for (const Gpu& gpu : machine_.gpus) {
    free += whole_gpu_free(gpu, availability.at(gpu.index)) && availability.at(gpu.index).external_mib == 0;
  }
  std::vector<PreemptionCandidate> candidates;
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running || job.spec.gpus.slice_mib || job.spec.gpus.mig ||
        preempt_tried_.count(id) > 0) {
      continue;
    }
    candidates.push_back({id, job.spec.priority, static_cast<unsigned>(job.gpus.size()), job.start_time.value_or(0)});
  }
  const JobId for_id = waiting->id;
  const std::string by = fmt::format("gpupoold (for job {} of priority {})", for_id, waiting->spec.priority);
  for (JobId id : jobs_to_preempt(waiting->spec.priority, waiting->spec.gpus.count, free, std::move(candidates))) {
    preempt_tried_.insert(id);  // a job the driver refuses once is not tried again
    if (auto refused = suspend(id, by, ResumeWhen::FreeAfterTheWaiting)) {
      fmt::print(stderr, "gpupoold: job {} cannot be suspended for job {}: {}\n", id, for_id, *refused);
    }
  }
}

void Daemon::Impl::suspend_jobs_on_loan() {
  const std::optional<Reservation>& reservation = scheduler_.reservation();
  if (!settings_.config.scheduler.backfill_by_suspending || !reservation) return;
  std::vector<JobId> in_the_way = scheduler_.jobs_in_the_way();
  if (in_the_way.empty()) return;
  const std::string by = fmt::format("gpupoold (on loan: GPU {} reserved for job {})",
                                     gpu_list_text(reservation->gpus), reservation->id);
  for (JobId id : in_the_way) {
    auto job = dispatcher_.active().find(id);
    if (job == dispatcher_.active().end() || job->second.suspension || !scheduler_.give_way(id)) continue;
    if (auto refused = suspend(id, by, ResumeWhen::Free)) {
      fmt::print(stderr, "gpupoold: job {} is on loan but cannot be suspended for job {}: {}\n", id,
                 reservation->id, *refused);
      dispatcher_.end_loan(id);  // it runs on; the reservation waits for its end
    }
  }
}

void Daemon::Impl::tell_idle_jobs(const std::map<JobId, double>& idle) {
  const double now = unix_now();
  std::set<JobId> told;
  for (const auto& [id, idle_since] : idle) {
    told.insert(id);
    // The accounting flags a job anew after a restart: the idleness told before it is not again
    // (a job that worked meanwhile and fell idle again is not told either: the log cannot say).
    if (idle_told_before_restart_.erase(id) > 0) continue;
    if (told_idle_.count(id) == 0) {
      events_->add(job_event(EventKind::JobIdle, dispatcher_.active().at(id), now,
                             fmt::format("about 0 % utilisation for {}", rough_duration_text(now - idle_since))));
    }
  }
  told_idle_ = std::move(told);
}

void Daemon::Impl::tell_slice_overruns(const std::map<JobId, SliceUse>& worst) {
  std::set<JobId> over;
  for (const auto& [id, use] : worst) {
    if (!use.overrun()) continue;
    over.insert(id);
    auto job = dispatcher_.active().find(id);
    if (told_overrun_.count(id) > 0 || job == dispatcher_.active().end()) continue;
    Event event = job_event(EventKind::SliceOverrun, job->second, unix_now(),
                            fmt::format("{} on GPU {}{}", slice_overrun_text(use.used_mib, use.slice_mib), use.gpu,
                                        settings_.config.slice_overrun == SliceOverrunPolicy::Stop ? "; it is stopped" : ""));
    event.gpus = {use.gpu};
    events_->add(std::move(event));
  }
  told_overrun_ = std::move(over);
}

Event Daemon::Impl::gpu_event(EventKind kind, unsigned index, std::string user, std::string detail) const {
  Event event;
  event.time = unix_now();
  event.kind = kind;
  event.user = std::move(user);
  event.gpus = {index};
  event.detail = std::move(detail);
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running || std::ranges::find(job.gpus, index) == job.gpus.end()) continue;
    event.jobs.push_back(id);
    event.users.push_back(job.owner.user);
  }
  return event;
}

void Daemon::Impl::observe_health(const Machine& machine, const std::vector<XidEvent>& xids) {
  last_reading_ = machine;
  auto changes = gpupool::observe_health(quarantine_, machine, xids, unix_now(), settings_.config.quarantine);
  for (const QuarantineChange& change : changes) {
    Event event = gpu_event(change.quarantined ? EventKind::GpuQuarantined : EventKind::GpuReturned, change.index, "",
                            change.why);
    if (change.quarantined) {
      fmt::print(stderr, "gpupoold: GPU {} quarantined: {}. No new job starts on it; {} running there go on\n",
                 change.index, change.why, event.jobs.size());
    } else {
      fmt::print(stderr, "gpupoold: GPU {} is back from quarantine: {}\n", change.index, change.why);
    }
    events_->add(std::move(event));
  }
  // A repeated XID moves the clean window: kept too, so a restart does not shorten it.
  if (!changes.empty() || !xids.empty()) store_quarantine();
}

void Daemon::Impl::store_quarantine() {
  if (auto stored = store_.set_setting("quarantine", encode(quarantine_)); !stored) {
    fmt::print(stderr, "gpupoold: cannot store the quarantine: {}\n", stored.error().message);
  }
  show_quarantine();
}

void Daemon::Impl::show_quarantine() {
  std::vector<bool> quarantined(machine_.gpus.size(), false);
  for (const auto& [uuid, note] : quarantine_.gpus) {
    if (note.index < quarantined.size()) quarantined[note.index] = true;
  }
  monitor_->set_quarantined(std::move(quarantined));
}

void Daemon::Impl::mark_out_of_service(std::vector<GpuAvailability>& gpus) const {
  mark_drained_gpus(drain_, gpus);
  mark_quarantined_gpus(quarantine_, gpus);
}

void Daemon::Impl::stop_unneeded_mps_controls() {
  std::set<std::string> in_use;
  for (const auto& [id, job] : dispatcher_.active()) {
    // Whatever the setting now: a slice started under an earlier one may be a client of its
    // GPU's control daemon, which then stays until it ends (and its servers have no client).
    if (job.state == JobState::Running && runs_under_mps(job.spec.gpus)) {
      in_use.insert(job.gpu_uuids.begin(), job.gpu_uuids.end());
    }
  }
  mps_.stop_unneeded(in_use);
}

std::optional<std::string> Daemon::Impl::mps_fault_reason(JobId id) {
  // Each running slice's program too: a fault may come before any sample saw its clients.
  std::map<uint32_t, JobId> clients = mps_clients_;
  for (const auto& [running, job] : dispatcher_.active()) {
    if (!runs_under_mps(job.spec.gpus)) continue;
    if (std::optional<uint32_t> program = dispatcher_.program_pid(running)) clients.emplace(*program, running);
  }
  for (auto& [job, why] : mps_fault_reasons(mps_.new_faults(), clients)) mps_fault_reasons_[job] = why;
  auto reason = mps_fault_reasons_.find(id);
  if (reason == mps_fault_reasons_.end()) return std::nullopt;
  std::string why = std::move(reason->second);
  mps_fault_reasons_.erase(reason);
  return why;
}

std::vector<SliceUse> Daemon::Impl::gpu_use_of(const Job& job, const Machine& sample) const {
  if (!job.pid) return {};
  return slice_uses(sample, {WatchedSlice{job.id, static_cast<uint32_t>(*job.pid), job.gpus, 0}},
                    [this](uint32_t pid) { return host_.parent_pid(pid); });
}

void Daemon::Impl::let_go_of_checkpointed(const Machine& sample) {
  dispatcher_.let_go_of_checkpointed([&](const Job& job) {
    std::vector<std::string> listed;
    for (const SliceUse& use : gpu_use_of(job, sample)) {
      for (uint32_t pid : use.pids) listed.push_back(fmt::format("pid {} on GPU {}", pid, use.gpu));
    }
    return listed;
  });
}

std::optional<std::string> Daemon::Impl::suspend(JobId id, const std::string& by, ResumeWhen resume_when) {
  const Job& job = dispatcher_.active().at(id);
  std::set<pid_t> pids;
  uint64_t gpu_mib = 0;
  for (const SliceUse& use : gpu_use_of(job, last_reading_)) {
    pids.insert(use.pids.begin(), use.pids.end());
    gpu_mib += use.used_mib;
  }
  if (std::optional<uint64_t> limit = settings_.config.suspend_host_memory_mib) {
    uint64_t held = 0;
    for (const auto& [other, suspended] : dispatcher_.active()) {
      if (suspended.suspension) held += suspended.suspension->host_mib;
    }
    if (held + gpu_mib > *limit) {
      return fmt::format("job {} holds {} GiB of GPU memory, and suspended jobs hold {} GiB of the {} GiB that "
                         "suspend_host_memory_mb allows them",
                         id, gib_text(gpu_mib), gib_text(held), gib_text(*limit));
    }
  }
  return dispatcher_.suspend(id, by, {pids.begin(), pids.end()}, gpu_mib, resume_when);
}

void Daemon::Impl::watch_slices(const Machine& sample) {
  if (!watches_slices(settings_.config.slice_enforcement)) return;
  std::vector<WatchedSlice> slices;
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running || !job.spec.gpus.slice_mib || !job.pid) continue;
    slices.push_back(WatchedSlice{id, static_cast<uint32_t>(*job.pid), job.gpus, *job.spec.gpus.slice_mib});
  }
  std::vector<SliceUse> uses = slice_uses(sample, slices, [this](uint32_t pid) { return host_.parent_pid(pid); });
  if (mps_slices_) {  // who a pid in an MPS server's log is, should a fault end it
    for (const SliceUse& use : uses) {
      for (uint32_t pid : use.pids) mps_clients_[pid] = use.job;
    }
  }
  std::map<JobId, std::set<uint32_t>> processes;
  for (const SliceUse& use : uses) processes[use.job].insert(use.pids.begin(), use.pids.end());
  monitor_->set_slice_processes(std::move(processes));
  auto worst = worst_use_per_job(uses);
  monitor_->set_slice_uses(worst);
  tell_slice_overruns(worst);
  dispatcher_.stop_outside_mps(worst);
  dispatcher_.stop_slice_overruns(worst, settings_.config.slice_overrun);
}

void Daemon::Impl::apply_survey() {
  if (survey_.empty()) return;  // before the first sample: it will apply the drain
  std::vector<GpuAvailability> outside = survey_;
  outside.resize(machine_.gpus.size());
  mark_out_of_service(outside);
  monitor_->set_pool(outside);
  // Leases of the daemon's own running jobs are the scheduler's business, not outside use.
  for (const auto& [id, job] : dispatcher_.active()) {
    if (job.state != JobState::Running) continue;
    for (unsigned index : job.gpus) {
      if (index >= outside.size()) continue;
      GpuAvailability& a = outside[index];
      if (job.spec.gpus.mig) {
        for (const std::string& uuid : job.gpu_uuids) std::erase(a.mig_taken, uuid);
      } else if (job.spec.gpus.slice_mib) {
        a.shared_mib -= std::min(a.shared_mib, *job.spec.gpus.slice_mib);
      } else {
        a.exclusive_held = false;
      }
    }
  }
  if (auto set = scheduler_.set_outside_use(outside); !set) {
    fmt::print(stderr, "gpupoold: {}\n", set.error().message);
  }
  dispatcher_.check_running(unix_now());
  dispatcher_.save_again(unix_now());
  monitor_->set_unsaved_jobs(dispatcher_.unsaved().size());
  dispatcher_.dispatch();
}

namespace {

// A runtime directory that is not root's (on a machine without the package, a user made
// /tmp/gpupool first) locks every other user out, and its owner could remove their leases. A root
// daemon moves it aside, whole, and makes its own; unless a lease in it is held: its owner's
// running work, which a new directory would not see.
Result<void> take_back_runtime_directory(const std::string& path) {
  if (effective_user_id() != 0) return {};
  auto status = link_status(path);
  if (!status || (status->type == FileType::directory && status->owner == 0)) return {};
  if (status->type == FileType::directory) {
    std::string locks = path + "/locks";
    auto names = directory_entries(locks);
    for (const std::string& name : names ? *names : std::vector<std::string>{}) {
      auto lock = open_regular_file(locks + "/" + name, O_RDWR | O_NONBLOCK | O_NOCTTY);
      if (!lock || !*lock) continue;  // not a lock file anyone could hold
      if (auto held = find_range_lock((*lock)->get(), ByteRange{0, kToEndOfFile}); held && *held) {
        return fail("{} belongs to {} (uid {}), not root, and a lease in it is held ({}): it cannot be moved aside "
                    "while that runs; end it, or have it ended, and start gpupoold again",
                    path, user_name(status->owner), status->owner, name);
      }
    }
  }
  std::string aside = fmt::format("{}.not-roots-{}", path, static_cast<int64_t>(unix_now()));
  if (auto moved = rename_file(path, aside); !moved) {
    return fail("{} belongs to {} (uid {}), not root, and cannot be moved aside: {}", path,
                user_name(status->owner), status->owner, moved.error().message);
  }
  fmt::print(stderr, "gpupoold: {} belonged to {} (uid {}), not root: moved it to {} and made it again, root's\n",
             path, user_name(status->owner), status->owner, aside);
  return {};
}

}  // namespace

// Checked at every sample. The directory first, then the jobs' locks in it, then the socket, in one
// turn of the loop: no client is served, and nothing leased by the daemon, in between. What
// cannot be made again stops the daemon, loudly; its jobs run on. A deletion still under way
// (`rm -rf` removes the socket before the directory) can take the directory away between the two
// steps: then the directory is made again first, a few times at most.
void Daemon::Impl::keep_runtime_directory() {
  constexpr int kRounds = 3;
  for (int round = 1; round <= kRounds; ++round) {
    if (!leases_.in_place()) {
      fmt::print(stderr, "gpupoold: the lease directory {} was deleted or replaced: making it again and locking "
                 "the running jobs' GPUs in it\n", leases_.path());
      auto remade = take_back_runtime_directory(leases_.path());
      if (remade) remade = leases_.remake();
      if (!remade) {
        fatal_ = fmt::format("cannot make the lease directory {} again: {}", leases_.path(), remade.error().message);
        io_.stop();
        return;
      }
      dispatcher_.relock_running();
    }
    if (sessions_.socket_in_place()) return;
    auto bound = sessions_.listen_again();
    if (bound) {
      fmt::print(stderr, "gpupoold: listening again on {}\n", sessions_.socket_path());
      return;
    }
    if (leases_.in_place() || round == kRounds) {
      fatal_ = fmt::format("cannot listen again on {}: {}", sessions_.socket_path(), bound.error().message);
      io_.stop();
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonSettings settings) {
  // The database holds every job's environment: nothing the daemon creates is for others to
  // read unless it says so (the socket, the directories and the logs get their modes set).
  set_umask(077);
  TRY(LeaseDirectory::prepare_slurm_job_directory());
  TRY(ensure_own_directory(settings.state_dir, 0755));
  TRY(ensure_own_directory(settings.state_dir + "/logs", 0755));
  TRY(ensure_own_directory(settings.state_dir + "/attempts", 0700));
  std::string database = settings.state_dir + "/gpupool.db";
  // The job store first: it refuses a database with tables it does not know, and would take
  // a new file holding only the accounting's table for someone else's.
  TRY_ASSIGN(JobStore store, JobStore::open(database));
  // A database deleted or replaced while the jobs' files stayed must not hand their ids out
  // again: a new job would meet an old job's log and attempt record.
  std::vector<std::string> recorded;
  for (const char* kind : {"/logs", "/attempts"}) {
    TRY_ASSIGN(std::vector<std::string> names, directory_entries(settings.state_dir + kind));
    recorded.insert(recorded.end(), names.begin(), names.end());
  }
  TRY(store.keep_ids_above(largest_recorded_id(recorded)));
  TRY_ASSIGN(UsageStore usage, UsageStore::open(database));
  TRY_ASSIGN(EventLog events, EventLog::open(database));
  for (const char* suffix : {"", "-wal", "-shm"}) (void)change_mode(database + suffix, 0600);
  TRY(take_back_runtime_directory(settings.runtime_dir));
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open(settings.runtime_dir));
  TRY_ASSIGN(auto backend, open_pool_backend());
  settings.checkpoint_program = checkpoint_program();
  settings.checkpoint_program.lock_directory = settings.state_dir + "/checkpoints";
  TRY(ensure_own_directory(settings.checkpoint_program.lock_directory, 0700));
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = true, .processes = false}));
  TRY_ASSIGN(Scheduler scheduler, Scheduler::create(machine, settings.config.scheduler));
  auto impl = std::make_unique<Impl>(std::move(settings), std::move(store), std::move(leases), std::move(backend),
                                     std::move(machine), std::move(scheduler));
  TRY(impl->open_socket());
  TRY(impl->watch_end_with());
  TRY(impl->isolate_devices());  // once this is the one daemon of its state directory
  impl->open_events(std::move(events));
  TRY(impl->open_monitor(std::move(usage)));
  TRY(impl->recover());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Result<void> Daemon::run() { return impl_->run(); }

}  // namespace gpupool
