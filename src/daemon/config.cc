#include "daemon/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <span>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "base/duration.h"
#include "base/quote.h"

namespace gpupool {
namespace {

// Every value is bounded: a tiny interval pinned every core (1e-6) or grew memory without end
// (1e-300), a huge grace period overflows the clock's arithmetic.
constexpr double kMinSampleIntervalS = 0.05;
constexpr double kMaxSampleIntervalS = 60;
constexpr double kMaxKillGraceS = 3600;
// The samples the monitor keeps per GPU (history / sample_interval_s): about 80 MB per GPU.
constexpr double kMaxSamplesKept = 1'000'000;
constexpr int64_t kMaxCount = 1'000'000;  // backfill_depth, max_queued_jobs_per_user
// Each user's run times are kept and sorted at every job end: a few thousand is plenty.
constexpr int64_t kMaxRuntimeHistory = 10'000;
// HTTP connections kept open: half of Linux's usual soft descriptor limit (1024), so that HTTP
// never takes what the job side needs even in a daemon started by hand (docs/security.md).
constexpr int64_t kMaxHttpConnections = 512;
constexpr int64_t kMaxMegabytes = int64_t{1} << 24;  // 16 TiB: max_log_mb, state_reserve_mb
constexpr size_t kMaxDetailBytes = 200;  // of a syntax error in an error line

// --- one value; errors name the key, the caller adds FILE:LINE ---

Result<double> number_of(const toml::node& node, std::string_view key) {
  if (!node.is_number()) return fail("{} must be a number", quote(key));
  return *node.value<double>();
}

Result<double> positive_number(const toml::node& node, std::string_view key) {
  TRY_ASSIGN(double value, number_of(node, key));
  if (!std::isfinite(value) || value <= 0) return fail("{} must be a number greater than 0", quote(key));
  return value;
}

Result<double> hours_in_seconds(const toml::node& node, std::string_view key) {
  TRY_ASSIGN(double hours, positive_number(node, key));
  if (hours * 3600 > kMaxDurationS) return fail("{} is too large (at most 100 years)", quote(key));
  return hours * 3600;
}

Result<size_t> count_of(const toml::node& node, std::string_view key, int64_t most = kMaxCount,
                        int64_t least = 1) {
  std::optional<int64_t> count = node.is_integer() ? node.value<int64_t>() : std::nullopt;
  if (!count || *count < least || *count > most) {
    return fail("{} must be a whole number from {} to {}", quote(key), least, most);
  }
  return static_cast<size_t>(*count);
}

// A whole number of MiB, in bytes.
Result<uint64_t> megabytes_of(const toml::node& node, std::string_view key, int64_t least) {
  std::optional<int64_t> count = node.is_integer() ? node.value<int64_t>() : std::nullopt;
  if (!count || *count < least || *count > kMaxMegabytes) {
    return fail("{} must be a whole number of MiB from {} to {}", quote(key), least, kMaxMegabytes);
  }
  return static_cast<uint64_t>(*count) << 20;
}

// No limit only when said in words: a 0 would more likely be a mistake.
Result<std::optional<uint64_t>> megabytes_or_unlimited(const toml::node& node, std::string_view key, int64_t least) {
  if (node.is_string() && *node.value<std::string_view>() == "unlimited") return std::optional<uint64_t>();
  auto bytes = megabytes_of(node, key, least);
  if (!bytes) return fail("{} or \"unlimited\"", bytes.error().message);
  return std::optional<uint64_t>(*bytes);
}

Result<std::string> text_of(const toml::node& node, std::string_view key) {
  if (!node.is_string()) return fail("{} must be a string", quote(key));
  return *node.value<std::string>();
}

Result<double> duration_of(const toml::node& node, std::string_view key) {
  if (node.is_number()) {
    if (auto seconds = positive_number(node, key); seconds && *seconds <= kMaxDurationS) return *seconds;
  } else if (node.is_string()) {
    auto seconds = parse_duration_s(*node.value<std::string_view>());
    if (seconds && *seconds > 0) return *seconds;
  }
  return fail("{} must be a duration such as \"30m\", \"2h\" or \"1d\", or a number of seconds (at most 100 years)",
              quote(key));
}

// One of the words `allowed`: "must be \"a\", \"b\" or \"c\"" otherwise.
Result<std::string_view> word_of(const toml::node& node, std::string_view key,
                                 std::initializer_list<std::string_view> allowed) {
  auto text = node.value<std::string_view>();
  if (node.is_string() && std::ranges::find(allowed, *text) != allowed.end()) return *text;
  std::string words;
  for (auto word = allowed.begin(); word != allowed.end(); ++word) {
    const char* before = word == allowed.begin() ? "" : std::next(word) == allowed.end() ? " or " : ", ";
    words += fmt::format("{}\"{}\"", before, *word);
  }
  return fail("{} must be {}", quote(key), words);
}

// A switch: "on" is true, "off" false.
Result<bool> on_off_of(const toml::node& node, std::string_view key) {
  TRY_ASSIGN(std::string_view word, word_of(node, key, {"on", "off"}));
  return word == "on";
}

// --- the tables ---

// A key of a table, and how its value lands in the configuration.
struct Key {
  const char* name;
  Result<void> (*read)(const toml::node& node, std::string_view key, DaemonConfig& config);
};

const Key kDaemonKeys[] = {
    {"admin_group",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string group, text_of(node, key));
       if (group.empty()) return fail("{} must name a group", quote(key));
       config.admin_group = std::move(group);
       return {};
     }},
    {"private_data",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       const toml::array* words = node.as_array();
       auto bad = [&] { return fail("{} must be a list of \"jobs\" and \"usage\", such as [\"jobs\", \"usage\"]", quote(key)); };
       if (!words) return bad();
       config.private_data = {};
       for (const toml::node& word : *words) {
         auto text = word.value<std::string_view>();
         if (!word.is_string() || (*text != "jobs" && *text != "usage")) return bad();
         (*text == "jobs" ? config.private_data.jobs : config.private_data.usage) = true;
       }
       return {};
     }},
    {"sample_interval_s",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(double interval, number_of(node, key));
       if (!(interval >= kMinSampleIntervalS && interval <= kMaxSampleIntervalS)) {
         return fail("{} must be a number from {} to {}", quote(key), kMinSampleIntervalS, kMaxSampleIntervalS);
       }
       config.sample_interval_s = interval;
       return {};
     }},
    {"kill_grace_s",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(double grace, number_of(node, key));
       if (!(grace >= 0 && grace <= kMaxKillGraceS)) return fail("{} must be a number from 0 to {}", quote(key), kMaxKillGraceS);
       config.kill_grace_s = grace;
       return {};
     }},
    {"default_time_limit",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.default_time_limit_s, duration_of(node, key));
       return {};
     }},
    {"max_time_limit",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.max_time_limit_s, duration_of(node, key));
       return {};
     }},
    {"device_isolation",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string_view word, word_of(node, key, {"auto", "on", "off"}));
       config.device_isolation = word == "on"    ? DeviceIsolationMode::On
                                 : word == "off" ? DeviceIsolationMode::Off
                                                 : DeviceIsolationMode::Auto;
       return {};
     }},
    {"slice_enforcement",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string_view word, word_of(node, key, {"auto", "mps", "watch", "off"}));
       config.slice_enforcement = word == "mps"     ? SliceEnforcement::Mps
                                  : word == "watch" ? SliceEnforcement::Watch
                                  : word == "off"   ? SliceEnforcement::Off
                                                    : SliceEnforcement::Auto;
       return {};
     }},
    {"slice_overrun",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string_view word, word_of(node, key, {"warn", "stop"}));
       config.slice_overrun = word == "stop" ? SliceOverrunPolicy::Stop : SliceOverrunPolicy::Warn;
       return {};
     }},
    {"max_log_mb",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.max_log_bytes, megabytes_or_unlimited(node, key, 1));
       return {};
     }},
    {"state_reserve_mb",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.state_reserve_bytes, megabytes_of(node, key, 0));
       return {};
     }},
    {"idle_suspend_after",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.idle_suspend_after_s, duration_of(node, key));
       return {};
     }},
    {"suspend_host_memory_mb",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::optional<uint64_t> bytes, megabytes_or_unlimited(node, key, 0));
       config.suspend_host_memory_mib = bytes ? std::optional(*bytes >> 20) : std::nullopt;
       return {};
     }},
};

const Key kMonitorKeys[] = {
    {"http",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string address, text_of(node, key));
       if (address == "off") {
         config.http.reset();
         return {};
       }
       if (!split_http_address(address)) return fail("{} must be HOST:PORT (e.g. \"127.0.0.1:9400\") or \"off\"", quote(key));
       config.http = std::move(address);
       return {};
     }},
    {"http_max_connections",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.http_max_connections, count_of(node, key, kMaxHttpConnections));
       return {};
     }},
    {"http_max_connections_per_address",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.http_max_connections_per_address, count_of(node, key, kMaxHttpConnections));
       return {};
     }},
    {"history",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.history_s, duration_of(node, key));
       return {};
     }},
    {"idle_flag_after",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.idle_flag_after_s, duration_of(node, key));
       return {};
     }},
    {"job_mapping_dir",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string dir, text_of(node, key));
       if (!dir.starts_with('/')) return fail("{} must be an absolute path (e.g. \"/run/dcgm-job-map\")", quote(key));
       config.job_mapping_dir = std::move(dir);
       return {};
     }},
    {"profiling",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.profiling, on_off_of(node, key));
       return {};
     }},
    {"quarantine",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.quarantine.enabled, on_off_of(node, key));
       return {};
     }},
    {"quarantine_clean_window",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.quarantine.clean_window_s, duration_of(node, key));
       return {};
     }},
};

// The hook's command: a list is its argument vector, a string a shell command line.
Result<std::vector<std::string>> command_of(const toml::node& node, std::string_view key) {
  auto bad = [&] { return fail("{} must be a command line (a string) or a list of its words, the first not empty", quote(key)); };
  std::vector<std::string> argv;
  if (node.is_string()) {
    std::string line = *node.value<std::string>();
    if (line.find_first_not_of(" \t") == std::string::npos) return bad();
    return std::vector<std::string>{"/bin/sh", "-c", std::move(line)};
  }
  const toml::array* words = node.as_array();
  if (words == nullptr || words->empty()) return bad();
  for (const toml::node& word : *words) {
    if (!word.is_string()) return bad();
    argv.push_back(*word.value<std::string>());
  }
  if (argv.front().empty()) return bad();
  return argv;
}

const Key kEventsKeys[] = {
    {"keep",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.events.keep_s, duration_of(node, key));
       return {};
     }},
    {"keep_max",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.events.keep_max, count_of(node, key, int64_t{100'000'000}));
       return {};
     }},
    {"on_event",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.events.on_event, command_of(node, key));
       return {};
     }},
    {"on_event_kinds",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       const toml::array* names = node.as_array();
       if (names == nullptr || names->empty()) return fail("{} must be a list of event names, such as [\"job_failed\"]", quote(key));
       config.events.on_event_kinds.clear();
       for (const toml::node& name : *names) {
         if (!name.is_string()) return fail("{} must be a list of event names, such as [\"job_failed\"]", quote(key));
         auto kind = parse_event_kind(*name.value<std::string_view>());
         if (!kind) return fail("{}: {}", quote(key), kind.error().message);
         config.events.on_event_kinds.push_back(*kind);
       }
       return {};
     }},
    {"on_event_timeout",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.events.on_event_timeout_s, duration_of(node, key));
       return {};
     }},
};

const Key kSchedulerKeys[] = {
    {"policy",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string name, text_of(node, key));
       auto policy = parse_policy(name);
       if (!policy) return fail("{} must be fifo, backfill or gpupool", quote(key));
       config.scheduler.policy = *policy;
       return {};
     }},
    {"quota_gpus",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.scheduler.quota_gpus, positive_number(node, key));
       return {};
     }},
    {"fair_share_half_life_h",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.scheduler.fair_share_half_life_s, hours_in_seconds(node, key));
       return {};
     }},
    {"default_runtime_h",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.scheduler.default_runtime_s, hours_in_seconds(node, key));
       return {};
     }},
    {"backfill_depth",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.scheduler.backfill_depth, count_of(node, key));
       return {};
     }},
    {"max_queued_jobs_per_user",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.max_queued_jobs_per_user, count_of(node, key));
       return {};
     }},
    {"runtime_history",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(config.scheduler.runtime_history, count_of(node, key, kMaxRuntimeHistory, 0));
       return {};
     }},
    {"runtime_estimate_quantile",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(double quantile, number_of(node, key));
       if (!(quantile > 0 && quantile <= 1))
         return fail("{} must be a number above 0 and at most 1", quote(key));
       config.scheduler.runtime_estimate_quantile = quantile;
       return {};
     }},
    {"preempt",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string_view word, word_of(node, key, {"suspend", "off"}));
       config.preempt_by_suspending = word == "suspend";
       return {};
     }},
    {"backfill",
     [](const toml::node& node, std::string_view key, DaemonConfig& config) -> Result<void> {
       TRY_ASSIGN(std::string_view word, word_of(node, key, {"suspend", "estimates"}));
       config.scheduler.backfill_by_suspending = word == "suspend";
       return {};
     }},
};

std::string names_of(std::span<const Key> keys) {
  std::string names;
  for (const Key& key : keys) names += fmt::format("{}{}", names.empty() ? "" : ", ", key.name);
  return names;
}

class ConfigReader {
 public:
  explicit ConfigReader(const std::string& source) : source_(source) {}

  Result<DaemonConfig> read(const toml::table& document) {
    for (const auto& [key, node] : document) {
      const toml::table* table = node.as_table();
      if (key == "daemon" || key == "scheduler" || key == "quotas" || key == "monitor" || key == "events") {
        if (table == nullptr) return at(key, fail("{} must be a table ([{}])", quote(key.str()), key.str()));
        if (key == "daemon") TRY(read_keys(*table, "daemon", kDaemonKeys));
        if (key == "monitor") TRY(read_keys(*table, "monitor", kMonitorKeys));
        if (key == "events") TRY(read_keys(*table, "events", kEventsKeys));
        if (key == "scheduler") TRY(read_keys(*table, "scheduler", kSchedulerKeys));
        if (key == "quotas") TRY(read_quotas(*table));
      } else if (table != nullptr) {
        return at(key, fail("unknown table {} (known: daemon, scheduler, quotas, monitor, events)", quote(key.str())));
      } else {
        return at(key, fail("unknown key {} outside a table (known tables: daemon, scheduler, quotas, monitor, events)",
                            quote(key.str())));
      }
    }
    if (config_.default_time_limit_s && config_.max_time_limit_s &&
        *config_.default_time_limit_s > *config_.max_time_limit_s) {
      const toml::key& key = document["daemon"].as_table()->find("default_time_limit")->first;
      return at(key, fail("'default_time_limit' ({} s) is longer than 'max_time_limit' ({} s)",
                          *config_.default_time_limit_s, *config_.max_time_limit_s));
    }
    if (config_.history_s / config_.sample_interval_s > kMaxSamplesKept) {
      const toml::key& key = document["monitor"].as_table()->find("history")->first;
      return at(key, fail("'history' ({} s) would keep more than {:.0f} samples per GPU at 'sample_interval_s' {}",
                          config_.history_s, kMaxSamplesKept, config_.sample_interval_s));
    }
    return config_;
  }

 private:
  Error at(const toml::key& key, Error error) const {
    return fail("{}:{}: {}", source_, key.source().begin.line, error.message);
  }

  Result<void> read_keys(const toml::table& table, std::string_view table_name, std::span<const Key> keys) {
    for (const auto& [key, node] : table) {
      const Key* known = nullptr;
      for (const Key& candidate : keys) {
        if (key == candidate.name) known = &candidate;
      }
      if (known == nullptr) {
        return at(key,
                  fail("unknown key {} in [{}] (known: {})", quote(key.str()), table_name, names_of(keys)));
      }
      if (auto read = known->read(node, key.str(), config_); !read) return at(key, std::move(read).error());
    }
    return {};
  }

  // [quotas]: any user name, each a number of GPUs.
  Result<void> read_quotas(const toml::table& table) {
    for (const auto& [key, node] : table) {
      auto quota = positive_number(node, key.str());
      if (!quota) return at(key, std::move(quota).error());
      config_.scheduler.user_quota_gpus[std::string(key.str())] = *quota;
    }
    return {};
  }

  const std::string& source_;
  DaemonConfig config_;
};

}  // namespace

std::optional<std::pair<std::string, int>> split_http_address(std::string_view address) {
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view port_text = address.substr(colon + 1);
  int port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port < 0 || port > 65535) {
    return std::nullopt;
  }
  return std::pair<std::string, int>(std::string(address.substr(0, colon)), port);
}

Result<DaemonConfig> parse_config(std::string_view text, const std::string& source) {
  toml::table document;
  try {
    document = toml::parse(text, source);
  } catch (const toml::parse_error& error) {  // toml++ reports syntax errors by exception only
    // Its description quotes what it saw, newlines and all.
    return fail("{}:{}: {}", source, error.source().begin.line,
                printable(error.description(), kMaxDetailBytes));
  }
  return ConfigReader(source).read(document);
}

Result<DaemonConfig> load_config(const std::string& path, bool named_explicitly) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) return fail("cannot read {}: it is a directory", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int error = errno;
    if (error == ENOENT && !named_explicitly) return DaemonConfig{};
    return fail("cannot read {}: {}", path, std::strerror(error));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail("cannot read {}", path);
  return parse_config(text.str(), path);
}

}  // namespace gpupool
