#include "base/text.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(Text, Lowercase) { EXPECT_EQ(lowercase("GPU-16FB"), "gpu-16fb"); }

TEST(Text, AllDigits) {
  EXPECT_TRUE(all_digits("012"));
  EXPECT_FALSE(all_digits(""));
  EXPECT_FALSE(all_digits("1a"));
  EXPECT_EQ(parse_decimal("0"), 0u);
  EXPECT_EQ(parse_decimal("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(parse_decimal("18446744073709551616"), std::nullopt);
  EXPECT_EQ(parse_decimal("-1"), std::nullopt);
  EXPECT_EQ(parse_decimal(" 1"), std::nullopt);
  EXPECT_EQ(parse_decimal(""), std::nullopt);
  EXPECT_FALSE(all_digits("-1"));
}

TEST(Text, SplitKeepsEmptyPieces) {
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (std::vector<std::string>{""}));
  EXPECT_EQ(split("x", ','), (std::vector<std::string>{"x"}));
}

TEST(Text, WithOverridesReplacesByNameAndAppendsNewOnes) {
  std::vector<std::string> env = {"PATH=/bin", "CUDA_VISIBLE_DEVICES=0", "EMPTY=", "NOEQUALS"};
  EXPECT_EQ(with_overrides(env, {"CUDA_VISIBLE_DEVICES=GPU-a", "NEW=1"}),
            (std::vector<std::string>{"PATH=/bin", "EMPTY=", "NOEQUALS", "CUDA_VISIBLE_DEVICES=GPU-a", "NEW=1"}));
  EXPECT_EQ(with_overrides(env, {}), env);
}

TEST(Text, WithDefaultsAddsOnlyWhatIsNotSetAlready) {
  std::vector<std::string> env = {"PATH=/bin", "TF_FORCE_GPU_ALLOW_GROWTH=false", "EMPTY="};
  EXPECT_EQ(with_defaults(env, {"TF_FORCE_GPU_ALLOW_GROWTH=true", "EMPTY=x", "NEW=1"}),
            (std::vector<std::string>{"PATH=/bin", "TF_FORCE_GPU_ALLOW_GROWTH=false", "EMPTY=", "NEW=1"}));
  EXPECT_EQ(with_defaults(env, {}), env);
}

TEST(Text, EditDistanceCountsSingleCharacterEdits) {
  EXPECT_EQ(edit_distance("list", "list"), 0u);
  EXPECT_EQ(edit_distance("lsit", "list"), 2u);
  EXPECT_EQ(edit_distance("jbos", "jobs"), 2u);
  EXPECT_EQ(edit_distance("", "top"), 3u);
  EXPECT_EQ(edit_distance("submitt", "submit"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(Text, LastLinesKeepsTheLastLinesOfPieces) {
  LastLines two(2);
  for (const char* piece : {"one\ntw", "o\nthr", "ee\n", "fo", "ur"}) two.add(piece);
  EXPECT_EQ(two.text(), "three\nfour");
  LastLines whole(10);
  whole.add("a\n\nb\n");
  EXPECT_EQ(whole.text(), "a\n\nb\n");
  LastLines none(0);
  none.add("a\nb");
  EXPECT_EQ(none.text(), "");
}

TEST(Text, NumbersMustFillTheWholeText) {
  EXPECT_EQ(parse_number<unsigned>("12"), 12u);
  EXPECT_EQ(parse_number<unsigned>("12x"), std::nullopt);
  EXPECT_EQ(parse_number<unsigned>(""), std::nullopt);
  EXPECT_EQ(parse_number<double>("2.5"), 2.5);
}

}  // namespace
}  // namespace gpupool
