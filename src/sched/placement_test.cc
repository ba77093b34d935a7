#include "sched/placement.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool {
namespace {

using Links = std::vector<std::vector<Link>>;
using NvlinkTable = std::vector<std::vector<unsigned>>;

// Where a GPU hangs in the PCIe tree: its NUMA node, host bridge, and the
// switches from the host bridge down to the GPU.
struct PciePath {
  int numa;
  int host_bridge;
  std::vector<int> switches;
};

// The level NVML reports for the closest common ancestor of two GPUs.
PcieLevel common_ancestor(const PciePath& a, const PciePath& b) {
  if (a.numa != b.numa) return PcieLevel::System;
  if (a.host_bridge != b.host_bridge) return PcieLevel::NumaNode;
  auto [end_a, end_b] = std::mismatch(a.switches.begin(), a.switches.end(), b.switches.begin(),
                                      b.switches.end());
  size_t shared = static_cast<size_t>(end_a - a.switches.begin());
  if (shared == 0) return PcieLevel::HostBridge;
  if (a.switches.size() == shared && b.switches.size() == shared) return PcieLevel::SingleSwitch;
  return PcieLevel::MultipleSwitches;
}

// `nvlinks` may be empty for a machine without NVLink.
Links build_links(const NvlinkTable& nvlinks, const std::vector<PciePath>& paths,
                  bool via_nvswitch = false) {
  Links links(paths.size(), std::vector<Link>(paths.size()));
  for (size_t a = 0; a < paths.size(); ++a) {
    for (size_t b = 0; b < paths.size(); ++b) {
      if (a == b) continue;
      unsigned count = nvlinks.empty() ? 0 : nvlinks[a][b];
      links[a][b] = Link{count, via_nvswitch && count > 0, common_ancestor(paths[a], paths[b])};
    }
  }
  return links;
}

// `count` NVLinks (through NVSwitches) between GPUs of the same island of `island_size`.
NvlinkTable nvswitch_islands(size_t gpus, size_t island_size, unsigned count) {
  NvlinkTable table(gpus, std::vector<unsigned>(gpus, 0));
  for (size_t a = 0; a < gpus; ++a) {
    for (size_t b = 0; b < gpus; ++b) {
      if (a != b && a / island_size == b / island_size) table[a][b] = count;
    }
  }
  return table;
}

// `machines` DGX-1s' hybrid cube-meshes side by side, a NUMA node per four GPUs.
Links cube_meshes(size_t machines) {
  const NvlinkTable mesh = {{0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0},
                            {1, 2, 0, 2, 0, 0, 1, 0}, {2, 1, 2, 0, 0, 0, 0, 1},
                            {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1},
                            {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0}};
  size_t gpus = machines * 8;
  NvlinkTable nvlinks(gpus, std::vector<unsigned>(gpus, 0));
  std::vector<PciePath> paths;
  for (size_t a = 0; a < gpus; ++a) {
    for (size_t b = 0; b < gpus; ++b) {
      if (a / 8 == b / 8) nvlinks[a][b] = mesh[a % 8][b % 8];
    }
    int gpu = static_cast<int>(a);
    paths.push_back({gpu / 4, gpu / 4, {gpu / 2}});
  }
  return build_links(nvlinks, paths);
}

Links dgx1_v100() { return cube_meshes(1); }

// Pairs of GPUs behind two levels of PCIe switches (PXB), two pairs per NUMA node.
Links dgx_a100() {
  std::vector<PciePath> paths;
  for (int gpu = 0; gpu < 8; ++gpu) paths.push_back({gpu / 4, gpu / 2, {gpu / 2, 100 + gpu}});
  return build_links(nvswitch_islands(8, 8, 12), paths, true);
}

// Every GPU on its own host bridge (NODE within a socket).
Links hgx_h200() {
  std::vector<PciePath> paths;
  for (int gpu = 0; gpu < 8; ++gpu) paths.push_back({gpu / 4, gpu, {gpu}});
  return build_links(nvswitch_islands(8, 8, 18), paths, true);
}

Links pcie_4gpu() {
  return build_links({}, {{0, 0, {0}}, {0, 0, {0}}, {1, 1, {1}}, {1, 1, {1}}});
}

Links mixed_workstation() { return build_links({}, {{0, 0, {}}, {0, 0, {}}}); }

// `islands` NVSwitch islands of 8 GPUs (NV18), four islands per socket, pairs
// of GPUs under one PCIe switch.
Links nvswitch_cluster(size_t islands) {
  std::vector<PciePath> paths;
  for (int gpu = 0; gpu < static_cast<int>(islands) * 8; ++gpu) {
    paths.push_back({gpu / 32, gpu / 4, {gpu / 2}});
  }
  return build_links(nvswitch_islands(paths.size(), 8, 18), paths, true);
}

// Two 8-GPU NVSwitch islands on different sockets.
Links two_islands() {
  std::vector<PciePath> paths;
  for (int gpu = 0; gpu < 16; ++gpu) paths.push_back({gpu / 8, gpu / 4, {gpu / 2}});
  return build_links(nvswitch_islands(16, 8, 18), paths, true);
}

using Mask = uint32_t;

std::vector<unsigned> gpus_of(Mask mask) {
  std::vector<unsigned> gpus;
  for (unsigned gpu = 0; mask >> gpu != 0; ++gpu) {
    if ((mask >> gpu) & 1) gpus.push_back(gpu);
  }
  return gpus;
}

Mask mask_of(const std::vector<unsigned>& gpus) {
  Mask mask = 0;
  for (unsigned gpu : gpus) mask |= Mask{1} << gpu;
  return mask;
}

// Free GPUs with the same pair score to every other free GPU, grouped.
std::vector<Mask> interchangeable_groups(const Links& links, Mask free) {
  std::vector<Mask> groups;
  for (unsigned gpu : gpus_of(free)) {
    auto same_links = [&](Mask group) {
      unsigned other = gpus_of(group).front();
      for (unsigned third : gpus_of(free & ~(Mask{1} << gpu) & ~(Mask{1} << other))) {
        if (pair_score(links[gpu][third]) != pair_score(links[other][third])) return false;
      }
      return true;
    };
    auto group = std::find_if(groups.begin(), groups.end(), same_links);
    if (group == groups.end()) {
      groups.push_back(Mask{1} << gpu);
    } else {
      *group |= Mask{1} << gpu;
    }
  }
  return groups;
}

// The brute force: every subset of the free GPUs, scored directly from the
// pair scores, ranked by the documented objective.
class BruteForce {
 public:
  explicit BruteForce(const Links& links) : score_of_(size_t{1} << links.size()) {
    for (Mask set = 0; set < score_of_.size(); ++set) {
      std::vector<unsigned> gpus = gpus_of(set);
      SetScore& score = score_of_[set];
      for (size_t i = 0; i < gpus.size(); ++i) {
        for (size_t j = i + 1; j < gpus.size(); ++j) {
          PairScore pair = pair_score(links[gpus[i]][gpus[j]]);
          score.worst = std::min(score.worst, pair);
          score.total += pair;
          score.nvlinks += pair > kBestPcieScore ? pair - kBestPcieScore : 0;
        }
      }
    }
  }

  const SetScore& score(Mask set) const { return score_of_[set]; }

  // True when choosing `a` out of `free` beats choosing `b`.
  bool better(Mask a, Mask b, Mask free) const {
    if (score(a) != score(b)) return score(a) > score(b);
    if (score(free & ~a) != score(free & ~b)) return score(free & ~a) > score(free & ~b);
    // Of two ascending index lists of one length, the lexicographically smaller
    // one holds the lowest GPU that only one of them holds.
    Mask differ = a ^ b;
    return (a & differ & -differ) != 0;
  }

  struct Ranked {
    // By count; 0 when there is none. The runner-up is the best set that takes
    // a different number of GPUs from some interchangeable group than the best.
    std::vector<Mask> best, runner_up;
  };

  Ranked rank(Mask free, const std::vector<Mask>& groups) const {
    size_t slots = static_cast<size_t>(std::popcount(free)) + 1;
    Ranked ranked{std::vector<Mask>(slots, 0), std::vector<Mask>(slots, 0)};
    // Every subset of `free`: the usual walk down through the submasks.
    for (Mask set = free; set != 0; set = (set - 1) & free) {
      Mask& best = ranked.best[static_cast<size_t>(std::popcount(set))];
      if (best == 0 || better(set, best, free)) best = set;
    }
    for (Mask set = free; set != 0; set = (set - 1) & free) {
      size_t count = static_cast<size_t>(std::popcount(set));
      bool same_choice = std::all_of(groups.begin(), groups.end(), [&](Mask group) {
        return std::popcount(set & group) == std::popcount(ranked.best[count] & group);
      });
      Mask& runner_up = ranked.runner_up[count];
      if (!same_choice && (runner_up == 0 || better(set, runner_up, free))) runner_up = set;
    }
    return ranked;
  }

 private:
  std::vector<SetScore> score_of_;
};

std::string describe(Mask mask) { return fmt::format("{{{}}}", fmt::join(gpus_of(mask), ",")); }

std::vector<Mask> every_free_set(const Links& links) {
  std::vector<Mask> sets;
  for (Mask free = 1; free < Mask{1} << links.size(); ++free) sets.push_back(free);
  return sets;
}

// place() and place_with_runner_up() against the brute force for each free set
// and every count. Stops at the first disagreement.
void expect_optimal(const Links& links, const std::vector<Mask>& free_sets) {
  BruteForce brute(links);
  for (Mask free : free_sets) {
    BruteForce::Ranked expected = brute.rank(free, interchangeable_groups(links, free));
    std::vector<unsigned> free_gpus = gpus_of(free);
    for (unsigned count = 1; count <= free_gpus.size(); ++count) {
      auto context = [&] { return fmt::format("free {} count {}", describe(free), count); };
      Result<Placement> placed = place(links, free_gpus, count);
      if (!placed) {
        ADD_FAILURE() << context() << ": " << placed.error().message;
        return;
      }
      Mask chosen = mask_of(placed->gpus);
      Mask best = expected.best[count];
      if (placed->gpus.size() != count || (chosen & ~free) != 0 || chosen != best ||
          placed->score != brute.score(best) || placed->remaining != brute.score(free & ~best) ||
          !placed->exact) {
        ADD_FAILURE() << context() << ": placed " << describe(chosen) << " ("
                      << explain(placed->score) << "), brute force " << describe(best) << " ("
                      << explain(brute.score(best)) << ")";
        return;
      }
      Result<PlacementChoice> choice = place_with_runner_up(links, free_gpus, count);
      Mask runner_up = choice->runner_up ? mask_of(choice->runner_up->gpus) : 0;
      if (mask_of(choice->best.gpus) != best || runner_up != expected.runner_up[count]) {
        ADD_FAILURE() << context() << ": runner-up " << describe(runner_up) << ", brute force "
                      << describe(expected.runner_up[count]);
        return;
      }
    }
  }
}

TEST(PlacementPairScore, OrdersLinksFromNvlinkDownToUnknownPcie) {
  std::vector<Link> best_first = {
      {18, true, PcieLevel::System},  {2, false, PcieLevel::System},
      {1, false, std::nullopt},       {0, false, PcieLevel::Board},
      {0, false, PcieLevel::SingleSwitch}, {0, false, PcieLevel::MultipleSwitches},
      {0, false, PcieLevel::HostBridge},   {0, false, PcieLevel::NumaNode},
      {0, false, PcieLevel::System},       {0, false, std::nullopt}};
  for (size_t i = 0; i + 1 < best_first.size(); ++i) {
    EXPECT_GT(pair_score(best_first[i]), pair_score(best_first[i + 1])) << "at " << i;
  }
  std::vector<std::string> labels;
  for (const Link& link : best_first) labels.push_back(pair_score_label(pair_score(link)));
  EXPECT_THAT(labels, ::testing::ElementsAre("NV18", "NV2", "NV1", "board", "PIX", "PXB", "PHB",
                                             "NODE", "SYS", "unknown"));
}

TEST(PlacementBuildLinks, FollowsNvmlCommonAncestors) {
  Links dgx1 = dgx1_v100();
  EXPECT_EQ(dgx1[0][1].pcie, PcieLevel::SingleSwitch);
  EXPECT_EQ(dgx1[0][2].pcie, PcieLevel::HostBridge);
  EXPECT_EQ(dgx1[0][4].pcie, PcieLevel::System);
  EXPECT_EQ(dgx1[0][3].nvlinks, 2u);
  Links a100 = dgx_a100();
  EXPECT_EQ(a100[0][1].pcie, PcieLevel::MultipleSwitches);
  EXPECT_EQ(a100[0][2].pcie, PcieLevel::NumaNode);
  EXPECT_TRUE(a100[0][7].via_nvswitch);
  EXPECT_EQ(mixed_workstation()[0][1].pcie, PcieLevel::HostBridge);
}

void expect_optimal_everywhere(const Links& links) { expect_optimal(links, every_free_set(links)); }

TEST(PlacementExhaustive, Dgx1V100) { expect_optimal_everywhere(dgx1_v100()); }
TEST(PlacementExhaustive, DgxA100) { expect_optimal_everywhere(dgx_a100()); }
TEST(PlacementExhaustive, HgxH200) { expect_optimal_everywhere(hgx_h200()); }
TEST(PlacementExhaustive, Pcie4Gpu) { expect_optimal_everywhere(pcie_4gpu()); }
TEST(PlacementExhaustive, MixedWorkstation) { expect_optimal_everywhere(mixed_workstation()); }
// All 65536 free sets of 16 GPUs take a minute in a debug build, so by default
// a sample: the GPUs of an island are interchangeable, so what matters is how
// many are free on each island and where the lowest free ones sit — every free
// pattern of one island, with 0 to 8 free GPUs on the other (spread over its
// switches), both ways round. GPUPOOL_EXHAUSTIVE=1 checks every free set.
TEST(PlacementExhaustive, TwoNvswitchIslandsAcrossSockets) {
  if (std::getenv("GPUPOOL_EXHAUSTIVE") != nullptr) {
    expect_optimal_everywhere(two_islands());
    return;
  }
  constexpr std::array<unsigned, 8> kFreeingOrder = {0, 5, 2, 7, 1, 4, 6, 3};
  std::vector<Mask> free_sets;
  Mask other = 0;
  for (size_t freed = 0; freed <= kFreeingOrder.size(); ++freed) {
    for (Mask island = 0; island < 256; ++island) {
      free_sets.push_back(island | other << 8);
      if (island != other) free_sets.push_back(other | island << 8);
    }
    if (freed < kFreeingOrder.size()) other |= Mask{1} << kFreeingOrder[freed];
  }
  expect_optimal(two_islands(), free_sets);
}

const std::vector<unsigned> kAllOf8 = {0, 1, 2, 3, 4, 5, 6, 7};

TEST(PlacementDgx1, TwoGpusGetAnNv2Pair) {
  Links links = dgx1_v100();
  Result<Placement> placed = place(links, kAllOf8, 2);
  ASSERT_TRUE(placed) << placed.error().message;
  ASSERT_EQ(placed->gpus.size(), 2u);
  EXPECT_EQ(links[placed->gpus[0]][placed->gpus[1]].nvlinks, 2u);
  EXPECT_EQ(pair_score_label(placed->score.worst), "NV2");
}

TEST(PlacementDgx1, FourGpusGetAFullyNvlinkedQuad) {
  Result<PlacementChoice> choice = place_with_runner_up(dgx1_v100(), kAllOf8, 4);
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_THAT(choice->best.gpus, ::testing::ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(explain(choice->best.score), "worst link NV1, 9 NVLinks in total, pair-score sum 45");
  // The other quad is exactly as good and leaves exactly as good a rest: it
  // loses on the index order only.
  ASSERT_TRUE(choice->runner_up);
  EXPECT_THAT(choice->runner_up->gpus, ::testing::ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(choice->runner_up->score, choice->best.score);
  EXPECT_EQ(choice->runner_up->remaining, choice->best.remaining);
}

TEST(PlacementDgx1, ThreeGpusStayOnOneSocketWheneverOneCanHoldThem) {
  Links links = dgx1_v100();
  for (Mask free = 1; free < 256; ++free) {
    bool socket_can_hold = std::popcount(free & 0x0Fu) >= 3 || std::popcount(free & 0xF0u) >= 3;
    if (!socket_can_hold) continue;
    Result<Placement> placed = place(links, gpus_of(free), 3);
    ASSERT_TRUE(placed) << placed.error().message;
    Mask chosen = mask_of(placed->gpus);
    EXPECT_TRUE((chosen & 0xF0u) == 0 || (chosen & 0x0Fu) == 0) << "free " << describe(free)
                                                                << " placed " << describe(chosen);
  }
}

TEST(PlacementPcie4Gpu, TwoGpusGetASameSwitchPair) {
  Result<Placement> placed = place(pcie_4gpu(), {0, 1, 2, 3}, 2);
  ASSERT_TRUE(placed) << placed.error().message;
  EXPECT_THAT(placed->gpus, ::testing::ElementsAre(0, 1));
  EXPECT_EQ(explain(placed->score), "worst link PIX, no NVLinks, pair-score sum 5");

  placed = place(pcie_4gpu(), {3, 0, 2}, 2);
  ASSERT_TRUE(placed) << placed.error().message;
  EXPECT_THAT(placed->gpus, ::testing::ElementsAre(2, 3));
}

TEST(PlacementTieBreak, OneGpuTakesTheLoneCardAndLeavesTheSwitchPair) {
  // Any single GPU scores the same; GPU 0 would be the index-order choice, but
  // taking it would split the PIX pair (0,1) and leave only SYS links behind.
  Result<PlacementChoice> choice = place_with_runner_up(pcie_4gpu(), {0, 1, 2}, 1);
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_THAT(choice->best.gpus, ::testing::ElementsAre(2));
  EXPECT_EQ(pair_score_label(choice->best.remaining.worst), "PIX");
  EXPECT_EQ(explain(choice->best.score), "no links (fewer than two GPUs)");
  ASSERT_TRUE(choice->runner_up);
  EXPECT_THAT(choice->runner_up->gpus, ::testing::ElementsAre(0));
}

TEST(PlacementTieBreak, SmallJobGoesToThePartlyUsedIsland) {
  // Island 0 is whole, island 1 has 5 free GPUs: 4 GPUs from either are NV18
  // everywhere, but taking them from island 1 keeps island 0 whole for an 8-GPU job.
  std::vector<unsigned> free = {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 13, 15};
  Result<Placement> placed = place(two_islands(), free, 4);
  ASSERT_TRUE(placed) << placed.error().message;
  EXPECT_THAT(placed->gpus, ::testing::ElementsAre(9, 10, 12, 13));
  EXPECT_EQ(pair_score_label(placed->score.worst), "NV18");
}

TEST(PlacementErrors, RejectsImpossibleRequests) {
  Links links = pcie_4gpu();
  auto error_of = [&](const std::vector<unsigned>& free, unsigned count) {
    Result<Placement> placed = place(links, free, count);
    return placed ? std::string("no error") : placed.error().message;
  };
  EXPECT_EQ(error_of({0, 1, 2}, 4), "need 4 GPUs but only 3 are free");
  EXPECT_EQ(error_of({2}, 2), "need 2 GPUs but only 1 is free");
  EXPECT_EQ(error_of({}, 1), "need 1 GPU but none is free");
  EXPECT_EQ(error_of({0, 1}, 0), "cannot place 0 GPUs: ask for at least one");
  EXPECT_EQ(error_of({0, 4}, 1), "GPU 4 is not on this machine (4 GPUs)");
  EXPECT_EQ(error_of({1, 1}, 1), "GPU 1 is listed as free twice");
  links[2].pop_back();
  EXPECT_EQ(error_of({0}, 1), "link matrix row 2 has 3 entries for 4 GPUs");
}

TEST(PlacementRunnerUp, NoneWhenEveryFreeGpuIsTaken) {
  Result<PlacementChoice> choice = place_with_runner_up(hgx_h200(), {1, 5, 6}, 3);
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_THAT(choice->best.gpus, ::testing::ElementsAre(1, 5, 6));
  EXPECT_FALSE(choice->runner_up);
  EXPECT_EQ(explain(choice->best.remaining), "no links (fewer than two GPUs)");
}

TEST(PlacementRunnerUp, NoneWhenEveryChoiceIsTheSameUpToInterchangeableGpus) {
  Result<PlacementChoice> choice = place_with_runner_up(hgx_h200(), kAllOf8, 4);
  ASSERT_TRUE(choice) << choice.error().message;
  EXPECT_THAT(choice->best.gpus, ::testing::ElementsAre(0, 1, 2, 3));
  EXPECT_FALSE(choice->runner_up);
}

TEST(PlacementLargeMachine, EightOfSixtyFourTakeAWholeIsland) {
  Links links = nvswitch_cluster(8);
  std::vector<unsigned> free;
  for (unsigned gpu = 0; gpu < 64; ++gpu) {
    if (gpu % 8 != 3) free.push_back(gpu);  // every island has a GPU in use...
  }
  for (unsigned gpu = 40; gpu < 48; ++gpu) {
    if (gpu % 8 == 3) free.push_back(gpu);  // ...but island 5
  }
  Result<Placement> placed = place(links, free, 8);
  ASSERT_TRUE(placed) << placed.error().message;
  // Each island's free GPUs are interchangeable: only how many to take from
  // each island is searched, which stays within the exact limit.
  EXPECT_TRUE(placed->exact);
  EXPECT_THAT(placed->gpus, ::testing::ElementsAre(40, 41, 42, 43, 44, 45, 46, 47));
}

TEST(PlacementLargeMachine, FourOfSixtyFourCubeMeshGpusGetAnNvlinkedQuad) {
  std::vector<unsigned> free;
  for (unsigned gpu = 0; gpu < 64; ++gpu) {
    if (gpu % 4 != 0) free.push_back(gpu);  // no whole NVLinked quad is left...
  }
  free.push_back(52);  // ...but 52-55
  Result<Placement> placed = place(cube_meshes(8), free, 4);
  ASSERT_TRUE(placed) << placed.error().message;
  EXPECT_FALSE(placed->exact);  // no two GPUs are interchangeable: C(49, 4) sets
  EXPECT_THAT(placed->gpus, ::testing::ElementsAre(52, 53, 54, 55));
  EXPECT_EQ(pair_score_label(placed->score.worst), "NV1");
}

void expect_exactly_the_count_asked(const Links& links, const std::vector<unsigned>& free) {
  for (unsigned count = 1; count <= free.size(); ++count) {
    Result<Placement> placed = place(links, free, count);
    ASSERT_TRUE(placed) << placed.error().message;
    const std::vector<unsigned>& gpus = placed->gpus;
    ASSERT_EQ(gpus.size(), count);
    EXPECT_TRUE(std::is_sorted(gpus.begin(), gpus.end()));
    EXPECT_TRUE(std::includes(free.begin(), free.end(), gpus.begin(), gpus.end()));
  }
}

TEST(PlacementLargeMachine, AlwaysReturnsExactlyTheCountAsked) {
  std::vector<unsigned> free;
  for (unsigned gpu = 0; gpu < 64; ++gpu) {
    if (gpu % 5 != 0) free.push_back(gpu);  // 6 or 7 free GPUs per island or mesh
  }
  expect_exactly_the_count_asked(nvswitch_cluster(8), free);
  expect_exactly_the_count_asked(cube_meshes(8), free);
}

}  // namespace
}  // namespace gpupool
