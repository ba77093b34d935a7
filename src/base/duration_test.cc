#include "base/duration.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace gpupool {
namespace {

TEST(Duration, ReadsEveryUnit) {
  EXPECT_DOUBLE_EQ(*parse_duration_s("90"), 90);
  EXPECT_DOUBLE_EQ(*parse_duration_s("90s"), 90);
  EXPECT_DOUBLE_EQ(*parse_duration_s("250ms"), 0.25);
  EXPECT_DOUBLE_EQ(*parse_duration_s("30m"), 1800);
  EXPECT_DOUBLE_EQ(*parse_duration_s("30min"), 1800);
  EXPECT_DOUBLE_EQ(*parse_duration_s("2h"), 7200);
  EXPECT_DOUBLE_EQ(*parse_duration_s("1.5d"), 129600);
  EXPECT_DOUBLE_EQ(*parse_duration_s("2w"), 1209600);
  EXPECT_DOUBLE_EQ(*parse_duration_s("0"), 0);
}

TEST(Duration, RefusesWhatIsNotAFiniteDurationWithOneLine) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"", "invalid duration '': expected e.g. 30s, 10m, 2h or 1d"},
      {"h", "invalid duration 'h': expected e.g. 30s, 10m, 2h or 1d"},
      {"-5m", "invalid duration '-5m': expected e.g. 30s, 10m, 2h or 1d"},
      {"inf", "invalid duration 'inf': expected e.g. 30s, 10m, 2h or 1d"},
      {"nan", "invalid duration 'nan': expected e.g. 30s, 10m, 2h or 1d"},
      {"1e300", "invalid duration '1e300': longer than 100 years"},
      {"1e9w", "invalid duration '1e9w': longer than 100 years"},
      {"5 m", "invalid duration '5 m': unknown unit ' m' (use ms, s, m, h, d or w)"},
      {"3y", "invalid duration '3y': unknown unit 'y' (use ms, s, m, h, d or w)"},
  };
  for (const auto& [text, message] : cases) {
    auto parsed = parse_duration_s(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.error().message, message);
  }
}

RC_GTEST_PROP(Duration, AnyAnswerIsFiniteAndInRange, (const std::string& text)) {
  auto parsed = parse_duration_s(text);
  if (parsed) {
    RC_ASSERT(std::isfinite(*parsed));
    RC_ASSERT(*parsed >= 0);
    RC_ASSERT(*parsed <= kMaxDurationS);
  } else {
    RC_ASSERT(parsed.error().message.find('\n') == std::string::npos);
  }
}

}  // namespace
}  // namespace gpupool
