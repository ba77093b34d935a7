#include "jobs/job_text.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(JobText, AJobIsNamedOneWayEverywhere) {
  EXPECT_EQ(job_label(329, "alice", "pretrain"), "job 329 (alice, pretrain)");
  EXPECT_EQ(job_label(329, "alice"), "job 329 (alice)");
}

TEST(JobText, TheDaemonsLeasesNameTheirJob) {
  EXPECT_EQ(lease_job_name(329), "job-329");
  EXPECT_EQ(job_of_lease("job-329"), 329u);
  for (const char* other : {"run-777", "job-", "job-3x", "job-03", "job--1", "train", "job-329 "}) {
    EXPECT_FALSE(job_of_lease(other).has_value()) << other;
  }
  EXPECT_EQ(lease_holder_text("job-329", "alice"), "job 329 (alice)");
  EXPECT_EQ(lease_holder_text("run-777", "bob"), "run-777 (bob)");
}

TEST(JobText, TheRequestSaysWholeGpusOrSlicesAndTheirShare) {
  Job job;
  job.spec.gpus.count = 2;
  EXPECT_EQ(request_text(job), "2");
  job.spec.gpus.slice_mib = 20480;
  EXPECT_EQ(request_text(job), "2x20G");
  job.spec.gpus = GpuRequest{1, 1536};
  EXPECT_EQ(request_text(job), "1x1536M");
  job.spec.gpus.sm_percent = 25;
  EXPECT_EQ(request_text(job), "1x1536M/25%");
  job.spec.gpus = GpuRequest{};
  job.spec.gpus.mig = MigRequest{"1g.18gb", 0};
  EXPECT_EQ(request_text(job), "mig:1g.18gb");
  job.spec.gpus.mig = MigRequest{"", 40960};
  EXPECT_EQ(request_text(job), "mig:40G");
  job.spec.gpus.mig = MigRequest{"3g.71gb", 1500};
  EXPECT_EQ(request_text(job), "mig:3g.71gb/1500M");
  job.spec.gpus.mig = MigRequest{};
  EXPECT_EQ(request_text(job), "mig:any");
}

TEST(JobText, AFinishedJobHasEnded) {
  EXPECT_EQ(already_ended_text(349, JobState::Cancelled), "job 349 has already ended (cancelled)");
}

}  // namespace
}  // namespace gpupool
