// The slice watchdog's decisions, pure: which memory slices' processes use more GPU memory than
// the slice holds (NVML's per-process figures, attributed to a slice through the process tree),
// by how much, and what the daemon does about it (docs/leases.md, "Slices that hold").
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jobs/job.h"
#include "machine/gpu.h"

namespace gpupool {

// [daemon] slice_enforcement. The watchdog watches under every mode but "off", MPS or not: a
// slice MPS cannot hold (one of several GPUs) is watched only.
enum class SliceEnforcement {
  Auto,   // MPS where nvidia-cuda-mps-control is found at start, else the watchdog
  Mps,    // MPS for every slice it can hold (sched/mps.h); a job whose GPU's control fails, fails
  Watch,  // the watchdog: NVML's per-process memory against the slice
  Off,    // slices are a promise among users only
};

// [daemon] slice_overrun: what the watchdog does with a job past its slice.
enum class SliceOverrunPolicy {
  Warn,  // shown in `jobs`, `top`, /metrics and the JSON API; the job runs on
  Stop,  // ended as a cancel ends it, failed with the reason
};

bool watches_slices(SliceEnforcement enforcement);

// A running slice lease: `holder_pid` and its descendants are its processes (a batch job's
// supervisor, an interactive job's client, `gpupool run`'s program).
struct WatchedSlice {
  uint64_t job = 0;  // whose: the daemon's job id (0 for `gpupool run` without a daemon)
  uint32_t holder_pid = 0;
  std::vector<unsigned> gpus;  // nvidia-smi indices
  uint64_t slice_mib = 0;      // of each GPU
};

// What one slice's processes use on one of its GPUs.
struct SliceUse {
  uint64_t job = 0;
  unsigned gpu = 0;
  uint64_t used_mib = 0;  // a process whose figure NVML does not give counts 0
  uint64_t slice_mib = 0;
  // One of the slice's processes there that NVML does not list as an MPS client (0: none):
  // for an MPS slice, a process that runs outside MPS, where the slice's limit does not hold.
  uint32_t outside_mps_pid = 0;
  std::vector<uint32_t> pids = {};  // the slice's processes NVML lists there

  bool overrun() const { return used_mib > slice_mib; }
  bool operator==(const SliceUse&) const = default;
};

using ParentOf = std::function<std::optional<uint32_t>(uint32_t pid)>;

// Each slice's use of each of its GPUs in `sample` (one entry per slice and GPU, 0 when nothing
// of it is listed). A process belongs to the nearest holder among its ancestors (itself
// included), and counts only on the GPUs that holder's slice covers.
std::vector<SliceUse> slice_uses(const Machine& sample, const std::vector<WatchedSlice>& slices,
                                 const ParentOf& parent_of);

// Per job, the GPU where it uses most of its slice (the one to report): every watched job, over
// or not.
std::map<uint64_t, SliceUse> worst_use_per_job(const std::vector<SliceUse>& uses);

// "used 31.2 GiB of its 20 GiB slice": the reason a stopped job ends with, and the warning.
std::string slice_overrun_text(uint64_t used_mib, uint64_t slice_mib);

// The warning `jobs` and `top` show for a running slice job past its slice at the latest sample
// ("over its slice: used 31.2 GiB of its 20 GiB slice"); nullopt for any other job.
// `short_form`: "Over 156%" (of its slice), for the one-word reasons of `gpupool jobs`'s table.
std::optional<std::string> slice_overrun_warning(const Job& job, bool short_form = false);

// The jobs to stop under `policy`: those over their slice that have not been told to end yet.
std::vector<uint64_t> jobs_to_stop(const std::map<uint64_t, SliceUse>& worst, SliceOverrunPolicy policy,
                                   const std::function<bool(uint64_t job)>& told_to_end);

}  // namespace gpupool
