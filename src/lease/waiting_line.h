// The waiting line of requests made without a daemon, as pure logic: what a ticket's name says
// (arrival, owner, the size of the request) and whether a request may try for GPUs now.
// First come, first served, with one exception: a request smaller than every one waiting ahead
// of it may pass them while they fit nowhere, until the oldest of them has waited
// `pass_window`. From then on nobody passes, so the GPUs drain towards the wide request: its
// wait is bounded by the window plus the longest job that passed it. docs/leases.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

// How much a waiting request asks for, as far as passing goes: fewer GPUs is smaller, and a
// slice of a GPU is smaller than the whole GPU. A MIG device (`mig`) waits in a line of its own:
// MIG devices and the GPUs that whole-GPU and slice requests get are never the same.
struct LineRequestSize {
  unsigned gpu_count = 1;
  bool slice = false;
  bool mig = false;
  bool operator<(const LineRequestSize& other) const;
};

struct LinePlace {
  std::string name;
  double arrival_s = 0;  // Unix seconds
  std::optional<LineRequestSize> size;  // unknown for a ticket written by an older version: never passed
};

// A ticket's name: arrival (seconds and nanoseconds, so names sort by arrival), pid, and size,
// e.g. "1796500000123456789.4242.g8", ".s2" for slices of 2 GPUs or ".m1" for a MIG device.
std::string ticket_name(int64_t seconds, int64_t nanoseconds, int pid, LineRequestSize size);
// nullopt for a name that is no ticket (the directory is world-writable: anything may be there).
std::optional<LinePlace> parse_ticket_name(std::string_view name);

struct LineTurn {
  bool may_try = false;
  std::string why_not;  // when it may not: the line's reason, for the waiting report
};

// Whether a request of `ours` may try for GPUs at `now`, behind the live tickets `ahead` (older
// than its own, or all of them for a request not yet in line) of its own line (MIG devices or
// GPUs; a ticket of unknown size is in both).
LineTurn line_turn(const std::vector<LinePlace>& ahead, LineRequestSize ours, double now, double pass_window_s);

}  // namespace gpupool
