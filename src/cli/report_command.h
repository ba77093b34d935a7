// `gpupool report`: GPU-hours and mean utilisation per user and per job, from gpupoold's
// accounting (docs/monitoring.md).
#pragma once

#include <string>
#include <string_view>

#include "base/result.h"

namespace gpupool::cli {

// --since: a duration back from `now` ("90s", "30m", "12h", "7d", "2w") or a local date and
// time ("2026-12-01", "2026-12-01 08:00", "2026-12-01T08:00:30"). Unix seconds.
Result<double> parse_since(std::string_view text, double now);

// Unix seconds as local time, "2026-12-01 08:00" (or as `format` says, strftime's).
std::string time_text(double unix_seconds, const char* format = "%Y-%m-%d %H:%M");

}  // namespace gpupool::cli
