#include "daemon/config.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "base/text.h"

namespace gpupool {
namespace {

DaemonConfig parsed(const std::string& text) {
  auto config = parse_config(text, "gpupool.toml");
  if (!config) {
    ADD_FAILURE() << config.error().message << "\n  in:\n" << text;
    return DaemonConfig{};
  }
  return *config;
}

std::string error_of(const std::string& text) {
  auto config = parse_config(text, "gpupool.toml");
  if (config) {
    ADD_FAILURE() << "parsed without an error:\n" << text;
    return "";
  }
  return config.error().message;
}

TEST(ConfigTest, NothingGivenMeansTheDefaults) {
  for (const char* text : {"", "# only a comment\n", "[daemon]\n[scheduler]\n[quotas]\n"}) {
    DaemonConfig config = parsed(text);
    EXPECT_FALSE(config.admin_group);
    EXPECT_EQ(config.sample_interval_s, 1.0);
    EXPECT_EQ(config.kill_grace_s, 10.0);
    EXPECT_FALSE(config.default_time_limit_s);
    EXPECT_FALSE(config.max_time_limit_s);
    EXPECT_EQ(config.device_isolation, DeviceIsolationMode::Auto);
    EXPECT_EQ(config.slice_enforcement, SliceEnforcement::Auto);
    EXPECT_EQ(config.slice_overrun, SliceOverrunPolicy::Warn);
    EXPECT_EQ(config.scheduler.policy, Policy::Gpupool);
    EXPECT_FALSE(config.scheduler.quota_gpus);
    EXPECT_TRUE(config.scheduler.user_quota_gpus.empty());
    EXPECT_EQ(config.scheduler.fair_share_half_life_s, 24 * 3600.0);
    EXPECT_EQ(config.scheduler.default_runtime_s, 3600.0);
    EXPECT_EQ(config.scheduler.backfill_depth, 1000u);
    EXPECT_EQ(config.max_queued_jobs_per_user, 10'000u);
    EXPECT_EQ(config.max_log_bytes, uint64_t{4096} << 20);
    EXPECT_EQ(config.state_reserve_bytes, uint64_t{512} << 20);
    EXPECT_TRUE(config.profiling);
  }
}

TEST(ConfigTest, OutputLimitAndReserveInMiB) {
  DaemonConfig config = parsed("[daemon]\nmax_log_mb = 3\nstate_reserve_mb = 0\n");
  EXPECT_EQ(config.max_log_bytes, uint64_t{3} << 20);
  EXPECT_EQ(config.state_reserve_bytes, 0u);
  EXPECT_FALSE(parsed("[daemon]\nmax_log_mb = \"unlimited\"\n").max_log_bytes);
  EXPECT_EQ(parsed("[daemon]\nsuspend_host_memory_mb = 262144\n").suspend_host_memory_mib, uint64_t{262144});
  EXPECT_FALSE(parsed("[daemon]\nsuspend_host_memory_mb = \"unlimited\"\n").suspend_host_memory_mib);
  EXPECT_FALSE(parsed("").suspend_host_memory_mib);
  EXPECT_EQ(parsed("[daemon]\nidle_suspend_after = \"2h\"\n").idle_suspend_after_s, 7200.0);
  EXPECT_FALSE(parsed("").idle_suspend_after_s);
  EXPECT_TRUE(parsed("[scheduler]\npreempt = \"suspend\"\n").preempt_by_suspending);
  EXPECT_FALSE(parsed("[scheduler]\npreempt = \"off\"\n").preempt_by_suspending);
  EXPECT_EQ(error_of("[scheduler]\npreempt = \"kill\"\n"), "gpupool.toml:2: 'preempt' must be \"suspend\" or \"off\"");
  EXPECT_TRUE(parsed("[scheduler]\nbackfill = \"suspend\"\n").scheduler.backfill_by_suspending);
  EXPECT_FALSE(parsed("[scheduler]\nbackfill = \"estimates\"\n").scheduler.backfill_by_suspending);
  EXPECT_FALSE(parsed("").scheduler.backfill_by_suspending);
  EXPECT_EQ(error_of("[scheduler]\nbackfill = true\n"), "gpupool.toml:2: 'backfill' must be \"suspend\" or \"estimates\"");
}

TEST(ConfigTest, SliceEnforcementByName) {
  EXPECT_EQ(parsed("[daemon]\nslice_enforcement = \"auto\"\n").slice_enforcement, SliceEnforcement::Auto);
  EXPECT_EQ(parsed("[daemon]\nslice_enforcement = \"mps\"\n").slice_enforcement, SliceEnforcement::Mps);
  EXPECT_EQ(parsed("[daemon]\nslice_enforcement = \"watch\"\n").slice_enforcement, SliceEnforcement::Watch);
  EXPECT_EQ(parsed("[daemon]\nslice_enforcement = \"off\"\n").slice_enforcement, SliceEnforcement::Off);
}

TEST(ConfigTest, PrivateDataNamesWhatIsPrivate) {
  EXPECT_FALSE(parsed("").private_data.jobs);
  EXPECT_FALSE(parsed("").private_data.usage);
  DaemonConfig jobs_only = parsed("[daemon]\nprivate_data = [\"jobs\"]\n");
  EXPECT_TRUE(jobs_only.private_data.jobs);
  EXPECT_FALSE(jobs_only.private_data.usage);
  EXPECT_FALSE(parsed("[daemon]\nprivate_data = []\n").private_data.jobs);
}

TEST(ConfigTest, EveryKey) {
  DaemonConfig config = parsed(R"(
[daemon]
admin_group = "gpuadmin"
private_data = ["jobs", "usage"]
sample_interval_s = 2.5
kill_grace_s = 0
default_time_limit = "2h"
max_time_limit = "1d"
device_isolation = "on"
slice_enforcement = "mps"
slice_overrun = "stop"

[scheduler]
policy = "backfill"
quota_gpus = 4
fair_share_half_life_h = 12
default_runtime_h = 0.5
backfill_depth = 50
max_queued_jobs_per_user = 200
runtime_history = 0
runtime_estimate_quantile = 0.5

[monitor]
http_max_connections = 100
http_max_connections_per_address = 100
job_mapping_dir = "/run/dcgm-job-map"
profiling = "off"

[quotas]
alice = 8
"bob.smith" = 0.5
)");
  EXPECT_EQ(config.admin_group, "gpuadmin");
  EXPECT_TRUE(config.private_data.jobs);
  EXPECT_TRUE(config.private_data.usage);
  EXPECT_EQ(config.sample_interval_s, 2.5);
  EXPECT_EQ(config.kill_grace_s, 0.0);
  EXPECT_EQ(config.default_time_limit_s, 7200.0);
  EXPECT_EQ(config.max_time_limit_s, 86400.0);
  EXPECT_EQ(config.device_isolation, DeviceIsolationMode::On);
  EXPECT_EQ(config.slice_enforcement, SliceEnforcement::Mps);
  EXPECT_EQ(config.slice_overrun, SliceOverrunPolicy::Stop);
  EXPECT_EQ(config.scheduler.policy, Policy::Backfill);
  EXPECT_EQ(config.scheduler.quota_gpus, 4.0);
  EXPECT_EQ(config.scheduler.fair_share_half_life_s, 12 * 3600.0);
  EXPECT_EQ(config.scheduler.default_runtime_s, 1800.0);
  EXPECT_EQ(config.scheduler.backfill_depth, 50u);
  EXPECT_EQ(config.max_queued_jobs_per_user, 200u);
  EXPECT_EQ(config.scheduler.runtime_history, 0u);
  EXPECT_EQ(config.scheduler.runtime_estimate_quantile, 0.5);
  EXPECT_EQ(config.http_max_connections, 100u);
  EXPECT_EQ(config.http_max_connections_per_address, 100u);
  EXPECT_EQ(config.job_mapping_dir, "/run/dcgm-job-map");
  EXPECT_FALSE(config.profiling);
  EXPECT_EQ(config.scheduler.user_quota_gpus,
            (std::map<std::string, double>{{"alice", 8}, {"bob.smith", 0.5}}));
}

TEST(ConfigTest, PoliciesByName) {
  EXPECT_EQ(parsed("[scheduler]\npolicy = \"fifo\"\n").scheduler.policy, Policy::Fifo);
  EXPECT_EQ(parsed("[scheduler]\npolicy = \"gpupool\"\n").scheduler.policy, Policy::Gpupool);
  EXPECT_EQ(error_of("[scheduler]\npolicy = \"lifo\"\n"),
            "gpupool.toml:2: 'policy' must be fifo, backfill or gpupool");
}

TEST(ConfigTest, DottedKeysAndInlineTablesCountAsTables) {
  DaemonConfig config = parsed("scheduler.policy = \"fifo\"\ndaemon = { kill_grace_s = 3 }\n");
  EXPECT_EQ(config.scheduler.policy, Policy::Fifo);
  EXPECT_EQ(config.kill_grace_s, 3.0);
}

TEST(ConfigTest, TimeLimitsAreDurationsOrSeconds) {
  const std::pair<std::string, double> cases[] = {
      {"\"30m\"", 1800},  {"\"2h\"", 7200}, {"\"1d\"", 86400}, {"\"90s\"", 90},
      {"\"1.5h\"", 5400}, {"\"45\"", 45},   {"600", 600},      {"0.5", 0.5}, {"\"1w\"", 604800},
  };
  for (const auto& [value, seconds] : cases) {
    EXPECT_EQ(parsed("[daemon]\ndefault_time_limit = " + value + "\n").default_time_limit_s, seconds)
        << value;
    EXPECT_EQ(parsed("[daemon]\nmax_time_limit = " + value + "\n").max_time_limit_s, seconds) << value;
  }
  for (const char* value : {"\"2 h\"", "\"0m\"", "\"-1h\"", "\"1y\"", "\"1e300d\"", "\"\"", "\"h\"", "\"inf\"", "\"nan\"",
                            "0", "-5", "inf", "nan", "true", "[1]", "1e300"}) {
    EXPECT_EQ(
        error_of(std::string("\n[daemon]\nmax_time_limit = ") + value + "\n"),
        "gpupool.toml:3: 'max_time_limit' must be a duration such as \"30m\", \"2h\" or \"1d\", or a number "
        "of seconds (at most 100 years)")
        << value;
  }
}

TEST(ConfigTest, TheDefaultTimeLimitMayNotExceedTheMaximum) {
  EXPECT_EQ(error_of("[daemon]\nmax_time_limit = \"1h\"\ndefault_time_limit = \"2h\"\n"),
            "gpupool.toml:3: 'default_time_limit' (7200 s) is longer than 'max_time_limit' (3600 s)");
  EXPECT_EQ(parsed("[daemon]\nmax_time_limit = \"1h\"\ndefault_time_limit = 3600\n").default_time_limit_s,
            3600);
}

TEST(ConfigTest, ValuesOutOfRangeOrOfTheWrongTypeNameTheKeyAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"[daemon]\nadmin_group = 5\n", "gpupool.toml:2: 'admin_group' must be a string"},
      {"[daemon]\nadmin_group = \"\"\n", "gpupool.toml:2: 'admin_group' must name a group"},
      {"[daemon]\nprivate_data = \"jobs\"\n",
       "gpupool.toml:2: 'private_data' must be a list of \"jobs\" and \"usage\", such as [\"jobs\", \"usage\"]"},
      {"[daemon]\nprivate_data = [\"jobs\", \"accounts\"]\n",
       "gpupool.toml:2: 'private_data' must be a list of \"jobs\" and \"usage\", such as [\"jobs\", \"usage\"]"},
      {"[daemon]\nsample_interval_s = \"1\"\n", "gpupool.toml:2: 'sample_interval_s' must be a number"},
      {"[daemon]\nsample_interval_s = 0\n",
       "gpupool.toml:2: 'sample_interval_s' must be a number from 0.05 to 60"},
      {"[daemon]\nsample_interval_s = 61\n",
       "gpupool.toml:2: 'sample_interval_s' must be a number from 0.05 to 60"},
      {"[daemon]\nsample_interval_s = 1e-6\n",
       "gpupool.toml:2: 'sample_interval_s' must be a number from 0.05 to 60"},
      {"[daemon]\nsample_interval_s = nan\n",
       "gpupool.toml:2: 'sample_interval_s' must be a number from 0.05 to 60"},
      {"[daemon]\nkill_grace_s = -1\n", "gpupool.toml:2: 'kill_grace_s' must be a number from 0 to 3600"},
      {"[daemon]\nkill_grace_s = inf\n", "gpupool.toml:2: 'kill_grace_s' must be a number from 0 to 3600"},
      {"[daemon]\nkill_grace_s = 1e300\n", "gpupool.toml:2: 'kill_grace_s' must be a number from 0 to 3600"},
      {"[daemon]\nkill_grace_s = false\n", "gpupool.toml:2: 'kill_grace_s' must be a number"},
      {"[daemon]\nmax_log_mb = 0\n",
       "gpupool.toml:2: 'max_log_mb' must be a whole number of MiB from 1 to 16777216 or \"unlimited\""},
      {"[daemon]\nmax_log_mb = \"lots\"\n",
       "gpupool.toml:2: 'max_log_mb' must be a whole number of MiB from 1 to 16777216 or \"unlimited\""},
      {"[daemon]\nsuspend_host_memory_mb = \"half\"\n",
       "gpupool.toml:2: 'suspend_host_memory_mb' must be a whole number of MiB from 0 to 16777216 or \"unlimited\""},
      {"[daemon]\nstate_reserve_mb = 1.5\n",
       "gpupool.toml:2: 'state_reserve_mb' must be a whole number of MiB from 0 to 16777216"},
      {"[daemon]\nstate_reserve_mb = 16777217\n",
       "gpupool.toml:2: 'state_reserve_mb' must be a whole number of MiB from 0 to 16777216"},
      {"[daemon]\ndevice_isolation = \"yes\"\n",
       "gpupool.toml:2: 'device_isolation' must be \"auto\", \"on\" or \"off\""},
      {"[daemon]\nslice_enforcement = \"on\"\n",
       "gpupool.toml:2: 'slice_enforcement' must be \"auto\", \"mps\", \"watch\" or \"off\""},
      {"[daemon]\nslice_enforcement = \"MPS\"\n",
       "gpupool.toml:2: 'slice_enforcement' must be \"auto\", \"mps\", \"watch\" or \"off\""},
      {"[daemon]\nslice_overrun = \"kill\"\n", "gpupool.toml:2: 'slice_overrun' must be \"warn\" or \"stop\""},
      {"[daemon]\nslice_overrun = 1\n", "gpupool.toml:2: 'slice_overrun' must be \"warn\" or \"stop\""},
      {"[monitor]\nquarantine = true\n", "gpupool.toml:2: 'quarantine' must be \"on\" or \"off\""},
      {"[monitor]\nprofiling = \"yes\"\n", "gpupool.toml:2: 'profiling' must be \"on\" or \"off\""},
      {"[monitor]\njob_mapping_dir = \"run/map\"\n",
       "gpupool.toml:2: 'job_mapping_dir' must be an absolute path (e.g. \"/run/dcgm-job-map\")"},
      {"[events]\non_event = \" \"\n",
       "gpupool.toml:2: 'on_event' must be a command line (a string) or a list of its words, the first not empty"},
      {"[events]\non_event = []\n",
       "gpupool.toml:2: 'on_event' must be a command line (a string) or a list of its words, the first not empty"},
      {"[events]\non_event = [\"mail\", 3]\n",
       "gpupool.toml:2: 'on_event' must be a command line (a string) or a list of its words, the first not empty"},
      {"[events]\non_event_kinds = [\"job_done\"]\n",
       "gpupool.toml:2: 'on_event_kinds': unknown event 'job_done' (one of job_started, job_ended, job_failed, "
       "job_cancelled, job_requeued, job_idle, job_suspended, job_resumed, job_suspend_failed, slice_overrun, "
       "gpu_quarantined, gpu_returned, gpu_drained, gpu_resumed, queue_drained, queue_resumed)"},
      {"[events]\nkeep = \"forever\"\n",
       "gpupool.toml:2: 'keep' must be a duration such as \"30m\", \"2h\" or \"1d\", or a number of seconds (at most 100 years)"},
      {"[events]\nkeep_max = 0\n", "gpupool.toml:2: 'keep_max' must be a whole number from 1 to 100000000"},
      {"[daemon]\ndevice_isolation = true\n",
       "gpupool.toml:2: 'device_isolation' must be \"auto\", \"on\" or \"off\""},
      {"[daemon]\ndevice_isolation = \"On\"\n",
       "gpupool.toml:2: 'device_isolation' must be \"auto\", \"on\" or \"off\""},
      {"[scheduler]\npolicy = 1\n", "gpupool.toml:2: 'policy' must be a string"},
      {"[scheduler]\nquota_gpus = \"4\"\n", "gpupool.toml:2: 'quota_gpus' must be a number"},
      {"[scheduler]\nquota_gpus = 0\n", "gpupool.toml:2: 'quota_gpus' must be a number greater than 0"},
      {"[scheduler]\nquota_gpus = -inf\n", "gpupool.toml:2: 'quota_gpus' must be a number greater than 0"},
      {"[scheduler]\nfair_share_half_life_h = 0\n",
       "gpupool.toml:2: 'fair_share_half_life_h' must be a number greater than 0"},
      {"[scheduler]\ndefault_runtime_h = -1\n",
       "gpupool.toml:2: 'default_runtime_h' must be a number greater than 0"},
      {"[scheduler]\nruntime_history = -1\n",
       "gpupool.toml:2: 'runtime_history' must be a whole number from 0 to 10000"},
      {"[scheduler]\nruntime_estimate_quantile = 0\n",
       "gpupool.toml:2: 'runtime_estimate_quantile' must be a number above 0 and at most 1"},
      {"[scheduler]\nruntime_estimate_quantile = nan\n",
       "gpupool.toml:2: 'runtime_estimate_quantile' must be a number above 0 and at most 1"},
      {"[scheduler]\nbackfill_depth = 0\n",
       "gpupool.toml:2: 'backfill_depth' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nbackfill_depth = 2.5\n",
       "gpupool.toml:2: 'backfill_depth' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nbackfill_depth = \"9\"\n",
       "gpupool.toml:2: 'backfill_depth' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nbackfill_depth = 9223372036854775807\n",
       "gpupool.toml:2: 'backfill_depth' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nfair_share_half_life_h = 1e300\n",
       "gpupool.toml:2: 'fair_share_half_life_h' is too large (at most 100 years)"},
      {"[monitor]\nhistory = \"30d\"\n[daemon]\nsample_interval_s = 0.1\n",
       "gpupool.toml:2: 'history' (2592000 s) would keep more than 1000000 samples per GPU at 'sample_interval_s' 0.1"},
      {"[monitor]\nhttp_max_connections = 0\n",
       "gpupool.toml:2: 'http_max_connections' must be a whole number from 1 to 512"},
      {"[monitor]\nhttp_max_connections_per_address = 513\n",
       "gpupool.toml:2: 'http_max_connections_per_address' must be a whole number from 1 to 512"},
      {"[scheduler]\nmax_queued_jobs_per_user = 0\n",
       "gpupool.toml:2: 'max_queued_jobs_per_user' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nmax_queued_jobs_per_user = -5\n",
       "gpupool.toml:2: 'max_queued_jobs_per_user' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nmax_queued_jobs_per_user = 1e4\n",
       "gpupool.toml:2: 'max_queued_jobs_per_user' must be a whole number from 1 to 1000000"},
      {"[scheduler]\nmax_queued_jobs_per_user = \"100\"\n",
       "gpupool.toml:2: 'max_queued_jobs_per_user' must be a whole number from 1 to 1000000"},
      {"[quotas]\nalice = 2\ncarol = 0\n", "gpupool.toml:3: 'carol' must be a number greater than 0"},
      {"[quotas]\ndave = \"x\"\n", "gpupool.toml:2: 'dave' must be a number"},
      {"[quotas.erin]\ngpus = 2\n", "gpupool.toml:1: 'erin' must be a number"},
      {"daemon = 3\n", "gpupool.toml:1: 'daemon' must be a table ([daemon])"},
  };
  for (const auto& [text, message] : cases) EXPECT_EQ(error_of(text), message) << text;
}

TEST(ConfigTest, UnknownKeysAndTablesAreErrorsNotIgnored) {
  EXPECT_EQ(error_of("# tuning\n\n[scheduler]\npolicy = \"fifo\"\npolcy = \"fifo\"\n"),
            "gpupool.toml:5: unknown key 'polcy' in [scheduler] (known: policy, quota_gpus, "
            "fair_share_half_life_h, default_runtime_h, backfill_depth, max_queued_jobs_per_user, "
            "runtime_history, runtime_estimate_quantile, preempt, backfill)");
  EXPECT_EQ(
      error_of("[daemon]\nadmin = \"wheel\"\n"),
      "gpupool.toml:2: unknown key 'admin' in [daemon] (known: admin_group, private_data, sample_interval_s, kill_grace_s, "
      "default_time_limit, max_time_limit, device_isolation, slice_enforcement, slice_overrun, max_log_mb, "
      "state_reserve_mb, idle_suspend_after, suspend_host_memory_mb)");
  EXPECT_EQ(error_of("[daemon]\n\n[schedular]\npolicy = \"fifo\"\n"),
            "gpupool.toml:3: unknown table 'schedular' (known: daemon, scheduler, quotas, monitor, events)");
  EXPECT_EQ(error_of("policy = \"fifo\"\n"),
            "gpupool.toml:1: unknown key 'policy' outside a table (known tables: daemon, scheduler, quotas, monitor, events)");
  EXPECT_EQ(
      error_of("\"two\\nlines\" = 1\n"),
      "gpupool.toml:1: unknown key 'two\\nlines' outside a table (known tables: daemon, scheduler, quotas, monitor, events)");
  EXPECT_EQ(error_of("[scheduler.extra]\nx = 1\n"),
            "gpupool.toml:1: unknown key 'extra' in [scheduler] (known: policy, quota_gpus, "
            "fair_share_half_life_h, default_runtime_h, backfill_depth, max_queued_jobs_per_user, "
            "runtime_history, runtime_estimate_quantile, preempt, backfill)");
}

TEST(ConfigTest, SyntaxErrorsGiveTheLine) {
  std::string message = error_of("[daemon]\nkill_grace_s = 3\nsample_interval_s = \n");
  EXPECT_TRUE(message.starts_with("gpupool.toml:3: ")) << message;
  message = error_of("[daemon]\n[daemon]\n");
  EXPECT_TRUE(message.starts_with("gpupool.toml:2: ")) << message;
  message = error_of("x = fa\n");
  EXPECT_EQ(message, "gpupool.toml:1: Error while parsing boolean: expected 'false', saw 'fa\\n'");
  message = error_of("[scheduler]\npolicy = \"fifo\"\npolicy = \"gpupool\"\n");
  EXPECT_TRUE(message.starts_with("gpupool.toml:3: ")) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

std::string text_of_file(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ConfigTest, TheHooksCommandIsAShellLineOrItsWords) {
  DaemonConfig line = parsed("[events]\non_event = \"mail -s gpupool lab < /dev/null\"\non_event_kinds = [\"job_failed\"]\n");
  EXPECT_EQ(line.events.on_event, (std::vector<std::string>{"/bin/sh", "-c", "mail -s gpupool lab < /dev/null"}));
  EXPECT_EQ(line.events.on_event_kinds, std::vector<EventKind>{EventKind::JobFailed});
  DaemonConfig words = parsed("[events]\non_event = [\"/usr/bin/logger\", \"-t\", \"gpupool\"]\non_event_timeout = \"5s\"\n");
  EXPECT_EQ(words.events.on_event, (std::vector<std::string>{"/usr/bin/logger", "-t", "gpupool"}));
  EXPECT_EQ(words.events.on_event_timeout_s, 5);
}

// The shipped example: as it is, all defaults; with every key uncommented, still valid. The
// documentation shows the same text.
TEST(ConfigTest, TheShippedExample) {
  const std::string source_dir = GPUPOOL_TEST_DATA_DIR "/../..";
  const std::string example = text_of_file(source_dir + "/packaging/gpupool.toml");
  DaemonConfig defaults = parsed(example);
  EXPECT_FALSE(defaults.admin_group);
  EXPECT_EQ(defaults.scheduler.policy, Policy::Gpupool);
  EXPECT_TRUE(defaults.scheduler.user_quota_gpus.empty());

  std::string uncommented;
  for (const std::string& line : split(example, '\n')) {
    uncommented +=
        (line.starts_with("#") && line.find(" = ") != std::string::npos ? line.substr(1) : line) + "\n";
  }
  DaemonConfig every_key = parsed(uncommented);
  EXPECT_EQ(every_key.admin_group, "gpuadmin");
  EXPECT_EQ(every_key.sample_interval_s, 1.0);
  EXPECT_TRUE(every_key.quarantine.enabled);
  EXPECT_TRUE(every_key.profiling);
  EXPECT_EQ(every_key.quarantine.clean_window_s, 1800);
  EXPECT_EQ(every_key.events.keep_s, 30 * 86400);
  EXPECT_EQ(every_key.events.on_event, (std::vector<std::string>{"/bin/sh", "-c", "/usr/local/sbin/gpupool-notify"}));
  EXPECT_EQ(every_key.events.on_event_kinds.size(), 5u);
  EXPECT_EQ(every_key.events.on_event_timeout_s, 30);
  EXPECT_TRUE(defaults.events.on_event.empty());
  EXPECT_EQ(every_key.kill_grace_s, 10.0);
  EXPECT_EQ(every_key.default_time_limit_s, 86400.0);
  EXPECT_EQ(every_key.max_time_limit_s, 7 * 86400.0);
  EXPECT_EQ(every_key.device_isolation, DeviceIsolationMode::Auto);
  EXPECT_EQ(every_key.scheduler.quota_gpus, 4.0);
  EXPECT_EQ(every_key.scheduler.fair_share_half_life_s, defaults.scheduler.fair_share_half_life_s);
  EXPECT_EQ(every_key.scheduler.default_runtime_s, defaults.scheduler.default_runtime_s);
  EXPECT_EQ(every_key.scheduler.backfill_depth, defaults.scheduler.backfill_depth);
  EXPECT_EQ(every_key.max_queued_jobs_per_user, defaults.max_queued_jobs_per_user);
  EXPECT_EQ(every_key.http_max_connections, defaults.http_max_connections);
  EXPECT_EQ(every_key.http_max_connections_per_address, defaults.http_max_connections_per_address);
  EXPECT_EQ(every_key.scheduler.user_quota_gpus.size(), 2u);

  EXPECT_NE(text_of_file(source_dir + "/docs/configuration.md").find("```toml\n" + example + "```"),
            std::string::npos)
      << "docs/configuration.md must show packaging/gpupool.toml as it is";
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-config-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(ConfigFileTest, AMissingFileIsTheDefaultsOnlyWhenNotNamed) {
  const std::string path = dir_ + "/gpupool.toml";
  auto defaults = load_config(path, false);
  ASSERT_TRUE(defaults.ok()) << defaults.error().message;
  EXPECT_EQ(defaults->kill_grace_s, 10.0);
  auto named = load_config(path, true);
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.error().message, "cannot read " + path + ": No such file or directory");
}

TEST_F(ConfigFileTest, ReadsTheFileAndNamesItInErrors) {
  const std::string path = dir_ + "/gpupool.toml";
  std::ofstream(path) << "[scheduler]\nquota_gpus = 2\n";
  auto config = load_config(path, true);
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->scheduler.quota_gpus, 2.0);

  std::ofstream(path) << "[scheduler]\nquota = 2\n";
  auto bad = load_config(path, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.error().message.starts_with(path + ":2: unknown key 'quota' in [scheduler]"))
      << bad.error().message;
}

TEST_F(ConfigFileTest, ADirectoryIsNotAConfiguration) {
  auto config = load_config(dir_, false);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.error().message, "cannot read " + dir_ + ": it is a directory");
}

}  // namespace
}  // namespace gpupool
