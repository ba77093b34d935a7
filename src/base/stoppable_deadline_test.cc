#include "base/stoppable_deadline.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

using namespace std::chrono_literals;
using Clock = StoppableDeadline::Clock;

TEST(StoppableDeadline, TheTimeStoppedDoesNotCount) {
  const Clock::time_point t0{};
  StoppableDeadline deadline;
  EXPECT_FALSE(deadline.at());
  deadline.set(t0 + 10s);
  deadline.stop(t0 + 4s);  // 6 s left
  EXPECT_FALSE(deadline.at());
  deadline.stop(t0 + 5s);  // stopped already: still 6 s left
  deadline.start(t0 + 100s);
  EXPECT_EQ(deadline.at(), t0 + 106s);
  deadline.start(t0 + 200s);  // running already
  EXPECT_EQ(deadline.at(), t0 + 106s);
}

TEST(StoppableDeadline, SettingOrClearingForgetsTheTimeLeft) {
  const Clock::time_point t0{};
  StoppableDeadline deadline;
  deadline.stop(t0);  // none set: nothing to stop
  deadline.start(t0 + 1s);
  EXPECT_FALSE(deadline.at());
  deadline.set(t0 + 10s);
  deadline.stop(t0 + 1s);
  deadline.set(t0 + 3s);  // a new deadline (a grace period), running
  deadline.start(t0 + 50s);
  EXPECT_EQ(deadline.at(), t0 + 3s);
  deadline.stop(t0 + 1s);
  deadline.clear();
  deadline.start(t0 + 2s);
  EXPECT_FALSE(deadline.at());
}

}  // namespace
}  // namespace gpupool
