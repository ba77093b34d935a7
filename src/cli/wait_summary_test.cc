#include "cli/wait_summary.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

WaitedJob waited(JobId id, JobState state, std::optional<int> exit_code = std::nullopt, std::string reason = "") {
  WaitedJob w;
  w.id = std::to_string(id);
  w.job.id = id;
  w.job.state = state;
  w.job.exit_code = exit_code;
  w.job.reason = std::move(reason);
  return w;
}

TEST(WaitSummaryTest, OneJobIsOneLineAboutIt) {
  EXPECT_EQ(wait_summary({waited(7, JobState::Done, 0)}), "job 7 done");
  EXPECT_EQ(wait_summary({waited(7, JobState::Failed, 3, "exit code 3")}), "job 7 failed(3): exit code 3");
  EXPECT_EQ(wait_summary({waited(7, JobState::Running)}), "job 7 has not ended (running)");
  WaitedJob forgotten = waited(9, JobState::Failed);
  forgotten.id = "slurm:9";
  forgotten.known = false;
  EXPECT_EQ(wait_summary({forgotten}), "job slurm:9 unknown");
  // Another user's words reach the terminal escaped.
  EXPECT_EQ(wait_summary({waited(7, JobState::Cancelled, std::nullopt, "cancelled by \x1b[31mbob")}),
            "job 7 cancelled: cancelled by \\x1b[31mbob");
}

TEST(WaitSummaryTest, ManyJobsAreCountedInOneLineThatNamesTheOnesNotDone) {
  std::vector<WaitedJob> jobs;
  for (JobId id = 1; id <= 297; ++id) jobs.push_back(waited(id, JobState::Done, 0));
  jobs.push_back(waited(298, JobState::Failed, 2));
  jobs.push_back(waited(299, JobState::Cancelled));
  jobs.push_back(waited(300, JobState::Failed, 1));
  EXPECT_EQ(wait_summary(jobs), "300 jobs: 297 done, 2 failed (ids 298, 300), 1 cancelled (ids 299)");
}

TEST(WaitSummaryTest, ALongListOfIdsIsCut) {
  std::vector<WaitedJob> jobs;
  for (JobId id = 1; id <= 25; ++id) jobs.push_back(waited(id, JobState::Failed, 1));
  EXPECT_EQ(wait_summary(jobs), "25 jobs: 25 failed (ids 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more)");
}

TEST(WaitSummaryTest, TheExitStatusCountsEveryJob) {
  EXPECT_EQ(wait_exit_code({}), 0);
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Done, 0), waited(2, JobState::Done, 0)}), 0);
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Done, 0), waited(2, JobState::Failed, 3), waited(3, JobState::Failed, 2)}),
            3);
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Cancelled)}), 1);                  // no exit code: 1
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Cancelled, 143)}), 143);            // ended by SIGTERM
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Failed, 0)}), 1);                   // failed, whatever it said
  EXPECT_EQ(wait_exit_code({waited(1, JobState::Failed, 7), waited(2, JobState::Queued)}), 124);
}

}  // namespace
}  // namespace gpupool::cli
