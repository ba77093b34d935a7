#include "sched/placement.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <utility>

#include <fmt/format.h>

namespace gpupool {

PairScore pair_score(const Link& link) {
  if (link.nvlinks > 0) return kBestPcieScore + link.nvlinks;
  if (!link.pcie) return 0;
  switch (*link.pcie) {
    case PcieLevel::Board: return 6;
    case PcieLevel::SingleSwitch: return 5;
    case PcieLevel::MultipleSwitches: return 4;
    case PcieLevel::HostBridge: return 3;
    case PcieLevel::NumaNode: return 2;
    case PcieLevel::System: return 1;
  }
  return 0;
}

std::string pair_score_label(PairScore score) {
  static constexpr const char* kPcieLabels[] = {"unknown", "SYS", "NODE", "PHB",
                                                "PXB",     "PIX", "board"};
  if (score == kNoPairs) return "none";
  if (score > kBestPcieScore) return fmt::format("NV{}", score - kBestPcieScore);
  return kPcieLabels[score];
}

std::string explain(const SetScore& score) {
  if (score.worst == kNoPairs) return "no links (fewer than two GPUs)";
  std::string nvlinks = score.nvlinks == 0   ? "no NVLinks"
                        : score.nvlinks == 1 ? "1 NVLink in total"
                                             : fmt::format("{} NVLinks in total", score.nvlinks);
  return fmt::format("worst link {}, {}, pair-score sum {}", pair_score_label(score.worst),
                     nvlinks, score.total);
}

bool better(const Placement& a, const Placement& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.remaining != b.remaining) return a.remaining > b.remaining;
  return a.gpus < b.gpus;
}

namespace {

void add_pairs(SetScore& score, PairScore pair, uint64_t pairs = 1) {
  if (pairs == 0) return;
  score.worst = std::min(score.worst, pair);
  score.total += pair * pairs;
  if (pair > kBestPcieScore) score.nvlinks += (pair - kBestPcieScore) * pairs;
}

// The pair scores among the free GPUs, addressed by position in the ascending
// free list, so position order is index order.
class FreeTopology {
 public:
  FreeTopology(const std::vector<std::vector<Link>>& links, std::vector<unsigned> free)
      : free_(std::move(free)),
        scores_(free_.size() * free_.size(), kNoPairs),
        rows_(free_.size()) {
    for (size_t a = 0; a < size(); ++a) {
      for (size_t b = a + 1; b < size(); ++b) {
        PairScore pair = pair_score(links[free_[a]][free_[b]]);
        scores_[a * size() + b] = scores_[b * size() + a] = pair;
        add_pairs(all_, pair);
        add_pairs(rows_[a], pair);
        add_pairs(rows_[b], pair);
      }
    }
  }

  size_t size() const { return free_.size(); }
  unsigned gpu(size_t position) const { return free_[position]; }
  PairScore at(size_t a, size_t b) const { return scores_[a * size() + b]; }

  // The score of the free GPUs outside `members`, whose own score is `chosen`.
  SetScore remaining_score(const std::vector<size_t>& members, const SetScore& chosen) const {
    // The rows of the members hold each inside pair twice and each crossing pair once.
    SetScore rest{kNoPairs, all_.total + chosen.total, all_.nvlinks + chosen.nvlinks};
    std::vector<bool> in_set(size(), false);
    for (size_t member : members) {
      in_set[member] = true;
      rest.total -= rows_[member].total;
      rest.nvlinks -= rows_[member].nvlinks;
    }
    // Usually a pair as bad as the worst of all free pairs turns up early.
    for (size_t a = 0; a < size() && rest.worst != all_.worst; ++a) {
      for (size_t b = a + 1; b < size() && !in_set[a] && rest.worst != all_.worst; ++b) {
        if (!in_set[b]) rest.worst = std::min(rest.worst, at(a, b));
      }
    }
    return rest;
  }

 private:
  std::vector<unsigned> free_;
  std::vector<PairScore> scores_;  // size() x size()
  SetScore all_;                   // of all free GPUs
  std::vector<SetScore> rows_;     // of each GPU's pairs (only total and nvlinks are used)
};

// The best `keep` candidates seen so far, best first.
class Ranking {
 public:
  Ranking(const FreeTopology& topology, size_t keep) : topology_(topology), keep_(keep) {}

  // The set score a candidate must at least reach to enter; none until full.
  const SetScore* bar() const { return ranked_.size() < keep_ ? nullptr : &ranked_.back().score; }

  void offer(const std::vector<size_t>& members, const SetScore& score) {
    // The tie-break costs more than the score: skip it for a set already out.
    if (const SetScore* least = bar(); least && score < *least) return;
    Placement candidate;
    for (size_t member : members) candidate.gpus.push_back(topology_.gpu(member));
    std::sort(candidate.gpus.begin(), candidate.gpus.end());
    if (std::any_of(ranked_.begin(), ranked_.end(),
                    [&](const Placement& p) { return p.gpus == candidate.gpus; })) {
      return;  // the heuristic reaches one set from several seeds
    }
    candidate.score = score;
    candidate.remaining = topology_.remaining_score(members, score);
    auto position = std::find_if(ranked_.begin(), ranked_.end(),
                                 [&](const Placement& p) { return better(candidate, p); });
    if (position == ranked_.end() && ranked_.size() == keep_) return;
    ranked_.insert(position, std::move(candidate));
    if (ranked_.size() > keep_) ranked_.pop_back();
  }

  std::vector<Placement> take() && { return std::move(ranked_); }

 private:
  const FreeTopology& topology_;
  size_t keep_;
  std::vector<Placement> ranked_;
};

// GPUs with the same link to every other free GPU are interchangeable: swapping
// two of them is a symmetry of the free topology, so it changes neither a set's
// score nor the rest's. On NVSwitch machines whole islands are one group.
struct GpuGroups {
  std::vector<std::vector<size_t>> groups;  // positions, ascending; ordered by lowest member
  std::vector<size_t> group_of;             // by position
};

GpuGroups interchangeable_groups(const FreeTopology& topology) {
  GpuGroups result;
  for (size_t gpu = 0; gpu < topology.size(); ++gpu) {
    auto same_links = [&](const std::vector<size_t>& group) {
      size_t other = group.front();
      for (size_t third = 0; third < topology.size(); ++third) {
        if (third == gpu || third == other) continue;
        if (topology.at(gpu, third) != topology.at(other, third)) return false;
      }
      return true;
    };
    auto group = std::find_if(result.groups.begin(), result.groups.end(), same_links);
    result.group_of.push_back(static_cast<size_t>(group - result.groups.begin()));
    if (group == result.groups.end()) {
      result.groups.push_back({gpu});
    } else {
      group->push_back(gpu);
    }
  }
  return result;
}

// The set with as many GPUs from each group as `members`, taking the lowest
// positions: it scores the same and comes first in index order.
std::vector<size_t> lowest_equivalent(const GpuGroups& groups, const std::vector<size_t>& members) {
  std::vector<size_t> taken(groups.groups.size(), 0);
  for (size_t member : members) ++taken[groups.group_of[member]];
  std::vector<size_t> lowest;
  for (size_t group = 0; group < taken.size(); ++group) {
    const std::vector<size_t>& positions = groups.groups[group];
    lowest.insert(lowest.end(), positions.begin(), positions.begin() + taken[group]);
  }
  return lowest;
}

// How many sets the exhaustive search offers (one per way of taking so many GPUs
// from each group), or limit + 1 when more.
uint64_t choices_capped(const GpuGroups& groups, size_t count, uint64_t limit) {
  std::vector<uint64_t> ways(count + 1, 0);  // ways[n]: choices of n GPUs from the groups so far
  ways[0] = 1;
  for (const std::vector<size_t>& group : groups.groups) {
    std::vector<uint64_t> next(count + 1, 0);
    for (size_t n = 0; n <= count; ++n) {
      for (size_t take = 0; take <= std::min(n, group.size()); ++take) {
        next[n] = std::min(next[n] + ways[n - take], limit + 1);
      }
    }
    ways = std::move(next);
  }
  return ways[count];
}

// Every way of taking so many GPUs from each group (the lowest positions of
// each), dropping a partial set once its worst link falls below the bar:
// adding GPUs never raises it.
void search_exhaustively(const FreeTopology& topology, const GpuGroups& groups, size_t count,
                         Ranking& ranking) {
  const std::vector<std::vector<size_t>>& group = groups.groups;
  std::vector<size_t> available_from(group.size() + 1, 0);  // GPUs in groups [g, end)
  for (size_t g = group.size(); g-- > 0;) {
    available_from[g] = available_from[g + 1] + group[g].size();
  }
  std::vector<size_t> taken(group.size(), 0);
  std::vector<size_t> members;
  members.reserve(count);
  // Within a group and between two groups every pair has the same score.
  std::function<void(size_t, const SetScore&)> extend = [&](size_t g, const SetScore& partial) {
    size_t needed = count - members.size();
    if (needed == 0) {
      ranking.offer(members, partial);
      return;
    }
    if (available_from[g] < needed) return;
    for (size_t take = std::min(needed, group[g].size()) + 1; take-- > 0;) {
      SetScore grown = partial;
      if (take >= 2) add_pairs(grown, topology.at(group[g][0], group[g][1]), take * (take - 1) / 2);
      for (size_t earlier = 0; earlier < g && take > 0; ++earlier) {
        add_pairs(grown, topology.at(group[earlier][0], group[g][0]), take * taken[earlier]);
      }
      if (const SetScore* least = ranking.bar(); least && grown.worst < least->worst) continue;
      taken[g] = take;
      members.insert(members.end(), group[g].begin(), group[g].begin() + take);
      extend(g + 1, grown);
      members.resize(members.size() - take);
      taken[g] = 0;
    }
  };
  extend(0, SetScore{});
}

// From one GPU of each group as a seed (interchangeable seeds grow sets just as
// good), grow a set by adding the GPU that keeps the worst link highest, then the
// pair-score sum (lowest position on ties). O(groups * free * count); optimal
// when the links form a hierarchy (NVSwitch islands, PCIe trees), not for
// arbitrary NVLink meshes.
void search_greedily(const FreeTopology& topology, const GpuGroups& groups, size_t count,
                     Ranking& ranking) {
  const size_t n = topology.size();
  for (const std::vector<size_t>& group : groups.groups) {
    size_t seed = group.front();
    std::vector<size_t> members{seed};
    std::vector<bool> chosen(n, false);
    chosen[seed] = true;
    // Each outsider's weakest link to the set, and its links' summed scores.
    std::vector<PairScore> weakest(n, kNoPairs);
    std::vector<uint64_t> summed(n, 0);
    SetScore score;
    while (members.size() < count) {
      size_t newest = members.back();
      std::optional<size_t> pick;
      for (size_t outsider = 0; outsider < n; ++outsider) {
        if (chosen[outsider]) continue;
        weakest[outsider] = std::min(weakest[outsider], topology.at(newest, outsider));
        summed[outsider] += topology.at(newest, outsider);
        auto key = [&](size_t gpu) {
          return std::pair{std::min(score.worst, weakest[gpu]), summed[gpu]};
        };
        if (!pick || key(outsider) > key(*pick)) pick = outsider;
      }
      for (size_t member : members) add_pairs(score, topology.at(member, *pick));
      members.push_back(*pick);
      chosen[*pick] = true;
    }
    ranking.offer(lowest_equivalent(groups, members), score);
  }
}

Result<void> check_request(const std::vector<std::vector<Link>>& links,
                           const std::vector<unsigned>& free, unsigned count) {
  for (size_t row = 0; row < links.size(); ++row) {
    if (links[row].size() != links.size()) {
      return fail("link matrix row {} has {} entries for {} GPUs", row, links[row].size(),
                  links.size());
    }
  }
  std::vector<bool> seen(links.size(), false);
  for (unsigned gpu : free) {
    if (gpu >= links.size()) {
      return fail("GPU {} is not on this machine ({} GPUs)", gpu, links.size());
    }
    if (seen[gpu]) return fail("GPU {} is listed as free twice", gpu);
    seen[gpu] = true;
  }
  if (count == 0) return fail("cannot place 0 GPUs: ask for at least one");
  if (count > free.size()) {
    std::string available = free.empty()       ? "none is"
                            : free.size() == 1 ? "only 1 is"
                                               : fmt::format("only {} are", free.size());
    return fail("need {} GPU{} but {} free", count, count == 1 ? "" : "s", available);
  }
  return {};
}

Result<std::vector<Placement>> place_ranked(const std::vector<std::vector<Link>>& links,
                                            const std::vector<unsigned>& free, unsigned count,
                                            size_t keep) {
  TRY(check_request(links, free, count));
  std::vector<unsigned> sorted_free = free;
  std::sort(sorted_free.begin(), sorted_free.end());
  FreeTopology topology(links, std::move(sorted_free));
  GpuGroups groups = interchangeable_groups(topology);
  Ranking ranking(topology, keep);
  bool exact = choices_capped(groups, count, kExactSearchLimit) <= kExactSearchLimit;
  if (exact) {
    search_exhaustively(topology, groups, count, ranking);
  } else {
    search_greedily(topology, groups, count, ranking);
  }
  std::vector<Placement> ranked = std::move(ranking).take();
  for (Placement& placement : ranked) placement.exact = exact;
  return ranked;
}

}  // namespace

Result<Placement> place(const std::vector<std::vector<Link>>& links,
                        const std::vector<unsigned>& free, unsigned count) {
  TRY_ASSIGN(std::vector<Placement> ranked, place_ranked(links, free, count, 1));
  return std::move(ranked.front());
}

Result<PlacementChoice> place_with_runner_up(const std::vector<std::vector<Link>>& links,
                                             const std::vector<unsigned>& free, unsigned count) {
  TRY_ASSIGN(std::vector<Placement> ranked, place_ranked(links, free, count, 2));
  PlacementChoice choice{std::move(ranked.front()), std::nullopt};
  if (ranked.size() > 1) choice.runner_up = std::move(ranked[1]);
  return choice;
}

}  // namespace gpupool
