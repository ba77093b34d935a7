#include "jobs/private_data.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

Job someone_elses_job() {
  Job job;
  job.id = 12;
  job.spec.name = "secret-sweep";
  job.spec.argv = {"python", "train.py", "--token=abc"};
  job.spec.environment = {"WANDB_API_KEY=xyz"};
  job.spec.cwd = "/home/alice/unpublished";
  job.spec.gpus.count = 2;
  job.spec.priority = 3;
  job.owner.user = "alice";
  job.state = JobState::Failed;
  job.reason = "cannot run 'train.py': No such file or directory";
  job.gpus = {0, 1};
  job.gpu_uuids = {"GPU-a", "GPU-b"};
  job.submit_time = 100;
  job.start_time = 110;
  job.end_time = 120;
  job.exit_code = 127;
  job.pid = 4242;
  job.pid_start_ticks = 99;
  job.stdout_path = "/var/lib/gpupool/logs/12.out";
  job.stderr_path = "/var/lib/gpupool/logs/12.err";
  job.submit_token = "0123456789abcdef";
  return job;
}

TEST(PrivateData, WithholdsWhatTheJobRunsAndWhere) {
  Job job = someone_elses_job();
  withhold_details(job);
  EXPECT_TRUE(job.details_withheld);
  EXPECT_EQ(job.spec.name, "");
  EXPECT_TRUE(job.spec.argv.empty());
  EXPECT_TRUE(job.spec.environment.empty());
  EXPECT_EQ(job.spec.cwd, "");
  EXPECT_EQ(job.reason, "");
  EXPECT_EQ(job.stdout_path, "");
  EXPECT_EQ(job.stderr_path, "");
  EXPECT_FALSE(job.pid);
  EXPECT_FALSE(job.pid_start_ticks);
  EXPECT_FALSE(job.submit_token);
}

TEST(PrivateData, KeepsWhoHoldsWhichGpusAndWhen) {
  Job job = someone_elses_job();
  withhold_details(job);
  EXPECT_EQ(job.id, 12u);
  EXPECT_EQ(job.owner.user, "alice");
  EXPECT_EQ(job.state, JobState::Failed);
  EXPECT_EQ(job.spec.gpus.count, 2u);
  EXPECT_EQ(job.spec.priority, 3);
  EXPECT_EQ(job.gpus, (std::vector<unsigned>{0, 1}));
  EXPECT_EQ(job.gpu_uuids.size(), 2u);
  EXPECT_EQ(job.start_time, 110);
  EXPECT_EQ(job.end_time, 120);
  EXPECT_EQ(job.exit_code, 127);
}

TEST(PrivateData, TablesCallAWithheldJobPrivate) {
  Job job = someone_elses_job();
  withhold_details(job);
  EXPECT_EQ(display_name(job), "(private)");
  job.array = ArrayTask{12, 3, 0};
  EXPECT_EQ(display_name(job), "(private)[3]");
}

}  // namespace
}  // namespace gpupool
