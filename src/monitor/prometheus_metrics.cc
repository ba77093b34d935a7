#include "monitor/prometheus_metrics.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "machine/mig_profile.h"

namespace gpupool {
namespace {

using Buffer = fmt::memory_buffer;

void header(Buffer& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A sample value: shortest round-trip form; the text format spells infinities +Inf/-Inf.
std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", value);
}

// dcgm-exporter's labels of a GPU: gpu, UUID, pci_bus_id, device, modelName, Hostname.
std::string identity_labels(const Gpu& gpu, const std::string& hostname) {
  return fmt::format(R"(gpu="{}",UUID="{}",pci_bus_id="{}",device="nvidia{}",modelName="{}",Hostname="{}")",
                     gpu.index, escape_label_value(gpu.uuid), escape_label_value(gpu.pci_bus_id),
                     gpu.minor_number.value_or(gpu.index), escape_label_value(gpu.name), escape_label_value(hostname));
}

// The identity labels, then the job and user holding the GPU through gpupool, when one does.
std::string gpu_labels(const MetricsGpu& entry, const std::string& hostname) {
  std::string labels = identity_labels(*entry.gpu, hostname);
  if (entry.holders.empty()) return labels;
  // Slices of one GPU may belong to several jobs: their numbers and users, comma-separated.
  std::vector<JobId> jobs;
  std::vector<std::string> users;
  for (const GpuHolder& holder : entry.holders) {
    jobs.push_back(holder.job);
    if (std::find(users.begin(), users.end(), holder.user) == users.end()) users.push_back(holder.user);
  }
  return labels + fmt::format(R"(,job_id="{}",user="{}")", fmt::join(jobs, ","),
                              escape_label_value(fmt::format("{}", fmt::join(users, ","))));
}

// The sampled readings' values as the text format writes them, in the table's order.
std::vector<std::optional<double>> reading_values(const GpuSample& sample) {
  std::vector<std::optional<double>> values;
  for_each_sampled_reading(sample, [&](const ReadingInfo&, const auto& value) {
    values.push_back(value ? std::optional<double>(static_cast<double>(*value)) : std::nullopt);
  });
  return values;
}

// A GPU instance's series of one activity reading: the GPU's identity labels and, as
// dcgm-exporter labels a MIG GPU's profiling metrics, GPU_I_PROFILE and GPU_I_ID. One series per
// GPU instance, however many compute instances (MIG devices) it holds.
void put_gpu_instance_series(Buffer& out, const ReadingInfo& reading, const MetricsGpu& entry,
                             const std::string& hostname, bool& any) {
  std::vector<unsigned> done;
  for (const MigDevice& device : entry.mig_devices) {
    if (std::find(done.begin(), done.end(), device.gpu_instance_id) != done.end()) continue;
    done.push_back(device.gpu_instance_id);
    std::optional<double> value = mig_activity_reading(device.activity, reading.key);
    if (!value) continue;
    if (!any) header(out, reading.metric, "gauge", reading.help);
    any = true;
    std::string profile = mig_profile_name(device.gpu_slices, device.gpu_slices, device.memory_mib,
                                           entry.gpu->memory_total_mib.value_or(0));
    fmt::format_to(std::back_inserter(out), "{}{{{},GPU_I_PROFILE=\"{}\",GPU_I_ID=\"{}\"}} {}\n", reading.metric,
                   identity_labels(*entry.gpu, hostname), escape_label_value(profile), device.gpu_instance_id,
                   number(*value));
  }
}

std::vector<ReadingInfo> sampled_readings() {
  std::vector<ReadingInfo> readings;
  for_each_sampled_reading(GpuSample{}, [&](const ReadingInfo& reading, const auto&) { readings.push_back(reading); });
  return readings;
}

void histogram(Buffer& out, std::string_view name, std::string_view help, const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"{}\"}} {}\n", name, number(h.bounds()[i]), cumulative);
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, h.count(),
                 name, number(h.sum()), name, h.count());
}

// A series of each user's or running job's usage; absent where value() is nullopt (never measured).
struct UsageMetric {
  const char* name;
  const char* help;
  std::optional<double> (*value)(const UsageTally&);
};

std::optional<double> measured_sm_active(const UsageTally& usage) {
  if (usage.sm_measured_gpu_seconds <= 0) return std::nullopt;
  return usage.sm_active_gpu_seconds;
}

std::optional<double> measured_energy(const UsageTally& usage) {
  if (usage.energy_measured_gpu_seconds <= 0) return std::nullopt;
  return usage.energy_j;
}

const UsageMetric kUserMetrics[] = {
    {"gpupool_user_gpu_seconds_total", "GPU time of each user's jobs (GPU-seconds; a slice counts its share of the GPU).",
     [](const UsageTally& u) { return std::optional(u.gpu_seconds); }},
    {"gpupool_user_sm_active_gpu_seconds_total",
     "GPU time each user's jobs kept the SMs busy (GPU-seconds weighted by SM activity).", measured_sm_active},
    {"gpupool_user_energy_joules_total", "Energy of each user's jobs (their part of their GPUs', in J).",
     measured_energy},
};

const UsageMetric kJobMetrics[] = {
    {"gpupool_job_gpu_seconds", "GPU time of each running job so far (GPU-seconds).",
     [](const UsageTally& u) { return std::optional(u.gpu_seconds); }},
    {"gpupool_job_mean_utilization", "Mean utilisation of a running job's GPUs (in %).",
     [](const UsageTally& u) { return u.mean_utilization(); }},
    {"gpupool_job_sm_active_gpu_seconds",
     "GPU time a running job kept the SMs busy so far (GPU-seconds weighted by SM activity).", measured_sm_active},
    {"gpupool_job_energy_joules", "Energy of a running job so far (its part of its GPUs', in J).", measured_energy},
    {"gpupool_job_peak_memory_bytes", "The most GPU memory a running job has used on one of its GPUs.",
     [](const UsageTally& u) {
       return u.peak_memory_mib ? std::optional(static_cast<double>(*u.peak_memory_mib) * 1024 * 1024) : std::nullopt;
     }},
};

// The slice watchdog's view of each watched slice job: what its processes use on the GPU where
// they use most of its slice, and whether that is past the slice.
void render_slice_uses(Buffer& out, const std::vector<MetricsJob>& jobs) {
  auto put = std::back_inserter(out);
  if (std::none_of(jobs.begin(), jobs.end(), [](const MetricsJob& j) { return j.slice.has_value(); })) return;
  header(out, "gpupool_job_slice_used_bytes", "gauge",
         "GPU memory a running slice job's processes use on the GPU where they use most of its slice.");
  for (const MetricsJob& job : jobs) {
    if (!job.slice) continue;
    fmt::format_to(put, "gpupool_job_slice_used_bytes{{job_id=\"{}\",user=\"{}\",gpu=\"{}\"}} {}\n", job.id,
                   escape_label_value(job.user), job.slice->gpu, job.slice->used_mib << 20);
  }
  header(out, "gpupool_job_slice_overrun", "gauge", "1 while a running slice job uses more GPU memory than its slice.");
  for (const MetricsJob& job : jobs) {
    if (!job.slice) continue;
    fmt::format_to(put, "gpupool_job_slice_overrun{{job_id=\"{}\",user=\"{}\"}} {}\n", job.id,
                   escape_label_value(job.user), job.slice->overrun() ? 1 : 0);
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // le: bound >= value
  ++counts_[static_cast<size_t>(bucket - bounds_.begin())];
  sum_ += value;
  ++count_;
}

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    if (c == '\\') escaped += "\\\\";
    else if (c == '"') escaped += "\\\"";
    else if (c == '\n') escaped += "\\n";
    else escaped += c;
  }
  return escaped;
}

std::string render_metrics(const MetricsView& view) {
  Buffer out;
  auto put = std::back_inserter(out);
  std::vector<std::string> labels;
  for (const MetricsGpu& gpu : view.gpus) labels.push_back(gpu_labels(gpu, view.hostname));

  std::vector<std::vector<std::optional<double>>> values;
  for (const MetricsGpu& gpu : view.gpus) {
    values.push_back(gpu.sample ? reading_values(*gpu.sample) : std::vector<std::optional<double>>());
  }
  // A GPU that does not report a value has no series; a metric no GPU reports is left out.
  std::vector<ReadingInfo> readings = sampled_readings();
  for (size_t r = 0; r < readings.size(); ++r) {
    bool any = false;
    for (size_t i = 0; i < view.gpus.size(); ++i) {
      if (values[i].empty() || !values[i][r]) continue;
      if (!any) header(out, readings[r].metric, "gauge", readings[r].help);
      any = true;
      fmt::format_to(put, "{}{{{}}} {}\n", readings[r].metric, labels[i], number(*values[i][r]));
    }
    for (const MetricsGpu& gpu : view.gpus) put_gpu_instance_series(out, readings[r], gpu, view.hostname, any);
  }

  bool any_xid = false;
  for (size_t i = 0; i < view.gpus.size(); ++i) {
    if (!view.gpus[i].last_xid) continue;
    if (!any_xid) header(out, "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.");
    any_xid = true;
    fmt::format_to(put, "DCGM_FI_DEV_XID_ERRORS{{{}}} {}\n", labels[i], *view.gpus[i].last_xid);
  }

  header(out, "gpupool_jobs", "gauge", "Jobs in gpupoold's queue, by state.");
  fmt::format_to(put, "gpupool_jobs{{state=\"queued\"}} {}\ngpupool_jobs{{state=\"held\"}} {}\n"
                      "gpupool_jobs{{state=\"running\"}} {}\ngpupool_jobs{{state=\"suspended\"}} {}\n",
                 view.queued, view.held, view.running, view.suspended);
  header(out, "gpupool_suspended_host_memory_bytes", "gauge",
         "GPU memory of suspended jobs, held in host memory (suspend_host_memory_mb bounds it).");
  fmt::format_to(put, "gpupool_suspended_host_memory_bytes {}\n", view.suspended_host_mib << 20);

  struct PoolMetric {
    const char* name;
    const char* help;
    double (*value)(const MetricsGpu&);
  };
  const PoolMetric pool_metrics[] = {
      {"gpupool_gpu_leased", "1 while an exclusive gpupool lease holds the GPU.",
       [](const MetricsGpu& g) { return g.leased ? 1.0 : 0.0; }},
      {"gpupool_gpu_leased_memory_bytes", "GPU memory held by gpupool slices.",
       [](const MetricsGpu& g) { return static_cast<double>(g.leased_mib) * 1024 * 1024; }},
      {"gpupool_gpu_outside_busy", "1 while processes gpupool did not start use the GPU.",
       [](const MetricsGpu& g) { return g.outside_busy ? 1.0 : 0.0; }},
      {"gpupool_gpu_quarantined",
       "1 while gpupool keeps new jobs off the GPU for its health (a critical XID, uncorrectable ECC errors, a "
       "pending or failed row remap).",
       [](const MetricsGpu& g) { return g.quarantined ? 1.0 : 0.0; }},
  };
  for (const PoolMetric& metric : pool_metrics) {
    if (view.gpus.empty()) break;
    header(out, metric.name, "gauge", metric.help);
    for (const MetricsGpu& gpu : view.gpus) {
      fmt::format_to(put, "{}{{gpu=\"{}\",UUID=\"{}\"}} {}\n", metric.name, gpu.gpu->index,
                     escape_label_value(gpu.gpu->uuid), number(metric.value(gpu)));
    }
  }

  bool any_unattributed = false;
  for (const MetricsGpu& gpu : view.gpus) {
    if (!gpu.unattributed_mib) continue;
    if (!any_unattributed) {
      header(out, "gpupool_gpu_unattributed_memory_bytes", "gauge",
             "GPU memory in use that no listed process holds: what ended processes left behind (or processes "
             "the daemon cannot see).");
    }
    any_unattributed = true;
    fmt::format_to(put, "gpupool_gpu_unattributed_memory_bytes{{gpu=\"{}\",UUID=\"{}\"}} {}\n", gpu.gpu->index,
                   escape_label_value(gpu.gpu->uuid), *gpu.unattributed_mib << 20);
  }

  if (!view.withhold_usage) {
    for (const UsageMetric& metric : kUserMetrics) {
      bool any = false;
      for (const auto& [user, usage] : view.user_usage) {
        std::optional<double> value = metric.value(usage);
        if (!value) continue;
        if (!any) header(out, metric.name, "counter", metric.help);
        any = true;
        fmt::format_to(put, "{}{{user=\"{}\"}} {}\n", metric.name, escape_label_value(user), number(*value));
      }
    }
  }

  if (!view.running_jobs.empty() && !view.withhold_usage) {
    for (const UsageMetric& metric : kJobMetrics) {
      bool any = false;
      for (const MetricsJob& job : view.running_jobs) {
        std::optional<double> value = metric.value(job.usage);
        if (!value) continue;
        if (!any) header(out, metric.name, "gauge", metric.help);
        any = true;
        fmt::format_to(put, "{}{{job_id=\"{}\",user=\"{}\"}} {}\n", metric.name, job.id,
                       escape_label_value(job.user), number(*value));
      }
    }
    header(out, "gpupool_job_idle", "gauge",
           "1 while a running job has held its GPUs at about 0 % utilisation for longer than idle_flag_after.");
    for (const MetricsJob& job : view.running_jobs) {
      fmt::format_to(put, "gpupool_job_idle{{job_id=\"{}\",user=\"{}\"}} {}\n", job.id, escape_label_value(job.user),
                     job.idle ? 1 : 0);
    }
  }
  render_slice_uses(out, view.running_jobs);
  size_t idle = static_cast<size_t>(
      std::count_if(view.running_jobs.begin(), view.running_jobs.end(), [](const MetricsJob& j) { return j.idle; }));
  header(out, "gpupool_idle_jobs", "gauge", "Running jobs flagged idle.");
  fmt::format_to(put, "gpupool_idle_jobs {}\n", idle);

  if (view.dispatch_latency != nullptr) {
    histogram(out, "gpupool_dispatch_latency_seconds",
              "Time gpupoold took to start a job the scheduler chose (leases, record, supervisor).",
              *view.dispatch_latency);
  }
  if (view.queue_wait != nullptr) {
    histogram(out, "gpupool_queue_wait_seconds", "Time from a job's submission to its start.", *view.queue_wait);
  }
  if (view.sample_duration_s) {
    header(out, "gpupool_sample_duration_seconds", "gauge", "Time the latest NVML sample of every GPU took.");
    fmt::format_to(put, "gpupool_sample_duration_seconds {}\n", number(*view.sample_duration_s));
  }
  if (view.state_space) {
    header(out, "gpupool_state_free_bytes", "gauge",
           "Free space on the file system of the state directory (database and job logs).");
    fmt::format_to(put, "gpupool_state_free_bytes {}\n", view.state_space->free_bytes);
    header(out, "gpupool_state_reserve_bytes", "gauge",
           "Free space kept for the database (state_reserve_mb): job output stops below it.");
    fmt::format_to(put, "gpupool_state_reserve_bytes {}\n", view.state_space->reserve_bytes);
    header(out, "gpupool_unsaved_jobs", "gauge",
           "Jobs whose latest change (such as their end) the database refused; the daemon retries.");
    fmt::format_to(put, "gpupool_unsaved_jobs {}\n", view.state_space->unsaved_jobs);
  }
  return fmt::to_string(out);
}

}  // namespace gpupool
