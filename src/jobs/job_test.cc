#include "jobs/job.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

Result<std::vector<JobId>> parsed_ids(std::vector<std::string> texts) { return parse_job_ids(texts); }

TEST(JobIds, ReadsListsAndSeveralArguments) {
  EXPECT_EQ(*parsed_ids({"42"}), (std::vector<JobId>{42}));
  EXPECT_EQ(*parsed_ids({"7,8", "9"}), (std::vector<JobId>{7, 8, 9}));
  EXPECT_EQ(*parsed_ids({"999999999999999999"}), (std::vector<JobId>{999999999999999999ull}));
}

TEST(JobIds, RefusesWhatIsNotAnIdWithOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "invalid job id '': expected a number like 42"},
      {"0", "invalid job id '0': expected a number like 42"},
      {"7,,8", "invalid job id '': expected a number like 42"},
      {"-3", "invalid job id '-3': expected a number like 42"},
      {"1000000000000000000", "invalid job id '1000000000000000000': expected a number like 42"},
      {"4\n2", "invalid job id '4\\n2': expected a number like 42"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = parsed_ids({text});
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().message, message);
  }
}

TEST(JobNames, StatesAndKindsReadBackWhatTheyWrite) {
  for (JobState state : {JobState::Queued, JobState::Held, JobState::Running, JobState::Done, JobState::Failed,
                         JobState::Cancelled}) {
    EXPECT_EQ(*parse_job_state(to_string(state)), state);
  }
  EXPECT_EQ(*parse_job_kind("batch"), JobKind::Batch);
  EXPECT_EQ(*parse_job_kind("interactive"), JobKind::Interactive);
  for (WaitReason reason : {WaitReason::Resources, WaitReason::Priority, WaitReason::Reservation,
                            WaitReason::Dependency, WaitReason::Held, WaitReason::Drained, WaitReason::QuotaLimit}) {
    EXPECT_EQ(*parse_wait_reason(to_string(reason)), reason);
  }
  EXPECT_EQ(std::string(to_string(WaitReason::QuotaLimit)), "QuotaLimit");
  EXPECT_FALSE(parse_wait_reason("resources").ok());
  EXPECT_EQ(parse_job_state("lost\nfound").error().message,
            "unknown job state 'lost\\nfound' (queued, held, running, done, failed or cancelled)");
}

}  // namespace
}  // namespace gpupool
