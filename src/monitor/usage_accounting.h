// Accounting of GPU time: GPU-hours and mean utilisation per job and per user, and the idle flag
// (a job holding GPUs at about 0 % utilisation for longer than `idle_flag_after`). A job's time
// counts from its start to its end as the loop sees them; the samples say how busy its GPUs were
// meanwhile. The time between a start or an end and the nearest sample counts as held but
// unmeasured, so a job shorter than a sample interval is still in the report. Pure: time and
// samples come in as values. Not thread-safe: the monitor guards it with its lock.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobs/job.h"
#include "machine/gpu.h"

namespace gpupool {

// Utilisation readings at or below this many percent count as idle ("about 0 %": NVML rounds).
inline constexpr unsigned kIdleUtilizationPercent = 1;

// How much GPU time a job (or a user) had, and how busy those GPUs were meanwhile.
struct UsageTally {
  double gpu_seconds = 0;           // Σ share × seconds over the GPUs held
  double measured_gpu_seconds = 0;  // the part of it with a utilisation reading
  double busy_gpu_seconds = 0;      // Σ share × seconds × utilisation / 100

  void add(double gpu_seconds_held, std::optional<unsigned> utilization);
  UsageTally& operator+=(const UsageTally& other);
  // Percent; nullopt when the GPUs never reported their utilisation.
  std::optional<double> mean_utilization() const;
  bool empty() const { return gpu_seconds == 0; }
};

// A job holding GPUs, as the accounting sees it.
struct RunningJob {
  JobId id = 0;
  std::string user;
  std::string name;
  std::vector<unsigned> gpus;
  double share = 1;  // of each GPU: 1 for whole GPUs, the slice's part of the memory for a slice
  std::optional<double> start_time;  // Unix seconds
};

// What each job's own processes (`pids`, those the slice watchdog found for it) ran on each GPU
// it holds, in percent of the GPU's time (NVML's per-process SM utilisation, summed, at most
// 100): 0 where none of them is on the GPU. Only where the sample lists the GPU's processes and
// gives each its utilisation, and none is an MPS client (else the job is left to the GPU's own
// reading). So slices sharing a card each get their own figure and idle flag.
using OwnUtilization = std::map<JobId, std::map<unsigned, unsigned>>;
OwnUtilization own_utilization(const std::vector<std::vector<GpuProcess>>& processes_by_gpu,
                               const std::vector<RunningJob>& running,
                               const std::map<JobId, std::set<uint32_t>>& pids);

// A slice's share of a GPU: its memory over the GPU's (1 when the size is unknown).
double gpu_share(std::optional<uint64_t> slice_mib, std::optional<uint64_t> memory_total_mib);

class Accounting {
 public:
  struct JobAccount {
    std::string user;
    std::string name;
    double first_time = 0, last_time = 0;  // Unix seconds: the start (or first tick) and the latest time accounted
    double gpus_held = 0;  // Σ share over its GPUs: what a second of it counts
    UsageTally total;    // all of it, including what an earlier daemon stored
    UsageTally unsaved;  // since it was last taken for the store
    std::optional<double> idle_since;  // since when every GPU it holds has been idle
    bool ended = false;  // no more time counts
  };

  explicit Accounting(double idle_flag_after_s) : idle_flag_after_s_(idle_flag_after_s) {}

  // A job began holding its GPUs at `since` (its start, or where an earlier daemon's accounting
  // stopped); the loop saw it at `now`. The time between counts as held, unmeasured.
  void started(const RunningJob& job, double since, double now);
  // One sampling tick at `now`, covering the `seconds` since the previous one (a job started
  // since then: only the part since it was accounted); `utilization` is indexed by GPU.
  // `own`: a job's own figure on a GPU, in place of the GPU's (own_utilization).
  void record(double now, double seconds, const std::vector<RunningJob>& running,
              const std::vector<std::optional<unsigned>>& utilization, const OwnUtilization& own = {});
  // A job stopped holding its GPUs at `now`: the time since its last tick counts as held,
  // unmeasured; the first call counts, later ones and later ticks add nothing. Take its unsaved
  // usage next, then forget it.
  void ended(JobId id, double now);

  // What the store already holds: a running job's earlier usage (after a restart), each user's
  // total. A seeded job is accounted from then on.
  void seed_job(JobId id, const std::string& user, const UsageTally& stored, double first_time);
  void seed_user(const std::string& user, double gpu_seconds);

  const JobAccount* job(JobId id) const;
  const std::map<JobId, JobAccount>& jobs() const { return jobs_; }
  // Flagged: it has held its GPUs at about 0 % for at least idle_flag_after.
  bool idle(JobId id, double now) const;
  double idle_flag_after_s() const { return idle_flag_after_s_; }

  // Every job's usage not yet stored; from now on it counts as stored.
  std::map<JobId, JobAccount> take_unsaved();
  // A job that no longer runs; take its unsaved usage first.
  void forget(JobId id) { jobs_.erase(id); }

  // GPU-seconds per user: the store's totals plus what has been recorded since.
  const std::map<std::string, double>& user_gpu_seconds() const { return user_gpu_seconds_; }

 private:
  void add_unmeasured(JobAccount& account, double seconds);

  double idle_flag_after_s_;
  std::map<JobId, JobAccount> jobs_;
  std::map<std::string, double> user_gpu_seconds_;
};

}  // namespace gpupool
