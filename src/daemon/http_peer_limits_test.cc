#include "daemon/http_peer_limits.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(HttpPeerLimits, CapsEachPeerAndTheTotal) {
  HttpPeerLimits limits(2, 3);
  EXPECT_TRUE(limits.admit("10.0.0.1"));
  EXPECT_TRUE(limits.admit("10.0.0.1"));
  EXPECT_FALSE(limits.admit("10.0.0.1"));  // its own cap
  EXPECT_TRUE(limits.admit("10.0.0.2"));
  EXPECT_FALSE(limits.admit("10.0.0.3"));  // the server's cap, though this peer has none open
  EXPECT_EQ(limits.open(), 3u);
  EXPECT_EQ(limits.open_from("10.0.0.1"), 2u);
  EXPECT_EQ(limits.open_from("10.0.0.3"), 0u);
}

TEST(HttpPeerLimits, ReleaseGivesTheRoomBack) {
  HttpPeerLimits limits(1, 2);
  ASSERT_TRUE(limits.admit("a"));
  ASSERT_TRUE(limits.admit("b"));
  limits.release("a");
  EXPECT_EQ(limits.open(), 1u);
  EXPECT_EQ(limits.open_from("a"), 0u);
  EXPECT_TRUE(limits.admit("c"));
  EXPECT_FALSE(limits.admit("a"));
  limits.release("b");
  EXPECT_TRUE(limits.admit("a"));
}

TEST(HttpPeerLimits, ReleasingWhatWasNeverAdmittedChangesNothing) {
  HttpPeerLimits limits(1, 1);
  ASSERT_TRUE(limits.admit("a"));
  limits.release("b");
  EXPECT_EQ(limits.open(), 1u);
  EXPECT_FALSE(limits.admit("b"));
}

}  // namespace
}  // namespace gpupool
