// The few CSV helpers the trace readers share: traces are plain comma-separated values without
// quoting, one record per line.
#pragma once

#include <string_view>
#include <vector>

#include "base/text.h"

namespace gpupool {

// `text` without the spaces, tabs and carriage return around it.
std::string_view trim_field(std::string_view text);

// "a, b,,c\r" -> {"a", "b", "", "c"}: every field, trimmed, empty ones included.
std::vector<std::string_view> csv_fields(std::string_view line);

// Calls `visit(line_number, line)` for every line of `text` (numbered from 1) until it returns
// false; the last line needs no newline.
template <typename Visit>
void for_each_line(std::string_view text, Visit&& visit) {
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t newline = text.find('\n', start);
    std::string_view line = text.substr(start, newline - start);
    start = newline == std::string_view::npos ? text.size() : newline + 1;
    if (!visit(++line_number, line)) return;
  }
}

}  // namespace gpupool
