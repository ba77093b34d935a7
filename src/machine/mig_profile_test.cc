#include "machine/mig_profile.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Each instance's memory (nvmlDeviceAttributes_t's memorySizeMB) sits a little below its share of
// the GPU, as on real GPUs; the names are the ones nvidia-smi prints for these profiles.
TEST(MigProfile, NamesH200ProfilesAsNvidiaSmiDoes) {
  constexpr uint64_t kH200 = 143771;
  EXPECT_EQ(mig_profile_name(1, 1, 16384, kH200), "1g.18gb");
  EXPECT_EQ(mig_profile_name(1, 1, 32768, kH200), "1g.35gb");
  EXPECT_EQ(mig_profile_name(2, 2, 32768, kH200), "2g.35gb");
  EXPECT_EQ(mig_profile_name(3, 3, 69632, kH200), "3g.71gb");
  EXPECT_EQ(mig_profile_name(4, 4, 69632, kH200), "4g.71gb");
  EXPECT_EQ(mig_profile_name(7, 7, 140544, kH200), "7g.141gb");
}

TEST(MigProfile, NamesA100Profiles) {
  constexpr uint64_t kA100_80 = 81920;
  EXPECT_EQ(mig_profile_name(1, 1, 9728, kA100_80), "1g.10gb");
  EXPECT_EQ(mig_profile_name(2, 2, 19968, kA100_80), "2g.20gb");
  EXPECT_EQ(mig_profile_name(3, 3, 40192, kA100_80), "3g.40gb");
  EXPECT_EQ(mig_profile_name(7, 7, 80896, kA100_80), "7g.80gb");
  constexpr uint64_t kA100_40 = 40960;
  EXPECT_EQ(mig_profile_name(1, 1, 4864, kA100_40), "1g.5gb");
  EXPECT_EQ(mig_profile_name(3, 3, 20096, kA100_40), "3g.20gb");
  EXPECT_EQ(mig_profile_name(7, 7, 40448, kA100_40), "7g.40gb");
}

TEST(MigProfile, NamesH100ProfilesWhoseTotalIsNotWholeGib) {
  constexpr uint64_t kH100 = 81559;  // 79.6 GiB: counts as 80
  EXPECT_EQ(mig_profile_name(1, 1, 9856, kH100), "1g.10gb");
  EXPECT_EQ(mig_profile_name(3, 3, 40320, kH100), "3g.40gb");
}

TEST(MigProfile, AComputeInstanceSmallerThanItsGpuInstanceNamesBoth) {
  EXPECT_EQ(mig_profile_name(3, 1, 69632, 143771), "1c.3g.71gb");
  EXPECT_EQ(mig_profile_name(3, 2, 20096, 40960), "2c.3g.20gb");
}

TEST(MigProfile, AGpuWithNoKnownMemoryGivesZeroGb) { EXPECT_EQ(mig_profile_name(1, 1, 100, 0), "1g.0gb"); }

}  // namespace
}  // namespace gpupool
