#include "base/statistics.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(Statistics, NearestRankIsAValueOfTheSample) {
  std::vector<double> values = {50, 20, 5000, 40, 30};
  EXPECT_EQ(nearest_rank(values, 0.8), 50);  // the 4th of 5
  EXPECT_EQ(nearest_rank(values, 0.95), 5000);
  EXPECT_EQ(nearest_rank(values, 0), 20);    // never below the first
  EXPECT_EQ(nearest_rank(values, 1), 5000);
  EXPECT_EQ(nearest_rank({}, 0.5), 0);
}

TEST(Statistics, MeanOfNoneIsZero) {
  EXPECT_EQ(mean({1, 2, 6}), 3);
  EXPECT_EQ(mean({}), 0);
}

}  // namespace
}  // namespace gpupool
