// gpupoold's configuration: a TOML file, /etc/gpupool/gpupool.toml unless GPUPOOL_CONFIG or
// `gpupoold --config` names another. Every key is optional; a missing file means defaults.
// Unknown keys and wrong types are errors with the file's line number, so a typo never
// silently leaves a limit unset. docs/configuration.md documents every key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "health/quarantine.h"
#include "jobs/event.h"
#include "jobs/private_data.h"
#include "sched/slice_watch.h"
#include "sched/scheduler.h"

namespace gpupool {

// dcgm-exporter's port, so that scrape configurations written for it find gpupoold.
inline constexpr const char* kDefaultHttpAddress = "127.0.0.1:9400";

// "HOST:PORT" (IPv4 address or name, port 0 to 65535; 0: any free port) split in two; nullopt when
// malformed.
std::optional<std::pair<std::string, int>> split_http_address(std::string_view address);

// [daemon] device_isolation (docs/daemon.md, "Device isolation").
enum class DeviceIsolationMode {
  Auto,  // isolate where the kernel allows it; otherwise say why once and run without
  On,    // refuse to start without it
  Off,
};

// [events] (docs/events.md): how long the event stream is kept, and the hook run for each event.
struct EventsConfig {
  double keep_s = 30 * 86400;     // keep: events older than this are trimmed
  uint64_t keep_max = 1'000'000;  // keep_max: and all but the newest this many
  // on_event: the program run for each event; a string in the file is run by /bin/sh -c. Empty: none.
  std::vector<std::string> on_event;
  std::vector<EventKind> on_event_kinds;  // empty: every kind
  double on_event_timeout_s = 30;         // past it the hook is killed
};

struct DaemonConfig {
  // [daemon]
  std::optional<std::string> admin_group;  // members may act on anyone's job, drain, resume
  PrivateData private_data;                // what users may not see of one another's jobs
  double sample_interval_s = 1.0;          // how often NVML is read for outside processes
  double kill_grace_s = 10.0;              // between SIGTERM and SIGKILL (cancel, time limit)
  std::optional<double> default_time_limit_s;  // for jobs submitted without --time
  std::optional<double> max_time_limit_s;      // submissions asking for more are refused
  DeviceIsolationMode device_isolation = DeviceIsolationMode::Auto;
  // Memory slices: how they are held to their size, and what happens to a job past its slice
  // (lease/slice_watch.h, docs/leases.md).
  SliceEnforcement slice_enforcement = SliceEnforcement::Auto;
  SliceOverrunPolicy slice_overrun = SliceOverrunPolicy::Warn;
  // Room on the state file system, which holds the job logs beside the database (state_space.h).
  // max_log_mb: each job's output, stdout and stderr together; nullopt ("unlimited"): none.
  std::optional<uint64_t> max_log_bytes = uint64_t{4096} << 20;
  // state_reserve_mb: job output stops while less is free, so the database can still grow.
  uint64_t state_reserve_bytes = uint64_t{512} << 20;
  // suspend_host_memory_mb: the GPU memory suspended jobs may hold in host memory together
  // (docs/suspend.md); a suspend past it is refused. nullopt ("unlimited"): the host's memory
  // is the bound, and a checkpoint that does not fit fails and is undone.
  std::optional<uint64_t> suspend_host_memory_mib;
  // idle_suspend_after: a job flagged idle this long is suspended while other jobs wait for
  // GPUs, and resumed behind them (docs/suspend.md). nullopt: never.
  std::optional<double> idle_suspend_after_s;
  // [scheduler]: policy, fair_share_half_life_h, default_runtime_h, backfill_depth, quota_gpus;
  // [quotas]: user = GPUs, into scheduler.user_quota_gpus
  SchedulerConfig scheduler;
  // [scheduler] max_queued_jobs_per_user: the daemon refuses a submission beyond it (queued and
  // held jobs count, running ones do not), so one user's runaway loop cannot bloat the queue.
  size_t max_queued_jobs_per_user = 10'000;
  // [scheduler] preempt = "suspend": a job waiting for whole GPUs that jobs of lower priority hold
  // has them suspended, to resume behind it (docs/suspend.md); "off" (the default): it waits.
  bool preempt_by_suspending = false;
  // [monitor] (docs/monitoring.md)
  std::optional<std::string> http = std::string(kDefaultHttpAddress);  // HOST:PORT; nullopt: no HTTP
  // HTTP connections kept open, in all and from one client address; more are closed at once. A
  // reverse proxy in front makes every client one address: raise the second to the first then.
  size_t http_max_connections = 64;
  size_t http_max_connections_per_address = 8;
  double history_s = 3600;          // how far back the samples go (charts, /api/history)
  double idle_flag_after_s = 1800;  // a job at about 0 % utilisation this long is flagged idle
  // Where dcgm-exporter's HPC job-mapping files are kept (monitor/job_mapping.h); empty: none.
  std::string job_mapping_dir;
  // [monitor] profiling: the GPM activity counters (DCGM_FI_PROF_*) sampled where GPUs have them.
  bool profiling = true;
  // [monitor] quarantine, quarantine_clean_window: GPUs whose health fails get no new jobs.
  QuarantinePolicy quarantine;
  EventsConfig events;
};

inline constexpr const char* kDefaultConfigPath = "/etc/gpupool/gpupool.toml";

// Parses TOML text; `source` names it in errors ("gpupool.toml:7: unknown key 'polcy' in
// [scheduler]").
Result<DaemonConfig> parse_config(std::string_view text, const std::string& source);

// Reads the file; a missing file at the default path gives the defaults, a missing file that
// was named explicitly is an error.
Result<DaemonConfig> load_config(const std::string& path, bool named_explicitly);

}  // namespace gpupool
