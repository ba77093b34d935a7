#include "sched/slice_watch.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

GpuProcess process(uint32_t pid, std::optional<uint64_t> used_mib) {
  GpuProcess p;
  p.pid = pid;
  p.used_memory_mib = used_mib;
  return p;
}

Machine two_gpus(std::vector<GpuProcess> on_0, std::vector<GpuProcess> on_1) {
  Machine machine;
  machine.gpus.resize(2);
  machine.gpus[0].index = 0;
  machine.gpus[0].processes = std::move(on_0);
  machine.gpus[1].index = 1;
  machine.gpus[1].processes = std::move(on_1);
  return machine;
}

// 100 and 200 hold slices; 101 is 100's child, 201 200's, 102 101's; 300 is nobody's.
std::optional<uint32_t> parent_of(uint32_t pid) {
  switch (pid) {
    case 101:
      return 100;
    case 102:
      return 101;
    case 201:
      return 200;
    case 300:
      return 1;
    default:
      return std::nullopt;
  }
}

TEST(SliceUses, ProcessesCountForTheNearestHolderOnItsSliceGpus) {
  std::vector<WatchedSlice> slices = {{7, 100, {0}, 20480}, {8, 200, {0, 1}, 10240}};
  Machine sample = two_gpus({process(102, 31949), process(201, 4096), process(300, 50000)},
                            {process(201, 12000), process(101, 9999)});
  std::vector<SliceUse> uses = slice_uses(sample, slices, parent_of);
  // Job 7's grandchild on GPU 0 counts; its child on GPU 1, outside its slice, does not.
  EXPECT_EQ(uses, (std::vector<SliceUse>{
                      {7, 0, 31949, 20480, 0, {102}}, {8, 0, 4096, 10240, 0, {201}}, {8, 1, 12000, 10240, 0, {201}}}));
  EXPECT_TRUE(uses[0].overrun());
  EXPECT_FALSE(uses[1].overrun());
}

TEST(SliceUses, ASliceWithNothingListedUsesNothingAndUnknownFiguresCountZero) {
  std::vector<WatchedSlice> slices = {{7, 100, {1}, 20480}};
  EXPECT_EQ(slice_uses(two_gpus({}, {process(100, std::nullopt)}), slices, parent_of),
            (std::vector<SliceUse>{{7, 1, 0, 20480, 0, {100}}}));
}

TEST(SliceUses, OnlyAComputeProcessNvmlSaysIsNoMpsClientIsOutsideMps) {
  std::vector<WatchedSlice> slices = {{7, 100, {0}, 20480}};
  GpuProcess client = process(101, 4000);
  client.mps_client = true;
  GpuProcess graphics = process(102, 10);
  graphics.kind = ProcessKind::Graphics;
  graphics.mps_client = false;
  GpuProcess unknown = process(100, 500);  // NVML without the MPS list: nobody is stopped for it
  EXPECT_EQ(slice_uses(two_gpus({client, graphics, unknown}, {}), slices, parent_of)[0].outside_mps_pid, 0u);
  GpuProcess outside = process(100, 500);
  outside.mps_client = false;
  EXPECT_EQ(slice_uses(two_gpus({client, graphics, outside}, {}), slices, parent_of)[0].outside_mps_pid, 100u);
}

TEST(SliceUses, AProcessGoneFromProcCountsForNobody) {
  std::vector<WatchedSlice> slices = {{7, 100, {0}, 1024}};
  EXPECT_EQ(slice_uses(two_gpus({process(999, 5000)}, {}), slices, parent_of)[0].used_mib, 0u);
}

TEST(WorstUse, EachJobIsReportedByTheGpuWhereItUsesMostOfItsSlice) {
  auto worst = worst_use_per_job({{8, 0, 4096, 10240, 0}, {8, 1, 12000, 10240, 0}, {7, 0, 100, 20480, 0}});
  ASSERT_EQ(worst.size(), 2u);
  EXPECT_EQ(worst.at(8), (SliceUse{8, 1, 12000, 10240, 0}));
  EXPECT_EQ(worst.at(7), (SliceUse{7, 0, 100, 20480, 0}));
}

TEST(SliceOverrunText, SaysTheFiguresInGib) {
  EXPECT_EQ(slice_overrun_text(31949, 20480), "used 31.2 GiB of its 20 GiB slice");
  EXPECT_EQ(slice_overrun_text(8192, 4096), "used 8 GiB of its 4 GiB slice");
  // Just past the slice never reads as the slice's own size rounded up.
  EXPECT_EQ(slice_overrun_text(20481, 20480), "used 20 GiB of its 20 GiB slice");
  EXPECT_EQ(slice_overrun_text(1536, 512), "used 1.5 GiB of its 0.5 GiB slice");
}

TEST(SliceOverrunWarning, OnlyARunningSliceJobPastItsSlice) {
  Job job;
  job.state = JobState::Running;
  job.spec.gpus.slice_mib = 20480;
  job.usage = JobUsage{};
  EXPECT_EQ(slice_overrun_warning(job), std::nullopt);  // not watched yet
  job.usage->slice_used_mib = 20480;
  EXPECT_EQ(slice_overrun_warning(job), std::nullopt);  // all of it, not more
  job.usage->slice_used_mib = 31949;
  EXPECT_EQ(slice_overrun_warning(job), "over its slice: used 31.2 GiB of its 20 GiB slice");
  EXPECT_EQ(slice_overrun_warning(job, /*short_form=*/true), "Over 156%");
  job.state = JobState::Failed;
  EXPECT_EQ(slice_overrun_warning(job), std::nullopt);
  job.state = JobState::Running;
  job.spec.gpus.slice_mib.reset();
  EXPECT_EQ(slice_overrun_warning(job), std::nullopt);
}

TEST(JobsToStop, OnlyUnderStopOnlyThoseOverAndNotToldAlready) {
  std::map<uint64_t, SliceUse> worst = {{7, {7, 0, 31949, 20480}}, {8, {8, 0, 100, 10240}}, {9, {9, 0, 2000, 1024}}};
  auto told = [](uint64_t job) { return job == 9; };
  EXPECT_EQ(jobs_to_stop(worst, SliceOverrunPolicy::Stop, told), (std::vector<uint64_t>{7}));
  EXPECT_TRUE(jobs_to_stop(worst, SliceOverrunPolicy::Warn, told).empty());
}

TEST(SliceEnforcement, AutoAndWatchWatchOffDoesNot) {
  EXPECT_TRUE(watches_slices(SliceEnforcement::Auto));
  EXPECT_TRUE(watches_slices(SliceEnforcement::Watch));
  EXPECT_FALSE(watches_slices(SliceEnforcement::Off));
}

}  // namespace
}  // namespace gpupool
