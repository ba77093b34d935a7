#include "cli/program_words.h"

#include <gtest/gtest.h>

namespace gpupool::cli {
namespace {

OptionKind kinds(std::string_view word) {
  if (word == "-g" || word == "--name" || word == "--gpu-count") return OptionKind::Value;
  if (word == "--wait") return OptionKind::OptionalValue;
  if (word == "-q" || word == "--quiet") return OptionKind::Flag;
  return OptionKind::Unknown;
}

using Words = std::vector<std::string>;

SplitWords split(const Words& words) { return split_program_words(words, kinds); }

TEST(ProgramWords, AfterTheSeparatorEverythingIsTheProgramsEvenOurOptionNames) {
  SplitWords words = split({"--wait", "10m", "--", "echo", "train.py", "--name", "3"});
  EXPECT_EQ(words.options, (Words{"--wait", "10m"}));
  EXPECT_EQ(words.program, (Words{"echo", "train.py", "--name", "3"}));
}

TEST(ProgramWords, AnOptionalValueDoesNotSwallowTheSeparator) {
  SplitWords words = split({"-g", "2", "--wait", "--", "python", "ddp.py", "-v"});
  EXPECT_EQ(words.options, (Words{"-g", "2", "--wait"}));
  EXPECT_EQ(words.program, (Words{"python", "ddp.py", "-v"}));
}

TEST(ProgramWords, OurOptionsStopAtTheProgramsFirstWord) {
  SplitWords words = split({"-q", "python", "train.py", "--name", "x", "--", "y"});
  EXPECT_EQ(words.options, (Words{"-q"}));
  EXPECT_EQ(words.program, (Words{"python", "train.py", "--name", "x", "--", "y"}));
}

TEST(ProgramWords, ValuesInEveryFormAreOurs) {
  SplitWords words = split({"-g2", "--name=a b", "--gpu-count", "-1", "--wait=5s", "sh"});
  EXPECT_EQ(words.options, (Words{"-g2", "--name=a b", "--gpu-count", "-1", "--wait=5s"}));
  EXPECT_EQ(words.program, (Words{"sh"}));
}

TEST(ProgramWords, OnlyTheFirstSeparatorIsOurs) {
  EXPECT_EQ(split({"--", "--", "x"}).program, (Words{"--", "x"}));
  EXPECT_EQ(split({"--", "--name", "x"}).program, (Words{"--name", "x"}));
  EXPECT_TRUE(split({"--"}).program.empty());
}

TEST(ProgramWords, UnknownOptionsAreLeftForTheParserToRefuse) {
  SplitWords words = split({"--bogus", "x"});
  EXPECT_EQ(words.options, (Words{"--bogus"}));
  EXPECT_EQ(words.program, (Words{"x"}));
  EXPECT_EQ(split({"-"}).program, (Words{"-"}));  // a lone dash is a word (stdin), not an option
}

}  // namespace
}  // namespace gpupool::cli
