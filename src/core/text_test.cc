#include "core/text.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(Text, Lowercase) { EXPECT_EQ(lowercase("GPU-16FB"), "gpu-16fb"); }

TEST(Text, AllDigits) {
  EXPECT_TRUE(all_digits("012"));
  EXPECT_FALSE(all_digits(""));
  EXPECT_FALSE(all_digits("1a"));
  EXPECT_FALSE(all_digits("-1"));
}

TEST(Text, SplitKeepsEmptyPieces) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split("x", ','), (std::vector<std::string>{"x"}));
}

}  // namespace
}  // namespace gpupool
