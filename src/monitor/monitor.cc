#include "monitor/monitor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "health/quarantine.h"
#include "os/clock.h"
#include "os/files.h"

namespace gpupool {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Running jobs' usage reaches the store this often (and when they stop), so a crash of the
// daemon loses at most this much of it.
constexpr auto kSaveEvery = std::chrono::seconds(60);
// The ring buffer's size is bounded whatever the configuration asks (a day at 1 s).
constexpr double kMaxHistoryTicks = 86400;

const std::vector<double> kDispatchBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
const std::vector<double> kQueueWaitBounds = {1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400};

// Milliseconds are plenty for charts, and the JSON stays short.
double to_millis(double seconds) { return std::round(seconds * 1000) / 1000; }

template <typename T>
json or_null(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// The readings the API shows (the clocks are for /metrics only).
json sample_json(const GpuSample& s) {
  json out = {{"time", s.time}};
  for_each_sampled_reading(s, [&](const ReadingInfo& reading, const auto& value) {
    if (reading.sample == SampleUse::Sampled) out[reading.key] = or_null(value);
  });
  return out;
}

std::optional<SliceUse> slice_use_of(const std::map<JobId, SliceUse>& uses, JobId id) {
  auto it = uses.find(id);
  return it == uses.end() ? std::nullopt : std::optional(it->second);
}

// The slice watchdog's reading of a job: null when not watched (whole GPUs, queued, watchdog off).
json slice_json(const std::optional<SliceUse>& use) {
  if (!use) return {{"slice_used_mib", nullptr}, {"slice_overrun", nullptr}};
  return {{"slice_used_mib", use->used_mib},
          {"slice_overrun", use->overrun() ? json(slice_overrun_text(use->used_mib, use->slice_mib)) : json(nullptr)}};
}

json usage_json(const Accounting::JobAccount* account, double now, const Accounting& accounting, JobId id) {
  json usage = {{"gpu_hours", nullptr}, {"mean_utilization", nullptr}, {"idle", false}, {"idle_since", nullptr}};
  if (account != nullptr) {
    usage = {{"gpu_hours", account->total.gpu_seconds / 3600},
             {"mean_utilization", or_null(account->total.mean_utilization())},
             {"idle", accounting.idle(id, now)},
             {"idle_since", or_null(account->idle_since)}};
  }
  protocol::put_efficiency(usage, account != nullptr ? efficiency_of(account->total) : GpuEfficiency{});
  return usage;
}

}  // namespace

QueueEntry queue_entry(const Job& job) {
  QueueEntry entry{job.id,
                    display_name(job),
                    job.owner.user,
                    job.state,
                    job.spec.kind,
                    job.spec.gpus.count,
                    job.spec.gpus.slice_mib,
                    job.spec.gpus.sm_percent,
                    job.spec.priority,
                    job.gpus,
                    job.submit_time,
                    job.start_time,
                    job.reason,
                    job.state == JobState::Held ? std::optional(WaitReason::Held) : job.wait_reason};
  if (job.spec.gpus.mig) {
    entry.mig_profile = job.spec.gpus.mig->profile;
    if (!job.gpu_uuids.empty()) entry.mig_uuid = job.gpu_uuids.front();
  }
  if (job.state == JobState::Suspended && job.suspension) entry.suspended_host_mib = job.suspension->host_mib;
  return entry;
}

std::optional<JobUsage> Monitor::usage_of(JobId id) {
  {
    std::lock_guard lock(mutex_);
    const Accounting::JobAccount* account = accounting_.job(id);
    auto slice = slice_uses_.find(id);
    std::optional<uint64_t> slice_used_mib;
    if (slice != slice_uses_.end()) slice_used_mib = slice->second.used_mib;
    if (account != nullptr) {
      double now = unix_now();
      return JobUsage{account->total.gpu_seconds / 3600, account->total.mean_utilization(),
                      accounting_.idle(id, now) ? account->idle_since : std::nullopt, slice_used_mib,
                      efficiency_of(account->total)};
    }
    // Watched before its first accounting: only the slice's reading.
    if (slice_used_mib) return JobUsage{0, std::nullopt, std::nullopt, slice_used_mib};
  }
  // A job that no longer runs: what the store kept of it.
  auto stored = store_.job(id);
  if (!stored || !*stored) return std::nullopt;
  const UsageTally& usage = (*stored)->usage;
  return JobUsage{usage.gpu_seconds / 3600, usage.mean_utilization(), std::nullopt, std::nullopt, efficiency_of(usage)};
}

Monitor::Monitor(MonitorSettings settings, Machine machine, GpuBackend& backend, UsageStore store,
                 std::function<void(Machine, std::vector<XidEvent>)> on_sample)
    : settings_(std::move(settings)),
      machine_(std::move(machine)),
      backend_(backend),
      store_(std::move(store)),
      on_sample_(std::move(on_sample)),
      started_(unix_now()),
      last_saved_(Clock::now()),
      view_(std::make_shared<const QueueView>()),
      pool_(machine_.gpus.size()),
      history_(machine_.gpus.size(),
               static_cast<size_t>(std::min(kMaxHistoryTicks, std::ceil(settings_.history_s / settings_.sample_interval_s)))),
      accounting_(settings_.idle_flag_after_s),
      dispatch_latency_(kDispatchBounds),
      queue_wait_(kQueueWaitBounds) {
  if (!settings_.job_mapping_dir.empty()) job_mapping_.emplace(settings_.job_mapping_dir);
  if (auto totals = store_.user_totals()) {
    for (const auto& [user, usage] : *totals) accounting_.seed_user(user, usage);
  } else {
    fmt::print(stderr, "gpupoold: {}\n", totals.error().message);
  }
}

Monitor::~Monitor() { stop(); }

void Monitor::start() {
  next_sample_ = Clock::now();
  sampler_ = std::thread([this] { sample_loop(); });
  auto watch = backend_.watch_xid_events();
  if (!watch) {
    fmt::print(stderr, "gpupoold: no XID events: {}\n", watch.error().message);
    return;
  }
  fmt::print(stderr, "gpupoold: watching critical XID events of {} GPU{}\n", (*watch)->gpus_watched(),
             (*watch)->gpus_watched() == 1 ? "" : "s");
  xid_watch_ = std::move(*watch);
  {
    std::lock_guard lock(mutex_);
    watching_xids_ = true;
  }
  xid_watcher_ = std::thread([this] { xid_loop(); });
}

void Monitor::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  if (xid_watcher_.joinable()) xid_watcher_.join();
}

// --- the XID watcher's thread ---

// Waits in short steps so that stop() is never kept long. An event brings the next reading
// forward: the quarantine acts on it within moments, not a sample interval later. An error is
// said once and the watch tried again a second later: one failed wait (a GPU just lost, say) must
// not end the watching for the daemon's life.
void Monitor::xid_loop() {
  constexpr auto kStep = std::chrono::milliseconds(250);
  constexpr auto kRetry = std::chrono::seconds(1);
  std::string last_failure;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
    }
    auto events = xid_watch_->wait(kStep);
    std::unique_lock lock(mutex_);
    if (!events) {
      if (events.error().message != last_failure) {
        fmt::print(stderr, "gpupoold: {} (trying again every second)\n", events.error().message);
        last_failure = events.error().message;
      }
      wake_.wait_for(lock, kRetry, [this] { return stopping_; });
      continue;
    }
    last_failure.clear();
    if (events->empty()) continue;
    for (const XidEvent& event : *events) {
      fmt::print(stderr, "gpupoold: GPU {} reported {}\n", event.gpu_uuid, describe_xid(event.xid));
      last_xids_[event.gpu_uuid] = event.xid;
    }
    pending_xids_.insert(pending_xids_.end(), events->begin(), events->end());
    next_sample_ = Clock::now();
    wake_.notify_all();
  }
}

// --- the sampler thread ---

void Monitor::sample_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto due = next_sample_;
    if (Clock::now() < due) {
      wake_.wait_until(lock, due);  // also woken by stop() and by a sooner sample_within()
      continue;
    }
    next_sample_ = due + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(settings_.sample_interval_s));
    if (next_sample_ < Clock::now()) next_sample_ = Clock::now();  // fell behind: no burst to catch up
    lock.unlock();
    take_sample();
    lock.lock();
  }
}

void Monitor::take_sample() {
  auto began = Clock::now();
  auto machine = backend_.discover(DiscoveryScope{.links = false, .processes = true, .activity = settings_.profiling});
  double took = std::chrono::duration<double>(Clock::now() - began).count();
  double now = to_millis(unix_now());
  if (!machine) {
    std::lock_guard lock(mutex_);
    if (machine.error().message != last_error_) {  // once, not every second
      fmt::print(stderr, "gpupoold: cannot read the GPUs: {}\n", machine.error().message);
      last_error_ = machine.error().message;
    }
    return;
  }
  std::vector<GpuSample> tick;
  std::vector<XidEvent> xids;
  SampleReadings readings;
  std::vector<std::vector<MigDevice>> mig_devices;
  std::vector<std::vector<GpuProcess>> processes;
  std::vector<std::optional<uint64_t>> unattributed;
  last_energy_mj_.resize(machine->gpus.size());
  for (size_t i = 0; i < machine->gpus.size(); ++i) {
    const Gpu& gpu = machine->gpus[i];
    tick.push_back(sample_of(gpu, now));
    GpuTick& reading = readings.gpus.emplace_back();
    reading.utilization = gpu.utilization_gpu;
    reading.sm_active = gpu.sm_active;
    reading.process_utilization = process_utilization_sum(gpu.processes);
    reading.memory_used_mib = gpu.memory_used_mib;
    // A counter that went back (the driver reloaded) gives no figure this once.
    if (gpu.energy_mj && last_energy_mj_[i] && *gpu.energy_mj >= *last_energy_mj_[i]) {
      reading.energy_j = static_cast<double>(*gpu.energy_mj - *last_energy_mj_[i]) / 1000;
    }
    last_energy_mj_[i] = gpu.energy_mj;
    for (const MigDevice& device : gpu.mig_devices) {
      if (device.activity.sm_active) reading.mig_sm_active[device.uuid] = *device.activity.sm_active;
    }
    mig_devices.push_back(gpu.mig_devices);
    processes.push_back(gpu.processes);
    unattributed.push_back(unattributed_memory_mib(gpu));
  }
  {
    std::lock_guard lock(mutex_);
    last_error_.clear();
    // An early reading (sample_within) covers less time; a late one never more than two intervals.
    double elapsed = last_sample_time_ ? std::max(0.0, now - *last_sample_time_) : settings_.sample_interval_s;
    double seconds = std::min(elapsed, 2 * settings_.sample_interval_s);
    // The energy of the time a late reading does not count is not counted either.
    if (elapsed > seconds) {
      for (GpuTick& reading : readings.gpus) {
        if (reading.energy_j) *reading.energy_j *= seconds / elapsed;
      }
    }
    history_.add(tick);
    mig_devices_ = std::move(mig_devices);
    unattributed_mib_ = std::move(unattributed);
    xids.swap(pending_xids_);
    readings.own_utilization = own_utilization(processes, running_, slice_processes_);
    readings.own_memory = own_memory(processes, running_, slice_processes_);
    accounting_.record(now, seconds, running_, readings);
    last_sample_time_ = now;
    sample_duration_s_ = took;
  }
  on_sample_(std::move(*machine), std::move(xids));
}

// --- the loop's thread ---

void Monitor::sample_within(std::chrono::milliseconds delay) {
  {
    std::lock_guard lock(mutex_);
    auto due = Clock::now() + delay;
    if (due >= next_sample_) return;
    next_sample_ = due;
  }
  wake_.notify_all();
}

std::vector<RunningJob> Monitor::running_jobs(const QueueView& view) const {
  std::vector<RunningJob> running;
  for (const QueueEntry& job : view.jobs) {
    if (job.state == JobState::Running && !job.gpus.empty()) running.push_back(running_job(job));
  }
  return running;
}

RunningJob Monitor::running_job(const QueueEntry& job) const {
  std::optional<uint64_t> memory;
  std::optional<uint64_t> held_mib = job.slice_mib;
  std::optional<unsigned> gpu_instance;
  if (job.gpus.front() < machine_.gpus.size()) {
    const Gpu& gpu = machine_.gpus[job.gpus.front()];
    memory = gpu.memory_total_mib;
    // A MIG device counts as its share of the GPU's memory, as a slice does.
    if (const MigDevice* device = mig_device_with_uuid(gpu, job.mig_uuid)) {
      held_mib = device->memory_mib;
      gpu_instance = device->gpu_instance_id;
    }
  }
  return RunningJob{job.id, job.user, job.name, job.gpus, gpu_share(held_mib, memory), job.start_time,
                    job.mig_uuid, gpu_instance};
}

void Monitor::publish(QueueView view) {
  auto shared = std::make_shared<const QueueView>(std::move(view));
  std::vector<RunningJob> running = running_jobs(*shared);
  std::set<JobId> now_running;
  std::vector<std::pair<const RunningJob*, StoredUsage>> earlier;  // usage stored by earlier attempts or daemons
  for (const RunningJob& job : running) {
    now_running.insert(job.id);
    if (known_running_.count(job.id) > 0) continue;
    if (auto stored = store_.job(job.id); stored && *stored) earlier.emplace_back(&job, **stored);
  }
  std::vector<JobId> ended;
  for (JobId id : known_running_) {
    if (now_running.count(id) == 0) ended.push_back(id);
  }
  std::map<JobId, Accounting::JobAccount> unsaved;
  const double now = unix_now();
  {
    std::lock_guard lock(mutex_);
    for (const auto& [job, stored] : earlier) accounting_.seed_job(job->id, job->user, stored.usage, stored.first_time);
    std::set<JobId> listed;
    for (const QueueEntry& job : shared->jobs) {
      listed.insert(job.id);
      if (job.state == JobState::Suspended) suspended_.insert(job.id);
    }
    std::erase_if(suspended_, [&](JobId id) { return listed.count(id) == 0; });
    for (const RunningJob& job : running) {
      if (known_running_.count(job.id) > 0) continue;
      // From its start, or from where an earlier daemon's accounting of it stopped.
      double since = std::min(now, job.start_time.value_or(now));
      if (auto it = std::find_if(earlier.begin(), earlier.end(), [&](const auto& e) { return e.first->id == job.id; });
          it != earlier.end()) {
        since = std::clamp(it->second.last_time, since, now);
      }
      if (suspended_.erase(job.id) > 0) since = now;  // resumed: it held no GPU while suspended
      accounting_.started(job, since, now);
    }
    for (const QueueEntry& job : shared->jobs) {
      // Jobs adopted after a restart started before this daemon: their wait was counted before.
      if (job.state == JobState::Running && known_running_.count(job.id) == 0 && job.start_time &&
          *job.start_time >= started_) {
        queue_wait_.observe(std::max(0.0, *job.start_time - job.submit_time));
      }
    }
    view_ = shared;
    running_ = std::move(running);
    for (JobId id : ended) accounting_.ended(id, now);
    if (!ended.empty() || Clock::now() - last_saved_ >= kSaveEvery) {
      unsaved = accounting_.take_unsaved();
      last_saved_ = Clock::now();
    }
    for (JobId id : ended) accounting_.forget(id);
  }
  known_running_ = std::move(now_running);
  store_usage(unsaved);
  update_job_mapping();
}

void Monitor::update_job_mapping() {
  if (!job_mapping_) return;
  std::vector<RunningJob> running;
  {
    std::lock_guard lock(mutex_);
    running = running_;
  }
  auto updated = job_mapping_->update(job_mapping_files(running, machine_.gpus.size()));
  std::string error = updated ? "" : updated.error().message;
  if (!error.empty() && error != job_mapping_error_) {
    fmt::print(stderr, "gpupoold: cannot keep the job-mapping files in {}: {}\n", settings_.job_mapping_dir, error);
  }
  job_mapping_error_ = error;
}

void Monitor::job_ended(const QueueEntry& job, double end_time) {
  const JobId id = job.id;
  std::lock_guard lock(mutex_);
  // A job that began and ended between two publishes was never accounted: its time counts now,
  // unmeasured, and the next publish stores it and forgets it as it does a job it saw end.
  if (accounting_.job(id) == nullptr && job.start_time && !job.gpus.empty()) {
    accounting_.started(running_job(job), std::min(*job.start_time, end_time), end_time);
    known_running_.insert(id);
  }
  accounting_.ended(id, end_time);
  std::erase_if(running_, [id](const RunningJob& running) { return running.id == id; });
  slice_uses_.erase(id);
}

void Monitor::set_slice_processes(std::map<JobId, std::set<uint32_t>> pids) {
  std::lock_guard lock(mutex_);
  slice_processes_ = std::move(pids);
}

void Monitor::set_slice_uses(std::map<JobId, SliceUse> uses) {
  std::lock_guard lock(mutex_);
  slice_uses_ = std::move(uses);
}

void Monitor::store_usage(const std::map<JobId, Accounting::JobAccount>& unsaved) {
  std::vector<StoredUsage> rows;
  for (const auto& [id, account] : unsaved) {
    rows.push_back(StoredUsage{id, account.user, account.name, account.unsaved, account.first_time, account.last_time});
  }
  if (auto stored = store_.add(rows); !stored) fmt::print(stderr, "gpupoold: {}\n", stored.error().message);
}

void Monitor::save_usage() {
  std::map<JobId, Accounting::JobAccount> unsaved;
  {
    std::lock_guard lock(mutex_);
    unsaved = accounting_.take_unsaved();
  }
  store_usage(unsaved);
}

void Monitor::set_pool(std::vector<GpuAvailability> pool) {
  ++samples_surveyed_;
  pool.resize(machine_.gpus.size());
  std::lock_guard lock(mutex_);
  pool_ = std::move(pool);
}

void Monitor::set_quarantined(std::vector<bool> quarantined) {
  std::lock_guard lock(mutex_);
  quarantined_ = std::move(quarantined);
}

void Monitor::observe_dispatch(double seconds) {
  std::lock_guard lock(mutex_);
  dispatch_latency_.observe(seconds);
}

void Monitor::set_unsaved_jobs(size_t count) {
  std::lock_guard lock(mutex_);
  unsaved_jobs_ = count;
}

Result<protocol::ReportResponse> Monitor::report(std::optional<double> since) {
  TRY_ASSIGN(std::vector<StoredUsage> stored, store_.since(since.value_or(0)));
  std::map<JobId, protocol::JobUsageLine> jobs;
  std::map<JobId, UsageTally> tallies;
  auto line_of = [&](JobId id, const std::string& user, const std::string& name, double first, double last) {
    protocol::JobUsageLine& line = jobs[id];
    line.id = id;
    line.user = user;
    line.name = name;
    line.first_time = line.first_time == 0 ? first : std::min(line.first_time, first);
    line.last_time = std::max(line.last_time, last);
    return &line;
  };
  for (const StoredUsage& row : stored) {
    line_of(row.id, row.user, row.name, row.first_time, row.last_time);
    tallies[row.id] += row.usage;
  }
  {
    std::lock_guard lock(mutex_);
    double now = unix_now();
    for (const auto& [id, account] : accounting_.jobs()) {
      // A running job's stored part may be older than `since`: it counts whole, like the rest.
      JobId job_id = id;  // clang 14 cannot capture a structured binding
      bool running =
          std::any_of(running_.begin(), running_.end(), [job_id](const RunningJob& j) { return j.id == job_id; });
      // An ended job waits here for the next publish to store it: it counts as a stored row would.
      if (!running && (account.unsaved.empty() || (since && account.last_time < *since))) continue;
      protocol::JobUsageLine* line = line_of(id, account.user, account.name, account.first_time, account.last_time);
      line->running = running;
      line->idle = running && accounting_.idle(id, now);
      if (tallies.count(id) == 0) {
        tallies[id] = account.total;
      } else {
        tallies[id] += account.unsaved;
      }
    }
  }
  protocol::ReportResponse report;
  report.since = since;
  std::map<std::string, std::pair<unsigned, UsageTally>> users;
  for (auto& [id, line] : jobs) {
    const UsageTally& tally = tallies[id];
    line.gpu_hours = tally.gpu_seconds / 3600;
    line.mean_utilization = tally.mean_utilization();
    line.efficiency = efficiency_of(tally);
    users[line.user].first += 1;
    users[line.user].second += tally;
    report.jobs.push_back(line);
  }
  for (const auto& [user, totals] : users) {
    report.users.push_back(protocol::UserUsageLine{user, totals.first, totals.second.gpu_seconds / 3600,
                                                   totals.second.mean_utilization(), efficiency_of(totals.second)});
  }
  std::stable_sort(report.users.begin(), report.users.end(),
                   [](const auto& a, const auto& b) { return a.gpu_hours > b.gpu_hours; });
  return report;
}

void withhold_from_report(protocol::ReportResponse& report, const std::string& viewer, const PrivateData& private_data) {
  if (private_data.usage) {
    std::erase_if(report.users, [&](const protocol::UserUsageLine& line) { return line.user != viewer; });
    std::erase_if(report.jobs, [&](const protocol::JobUsageLine& line) { return line.user != viewer; });
  } else if (private_data.jobs) {
    for (protocol::JobUsageLine& line : report.jobs) {
      if (line.user != viewer) line.name = "(private)";
    }
  }
}

// --- any thread ---

std::string Monitor::metrics_text() {
  std::lock_guard lock(mutex_);
  double now = unix_now();
  MetricsView view;
  view.hostname = settings_.hostname;
  for (size_t i = 0; i < machine_.gpus.size(); ++i) {
    MetricsGpu gpu;
    gpu.gpu = &machine_.gpus[i];
    gpu.sample = history_.latest(i);
    gpu.leased = pool_[i].exclusive_held;
    gpu.leased_mib = pool_[i].shared_mib;
    gpu.outside_busy = pool_[i].external_busy;
    gpu.quarantined = i < quarantined_.size() && quarantined_[i];
    if (watching_xids_) {
      auto xid = last_xids_.find(machine_.gpus[i].uuid);
      gpu.last_xid = xid == last_xids_.end() ? 0 : xid->second;
    }
    if (i < mig_devices_.size()) gpu.mig_devices = mig_devices_[i];
    if (i < unattributed_mib_.size()) gpu.unattributed_mib = unattributed_mib_[i];
    view.gpus.push_back(std::move(gpu));
  }
  for (const RunningJob& job : running_) {
    for (unsigned index : job.gpus) {
      if (index < view.gpus.size()) view.gpus[index].holders.push_back(GpuHolder{job.id, job.user});
    }
    const Accounting::JobAccount* account = accounting_.job(job.id);
    view.running_jobs.push_back(MetricsJob{job.id, job.user, account != nullptr ? account->total : UsageTally{},
                                           accounting_.idle(job.id, now), slice_use_of(slice_uses_, job.id)});
  }
  for (const QueueEntry& job : view_->jobs) {
    if (job.state == JobState::Queued) ++view.queued;
    if (job.state == JobState::Held) ++view.held;
    if (job.state == JobState::Running) ++view.running;
    if (job.state == JobState::Suspended) ++view.suspended;
    view.suspended_host_mib += job.suspended_host_mib;
  }
  view.user_usage = accounting_.user_usage();
  view.withhold_usage = settings_.private_data.usage;
  view.dispatch_latency = &dispatch_latency_;
  view.queue_wait = &queue_wait_;
  view.sample_duration_s = sample_duration_s_;
  // Read now rather than sampled: a scrape should see the space a job's output has just taken.
  if (!settings_.state_dir.empty()) {
    if (auto free = free_bytes(settings_.state_dir)) {
      view.state_space = StateSpaceView{*free, settings_.state_reserve_bytes, unsaved_jobs_};
    }
  }
  return render_metrics(view);
}

std::string Monitor::gpus_json() {
  std::lock_guard lock(mutex_);
  double now = unix_now();
  json gpus = json::array();
  for (size_t i = 0; i < machine_.gpus.size(); ++i) {
    const Gpu& gpu = machine_.gpus[i];
    auto latest = history_.latest(i);
    json holders = json::array();
    for (const RunningJob& job : running_) {
      if (std::find(job.gpus.begin(), job.gpus.end(), gpu.index) == job.gpus.end()) continue;
      json holder = {{"id", job.id}, {"user", job.user}, {"name", settings_.private_data.jobs ? "" : job.name}};
      if (settings_.private_data.jobs) holder["private"] = true;
      if (!settings_.private_data.usage) holder["idle"] = accounting_.idle(job.id, now);
      holders.push_back(std::move(holder));
    }
    gpus.push_back({{"index", gpu.index},
                    {"uuid", gpu.uuid},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"name", gpu.name},
                    {"memory_total_mib", or_null(gpu.memory_total_mib)},
                    {"sample", latest ? sample_json(*latest) : json(nullptr)},
                    {"jobs", std::move(holders)},
                    {"leased", pool_[i].exclusive_held},
                    {"leased_mib", pool_[i].shared_mib},
                    {"outside_busy", pool_[i].external_busy},
                    {"quarantined", i < quarantined_.size() && quarantined_[i]},
                    {"holders", pool_[i].holders}});
  }
  return json{{"time", to_millis(now)},
              {"hostname", settings_.hostname},
              {"sample_interval_s", settings_.sample_interval_s},
              {"gpus", std::move(gpus)}}
      .dump();
}

std::string Monitor::jobs_json() {
  std::lock_guard lock(mutex_);
  double now = unix_now();
  json jobs = json::array();
  unsigned queued = 0, held = 0, running = 0, suspended = 0;
  for (const QueueEntry& job : view_->jobs) {
    if (job.state == JobState::Queued) ++queued;
    if (job.state == JobState::Held) ++held;
    if (job.state == JobState::Running) ++running;
    if (job.state == JobState::Suspended) ++suspended;
    json entry = {{"id", job.id},
                  {"name", settings_.private_data.jobs ? "" : job.name},
                  {"user", job.user},
                  {"state", to_string(job.state)},
                  {"kind", to_string(job.kind)},
                  {"gpu_count", job.gpu_count},
                  {"mem_mib", or_null(job.slice_mib)},
                  {"sm_percent", or_null(job.sm_percent)},
                  {"mig_profile", or_null(job.mig_profile)},
                  {"mig_device", job.mig_uuid.empty() ? json(nullptr) : json(job.mig_uuid)},
                  {"priority", job.priority},
                  {"gpus", job.gpus},
                  {"submit_time", job.submit_time},
                  {"start_time", or_null(job.start_time)},
                  {"reason", job.reason},
                  {"wait_reason", job.wait_reason ? json(to_string(*job.wait_reason)) : json(nullptr)}};
    if (settings_.private_data.jobs) entry["private"] = true;
    if (!settings_.private_data.usage) entry.update(usage_json(accounting_.job(job.id), now, accounting_, job.id));
    entry.update(slice_json(slice_use_of(slice_uses_, job.id)));
    jobs.push_back(std::move(entry));
  }
  return json{{"time", to_millis(now)},
              {"drained", view_->drained},
              {"counts", {{"queued", queued}, {"held", held}, {"running", running}, {"suspended", suspended}}},
              {"idle_flag_after_s", accounting_.idle_flag_after_s()},
              {"jobs", std::move(jobs)}}
      .dump();
}

std::string Monitor::history_json(double since) {
  std::vector<std::vector<GpuSample>> samples;
  {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < history_.gpus(); ++i) samples.push_back(history_.after(i, since));
  }
  json gpus = json::array();
  for (size_t i = 0; i < samples.size(); ++i) {
    json gpu = {{"index", machine_.gpus[i].index},
                {"memory_total_mib", or_null(machine_.gpus[i].memory_total_mib)},
                {"time", json::array()}};
    for_each_sampled_reading(GpuSample{}, [&](const ReadingInfo& reading, const auto&) {
      if (reading.sample == SampleUse::Sampled) gpu[reading.key] = json::array();
    });
    for (const GpuSample& s : samples[i]) {
      gpu["time"].push_back(s.time);
      for_each_sampled_reading(s, [&](const ReadingInfo& reading, const auto& value) {
        if (reading.sample == SampleUse::Sampled) gpu[reading.key].push_back(or_null(value));
      });
    }
    gpus.push_back(std::move(gpu));
  }
  return json{{"time", to_millis(unix_now())},
              {"sample_interval_s", settings_.sample_interval_s},
              {"history_s", settings_.history_s},
              {"gpus", std::move(gpus)}}
      .dump();
}

}  // namespace gpupool
