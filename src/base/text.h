// Small text helpers shared by the parsers of user input.
#pragma once

#include <charconv>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

std::string lowercase(std::string_view text);
// True for a non-empty run of decimal digits.
bool all_digits(std::string_view text);
// A non-empty run of decimal digits as a number; nullopt for anything else or past 64 bits.
std::optional<uint64_t> parse_decimal(std::string_view text);

// The whole of `text` as a number; nullopt when any of it is not.
template <typename Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Levenshtein distance: the insertions, deletions and substitutions that turn one into the other
// (for "did you mean" hints).
size_t edit_distance(std::string_view a, std::string_view b);
// "a,,b" -> {"a", "", "b"}: every piece, empty ones included.
std::vector<std::string> split(std::string_view text, char separator);
// An environment ("NAME=value" entries) with `overrides` replacing entries of the same name
// or added at the end.
std::vector<std::string> with_overrides(const std::vector<std::string>& environment,
                                        const std::vector<std::string>& overrides);

// `environment` ("NAME=value" entries) with each of `defaults` added whose name it does not set.
std::vector<std::string> with_defaults(const std::vector<std::string>& environment,
                                       const std::vector<std::string>& defaults);

// The last `count` lines of a text given a piece at a time (a log read in chunks), holding no
// more than those lines. A last line without its newline counts as a line.
class LastLines {
 public:
  explicit LastLines(size_t count) : count_(count) {}
  void add(std::string_view piece);
  std::string text() const;

 private:
  size_t count_;
  std::deque<std::string> lines_;  // each with its '\n' but maybe the last
};

}  // namespace gpupool
