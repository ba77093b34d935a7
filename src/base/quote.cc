#include "base/quote.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpupool {
namespace {

constexpr size_t kMaxQuotedBytes = 64;

bool continues_a_character(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

}  // namespace

std::string printable(std::string_view text, size_t max_bytes) {
  size_t shown = text.size();
  if (shown > max_bytes) {
    shown = max_bytes;
    while (shown > 0 && continues_a_character(text[shown])) --shown;
  }
  std::string out;
  for (char c : text.substr(0, shown)) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
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
