#include "base/quote.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(QuoteTest, PlainTextIsQuotedAsItIs) {
  EXPECT_EQ(quote("polcy"), "'polcy'");
  EXPECT_EQ(quote(""), "''");
  EXPECT_EQ(quote("café 日本"), "'café 日本'");
}

TEST(QuoteTest, ControlCharactersAreEscapedSoTheLineStaysOne) {
  EXPECT_EQ(quote("a\nb\tc\rd"), "'a\\nb\\tc\\rd'");
  EXPECT_EQ(quote(std::string_view("x\0y\x1b\x7f", 5)), "'x\\x00y\\x1b\\x7f'");
}

TEST(QuoteTest, LongTextIsCutAtACharacterBoundary) {
  EXPECT_EQ(quote(std::string(64, 'a')), "'" + std::string(64, 'a') + "'");
  EXPECT_EQ(quote(std::string(65, 'a')), "'" + std::string(64, 'a') + "...'");
  // "é" is two bytes; the 64-byte cut would fall inside the last one.
  std::string accents = std::string(63, 'a') + "éé";
  EXPECT_EQ(quote(accents), "'" + std::string(63, 'a') + "...'");
}

TEST(QuoteTest, PrintableTakesItsOwnLimitAndNoQuotes) {
  EXPECT_EQ(printable("a\nb", 10), "a\\nb");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
}

TEST(QuoteTest, ShellQuoteLeavesPlainWordsAndQuotesTheRest) {
  EXPECT_EQ(shell_quote("train.py"), "train.py");
  EXPECT_EQ(shell_quote("--lr=3e-4"), "--lr=3e-4");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("two words"), "'two words'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("$HOME `id` *"), "'$HOME `id` *'");
  EXPECT_EQ(shell_quote("a\nb"), "'a\nb'");
  EXPECT_EQ(shell_quote("~user"), "'~user'");
}

TEST(QuotedVariable, IsAJsonStringOrUnset) {
  EXPECT_EQ(quoted_variable(std::string("0,1")), "\"0,1\"");
  EXPECT_EQ(quoted_variable(std::string("a\"b")), "\"a\\\"b\"");
  EXPECT_EQ(quoted_variable(std::nullopt), "unset");
}

}  // namespace
}  // namespace gpupool
