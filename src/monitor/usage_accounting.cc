#include "monitor/usage_accounting.h"

#include <algorithm>

namespace gpupool {

void UsageTally::add(double gpu_seconds_held, std::optional<unsigned> utilization) {
  gpu_seconds += gpu_seconds_held;
  if (!utilization) return;
  measured_gpu_seconds += gpu_seconds_held;
  busy_gpu_seconds += gpu_seconds_held * std::min(*utilization, 100u) / 100.0;
}

UsageTally& UsageTally::operator+=(const UsageTally& other) {
  gpu_seconds += other.gpu_seconds;
  measured_gpu_seconds += other.measured_gpu_seconds;
  busy_gpu_seconds += other.busy_gpu_seconds;
  return *this;
}

std::optional<double> UsageTally::mean_utilization() const {
  if (measured_gpu_seconds <= 0) return std::nullopt;
  return std::min(100.0, 100.0 * busy_gpu_seconds / measured_gpu_seconds);  // not above by rounding
}

double gpu_share(std::optional<uint64_t> slice_mib, std::optional<uint64_t> memory_total_mib) {
  if (!slice_mib) return 1;
  if (!memory_total_mib || *memory_total_mib == 0) return 1;
  return std::min(1.0, static_cast<double>(*slice_mib) / static_cast<double>(*memory_total_mib));
}

namespace {

double gpus_held(const RunningJob& job) { return job.share * static_cast<double>(job.gpus.size()); }

}  // namespace

void Accounting::add_unmeasured(JobAccount& account, double seconds) {
  if (seconds <= 0 || account.gpus_held <= 0) return;
  UsageTally held;
  held.add(account.gpus_held * seconds, std::nullopt);
  account.total += held;
  account.unsaved += held;
  user_gpu_seconds_[account.user] += held.gpu_seconds;
}

void Accounting::started(const RunningJob& job, double since, double now) {
  JobAccount& account = jobs_[job.id];
  account.user = job.user;
  account.name = job.name;
  account.gpus_held = gpus_held(job);
  if (account.first_time == 0) account.first_time = since;
  add_unmeasured(account, now - since);
  account.last_time = std::max(since, now);
}

OwnUtilization own_utilization(const std::vector<std::vector<GpuProcess>>& processes_by_gpu,
                               const std::vector<RunningJob>& running,
                               const std::map<JobId, std::set<uint32_t>>& pids) {
  OwnUtilization own;
  for (const RunningJob& job : running) {
    auto mine = pids.find(job.id);
    if (mine == pids.end()) continue;
    for (unsigned gpu : job.gpus) {
      if (gpu >= processes_by_gpu.size()) continue;
      const std::vector<GpuProcess>& processes = processes_by_gpu[gpu];
      // The card's reading stands where NVML lists no process (a list it could not read, a daemon
      // that sees no other PID namespace), gives some process no figure, or under MPS (the
      // kernels run in the MPS server's context, not the clients').
      auto known = [](const GpuProcess& p) { return p.sm_utilization.has_value() && p.mps_client != true; };
      if (processes.empty() || !std::ranges::all_of(processes, known)) continue;
      unsigned sum = 0;
      for (const GpuProcess& process : processes) {
        if (mine->second.contains(process.pid)) sum += *process.sm_utilization;
      }
      own[job.id][gpu] = std::min(sum, 100u);
    }
  }
  return own;
}

void Accounting::record(double now, double seconds, const std::vector<RunningJob>& running,
                        const std::vector<std::optional<unsigned>>& utilization, const OwnUtilization& own) {
  for (const RunningJob& job : running) {
    JobAccount& account = jobs_[job.id];
    if (account.ended) continue;
    account.user = job.user;
    account.name = job.name;
    account.gpus_held = gpus_held(job);
    if (account.first_time == 0) account.first_time = now;
    // A job accounted since the previous tick (it started in between) counts only that part.
    double held_seconds = account.last_time == 0 ? seconds : std::clamp(now - account.last_time, 0.0, seconds);
    account.last_time = now;
    bool idle = !job.gpus.empty();
    UsageTally tick;
    auto own_figures = own.find(job.id);
    for (unsigned gpu : job.gpus) {
      std::optional<unsigned> busy = gpu < utilization.size() ? utilization[gpu] : std::nullopt;
      if (own_figures != own.end()) {
        if (auto figure = own_figures->second.find(gpu); figure != own_figures->second.end()) busy = figure->second;
      }
      tick.add(job.share * held_seconds, busy);
      // A GPU that does not report its utilisation is never taken for idle.
      idle = idle && busy && *busy <= kIdleUtilizationPercent;
    }
    account.total += tick;
    account.unsaved += tick;
    user_gpu_seconds_[job.user] += tick.gpu_seconds;
    if (!idle) {
      account.idle_since.reset();
    } else if (!account.idle_since) {
      account.idle_since = now;
    }
  }
}

void Accounting::ended(JobId id, double now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.ended) return;
  add_unmeasured(it->second, now - it->second.last_time);
  it->second.last_time = std::max(it->second.last_time, now);
  it->second.ended = true;
}

void Accounting::seed_job(JobId id, const std::string& user, const UsageTally& stored, double first_time) {
  JobAccount& account = jobs_[id];
  account.user = user;
  account.total += stored;
  account.first_time = first_time;
}

void Accounting::seed_user(const std::string& user, double gpu_seconds) { user_gpu_seconds_[user] += gpu_seconds; }

const Accounting::JobAccount* Accounting::job(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

bool Accounting::idle(JobId id, double now) const {
  const JobAccount* account = job(id);
  return account != nullptr && account->idle_since && now - *account->idle_since >= idle_flag_after_s_;
}

std::map<JobId, Accounting::JobAccount> Accounting::take_unsaved() {
  std::map<JobId, JobAccount> unsaved;
  for (auto& [id, account] : jobs_) {
    if (account.unsaved.empty()) continue;
    unsaved[id] = account;
    account.unsaved = UsageTally{};
  }
  return unsaved;
}

}  // namespace gpupool
