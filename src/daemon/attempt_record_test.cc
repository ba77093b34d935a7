#include "daemon/attempt_record.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(AttemptRecord, TheLargestRecordedIdComesFromLogAndAttemptFileNames) {
  EXPECT_EQ(largest_recorded_id({}), 0u);
  EXPECT_EQ(largest_recorded_id({"7.out", "7.err", "12.1", "12.2", "9.out"}), 12u);
  // What is not a job's file is passed over: other names, a leading dot, digits without a dot.
  EXPECT_EQ(largest_recorded_id({"3.out", "lost+found", ".99.out", "500", "x12.out", "18446744073709551616.1"}), 3u);
}

}  // namespace
}  // namespace gpupool
