// What `gpupool drain` has taken out of service: the whole queue, or single GPUs (maintenance of
// one card: its running jobs go on, no new job starts on it). Pure: the daemon stores it as one
// setting, so that a drain is kept whole or not at all, and applies it to what the scheduler and
// the dashboard see of each GPU.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "sched/allocation.h"

namespace gpupool {

struct DrainNote {
  std::string by;      // who drained it
  double at = 0;       // Unix seconds
  std::string reason;  // "" when not said
};

struct DrainState {
  std::optional<DrainNote> queue;      // no job starts anywhere
  std::map<unsigned, DrainNote> gpus;  // no new job starts on these (nvidia-smi indices)

  // "drained by root: swap fan", what everyone who waits for the GPU is told.
  static std::string describe(const DrainNote& note);
};

// One JSON object: {"queue": {"by", "at", "reason"} or null, "gpus": {"3": {...}}}.
std::string encode(const DrainState& state);
Result<DrainState> parse_drain_state(std::string_view text);

// Keeps every job off the drained GPUs (`usable` false) and names the drain among their holders.
void mark_drained_gpus(const DrainState& state, std::vector<GpuAvailability>& gpus);

}  // namespace gpupool
