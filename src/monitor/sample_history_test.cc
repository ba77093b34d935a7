#include "monitor/sample_history.h"

#include <deque>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace gpupool {
namespace {

// A sample whose utilisation tells which GPU and tick it came from.
GpuSample sample(double time, unsigned gpu) {
  GpuSample s;
  s.time = time;
  s.utilization_gpu = static_cast<unsigned>(time) * 10 + gpu;
  return s;
}

std::vector<GpuSample> tick(double time, size_t gpus) {
  std::vector<GpuSample> samples;
  for (unsigned gpu = 0; gpu < gpus; ++gpu) samples.push_back(sample(time, gpu));
  return samples;
}

std::vector<double> times(const std::vector<GpuSample>& samples) {
  std::vector<double> result;
  for (const GpuSample& s : samples) result.push_back(s.time);
  return result;
}

TEST(SampleOf, CopiesEverySampledReading) {
  Gpu gpu;
  size_t sampled = 0;
  for_each_reading(gpu, [&](const ReadingInfo& reading, auto& value) {
    value.emplace();
    if (reading.sample != SampleUse::NotSampled) ++sampled;
  });
  GpuSample s = sample_of(gpu, 5);
  EXPECT_EQ(s.time, 5);
  size_t copied = 0;
  for_each_sampled_reading(s, [&](const ReadingInfo& reading, const auto& value) {
    EXPECT_TRUE(value.has_value()) << reading.key;
    ++copied;
  });
  EXPECT_EQ(copied, sampled);
}

TEST(SampleHistory, StartsEmpty) {
  SampleHistory history(2, 10);
  EXPECT_EQ(history.gpus(), 2u);
  EXPECT_EQ(history.capacity(), 10u);
  EXPECT_EQ(history.ticks(), 0u);
  EXPECT_EQ(history.latest(0), std::nullopt);
  EXPECT_TRUE(history.after(0, 0).empty());
}

TEST(SampleHistory, ZeroTicksStillHoldsOne) {
  SampleHistory history(1, 0);
  EXPECT_EQ(history.capacity(), 1u);
  history.add(tick(1, 1));
  history.add(tick(2, 1));
  EXPECT_EQ(times(history.after(0, 0)), std::vector<double>{2});
}

TEST(SampleHistory, WrapsAroundKeepingTheNewest) {
  SampleHistory history(2, 3);
  for (double t = 1; t <= 7; ++t) history.add(tick(t, 2));
  EXPECT_EQ(history.ticks(), 3u);
  EXPECT_EQ(times(history.after(0, 0)), (std::vector<double>{5, 6, 7}));
  std::vector<GpuSample> gpu1 = history.after(1, 0);
  ASSERT_EQ(gpu1.size(), 3u);
  EXPECT_EQ(gpu1[0].utilization_gpu, 51u);  // GPU 1's own samples, not GPU 0's
  EXPECT_EQ(gpu1[2].utilization_gpu, 71u);
}

TEST(SampleHistory, AfterIsOldestFirstAndExcludesTheCutOff) {
  SampleHistory history(1, 10);
  for (double t = 1; t <= 5; ++t) history.add(tick(t, 1));
  EXPECT_EQ(times(history.after(0, 2)), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(times(history.after(0, 2.5)), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(times(history.after(0, 0)), (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(history.after(0, 5).empty());
  EXPECT_TRUE(history.after(0, 99).empty());
}

TEST(SampleHistory, UnknownGpuHasNothing) {
  SampleHistory history(2, 4);
  history.add(tick(1, 2));
  EXPECT_TRUE(history.after(2, 0).empty());
  EXPECT_EQ(history.latest(2), std::nullopt);
}

TEST(SampleHistory, LatestIsTheNewestTick) {
  SampleHistory history(2, 2);
  history.add(tick(1, 2));
  ASSERT_TRUE(history.latest(1));
  EXPECT_EQ(history.latest(1)->time, 1);
  for (double t = 2; t <= 5; ++t) history.add(tick(t, 2));
  EXPECT_EQ(history.latest(0)->time, 5);
  EXPECT_EQ(history.latest(1)->utilization_gpu, 51u);
}

TEST(SampleHistory, ShortTickIsPaddedWithEmptySamplesOfItsTime) {
  SampleHistory history(3, 4);
  history.add(tick(1, 3));
  history.add(tick(2, 1));  // GPUs 1 and 2 did not answer
  std::optional<GpuSample> padded = history.latest(2);
  ASSERT_TRUE(padded);
  EXPECT_EQ(padded->time, 2);
  EXPECT_EQ(padded->utilization_gpu, std::nullopt);
  EXPECT_EQ(padded->memory_used_mib, std::nullopt);
  EXPECT_EQ(padded->power_w, std::nullopt);
  EXPECT_EQ(times(history.after(2, 0)), (std::vector<double>{1, 2}));
  EXPECT_EQ(history.latest(0)->utilization_gpu, 20u);
}

TEST(SampleHistory, PaddingReplacesWhatTheSlotHeldBefore) {
  SampleHistory history(2, 1);
  history.add(tick(1, 2));
  history.add(tick(2, 1));
  EXPECT_EQ(history.latest(1)->utilization_gpu, std::nullopt);
  EXPECT_EQ(history.latest(1)->time, 2);
}

TEST(SampleHistory, SampleOfCopiesEveryMeasurement) {
  Gpu gpu;
  gpu.utilization_gpu = 91;
  gpu.utilization_memory = 40;
  gpu.memory_used_mib = 1000;
  gpu.memory_free_mib = 2000;
  gpu.temperature_c = 55;
  gpu.sm_clock_mhz = 1980;
  gpu.memory_clock_mhz = 2619;
  gpu.power_w = 512.5;
  GpuSample s = sample_of(gpu, 42.5);
  EXPECT_EQ(s.time, 42.5);
  EXPECT_EQ(s.utilization_gpu, 91u);
  EXPECT_EQ(s.utilization_memory, 40u);
  EXPECT_EQ(s.memory_used_mib, 1000u);
  EXPECT_EQ(s.memory_free_mib, 2000u);
  EXPECT_EQ(s.temperature_c, 55u);
  EXPECT_EQ(s.sm_clock_mhz, 1980u);
  EXPECT_EQ(s.memory_clock_mhz, 2619u);
  EXPECT_EQ(s.power_w, 512.5);
}

// The ring buffer against a deque that drops its front when full.
RC_GTEST_PROP(SampleHistory, BehavesLikeABoundedDeque, ()) {
  const auto gpus = *rc::gen::inRange<size_t>(1, 5);
  const auto capacity = *rc::gen::inRange<size_t>(1, 20);
  const auto steps = *rc::gen::container<std::vector<std::pair<unsigned, size_t>>>(
      rc::gen::pair(rc::gen::inRange(0u, 3u), rc::gen::inRange<size_t>(0, 6)));  // time step, tick size
  SampleHistory history(gpus, capacity);
  std::deque<std::vector<GpuSample>> model;  // each tick padded to `gpus` samples
  double now = 1;
  for (const auto& [step, size] : steps) {
    now += step;  // ticks may share a time
    std::vector<GpuSample> samples = tick(now, std::max<size_t>(size, 1));
    history.add(samples);
    samples.resize(gpus);
    for (GpuSample& s : samples) s.time = now;  // padding carries the tick's time
    model.push_back(samples);
    if (model.size() > capacity) model.pop_front();
  }
  RC_ASSERT(history.ticks() == model.size());
  const auto cut = *rc::gen::inRange(0, static_cast<int>(now) + 2);
  for (size_t gpu = 0; gpu < gpus; ++gpu) {
    std::vector<GpuSample> expected;
    for (const auto& samples : model) {
      if (samples[gpu].time > cut) expected.push_back(samples[gpu]);
    }
    std::vector<GpuSample> got = history.after(gpu, cut);
    RC_ASSERT(times(got) == times(expected));
    for (size_t i = 0; i < got.size(); ++i) RC_ASSERT(got[i].utilization_gpu == expected[i].utilization_gpu);
    if (model.empty()) {
      RC_ASSERT(!history.latest(gpu));
    } else {
      RC_ASSERT(history.latest(gpu)->utilization_gpu == model.back()[gpu].utilization_gpu);
    }
  }
}

}  // namespace
}  // namespace gpupool
