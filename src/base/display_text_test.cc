#include "base/display_text.h"

#include <gtest/gtest.h>

#include <clocale>

#include "base/quote.h"

namespace gpupool {
namespace {

// Widths need a UTF-8 character type, as the commands set at start.
class DisplayText : public testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(std::setlocale(LC_CTYPE, "C.UTF-8"), nullptr); }
};

TEST_F(DisplayText, WideAndCombiningCharactersTakeTheirCells) {
  EXPECT_EQ(display_width("train-3"), 7u);
  EXPECT_EQ(display_width("日本語"), 6u);
  EXPECT_EQ(display_width("αβγ"), 3u);
  EXPECT_EQ(display_width("e\u0301"), 1u);  // e + combining acute
  EXPECT_EQ(display_width("🚀"), 2u);
}

TEST_F(DisplayText, TextIsCutBetweenCharactersNeverInsideOne) {
  EXPECT_EQ(fit_cells("αβγ-日本語-x", 8), "αβγ-日~");
  EXPECT_EQ(fit_cells("αβγ-日本語-x", 9), "αβγ-日本~");
  EXPECT_EQ(fit_cells("日本語", 4), "日~");  // a wide character that would cross the edge stays out
  EXPECT_EQ(fit_cells("short", 8), "short");
  EXPECT_EQ(fit_cells("abcdefgh", 6, "..."), "abc...");
  EXPECT_EQ(fit_cells("abc", 0), "");
  EXPECT_EQ(pad_cells("日本", 6), "日本  ");
  EXPECT_EQ(display_width(pad_cells("日本語-long-name", 10)), 10u);
}

TEST_F(DisplayText, EscapesCountAsWhatTheyShow) {
  EXPECT_EQ(fit_cells("evil\x1b[31mred\nline2", 40), "evil\\x1b[31mred\\nline2");
  EXPECT_EQ(pad_cells("a\nb", 5), "a\\nb ");
}

TEST(Printable, NothingThatSteersATerminalGetsThrough) {
  EXPECT_EQ(printable("evil\x1b]0;title\x07", 100), "evil\\x1b]0;title\\x07");
  EXPECT_EQ(printable("\xc2\x9b" "31m", 100), "\\u009b31m");         // C1 CSI
  EXPECT_EQ(printable("a\xe2\x80\xae" "b", 100), "a\\u202eb");       // right-to-left override
  EXPECT_EQ(printable("\xff\xfe ok \xc3", 100), "\\xff\\xfe ok \\xc3");  // not UTF-8
  EXPECT_EQ(printable("\xed\xa0\x80", 100), "\\xed\\xa0\\x80");      // a surrogate
  EXPECT_EQ(printable("\xc0\xaf", 100), "\\xc0\\xaf");               // overlong '/'
  EXPECT_EQ(printable("日本語", 100), "日本語");
}

TEST(NextCodePoint, DecodesEveryLength) {
  std::string_view text = "a\u00e9\u65e5\U0001F680";
  size_t at = 0;
  EXPECT_EQ(next_code_point(text, at), U'a');
  EXPECT_EQ(next_code_point(text, at), U'\u00e9');
  EXPECT_EQ(next_code_point(text, at), U'\u65e5');
  EXPECT_EQ(next_code_point(text, at), U'\U0001F680');
  EXPECT_EQ(at, text.size());
}

}  // namespace
}  // namespace gpupool
