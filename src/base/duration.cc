#include "base/duration.h"

#include <charconv>
#include <cmath>
#include <utility>

#include "base/quote.h"

namespace gpupool {

Result<double> parse_duration_s(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [unit_start, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || !std::isfinite(value) || value < 0) {
    return fail("invalid duration {}: expected e.g. 30s, 10m, 2h or 1d", quote(text));
  }
  constexpr std::pair<std::string_view, double> kUnits[] = {
      {"", 1}, {"s", 1}, {"ms", 0.001}, {"m", 60}, {"min", 60}, {"h", 3600}, {"d", 86400}, {"w", 7 * 86400}};
  std::string_view unit(unit_start, static_cast<size_t>(end - unit_start));
  for (const auto& [name, seconds] : kUnits) {
    if (unit != name) continue;
    double total = value * seconds;
    if (total > kMaxDurationS) return fail("invalid duration {}: longer than 100 years", quote(text));
    return total;
  }
  return fail("invalid duration {}: unknown unit {} (use ms, s, m, h, d or w)", quote(text), quote(unit));
}

}  // namespace gpupool
