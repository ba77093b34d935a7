// `gpupool report`: GPU-hours and mean utilisation per user and per job, from gpupoold's
// accounting (docs/monitoring.md).
#pragma once

#include <string_view>

#include "base/result.h"

namespace gpupool::cli {

// --since: a duration back from `now` ("90s", "30m", "12h", "7d", "2w") or a local date and
// time ("2026-12-01", "2026-12-01 08:00", "2026-12-01T08:00:30"). Unix seconds.
Result<double> parse_since(std::string_view text, double now);

}  // namespace gpupool::cli
