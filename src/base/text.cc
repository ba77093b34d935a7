#include "base/text.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace gpupool {

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::optional<uint64_t> parse_decimal(std::string_view text) {
  uint64_t value = 0;
  if (!all_digits(text)) return std::nullopt;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t at = text.find(separator, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

namespace {

std::string_view variable_name(const std::string& entry) { return std::string_view(entry).substr(0, entry.find('=')); }

}  // namespace

std::vector<std::string> with_defaults(const std::vector<std::string>& environment,
                                       const std::vector<std::string>& defaults) {
  std::vector<std::string> merged = environment;
  for (const std::string& entry : defaults) {
    bool set = std::any_of(environment.begin(), environment.end(),
                           [&](const std::string& e) { return variable_name(e) == variable_name(entry); });
    if (!set) merged.push_back(entry);
  }
  return merged;
}

std::vector<std::string> with_overrides(const std::vector<std::string>& environment,
                                        const std::vector<std::string>& overrides) {
  auto name_of = variable_name;
  std::vector<std::string> merged;
  for (const std::string& entry : environment) {
    bool replaced = false;
    for (const auto& o : overrides) replaced = replaced || name_of(o) == name_of(entry);
    if (!replaced) merged.push_back(entry);
  }
  merged.insert(merged.end(), overrides.begin(), overrides.end());
  return merged;
}

void LastLines::add(std::string_view piece) {
  while (!piece.empty()) {
    if (lines_.empty() || lines_.back().ends_with('\n')) lines_.emplace_back();
    size_t end = piece.find('\n');
    size_t taken = end == std::string_view::npos ? piece.size() : end + 1;
    lines_.back().append(piece.substr(0, taken));
    piece.remove_prefix(taken);
    while (lines_.size() > count_) lines_.pop_front();
  }
}

std::string LastLines::text() const {
  std::string text;
  for (const std::string& line : lines_) text += line;
  return text;
}

}  // namespace gpupool
