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

// What one GPU said over one tick, for the part of it a job holds.
struct HeldReading {
  std::optional<unsigned> utilization = std::nullopt;  // percent
  // The SM-active seconds of the GPU that are the job's (GPM's SM activity × seconds, apportioned
  // on a shared GPU); nullopt where the GPU has no SM activity reading or it cannot be apportioned.
  std::optional<double> sm_active_seconds = std::nullopt;
  std::optional<double> energy_j = std::nullopt;       // the job's part of the GPU's energy
  std::optional<uint64_t> memory_mib = std::nullopt;   // GPU memory the job uses there
};

// How much GPU time a job (or a user) had, how busy those GPUs were meanwhile, and what the job
// took of them: the figures of `gpupool report --efficiency`.
struct UsageTally {
  double gpu_seconds = 0;           // Σ share × seconds over the GPUs held
  double measured_gpu_seconds = 0;  // the part of it with a utilisation reading
  double busy_gpu_seconds = 0;      // Σ share × seconds × utilisation / 100
  double sm_measured_gpu_seconds = 0;  // the part of gpu_seconds with an SM activity reading
  double sm_active_gpu_seconds = 0;    // Σ the job's SM-active seconds: GPU time really used
  double energy_measured_gpu_seconds = 0;  // the part of gpu_seconds whose energy is known
  double energy_j = 0;                     // joules
  std::optional<uint64_t> peak_memory_mib;  // the most GPU memory used on one GPU at one sample

  void add(double gpu_seconds_held, const HeldReading& reading);
  UsageTally& operator+=(const UsageTally& other);
  // Percent; nullopt when the GPUs never reported their utilisation.
  std::optional<double> mean_utilization() const;
  // SM-active GPU time over the GPU time it was measured on: how much of what was held was
  // used (above 1 for a slice whose kernels used more of the card than its memory share);
  // nullopt without GPM.
  std::optional<double> sm_efficiency() const;
  bool empty() const { return gpu_seconds == 0; }
};
// The tally as the protocol carries it: GPU-hours, kWh, MiB.
GpuEfficiency efficiency_of(const UsageTally& tally);

// A job holding GPUs, as the accounting sees it.
struct RunningJob {
  JobId id = 0;
  std::string user;
  std::string name;
  std::vector<unsigned> gpus;
  double share = 1;  // of each GPU: 1 for whole GPUs, the slice's part of the memory for a slice
  std::optional<double> start_time;  // Unix seconds
  std::string mig_uuid = {};  // a --mig job's MIG device; empty for others
  std::optional<unsigned> mig_gpu_instance = std::nullopt;  // and its GPU instance's id
};

// What each job's own processes (`pids`, those the slice watchdog found for it) ran on each GPU
// it holds, in percent of the GPU's time (NVML's per-process SM utilisation, summed, at most
// 100): 0 where none of them is on the GPU. Only where the sample lists the GPU's processes and
// gives each its utilisation, and none is an MPS client (else the job is left to the GPU's own
// reading). So slices sharing a card each get their own figure and idle flag.
using OwnUtilization = std::map<JobId, std::map<unsigned, unsigned>>;
// What all of a GPU's processes ran, summed (percent): nullopt where own_utilization gives no job
// a figure there (no process listed, one without a figure, an MPS client).
std::optional<unsigned> process_utilization_sum(const std::vector<GpuProcess>& processes);
OwnUtilization own_utilization(const std::vector<std::vector<GpuProcess>>& processes_by_gpu,
                               const std::vector<RunningJob>& running,
                               const std::map<JobId, std::set<uint32_t>>& pids);

// What each slice job's own processes (`pids`) use of each GPU it holds, in MiB (summed). Only
// where some of them are listed there, each with a figure.
using OwnMemory = std::map<JobId, std::map<unsigned, uint64_t>>;
OwnMemory own_memory(const std::vector<std::vector<GpuProcess>>& processes_by_gpu, const std::vector<RunningJob>& running,
                     const std::map<JobId, std::set<uint32_t>>& pids);

// One sample, as the accounting reads it.
struct GpuTick {
  std::optional<unsigned> utilization = std::nullopt;  // percent
  std::optional<double> sm_active = std::nullopt;      // ratio 0-1 (GPM)
  // What every process on the GPU ran, summed (NVML's per-process utilisation, percent); nullopt
  // where some process has no figure or is an MPS client (process_utilization_sum).
  std::optional<unsigned> process_utilization = std::nullopt;
  std::optional<double> energy_j = std::nullopt;       // what the GPU used since the previous sample
  std::optional<uint64_t> memory_used_mib = std::nullopt;
  std::map<std::string, double> mig_sm_active = {};  // each MIG device's GPU instance's, by UUID
};
struct SampleReadings {
  std::vector<GpuTick> gpus;  // by index
  OwnUtilization own_utilization;
  OwnMemory own_memory;
};

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
  // since then: only the part since it was accounted). A job's own utilisation and memory on a
  // GPU (own_utilization, own_memory) stand in place of the GPU's. On a GPU that several jobs
  // hold, the GPU's SM activity is shared among them by their own utilisation (unmeasured where
  // one has none); a MIG job takes its GPU instance's. Energy counts by share.
  void record(double now, double seconds, const std::vector<RunningJob>& running, const SampleReadings& sample);
  // A job stopped holding its GPUs at `now`: the time since its last tick counts as held,
  // unmeasured; the first call counts, later ones and later ticks add nothing. Take its unsaved
  // usage next, then forget it.
  void ended(JobId id, double now);

  // What the store already holds: a running job's earlier usage (after a restart), each user's
  // total. A seeded job is accounted from then on.
  void seed_job(JobId id, const std::string& user, const UsageTally& stored, double first_time);
  void seed_user(const std::string& user, const UsageTally& stored);

  const JobAccount* job(JobId id) const;
  const std::map<JobId, JobAccount>& jobs() const { return jobs_; }
  // Flagged: it has held its GPUs at about 0 % for at least idle_flag_after.
  bool idle(JobId id, double now) const;
  double idle_flag_after_s() const { return idle_flag_after_s_; }

  // Every job's usage not yet stored; from now on it counts as stored.
  std::map<JobId, JobAccount> take_unsaved();
  // A job that no longer runs; take its unsaved usage first.
  void forget(JobId id) { jobs_.erase(id); }

  // Each user's usage: the store's totals plus what has been recorded since.
  const std::map<std::string, UsageTally>& user_usage() const { return user_usage_; }

 private:
  void add_unmeasured(JobAccount& account, double seconds);

  double idle_flag_after_s_;
  std::map<JobId, JobAccount> jobs_;
  std::map<std::string, UsageTally> user_usage_;
};

}  // namespace gpupool
