#include "base/cpu_list.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(CpuList, FormatsRanges) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({3}), "3");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({11, 10, 3, 3, 2}), "2-3,10-11");
}

TEST(CpuList, ParsesWhatItFormats) {
  auto cpus = parse_cpu_list("0-3,8,10-11\n");
  ASSERT_TRUE(cpus.ok()) << cpus.error().message;
  EXPECT_EQ(*cpus, (std::vector<unsigned>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list(*cpus), "0-3,8,10-11");
  EXPECT_TRUE(parse_cpu_list("")->empty());
}

TEST(CpuList, RejectsMalformedLists) {
  EXPECT_EQ(parse_cpu_list("0-a").error().message, "invalid CPU list '0-a': 'a' is not a CPU number");
  EXPECT_EQ(parse_cpu_list("5-2").error().message, "invalid CPU list '5-2': range 5-2 is backwards");
  EXPECT_FALSE(parse_cpu_list("1,,2").ok());
  EXPECT_FALSE(parse_cpu_list("-1").ok());
}

TEST(CpuList, ReadsNvmlMasks) {
  EXPECT_EQ(cpus_from_mask({0xFFFFUL}), (std::vector<unsigned>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                               11, 12, 13, 14, 15}));
  EXPECT_EQ(format_cpu_list(cpus_from_mask({0x1UL, 0x3UL})), "0,64-65");
}

}  // namespace
}  // namespace gpupool
