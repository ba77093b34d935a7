#include "machine/cuda_arch.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(CudaArch, CoresPerMultiprocessorMatchesNvidiaTables) {
  EXPECT_EQ(cores_per_multiprocessor(6, 0), 64u);    // P100
  EXPECT_EQ(cores_per_multiprocessor(6, 1), 128u);   // GTX 1080
  EXPECT_EQ(cores_per_multiprocessor(7, 0), 64u);    // V100
  EXPECT_EQ(cores_per_multiprocessor(7, 5), 64u);    // T4
  EXPECT_EQ(cores_per_multiprocessor(8, 0), 64u);    // A100
  EXPECT_EQ(cores_per_multiprocessor(8, 6), 128u);   // RTX 3060, A6000
  EXPECT_EQ(cores_per_multiprocessor(8, 7), 128u);   // Orin
  EXPECT_EQ(cores_per_multiprocessor(8, 9), 128u);   // RTX 4090 (Ada)
  EXPECT_EQ(cores_per_multiprocessor(9, 0), 128u);   // H100, H200
  EXPECT_EQ(cores_per_multiprocessor(10, 0), 128u);  // B200
  EXPECT_EQ(cores_per_multiprocessor(12, 0), 128u);  // RTX 5090
}

TEST(CudaArch, UnknownArchitectureIsZero) {
  EXPECT_EQ(cores_per_multiprocessor(1, 0), 0u);
  EXPECT_EQ(cores_per_multiprocessor(42, 0), 0u);
  EXPECT_EQ(cores_per_multiprocessor(-1, 0), 0u);
}

TEST(CudaArch, H200CoreCountGivesItsMultiprocessors) {
  EXPECT_EQ(16896u / cores_per_multiprocessor(9, 0), 132u);
}

}  // namespace
}  // namespace gpupool
