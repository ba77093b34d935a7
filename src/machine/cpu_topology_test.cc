#include "machine/cpu_topology.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

std::vector<unsigned> cpus_of(const std::vector<CpuCore>& cores, size_t i) { return cores.at(i).cpus; }

// Two sockets of two cores with two threads each, numbered as the kernel numbers most Intel hosts:
// the first thread of every core first (0-3), then their siblings (4-7).
std::vector<CpuThread> siblings_apart() {
  return {{0, 0, {0, 4}}, {1, 0, {1, 5}}, {2, 1, {2, 6}}, {3, 1, {3, 7}},
          {4, 0, {0, 4}}, {5, 0, {1, 5}}, {6, 1, {2, 6}}, {7, 1, {3, 7}}};
}

TEST(CpuTopology, OrdersCoresSocketBySocketByTheirLowestCpu) {
  std::vector<CpuCore> cores = ordered_cores(siblings_apart());
  ASSERT_EQ(cores.size(), 4u);
  EXPECT_EQ(cpus_of(cores, 0), (std::vector<unsigned>{0, 4}));
  EXPECT_EQ(cpus_of(cores, 1), (std::vector<unsigned>{1, 5}));
  EXPECT_EQ(cpus_of(cores, 2), (std::vector<unsigned>{2, 6}));
  EXPECT_EQ(cores[3].package, 1u);
}

TEST(CpuTopology, AlternatingSocketsKeepEachSocketsCoresTogether) {
  // Even CPUs on socket 0, odd on socket 1, no SMT: socket 0's cores come first.
  std::vector<CpuThread> threads;
  for (unsigned cpu = 0; cpu < 8; ++cpu) threads.push_back({cpu, cpu % 2, {cpu}});
  std::vector<CpuCore> cores = ordered_cores(threads);
  ASSERT_EQ(cores.size(), 8u);
  EXPECT_EQ(cpus_of(cores, 0), std::vector<unsigned>{0});
  EXPECT_EQ(cpus_of(cores, 1), std::vector<unsigned>{2});
  EXPECT_EQ(cpus_of(cores, 3), std::vector<unsigned>{6});
  EXPECT_EQ(cpus_of(cores, 4), std::vector<unsigned>{1});
}

TEST(CpuTopology, SocketsGoInTheOrderOfTheirCpusNotOfTheirNumbers) {
  std::vector<CpuCore> cores = ordered_cores({{0, 7, {0}}, {1, 3, {1}}});
  ASSERT_EQ(cores.size(), 2u);
  EXPECT_EQ(cores[0].package, 7u);
}

TEST(CpuTopology, AThreadCountsInItsCoreEvenWhenItsSiblingListOmitsIt) {
  std::vector<CpuCore> cores = ordered_cores({{0, 0, {1}}, {1, 0, {0, 1}}});
  ASSERT_EQ(cores.size(), 1u);
  EXPECT_EQ(cpus_of(cores, 0), (std::vector<unsigned>{0, 1}));
}

TEST(CpuTopology, DescribesAUniformHostAsSlurmDoes) {
  std::optional<CpuLayout> layout = uniform_layout(ordered_cores(siblings_apart()));
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->cpus, 8u);
  EXPECT_EQ(layout->sockets, 2u);
  EXPECT_EQ(layout->cores_per_socket, 2u);
  EXPECT_EQ(layout->threads_per_core, 2u);
}

TEST(CpuTopology, HasNoLayoutForMixedCoresUnevenSocketsOrNoCpus) {
  // A hybrid CPU: performance cores with two threads, efficiency cores with one.
  EXPECT_FALSE(uniform_layout(ordered_cores({{0, 0, {0, 1}}, {1, 0, {0, 1}}, {2, 0, {2}}})));
  EXPECT_FALSE(uniform_layout(ordered_cores({{0, 0, {0}}, {1, 0, {1}}, {2, 1, {2}}})));
  EXPECT_FALSE(uniform_layout({}));
}

}  // namespace
}  // namespace gpupool
