#include "base/display_text.h"

#include <cwchar>
#include <limits>

#include "base/quote.h"

namespace gpupool {
namespace {

size_t cells_of(char32_t code_point) {
  int width = wcwidth(static_cast<wchar_t>(code_point));
  return width < 0 ? 1 : static_cast<size_t>(width);
}

}  // namespace

std::optional<char32_t> next_code_point(std::string_view text, size_t& at) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = byte(at);
  size_t length = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 0;
  if (length == 0 || at + length > text.size()) {
    ++at;
    return std::nullopt;
  }
  char32_t code_point = length == 1 ? lead : lead & (0xFF >> (length + 1));
  for (size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) {
      ++at;
      return std::nullopt;
    }
    code_point = (code_point << 6) | (byte(at + i) & 0x3F);
  }
  static constexpr char32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code_point < kSmallest[length] || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    ++at;
    return std::nullopt;
  }
  at += length;
  return code_point;
}

size_t display_width(std::string_view text) {
  size_t cells = 0;
  for (size_t at = 0; at < text.size();) {
    std::optional<char32_t> code_point = next_code_point(text, at);
    cells += code_point ? cells_of(*code_point) : 1;
  }
  return cells;
}

std::string fit_cells(std::string_view text, size_t cells, std::string_view mark) {
  std::string shown = printable(text, std::numeric_limits<size_t>::max());
  if (display_width(shown) <= cells) return shown;
  size_t room = cells > mark.size() ? cells - mark.size() : 0;
  size_t used = 0;
  size_t at = 0;
  while (at < shown.size()) {
    size_t next = at;
    std::optional<char32_t> code_point = next_code_point(shown, next);
    size_t width = code_point ? cells_of(*code_point) : 1;
    if (used + width > room) break;
    used += width;
    at = next;
  }
  return shown.substr(0, at) + std::string(mark.substr(0, cells - used));
}

std::string pad_cells(std::string_view text, size_t cells) {
  std::string shown = fit_cells(text, cells);
  size_t width = display_width(shown);
  return shown + std::string(cells > width ? cells - width : 0, ' ');
}

}  // namespace gpupool
