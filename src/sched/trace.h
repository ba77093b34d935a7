// Job traces for the simulator: one CSV row per job, with a header
//   id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s
// The last four columns may be empty or absent. docs/scheduling.md describes the format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpupool {

// The most GPUs one trace job may ask for (one node).
inline constexpr unsigned kMaxTraceGpus = 8;

struct TraceJob {
  std::string id;
  double submit_s = 0;
  double duration_s = 0;                // what the job would run; only the replay sees it
  unsigned gpus = 1;                    // 1..kMaxTraceGpus
  std::optional<uint64_t> gpu_mem_mib;  // nullopt: exclusive GPUs; else a slice of each
  std::string user;                     // "" when the column is empty or absent
  int priority = 0;                     // higher runs first (gpupool policy only)
  std::optional<double> time_limit_s;   // what the user declared, if anything
};

// Parses a whole trace. Rows asking for 0 GPUs are CPU-only jobs and are skipped. The first bad
// row stops parsing: "line 7: gpus: expected an integer from 0 to 8, got '12'".
Result<std::vector<TraceJob>> parse_trace(std::string_view csv);

}  // namespace gpupool
