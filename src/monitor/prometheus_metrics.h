// /metrics: the Prometheus text format (version 0.0.4). GPU series carry dcgm-exporter's names
// and labels, so Grafana boards made for dcgm-exporter work unchanged; gpupool's own series
// start with gpupool_. Pure: everything to print comes in a MetricsView.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "jobs/job.h"
#include "machine/gpu.h"
#include "monitor/sample_history.h"
#include "monitor/usage_accounting.h"
#include "sched/slice_watch.h"

namespace gpupool {

// A Prometheus histogram: a count per bucket (not cumulative; the last one is +Inf).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Who holds a GPU through gpupool.
struct GpuHolder {
  JobId job = 0;
  std::string user;
};

struct MetricsGpu {
  const Gpu* gpu = nullptr;  // identity: index, UUID, PCI bus id, name, minor number
  std::optional<GpuSample> sample;
  std::vector<GpuHolder> holders;
  bool leased = false;         // an exclusive lease holds it (a job's, or one taken without the daemon)
  uint64_t leased_mib = 0;     // memory held by slices
  bool outside_busy = false;   // processes gpupool did not start use it
  // Its MIG devices as last sampled, with their GPU instances' activity.
  std::vector<MigDevice> mig_devices = {};
  bool quarantined = false; // kept from new jobs for its health (health/quarantine.h)
  // The last critical XID the driver reported for it since the daemon started (0: none); nullopt
  // where nobody watches its XID events.
  std::optional<uint64_t> last_xid = std::nullopt;
  // Memory in use that no listed process holds (health/quarantine.h); nullopt where not told.
  std::optional<uint64_t> unattributed_mib = std::nullopt;
};

struct MetricsJob {
  JobId id = 0;
  std::string user;
  UsageTally usage;  // so far
  bool idle = false;
  std::optional<SliceUse> slice;  // a watched slice job's worst GPU (sched/slice_watch.h)
};

// The state file system, which holds the database and the job logs.
struct StateSpaceView {
  uint64_t free_bytes = 0;
  uint64_t reserve_bytes = 0;  // job output stops below it
  size_t unsaved_jobs = 0;     // changes the database refused, being retried
};

struct MetricsView {
  std::string hostname;
  std::vector<MetricsGpu> gpus;
  unsigned queued = 0, held = 0, running = 0, suspended = 0;
  uint64_t suspended_host_mib = 0;  // the GPU memory suspended jobs hold in host memory
  std::vector<MetricsJob> running_jobs;
  std::map<std::string, UsageTally> user_usage;
  // private_data's usage: per-user and per-job series are left out (the idle count stays).
  bool withhold_usage = false;
  const Histogram* dispatch_latency = nullptr;
  const Histogram* queue_wait = nullptr;
  std::optional<double> sample_duration_s;  // of the latest NVML sample
  std::optional<StateSpaceView> state_space;
};

std::string render_metrics(const MetricsView& view);

// A label value as the text format quotes it (backslash, double quote and newline escaped).
std::string escape_label_value(std::string_view value);

}  // namespace gpupool
