#include "base/cpu_list.h"

#include <algorithm>
#include <charconv>
#include <climits>

#include <fmt/format.h>

namespace gpupool {

std::string format_cpu_list(std::vector<unsigned> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

namespace {

Result<unsigned> parse_cpu_number(std::string_view text, std::string_view whole) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return fail("invalid CPU list '{}': '{}' is not a CPU number", whole, text);
  }
  return value;
}

}  // namespace

Result<std::vector<unsigned>> parse_cpu_list(std::string_view text) {
  std::vector<unsigned> cpus;
  std::string_view rest = text;
  while (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    size_t dash = item.find('-');
    TRY_ASSIGN(unsigned first, parse_cpu_number(item.substr(0, dash), text));
    unsigned last = first;
    if (dash != std::string_view::npos) {
      TRY_ASSIGN(last, parse_cpu_number(item.substr(dash + 1), text));
    }
    if (last < first) return fail("invalid CPU list '{}': range {} is backwards", text, item);
    if (last - first > 65535) return fail("invalid CPU list '{}': range {} is too large", text, item);
    for (unsigned cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

std::vector<unsigned> cpus_from_mask(const std::vector<unsigned long>& words) {
  constexpr unsigned bits = sizeof(unsigned long) * CHAR_BIT;
  std::vector<unsigned> cpus;
  for (size_t w = 0; w < words.size(); ++w) {
    for (unsigned b = 0; b < bits; ++b) {
      if ((words[w] >> b) & 1UL) cpus.push_back(static_cast<unsigned>(w) * bits + b);
    }
  }
  return cpus;
}

}  // namespace gpupool
