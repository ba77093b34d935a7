// Topology-aware placement: which N of the free GPUs a multi-GPU job gets.
// The objective, best first (docs/placement.md explains the choices):
//   1. the set's own score: its worst pair link (the bottleneck of a collective),
//      then the sum of its pair scores, then its NVLink count;
//   2. the score of the free GPUs left over, measured the same way, so the next
//      multi-GPU job also finds a well-connected set;
//   3. the lexicographically smallest index list, so the answer is deterministic.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool {

// How well two GPUs are connected, higher is better: 0 for an unknown PCIe path,
// 1 SYS, 2 NODE, 3 PHB, 4 PXB, 5 PIX, 6 same board, and 6 + n for n NVLinks
// (direct or through an NVSwitch), so any NVLink beats any PCIe path.
using PairScore = unsigned;
inline constexpr PairScore kBestPcieScore = 6;
// The worst link of a set without pairs (fewer than two GPUs): nothing constrains it.
inline constexpr PairScore kNoPairs = std::numeric_limits<PairScore>::max();

PairScore pair_score(const Link& link);
// "NV12", "board", "PIX", "PXB", "PHB", "NODE", "SYS", "unknown"; "none" for kNoPairs.
std::string pair_score_label(PairScore score);

// Compared field by field: the bottleneck first, then the total.
struct SetScore {
  PairScore worst = kNoPairs;
  uint64_t total = 0;    // sum of the pair scores
  uint64_t nvlinks = 0;  // NVLinks summed over the pairs

  auto operator<=>(const SetScore&) const = default;
};

// "worst link NV2, 12 NVLinks in total, pair-score sum 54".
std::string explain(const SetScore& score);

struct Placement {
  std::vector<unsigned> gpus;  // machine indices, ascending
  SetScore score;
  SetScore remaining;  // of the free GPUs not chosen: the tie-break
  bool exact = true;   // false when the search space was too big and a heuristic chose
};

// True when `a` is strictly preferable to `b` (same count, same free set).
bool better(const Placement& a, const Placement& b);

// Free GPUs with the same link to every other free GPU are interchangeable
// (an NVSwitch island, two GPUs behind one PCIe switch): swapping them changes
// nothing, so the search only decides how many to take from each such group.
// Above this many such choices the search is heuristic (see docs/placement.md).
inline constexpr uint64_t kExactSearchLimit = 20000;

// `links` is the machine's link matrix (Machine::links; read above the diagonal).
// Returns exactly `count` GPUs, all from `free`, or an error for an impossible request.
Result<Placement> place(const std::vector<std::vector<Link>>& links,
                        const std::vector<unsigned>& free, unsigned count);

// The best set and, for explanations, the best one that differs from it by more
// than a swap of interchangeable GPUs; no runner-up when there is no such set.
struct PlacementChoice {
  Placement best;
  std::optional<Placement> runner_up;
};
Result<PlacementChoice> place_with_runner_up(const std::vector<std::vector<Link>>& links,
                                             const std::vector<unsigned>& free, unsigned count);

}  // namespace gpupool
