#include "os/timer.h"

#include <chrono>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

using std::chrono::milliseconds;

TEST(Timer, ExpiresOnceWhenArmed) {
  auto timer = timer_descriptor();
  ASSERT_TRUE(timer.ok()) << timer.error().message;
  EXPECT_FALSE(take_timer_expiry(timer->get()));  // disarmed: never ready, and no waiting
  arm_timer(timer->get(), 0.01);
  EXPECT_FALSE((*wait_until_ready({timer->get()}, milliseconds(0)))[0]);
  EXPECT_TRUE((*wait_until_ready({timer->get()}, milliseconds(5000)))[0]);
  EXPECT_TRUE(take_timer_expiry(timer->get()));
  EXPECT_FALSE(take_timer_expiry(timer->get()));  // taken
}

TEST(Timer, ZeroOrLessExpiresAtOnceRatherThanDisarming) {
  auto timer = timer_descriptor();
  ASSERT_TRUE(timer.ok()) << timer.error().message;
  arm_timer(timer->get(), -1);
  EXPECT_TRUE((*wait_until_ready({timer->get()}, milliseconds(5000)))[0]);
  EXPECT_TRUE(take_timer_expiry(timer->get()));
}

TEST(Timer, ArmingAgainReplacesTheEarlierTime) {
  auto timer = timer_descriptor();
  ASSERT_TRUE(timer.ok()) << timer.error().message;
  arm_timer(timer->get(), 0);
  arm_timer(timer->get(), 3600);
  EXPECT_FALSE((*wait_until_ready({timer->get()}, milliseconds(50)))[0]);
}

}  // namespace
}  // namespace gpupool
