#include "base/quote.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/display_text.h"

namespace gpupool {
namespace {

constexpr size_t kMaxQuotedBytes = 64;

bool continues_a_character(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

// C1 controls (a terminal may take U+009B for CSI) and the bidirectional overrides and isolates,
// which reorder what follows them on the line.
bool invisible_control(char32_t code_point) {
  return (code_point >= 0x80 && code_point <= 0x9F) || (code_point >= 0x202A && code_point <= 0x202E) ||
         (code_point >= 0x2066 && code_point <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  size_t shown = text.size();
  if (shown > max_bytes) {
    shown = max_bytes;
    while (shown > 0 && continues_a_character(text[shown])) --shown;
  }
  std::string_view kept = text.substr(0, shown);
  std::string out;
  for (size_t at = 0; at < kept.size();) {
    size_t start = at;
    std::optional<char32_t> code_point = next_code_point(kept, at);
    if (!code_point) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(kept[start]));
    } else if (*code_point == '\n') {
      out += "\\n";
    } else if (*code_point == '\t') {
      out += "\\t";
    } else if (*code_point == '\r') {
      out += "\\r";
    } else if (*code_point < 0x20 || *code_point == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(*code_point));
    } else if (invisible_control(*code_point)) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(*code_point));
    } else {
      out += kept.substr(start, at - start);
    }
  }
  if (shown < text.size()) out += "...";
  return out;
}

std::string quote(std::string_view text) { return "'" + printable(text, kMaxQuotedBytes) + "'"; }

std::string quoted_variable(const std::optional<std::string>& value) {
  return value ? nlohmann::json(*value).dump() : "unset";
}

std::string shell_quote(std::string_view word) {
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("@%+=:,./_-").find(c) != std::string_view::npos;
  };
  if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) return std::string(word);
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace gpupool
