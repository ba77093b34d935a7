#include "lease/waiting_line.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace gpupool {
namespace {

std::string waited_text(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", std::max(0.0, seconds));
  return fmt::format("{:.0f} min", seconds / 60);
}

// Digits only: no sign, no spaces.
template <typename Number>
std::optional<Number> number_of(std::string_view text) {
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  Number value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

bool LineRequestSize::operator<(const LineRequestSize& other) const {
  if (gpu_count != other.gpu_count) return gpu_count < other.gpu_count;
  return slice && !other.slice;
}

std::string ticket_name(int64_t seconds, int64_t nanoseconds, int pid, LineRequestSize size) {
  char kind = size.mig ? 'm' : size.slice ? 's' : 'g';
  return fmt::format("{:010}{:09}.{}.{}{}", seconds, nanoseconds, pid, kind, size.gpu_count);
}

std::optional<LinePlace> parse_ticket_name(std::string_view name) {
  // ARRIVAL(19 digits).PID[.gCOUNT|.sCOUNT|.mCOUNT]
  size_t dot = name.find('.');
  if (dot != 19) return std::nullopt;
  auto seconds = number_of<int64_t>(name.substr(0, 10));
  auto nanoseconds = number_of<int64_t>(name.substr(10, 9));
  if (!seconds || !nanoseconds) return std::nullopt;
  LinePlace place;
  place.name = std::string(name);
  place.arrival_s = static_cast<double>(*seconds) + static_cast<double>(*nanoseconds) / 1e9;
  std::string_view rest = name.substr(dot + 1);
  size_t size_dot = rest.find('.');
  if (!number_of<int>(rest.substr(0, size_dot))) return std::nullopt;
  if (size_dot == std::string_view::npos) return place;  // an older version's ticket: size unknown
  std::string_view size = rest.substr(size_dot + 1);
  if (size.size() < 2 || (size[0] != 'g' && size[0] != 's' && size[0] != 'm')) return place;
  auto count = number_of<unsigned>(size.substr(1));
  if (count && *count > 0) place.size = LineRequestSize{*count, size[0] == 's', size[0] == 'm'};
  return place;
}

LineTurn line_turn(const std::vector<LinePlace>& everyone_ahead, LineRequestSize ours, double now,
                   double pass_window_s) {
  std::vector<LinePlace> ahead;
  for (const LinePlace& place : everyone_ahead) {
    if (!place.size || place.size->mig == ours.mig) ahead.push_back(place);
  }
  if (ahead.empty()) return {true, ""};
  const size_t n = ahead.size();
  std::string first = fmt::format("waiting in line: {} earlier request{} first", n, n == 1 ? " goes" : "s go");
  bool smaller_than_all =
      std::all_of(ahead.begin(), ahead.end(), [&](const LinePlace& p) { return p.size && ours < *p.size; });
  if (!smaller_than_all) return {false, first};
  double oldest = std::min_element(ahead.begin(), ahead.end(), [](const LinePlace& a, const LinePlace& b) {
                    return a.arrival_s < b.arrival_s;
                  })->arrival_s;
  if (now - oldest >= pass_window_s) {
    return {false, fmt::format("{} (the first has waited {}: smaller requests no longer pass it)", first,
                               waited_text(now - oldest))};
  }
  return {true, ""};
}

}  // namespace gpupool
