#include "daemon/drain_state.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(DrainState, RoundTripsAsOneSetting) {
  DrainState state;
  state.queue = DrainNote{"root", 1764945000.5, "upgrade"};
  state.gpus[3] = DrainNote{"admin", 1764945100.0, "fan"};
  state.gpus[7] = DrainNote{"admin", 1764945200.0, ""};
  auto parsed = parse_drain_state(encode(state));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_TRUE(parsed->queue);
  EXPECT_EQ(parsed->queue->by, "root");
  EXPECT_EQ(parsed->queue->at, 1764945000.5);
  EXPECT_EQ(parsed->queue->reason, "upgrade");
  ASSERT_EQ(parsed->gpus.size(), 2u);
  EXPECT_EQ(parsed->gpus.at(3).reason, "fan");
  EXPECT_EQ(parsed->gpus.at(7).at, 1764945200.0);
  auto nothing = parse_drain_state(encode(DrainState{}));
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->queue);
  EXPECT_TRUE(nothing->gpus.empty());
}

TEST(DrainState, DamageIsOneLine) {
  EXPECT_EQ(parse_drain_state("{").error().message, "the stored drain is not a JSON object");
  EXPECT_EQ(parse_drain_state(R"({"queue":3})").error().message, "a drain note must be an object");
  EXPECT_FALSE(parse_drain_state(R"({"gpus":{"x":{}}})").ok());
  EXPECT_FALSE(parse_drain_state(R"({"gpus":{"1":{"by":5}}})").ok());
}

TEST(DrainState, DrainedGpusTakeNoJobsAndSayWhy) {
  DrainState state;
  state.gpus[1] = DrainNote{"root", 0, "swap fan"};
  state.gpus[9] = DrainNote{"root", 0, ""};  // not on this machine: nothing to mark
  std::vector<GpuAvailability> gpus(3);
  gpus[1].holders = "alice (train)";
  mark_drained_gpus(state, gpus);
  EXPECT_TRUE(gpus[0].usable);
  EXPECT_FALSE(gpus[1].usable);
  EXPECT_EQ(gpus[1].holders, "alice (train); drained by root: swap fan");
  EXPECT_TRUE(gpus[2].usable);
  EXPECT_EQ(DrainState::describe(DrainNote{"bob", 0, ""}), "drained by bob");
}

}  // namespace
}  // namespace gpupool
