#include "base/csv.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace gpupool {
namespace {

TEST(Csv, FieldsAreTrimmedAndEmptyOnesKept) {
  EXPECT_EQ(csv_fields("a, b,,c\r"), (std::vector<std::string_view>{"a", "b", "", "c"}));
  EXPECT_EQ(csv_fields(""), (std::vector<std::string_view>{""}));
}

TEST(Csv, LinesAreNumberedAndTheLastNeedsNoNewline) {
  std::vector<std::pair<size_t, std::string>> seen;
  for_each_line("one\ntwo\n\nfour", [&](size_t number, std::string_view line) {
    seen.emplace_back(number, std::string(line));
    return true;
  });
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, std::string>>{
                      {1, "one"}, {2, "two"}, {3, ""}, {4, "four"}}));
}

TEST(Csv, AVisitThatReturnsFalseStopsTheWalk) {
  size_t visited = 0;
  for_each_line("a\nb\nc\n", [&](size_t, std::string_view) { return ++visited < 2; });
  EXPECT_EQ(visited, 2u);
}

}  // namespace
}  // namespace gpupool
