#include "monitor/usage_accounting.h"

#include <algorithm>

namespace gpupool {

namespace {

std::optional<uint64_t> larger(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

}  // namespace

void UsageTally::add(double gpu_seconds_held, const HeldReading& reading) {
  gpu_seconds += gpu_seconds_held;
  if (reading.utilization) {
    measured_gpu_seconds += gpu_seconds_held;
    busy_gpu_seconds += gpu_seconds_held * std::min(*reading.utilization, 100u) / 100.0;
  }
  if (reading.sm_active_seconds) {
    sm_measured_gpu_seconds += gpu_seconds_held;
    sm_active_gpu_seconds += std::max(0.0, *reading.sm_active_seconds);
  }
  if (reading.energy_j) {
    energy_measured_gpu_seconds += gpu_seconds_held;
    energy_j += std::max(0.0, *reading.energy_j);
  }
  peak_memory_mib = larger(peak_memory_mib, reading.memory_mib);
}

UsageTally& UsageTally::operator+=(const UsageTally& other) {
  gpu_seconds += other.gpu_seconds;
  measured_gpu_seconds += other.measured_gpu_seconds;
  busy_gpu_seconds += other.busy_gpu_seconds;
  sm_measured_gpu_seconds += other.sm_measured_gpu_seconds;
  sm_active_gpu_seconds += other.sm_active_gpu_seconds;
  energy_measured_gpu_seconds += other.energy_measured_gpu_seconds;
  energy_j += other.energy_j;
  peak_memory_mib = larger(peak_memory_mib, other.peak_memory_mib);
  return *this;
}

std::optional<double> UsageTally::mean_utilization() const {
  if (measured_gpu_seconds <= 0) return std::nullopt;
  return std::min(100.0, 100.0 * busy_gpu_seconds / measured_gpu_seconds);  // not above by rounding
}

std::optional<double> UsageTally::sm_efficiency() const {
  if (sm_measured_gpu_seconds <= 0) return std::nullopt;
  return sm_active_gpu_seconds / sm_measured_gpu_seconds;
}

GpuEfficiency efficiency_of(const UsageTally& tally) {
  GpuEfficiency efficiency;
  if (tally.sm_measured_gpu_seconds > 0) efficiency.sm_active_gpu_hours = tally.sm_active_gpu_seconds / 3600;
  efficiency.sm_efficiency = tally.sm_efficiency();
  if (tally.energy_measured_gpu_seconds > 0) efficiency.energy_kwh = tally.energy_j / 3.6e6;
  efficiency.peak_memory_mib = tally.peak_memory_mib;
  return efficiency;
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
  held.add(account.gpus_held * seconds, {});
  account.total += held;
  account.unsaved += held;
  user_usage_[account.user] += held;
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

std::optional<unsigned> process_utilization_sum(const std::vector<GpuProcess>& processes) {
  auto known = [](const GpuProcess& p) { return p.sm_utilization.has_value() && p.mps_client != true; };
  if (processes.empty() || !std::ranges::all_of(processes, known)) return std::nullopt;
  unsigned sum = 0;
  for (const GpuProcess& process : processes) sum += *process.sm_utilization;
  return sum;
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
      if (!process_utilization_sum(processes)) continue;
      unsigned sum = 0;
      for (const GpuProcess& process : processes) {
        if (mine->second.contains(process.pid)) sum += *process.sm_utilization;
      }
      own[job.id][gpu] = std::min(sum, 100u);
    }
  }
  return own;
}

OwnMemory own_memory(const std::vector<std::vector<GpuProcess>>& processes_by_gpu, const std::vector<RunningJob>& running,
                     const std::map<JobId, std::set<uint32_t>>& pids) {
  OwnMemory own;
  for (const RunningJob& job : running) {
    auto mine = pids.find(job.id);
    if (mine == pids.end()) continue;
    for (unsigned gpu : job.gpus) {
      if (gpu >= processes_by_gpu.size()) continue;
      // Unknown, not 0, where none of its processes is listed there or one has no figure.
      std::optional<uint64_t> sum;
      for (const GpuProcess& process : processes_by_gpu[gpu]) {
        if (!mine->second.contains(process.pid)) continue;
        if (!process.used_memory_mib) {
          sum.reset();
          break;
        }
        sum = sum.value_or(0) + *process.used_memory_mib;
      }
      if (sum) own[job.id][gpu] = *sum;
    }
  }
  return own;
}

namespace {

template <typename T>
std::optional<T> own_figure(const std::map<JobId, std::map<unsigned, T>>& figures, JobId job, unsigned gpu) {
  auto of_job = figures.find(job);
  if (of_job == figures.end()) return std::nullopt;
  auto figure = of_job->second.find(gpu);
  return figure == of_job->second.end() ? std::nullopt : std::optional<T>(figure->second);
}

// The jobs holding each GPU in this tick, by index.
std::map<unsigned, std::vector<JobId>> holders_of(const std::vector<RunningJob>& running) {
  std::map<unsigned, std::vector<JobId>> holders;
  for (const RunningJob& job : running) {
    for (unsigned gpu : job.gpus) holders[gpu].push_back(job.id);
  }
  return holders;
}

// The GPU's SM-active seconds over `seconds` that are `job`'s: its GPU instance's for a MIG job;
// for a job with its own figure there, its part of what every process on the GPU ran (outside
// processes' activity is not its); all of them for a job alone on a whole GPU; else unknown.
std::optional<double> sm_active_seconds(const RunningJob& job, unsigned gpu, const GpuTick& tick, double seconds,
                                        size_t holders, const OwnUtilization& own) {
  if (!job.mig_uuid.empty()) {
    auto instance = tick.mig_sm_active.find(job.mig_uuid);
    if (instance == tick.mig_sm_active.end()) return std::nullopt;
    return std::clamp(instance->second, 0.0, 1.0) * seconds * job.share;
  }
  if (!tick.sm_active) return std::nullopt;
  double card = std::clamp(*tick.sm_active, 0.0, 1.0) * seconds;
  std::optional<unsigned> mine = own_figure(own, job.id, gpu);
  if (mine && tick.process_utilization) {
    return *tick.process_utilization == 0 ? 0.0 : card * std::min(*mine, *tick.process_utilization) / *tick.process_utilization;
  }
  if (holders == 1 && job.share >= 1) return card;
  return std::nullopt;
}

}  // namespace

void Accounting::record(double now, double seconds, const std::vector<RunningJob>& running,
                        const SampleReadings& sample) {
  std::map<unsigned, std::vector<JobId>> holders = holders_of(running);
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
    UsageTally tally;
    for (unsigned gpu : job.gpus) {
      static const GpuTick kNoReading;
      const GpuTick& gpu_tick = gpu < sample.gpus.size() ? sample.gpus[gpu] : kNoReading;
      HeldReading reading;
      reading.utilization = own_figure(sample.own_utilization, job.id, gpu);
      if (!reading.utilization) reading.utilization = gpu_tick.utilization;
      reading.sm_active_seconds =
          sm_active_seconds(job, gpu, gpu_tick, held_seconds, holders[gpu].size(), sample.own_utilization);
      // The card's energy counts for the part of the tick the job held it.
      if (gpu_tick.energy_j && seconds > 0) reading.energy_j = *gpu_tick.energy_j * job.share * held_seconds / seconds;
      reading.memory_mib = own_figure(sample.own_memory, job.id, gpu);
      // A whole GPU's memory is its holder's; a shared one's is told apart only by its processes.
      if (!reading.memory_mib && holders[gpu].size() == 1 && job.mig_uuid.empty() && job.share >= 1) {
        reading.memory_mib = gpu_tick.memory_used_mib;
      }
      tally.add(job.share * held_seconds, reading);
      // A GPU that does not report its utilisation is never taken for idle.
      idle = idle && reading.utilization && *reading.utilization <= kIdleUtilizationPercent;
    }
    account.total += tally;
    account.unsaved += tally;
    user_usage_[job.user] += tally;
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

void Accounting::seed_user(const std::string& user, const UsageTally& stored) { user_usage_[user] += stored; }

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
