#include "cli/jobs_table.h"

#include <gtest/gtest.h>

#include "base/display_text.h"

namespace gpupool::cli {
namespace {

constexpr double kNow = 1'000'000;

// Five characters, as "14:05" and "12-04" are: minutes from now.
std::string clock_for_table(double unix_seconds) { return fmt::format("c{:04.0f}", (unix_seconds - kNow) / 60); }

Job table_job(JobState state) {
  Job job;
  job.id = 4242;
  job.state = state;
  job.owner.user = "alice";
  job.spec.name = "pretrain";
  job.spec.argv = {"python", "train.py"};
  job.spec.gpus.count = 4;
  return job;
}

std::string row_of(const Job& job) { return jobs_table_row(job, std::to_string(job.id), to_string(job.state), kNow, clock_for_table); }

TEST(JobsTableTest, ARunningJobShowsItsTimeLeftUtilisationAndGpuHours) {
  Job job = table_job(JobState::Running);
  job.gpus = {0, 1, 2, 3};
  job.start_time = kNow - 3910;
  job.spec.time_limit_s = 7200;
  job.usage = JobUsage{4.34, 97.4, std::nullopt, std::nullopt};
  EXPECT_EQ(row_of(job), "  4242 running    alice    pretrain      4      0-3   c-065  1:05:10 0:54:50  97%   4.3 ");
}

TEST(JobsTableTest, TheTimeLeftDoesNotCountTheTimeSuspended) {
  Job job = table_job(JobState::Running);
  job.gpus = {0};
  job.start_time = kNow - 3910;
  job.spec.time_limit_s = 3600;  // past, but it was suspended for 20 minutes
  job.suspended_s = 1200;
  EXPECT_NE(row_of(job).find(" 1:05:10 0:14:50 "), std::string::npos) << row_of(job);
}

TEST(JobsTableTest, UtilisationIsTheSmsActivityWhereTheGpusMeasureIt) {
  Job job = table_job(JobState::Running);
  job.gpus = {0, 1, 2, 3};
  job.start_time = kNow - 3910;
  job.usage = JobUsage{4.34, 97.4, std::nullopt, std::nullopt};
  job.usage->efficiency.sm_efficiency = 0.314;
  EXPECT_NE(row_of(job).find("  31%   4.3 "), std::string::npos) << row_of(job);
  job.usage->efficiency.sm_efficiency = 25;  // a slice far beyond its memory share still fits
  EXPECT_NE(row_of(job).find(" 999%   4.3 "), std::string::npos) << row_of(job);
}

TEST(JobsTableTest, TheEfficiencyLineSaysWhatIsKnown) {
  GpuEfficiency efficiency;
  EXPECT_EQ(efficiency_line(efficiency), "");
  efficiency.energy_kwh = 0.4123;
  EXPECT_EQ(efficiency_line(efficiency), "0.412 kWh");
  efficiency.sm_efficiency = 0.62;
  efficiency.sm_active_gpu_hours = 0.78;
  efficiency.peak_memory_mib = 39117;
  EXPECT_EQ(efficiency_line(efficiency),
            "SMs busy 62 % of the GPU time held (0.78 GPU-hours), 0.412 kWh, peak 38.2 GiB on one GPU");
  EXPECT_EQ(used_text(GpuEfficiency{}), "n/a");
  EXPECT_EQ(peak_memory_text(GpuEfficiency{}), "n/a");
}

TEST(JobsTableTest, AQueuedJobSaysWhyInOneWordAndWhenItIsExpectedToStart) {
  Job job = table_job(JobState::Queued);
  job.spec.gpus.slice_mib = 20480;
  job.spec.gpus.count = 1;
  job.wait_reason = WaitReason::Reservation;
  job.reason = "GPU 0-3 reserved for job 4000 of bob, expected to start in 40m; with a time limit ...";
  job.expected_start = kNow + 2400;
  EXPECT_EQ(row_of(job), "  4242 queued     alice    pretrain      1x20G  -     ~c0040       -       -    -     - Reservation");
  job.expected_start = kNow - 1;  // the plan is older than the clock
  EXPECT_NE(row_of(job).find(" ~now "), std::string::npos);
  job.expected_start.reset();
  job.wait_reason = WaitReason::QuotaLimit;
  EXPECT_EQ(row_of(job).substr(54, 7), "-      ") << row_of(job);
  EXPECT_TRUE(row_of(job).ends_with("    -     - QuotaLimit"));
}

TEST(JobsTableTest, AnIdleJobSaysForHowLong) {
  Job job = table_job(JobState::Running);
  job.start_time = kNow - 7200;
  job.usage = JobUsage{8.0, 0.2, kNow - 25 * 60, std::nullopt};
  EXPECT_TRUE(row_of(job).ends_with("   0%   8.0 Idle 25m")) << row_of(job);
}

TEST(JobsTableTest, AnEndedJobShowsHowLongItRan) {
  Job job = table_job(JobState::Failed);
  job.start_time = kNow - 500;
  job.end_time = kNow - 200;
  EXPECT_NE(row_of(job).find(" 0:05:00 "), std::string::npos) << row_of(job);
}

TEST(JobsTableTest, RowsStayWithinAHundredColumnsWhateverTheNames) {
  Job job = table_job(JobState::Queued);
  job.owner.user = "a-very-long-user-name";
  job.spec.name = "evil\x1b[31mred\nline2-日本語-and-much-longer";
  job.wait_reason = WaitReason::Reservation;
  job.expected_start = kNow + 90000;
  std::string row = jobs_table_row(job, "123456", "cancelled", kNow, clock_for_table);
  EXPECT_EQ(row.find('\x1b'), std::string::npos);
  EXPECT_EQ(row.find('\n'), std::string::npos);
  EXPECT_LE(display_width(row), 100u) << row;
  EXPECT_LE(display_width(jobs_table_header()), 100u);
  EXPECT_EQ(jobs_table_header().find("REASON"), display_width(row.substr(0, row.find("Reservation"))));
}

TEST(JobsTableTest, AJobPastItsSliceSaysByHowMuchWithinAHundredColumns) {
  Job job = table_job(JobState::Running);
  job.spec.gpus.slice_mib = 20480;
  job.usage = JobUsage{4.34, 97.4, std::nullopt, 31949};
  std::string row = jobs_table_row(job, "123456", "running", kNow, clock_for_table);
  EXPECT_NE(row.find("Over 156%"), std::string::npos) << row;
  EXPECT_LE(display_width(row), 100u) << row;
}

TEST(JobsTableTest, DrainsAreOneLineEachAboveTheTable) {
  protocol::StatusResponse status;
  EXPECT_TRUE(daemon_notices(status, clock_for_table).empty());
  status.drained = true;
  status.drained_by = "root";
  status.drained_at = kNow - 600;
  status.drain_reason = "upgrade\x1b[2J";
  status.drained_gpus = {{3, "admin", kNow - 60, "fan"}, {5, "", 0, ""}};
  EXPECT_EQ(daemon_notices(status, clock_for_table),
            (std::vector<std::string>{
                "The queue is drained by root since c-010: upgrade\\x1b[2J. No job starts until `gpupool resume`.",
                "GPU 3 is drained by admin since c-001: fan. Its jobs run on; none starts on it until `gpupool "
                "resume --gpu 3`.",
                "GPU 5 is drained. Its jobs run on; none starts on it until `gpupool resume --gpu 5`."}));
}

TEST(JobsTableTest, ShortSpaceAndUnsavedJobsAreSaidAboveTheTable) {
  protocol::StatusResponse status;
  status.state_space = protocol::StateSpace{600u << 20, 512u << 20, 0};
  EXPECT_TRUE(daemon_notices(status, clock_for_table).empty());
  status.state_space = protocol::StateSpace{(3u << 20) + 1000, 512u << 20, 2};
  EXPECT_EQ(daemon_notices(status, clock_for_table),
            (std::vector<std::string>{"The state filesystem has 3 MiB free, under the 512 MiB kept for the job "
                                      "database: job output is not being saved.",
                                      "2 jobs could not be saved to the job database; gpupoold keeps trying."}));
}

}  // namespace
}  // namespace gpupool::cli
