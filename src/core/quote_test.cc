#include "core/quote.h"

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

}  // namespace
}  // namespace gpupool
