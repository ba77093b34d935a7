#include "daemon/state_space.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

constexpr uint64_t kPlenty = uint64_t{1} << 40;

TEST(OutputAllowance, WritesEverythingWithoutLimitsAndRoom) {
  OutputAllowance allowance({std::nullopt, 0}, 0);
  auto decision = allowance.admit(OutputStream::Out, 4096, kPlenty);
  EXPECT_EQ(decision.write, 4096u);
  EXPECT_FALSE(decision.notice);
  EXPECT_EQ(allowance.written(), 4096u);
}

TEST(OutputAllowance, CutsAtTheLimitExactlyAndSaysSoOncePerLog) {
  OutputAllowance allowance({1000, 0}, 0);
  EXPECT_EQ(allowance.admit(OutputStream::Out, 600, kPlenty).write, 600u);
  auto cut = allowance.admit(OutputStream::Err, 600, kPlenty);  // both streams count together
  EXPECT_EQ(cut.write, 400u);
  ASSERT_TRUE(cut.notice);
  EXPECT_EQ(*cut.notice,
            "gpupool: output cut at 1000 bytes: the job reached its output limit (max_log_mb); the rest is dropped\n");
  auto again = allowance.admit(OutputStream::Err, 600, kPlenty);
  EXPECT_EQ(again.write, 0u);
  EXPECT_FALSE(again.notice);
  auto other = allowance.admit(OutputStream::Out, 10, kPlenty);  // stdout's log is told too
  EXPECT_EQ(other.write, 0u);
  EXPECT_TRUE(other.notice);
  EXPECT_EQ(allowance.written(), 1000u);
}

TEST(OutputAllowance, CountsWhatEarlierAttemptsWrote) {
  OutputAllowance allowance({1000, 0}, 1500);
  auto decision = allowance.admit(OutputStream::Out, 1, kPlenty);
  EXPECT_EQ(decision.write, 0u);
  EXPECT_TRUE(decision.notice);
}

TEST(OutputAllowance, DropsUnderTheReserveAndResumesWhenRoomReturns) {
  OutputAllowance allowance({std::nullopt, 1000}, 0);
  EXPECT_EQ(allowance.admit(OutputStream::Out, 100, 1100).write, 100u);  // exactly to the reserve
  auto dropped = allowance.admit(OutputStream::Out, 100, 1099);
  EXPECT_EQ(dropped.write, 0u);
  ASSERT_TRUE(dropped.notice);
  EXPECT_EQ(*dropped.notice,
            "gpupool: output dropped: the state filesystem is short of space (1099 bytes free, 1000 kept for the "
            "job database)\n");
  EXPECT_FALSE(allowance.admit(OutputStream::Out, 100, 500).notice);  // told once per shortage
  EXPECT_EQ(allowance.admit(OutputStream::Out, 100, kPlenty).write, 100u);
  EXPECT_TRUE(allowance.admit(OutputStream::Out, 100, 0).notice);  // a new shortage is told again
  EXPECT_EQ(allowance.written(), 200u);
}

TEST(OutputAllowance, AFailedWriteIsAShortageToldOnce) {
  OutputAllowance allowance({std::nullopt, 0}, 0);
  EXPECT_TRUE(allowance.write_failed(OutputStream::Err, 0));
  EXPECT_FALSE(allowance.write_failed(OutputStream::Err, 0));
  EXPECT_TRUE(allowance.write_failed(OutputStream::Out, 0));
}

TEST(OutputAllowance, NothingLeftUnderTheLimitIsNotASpaceMatter) {
  OutputAllowance allowance({10, 1000}, 10);
  auto decision = allowance.admit(OutputStream::Out, 5, 0);
  EXPECT_EQ(decision.write, 0u);
  ASSERT_TRUE(decision.notice);
  EXPECT_NE(decision.notice->find("output cut at 10 bytes"), std::string::npos);
}

TEST(SaveRetry, BacksOffFromASecondToAMinuteAndStartsOverAfterASave) {
  SaveRetry retry;
  EXPECT_TRUE(retry.due(0));
  retry.failed(100);
  EXPECT_FALSE(retry.due(100.5));
  EXPECT_TRUE(retry.due(101));
  retry.failed(101);
  EXPECT_FALSE(retry.due(102.9));
  EXPECT_TRUE(retry.due(103));
  double now = 103;
  for (int i = 0; i < 20; ++i) retry.failed(now);
  EXPECT_FALSE(retry.due(now + SaveRetry::kMaxDelayS - 0.1));
  EXPECT_TRUE(retry.due(now + SaveRetry::kMaxDelayS));
  retry.succeeded();
  EXPECT_TRUE(retry.due(now));
  retry.failed(now);
  EXPECT_TRUE(retry.due(now + SaveRetry::kFirstDelayS));
}

}  // namespace
}  // namespace gpupool
