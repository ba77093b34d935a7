// Durations typed by people: time limits, waits, grace periods, report windows, and the
// configuration's durations. One parser, so "1.5d" means the same everywhere.
#pragma once

#include <string_view>

#include "base/result.h"

namespace gpupool {

// Longer than any job or report window; keeps every conversion (to milliseconds, to a time
// point) far from overflow.
inline constexpr double kMaxDurationS = 100.0 * 365 * 86400;

// "250ms", "90s", "30m", "2h", "1.5d", "2w", or a bare number of seconds; "min" is "m".
// Returns seconds: finite, at least 0, at most kMaxDurationS. The one-line error quotes the text.
Result<double> parse_duration_s(std::string_view text);

}  // namespace gpupool
