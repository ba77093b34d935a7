#include "os/environment.h"

#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

using namespace std::string_literals;

TEST(Environment, ReadsOneVariableTellingUnsetFromEmpty) {
  setenv("GPUPOOL_TEST_EMPTY", "", 1);
  setenv("GPUPOOL_TEST_VALUE", "a=b", 1);
  unsetenv("GPUPOOL_TEST_UNSET");
  EXPECT_EQ(environment_variable("GPUPOOL_TEST_EMPTY"), "");
  EXPECT_EQ(environment_variable("GPUPOOL_TEST_VALUE"), "a=b");
  EXPECT_EQ(environment_variable("GPUPOOL_TEST_UNSET"), std::nullopt);
  EnvironmentMap own = own_environment();
  EXPECT_EQ(own.at("GPUPOOL_TEST_VALUE"), "a=b");  // split at the first '='
  EXPECT_EQ(own.at("GPUPOOL_TEST_EMPTY"), "");
  EXPECT_FALSE(own.contains("GPUPOOL_TEST_UNSET"));
  unsetenv("GPUPOOL_TEST_EMPTY");
  unsetenv("GPUPOOL_TEST_VALUE");
}

TEST(Environment, SetsAndUnsetsVariablesWhereEveryReaderSeesThem) {
  set_environment_variable("GPUPOOL_TEST_SET", "one");
  set_environment_variable("GPUPOOL_TEST_SET", "two");  // replaced
  EXPECT_EQ(environment_variable("GPUPOOL_TEST_SET"), "two");
  std::vector<std::string> entries = own_environment_entries();
  EXPECT_EQ(std::count(entries.begin(), entries.end(), "GPUPOOL_TEST_SET=two"), 1);
  unset_environment_variable("GPUPOOL_TEST_SET");
  EXPECT_EQ(environment_variable("GPUPOOL_TEST_SET"), std::nullopt);
  EXPECT_FALSE(own_environment().contains("GPUPOOL_TEST_SET"));
}

TEST(Environment, SplitsAProcEnvironBlock) {
  EXPECT_EQ(environment_from_block("A=1\0B=x=y\0NOEQUALS\0C=\0"s),
            (EnvironmentMap{{"A", "1"}, {"B", "x=y"}, {"C", ""}}));
  EXPECT_EQ(environment_from_block("LAST=unterminated"s), (EnvironmentMap{{"LAST", "unterminated"}}));
  EXPECT_TRUE(environment_from_block("").empty());
  EXPECT_EQ(environment_from_block("\0\0A=1"s), (EnvironmentMap{{"A", "1"}}));
}

}  // namespace
}  // namespace gpupool
