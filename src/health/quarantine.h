// The quarantine: a GPU whose readings or XID events say its hardware is at fault gets no new
// jobs until it has been clean for a while, or an administrator returns it. Pure: the daemon
// feeds it every sample, keeps its state in the store (so that a restart does not forget an
// XID the driver will not report again) and applies it to what the scheduler sees, as a drain.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "sched/allocation.h"

namespace gpupool {

// What an XID says, from NVIDIA's XID catalogue: what happened, what to do, and whether it is
// the hardware's fault (the others, such as 13 or 31, are a program's and say nothing of the GPU).
struct XidMeaning {
  uint64_t xid = 0;
  std::string_view what;
  std::string_view action;
  bool hardware = false;
};
// nullptr for an XID gpupool has no text for (it does not quarantine).
const XidMeaning* xid_meaning(uint64_t xid);
// "XID 79 (the GPU fell off the bus)".
std::string describe_xid(uint64_t xid);

// The faults a reading shows now that take a GPU out of service, one short line each.
std::vector<std::string> reading_faults(const Gpu& gpu);

// GPU memory in use that no process NVML lists holds: the GPU's used memory less its processes'.
// What a process that ended left behind (a context the driver never released), or processes the
// reader cannot see (another container's). nullopt where it cannot be told: a GPU in MIG mode
// (its instances hold memory of their own), a process without a figure, no memory reading.
std::optional<uint64_t> unattributed_memory_mib(const Gpu& gpu);
// Below this much, unattributed memory is the driver's own and nothing to act on.
inline constexpr uint64_t kUnattributedMemoryToleranceMib = 1024;

struct QuarantinePolicy {
  bool enabled = true;
  double clean_window_s = 1800;  // how long without a fault before a GPU returns by itself
};

struct QuarantineNote {
  unsigned index = 0;     // nvidia-smi's, for messages
  std::string reason;     // the faults that took it out
  double since = 0;       // Unix seconds
  double last_fault = 0;  // the clean window counts from it
  bool operator==(const QuarantineNote&) const = default;
};

// What the quarantine knows a GPU by: its UUID, or "index N" for one NVML cannot read.
std::string quarantine_key(const Gpu& gpu);

struct QuarantineState {
  std::map<std::string, QuarantineNote> gpus;  // by quarantine_key
  // Faults an administrator let a GPU run with (`gpupool resume --gpu`), by key: they no longer
  // quarantine it while they last; a new one does.
  std::map<std::string, std::set<std::string>> accepted;
  bool operator==(const QuarantineState&) const = default;
};

struct QuarantineChange {
  unsigned index = 0;
  std::string key;  // quarantine_key
  bool quarantined = false;  // true: taken out; false: back
  std::string why;
};

// One sample: the GPUs' readings and the XID events since the last. Returns what changed, for the
// log and for everyone waiting. With the policy off, every quarantine ends; so does the entry of a
// card that is no longer at its index (replaced, or the GPUs numbered anew).
std::vector<QuarantineChange> observe_health(QuarantineState& state, const Machine& reading,
                                             const std::vector<XidEvent>& xids, double now,
                                             const QuarantinePolicy& policy);

// An administrator returns the GPU (by its key or its index): the faults `reading` shows now are
// accepted while they last. False where it was not quarantined (its faults are accepted all the same).
bool release_from_quarantine(QuarantineState& state, const Gpu& reading);

// Keeps every job off the quarantined GPUs (`usable` false) and says why among their holders.
void mark_quarantined_gpus(const QuarantineState& state, std::vector<GpuAvailability>& gpus);

// "quarantined: XID 79 (the GPU fell off the bus)", what everyone who waits for the GPU is told.
std::string describe_quarantine(const QuarantineNote& note);

// What an administrator should do about a GPU quarantined for `reason`: each XID's action, a
// reset for ECC errors and pending repairs, service for a failed remap.
std::string quarantine_advice(std::string_view reason);

// One JSON object, as the daemon stores it.
std::string encode(const QuarantineState& state);
Result<QuarantineState> parse_quarantine_state(std::string_view text);

}  // namespace gpupool
