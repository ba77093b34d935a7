#include "sched/fragmentation.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

GpuRequest slice(uint64_t mib) { return GpuRequest{.count = 1, .slice_mib = mib}; }
GpuRequest whole() { return GpuRequest{}; }

TEST(RequestMix, NothingIsUnusableWithoutRequests) {
  RequestMix mix(10);
  EXPECT_TRUE(mix.empty());
  EXPECT_EQ(mix.unusable_mib(500, false), 0);
}

TEST(RequestMix, RoomIsUnusableForTheRequestsLargerThanIt) {
  RequestMix mix(10);
  mix.add(slice(300));
  mix.add(slice(600));
  mix.add(whole());
  mix.add(whole());
  // 500 MiB on a shared GPU: the 300 MiB slice fits; the 600 MiB one and whole GPUs do not.
  EXPECT_DOUBLE_EQ(mix.unusable_mib(500, false), 500 * 3 / 4.0);
  // A free GPU serves whole-GPU requests too: only the 1000 MiB it has matter to the rest.
  EXPECT_DOUBLE_EQ(mix.unusable_mib(1000, true), 0);
  EXPECT_EQ(mix.unusable_mib(0, false), 0);
}

TEST(RequestMix, OnlyTheLastWindowCounts) {
  RequestMix mix(2);
  mix.add(slice(800));
  mix.add(slice(100));
  mix.add(slice(100));  // the 800 MiB request leaves the window
  EXPECT_EQ(mix.unusable_mib(200, false), 0);
  GpuRequest mig;
  mig.mig = MigRequest{};
  mix.add(mig);  // no part in it
  EXPECT_EQ(mix.unusable_mib(200, false), 0);
}

TEST(RequestMix, AWindowOfNoneRecordsNothing) {
  RequestMix mix(0);
  mix.add(slice(100));
  EXPECT_TRUE(mix.empty());
}

TEST(FragmentationGrowth, LeavesRoomTheCommonRequestFits) {
  // Most requests ask for 400 MiB. A 300 MiB slice where 500 MiB is left (best fit's choice)
  // leaves 200 that no request fits; where 700 is left, 400, which they all fit.
  RequestMix mix(10);
  for (int i = 0; i < 3; ++i) mix.add(slice(400));
  mix.add(slice(300));
  EXPECT_DOUBLE_EQ(fragmentation_growth(mix, 500, false, 300), 200);
  EXPECT_DOUBLE_EQ(fragmentation_growth(mix, 700, false, 300), 0);
}

TEST(FragmentationGrowth, FillingRoomNobodyCouldUseIsAGain) {
  // 300 MiB left is too little for the 400 MiB requests; a 200 MiB slice there leaves 100.
  RequestMix mix(10);
  for (int i = 0; i < 3; ++i) mix.add(slice(400));
  mix.add(slice(200));
  EXPECT_DOUBLE_EQ(fragmentation_growth(mix, 300, false, 200), 100 - 300 * 3 / 4.0);
}

TEST(FragmentationGrowth, AFreeGpuCostsTheWholeGpuRequestsTheirGpu) {
  RequestMix mix(10);
  mix.add(whole());
  mix.add(slice(200));
  EXPECT_DOUBLE_EQ(fragmentation_growth(mix, 1000, true, 200), 800 / 2.0);
  EXPECT_LT(fragmentation_growth(mix, 500, false, 200), 0);  // fills room whole GPUs could not use
}

}  // namespace
}  // namespace gpupool
