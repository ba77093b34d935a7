// Public GPU cluster traces, read into gpupool's trace format (sched/trace.h) and fitted to one
// machine: Alibaba's GPU-sharing trace (cluster-trace-gpu-v2023, the FGD paper's), SenseTime's
// Helios traces (cluster_log.csv) and Microsoft's Philly trace (cluster_job_log). Reading keeps
// what the trace recorded; fitting drops what one machine cannot run, turns GPU fractions into
// memory slices of the machine's card and compresses arrivals to a target load.
// docs/scheduling.md, "Real traces", gives the rule and the commands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "sched/trace.h"

namespace gpupool::sim {

enum class TraceFormat { AlibabaGpu, Helios, Philly };

// "alibaba-gpu", "helios" or "philly".
Result<TraceFormat> parse_trace_format(std::string_view name);

// A job as its cluster recorded it.
struct RecordedJob {
  std::string id;
  double submit_s = 0;    // seconds from an origin of the trace's own
  double duration_s = 0;  // how long it ran (all its attempts, for Philly)
  unsigned gpus = 0;      // 0: a CPU-only job
  std::optional<double> gpu_fraction;  // 0 < f < 1: a share of one GPU
  std::string user;       // "" where the trace names none
};

struct RecordedTrace {
  std::vector<RecordedJob> jobs;
  size_t unusable = 0;  // never ran, still running when recorded, or without times
};

// The first malformed record stops reading: "line 12: num_gpu: expected an integer, got 'x'".
Result<RecordedTrace> read_recorded_trace(TraceFormat format, std::string_view text);

struct FitOptions {
  unsigned machine_gpus = kMaxTraceGpus;
  uint64_t gpu_memory_mib = 0;  // of the machine's card: a fraction f becomes f x this
  double target_load = 1.3;     // GPU-time offered over what the machine's GPUs can serve
  size_t offset = 0;            // jobs passed over first, in arrival order
  std::optional<size_t> count;  // jobs kept after them; nullopt: all
};

struct FittedTrace {
  std::vector<TraceJob> jobs;  // in arrival order, the first arriving at 0
  size_t cpu_only = 0;
  size_t too_wide = 0;         // asked for more GPUs than the machine has
  double offered_load = 0;     // of the kept jobs at their recorded arrival times
  double arrival_scale = 1;    // the gaps between arrivals were multiplied by this
};

Result<FittedTrace> fit_to_machine(std::vector<RecordedJob> jobs, const FitOptions& options);

// The trace in gpupool's CSV format, with the header parse_trace() expects.
std::string format_trace(const std::vector<TraceJob>& jobs);

}  // namespace gpupool::sim
