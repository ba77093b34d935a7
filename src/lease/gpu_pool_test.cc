#include "lease/gpu_pool.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(UnexplainedMemory, MemoryNobodyListsIsTheLeasesUpToWhatTheyHold) {
  // A 20 GiB slice whose process NVML does not list (another PID namespace): 18 GiB in use.
  EXPECT_EQ(unexplained_memory_mib(18432, 0, 0, 0, 20480), 0u);
  // 30 GiB in use on it: 10 GiB is someone else's.
  EXPECT_EQ(unexplained_memory_mib(30720, 0, 0, 0, 20480), 10240u);
  // No lease: all of it is someone else's.
  EXPECT_EQ(unexplained_memory_mib(18432, 0, 0, 0, 0), 18432u);
}

TEST(UnexplainedMemory, ListedProcessesWeCannotSeeCountAgainstTheLeasesToo) {
  // Listed with 18 GiB but not in our /proc, beside a 20 GiB slice.
  EXPECT_EQ(unexplained_memory_mib(18432, 18432, 0, 18432, 20480), 0u);
  // Two slices of 20 GiB, one's process visible (15 GiB), the other's not (25 GiB): 5 GiB over.
  EXPECT_EQ(unexplained_memory_mib(40960, 40960, 15360, 25600, 40960), 0u);
  EXPECT_EQ(unexplained_memory_mib(46080, 40960, 15360, 25600, 40960), 5120u);
}

TEST(UnexplainedMemory, VisibleProcessesOfTheLeasesUseUpTheirRoom) {
  // The slice's own process is listed and uses 20 GiB: 8 GiB more, unlisted, is not the slice's.
  EXPECT_EQ(unexplained_memory_mib(28672, 20480, 20480, 0, 20480), 8192u);
  // Listed processes explain everything: nothing is unexplained, whatever the leases.
  EXPECT_EQ(unexplained_memory_mib(4096, 4096, 0, 0, 0), 0u);
  EXPECT_EQ(unexplained_memory_mib(4096, 8192, 0, 0, 0), 0u);  // the lists can outrun the total
}

TEST(UnexplainedMemory, AnExclusiveLeaseExplainsTheWholeGpu) {
  EXPECT_EQ(unexplained_memory_mib(143771, 0, 0, 0, 143771), 0u);
}

}  // namespace
}  // namespace gpupool
