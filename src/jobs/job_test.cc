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

TEST(JobIds, ReadsRanges) {
  EXPECT_EQ(*parsed_ids({"5,7,9-12"}), (std::vector<JobId>{5, 7, 9, 10, 11, 12}));
  EXPECT_EQ(*parsed_ids({"100-100"}), (std::vector<JobId>{100}));
  EXPECT_EQ(parsed_ids({"1-100000"})->size(), kMaxTypedJobIds);
  EXPECT_EQ(parsed_ids({"1-100001"}).error().message, "'1-100001' makes more than 100000 job ids");
  EXPECT_EQ(parsed_ids({"1-50000", "60000-110000"}).error().message, "'60000-110000' makes more than 100000 job ids");
}

TEST(JobIds, RefusesWhatIsNotAnIdWithOneLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "invalid job id '': expected a number like 42 or a range like 40-45"},
      {"0", "invalid job id '0': expected a number like 42 or a range like 40-45"},
      {"7,,8", "invalid job id '': expected a number like 42 or a range like 40-45"},
      {"-3", "invalid job id '-3': expected a number like 42 or a range like 40-45"},
      {"1000000000000000000", "invalid job id '1000000000000000000': expected a number like 42 or a range like 40-45"},
      {"4\n2", "invalid job id '4\\n2': expected a number like 42 or a range like 40-45"},
      {"12-9", "invalid job id '12-9': expected a number like 42 or a range like 40-45"},
      {"0-3", "invalid job id '0-3': expected a number like 42 or a range like 40-45"},
      {"3-", "invalid job id '3-': expected a number like 42 or a range like 40-45"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = parsed_ids({text});
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().message, message);
  }
}

TEST(ArraySpecs, ReadsSlurmsForms) {
  EXPECT_EQ(parse_array_spec("0-3")->indices, (std::vector<unsigned>{0, 1, 2, 3}));
  EXPECT_EQ(parse_array_spec("1,3,5-7")->indices, (std::vector<unsigned>{1, 3, 5, 6, 7}));
  EXPECT_EQ(parse_array_spec("0-15:4")->indices, (std::vector<unsigned>{0, 4, 8, 12}));
  EXPECT_EQ(parse_array_spec("7,2,2-3")->indices, (std::vector<unsigned>{2, 3, 7}));  // each once, in order
  EXPECT_EQ(parse_array_spec("0-99")->limit, 0u);
  ArraySpec throttled = *parse_array_spec("0-99%8");
  EXPECT_EQ(throttled.indices.size(), 100u);
  EXPECT_EQ(throttled.limit, 8u);
  EXPECT_EQ(parse_array_spec("0-9999")->indices.size(), kMaxArrayTasks);
  EXPECT_EQ(parse_array_spec("999999")->indices, (std::vector<unsigned>{kMaxArrayIndex}));
}

TEST(ArraySpecs, RefusesWithOneLine) {
  const std::string kExamples = " (e.g. 0-99, 1,3,5-7, 0-15:4, 0-99%8)";
  const std::pair<std::string, std::string> cases[] = {
      {"", "invalid --array '': '' is not an index or a range of indices from 0 to 999999"},
      {"5-2", "invalid --array '5-2': '5-2' is not an index or a range of indices from 0 to 999999"},
      {"1000000", "invalid --array '1000000': '1000000' is not an index or a range of indices from 0 to 999999"},
      {"0-9%0", "invalid --array '0-9%0': after % comes how many tasks may run at once, at least 1"},
      {"0-9%", "invalid --array '0-9%': after % comes how many tasks may run at once, at least 1"},
      {"0-9:0", "invalid --array '0-9:0': '0-9:0' is not a range with a step of at least 1 (FIRST-LAST:STEP)"},
      {"4:2", "invalid --array '4:2': '4:2' is not a range with a step of at least 1 (FIRST-LAST:STEP)"},
      {"0-10000", "invalid --array '0-10000': more than 10000 tasks"},
      {"a-b", "invalid --array 'a-b': 'a-b' is not an index or a range of indices from 0 to 999999"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = parse_array_spec(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().message, message + kExamples);
  }
}

TEST(JobNames, ArrayTasksShowTheirIndex) {
  Job task;
  task.spec.argv = {"/usr/bin/python3", "train.py"};
  EXPECT_EQ(display_name(task), "python3");
  task.array = ArrayTask{40, 3, 8};
  EXPECT_EQ(display_name(task), "python3[3]");
  task.spec.name = "train";
  EXPECT_EQ(display_name(task), "train[3]");
}

TEST(JobNames, StatesAndKindsReadBackWhatTheyWrite) {
  for (JobState state : {JobState::Queued, JobState::Held, JobState::Running, JobState::Done, JobState::Failed,
                         JobState::Cancelled}) {
    EXPECT_EQ(*parse_job_state(to_string(state)), state);
  }
  EXPECT_EQ(*parse_job_kind("batch"), JobKind::Batch);
  EXPECT_EQ(*parse_job_kind("interactive"), JobKind::Interactive);
  for (WaitReason reason : {WaitReason::Resources, WaitReason::Priority, WaitReason::Reservation,
                            WaitReason::Dependency, WaitReason::Held, WaitReason::Drained, WaitReason::QuotaLimit,
                            WaitReason::ArrayLimit}) {
    EXPECT_EQ(*parse_wait_reason(to_string(reason)), reason);
  }
  EXPECT_EQ(std::string(to_string(WaitReason::QuotaLimit)), "QuotaLimit");
  EXPECT_FALSE(parse_wait_reason("resources").ok());
  EXPECT_EQ(parse_job_state("lost\nfound").error().message,
            "unknown job state 'lost\\nfound' (queued, held, running, suspended, done, failed or cancelled)");
}

}  // namespace
}  // namespace gpupool
