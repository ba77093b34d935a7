// Fuzzes the configuration parser: any text either parses into settings within the documented
// ranges or yields one error line that names the file and a line.
// Seeds: tests/fuzz/config/.
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/config.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

bool positive_finite(double value) { return std::isfinite(value) && value > 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = gpupool::parse_config(text, "fuzz.toml");
  if (!config) {
    const std::string& message = config.error().message;
    check(message.starts_with("fuzz.toml:") && message.find('\n') == std::string::npos);
    return 0;
  }
  check(!config->admin_group || !config->admin_group->empty());
  check(positive_finite(config->sample_interval_s) && config->sample_interval_s <= 60);
  check(std::isfinite(config->kill_grace_s) && config->kill_grace_s >= 0);
  check(!config->default_time_limit_s || positive_finite(*config->default_time_limit_s));
  check(!config->max_time_limit_s || positive_finite(*config->max_time_limit_s));
  check(!config->default_time_limit_s || !config->max_time_limit_s ||
        *config->default_time_limit_s <= *config->max_time_limit_s);
  check(config->http_max_connections >= 1 && config->http_max_connections <= 512);
  check(config->http_max_connections_per_address >= 1 && config->http_max_connections_per_address <= 512);
  const gpupool::SchedulerConfig& scheduler = config->scheduler;
  check(!scheduler.quota_gpus || positive_finite(*scheduler.quota_gpus));
  for (const auto& [user, quota] : scheduler.user_quota_gpus) check(positive_finite(quota));
  check(positive_finite(scheduler.fair_share_half_life_s));
  check(positive_finite(scheduler.default_runtime_s));
  check(scheduler.backfill_depth >= 1);
  check(scheduler.runtime_estimate_quantile > 0 && scheduler.runtime_estimate_quantile <= 1);
  return 0;
}
