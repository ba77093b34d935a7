// The daemon's monitoring: a sampler thread reads every GPU through the backend once per
// sample interval (never on the event loop), keeps the samples in a ring buffer, accounts GPU
// time to the running jobs and hands each reading to the loop (which looks for GPUs taken
// outside gpupool). The loop publishes its view of the queue after each event; the HTTP
// threads read both. One lock guards what the threads share; the usage store is the loop's.
// docs/monitoring.md describes the metrics and the JSON API.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_backend.h"
#include "jobs/job.h"
#include "jobs/private_data.h"
#include "machine/gpu.h"
#include "monitor/job_mapping.h"
#include "monitor/monitor_store.h"
#include "monitor/prometheus_metrics.h"
#include "monitor/sample_history.h"
#include "monitor/usage_accounting.h"
#include "protocol/messages.h"
#include "sched/allocation.h"
#include "sched/slice_watch.h"

namespace gpupool {

// An unfinished job as the dashboard and the API show it.
struct QueueEntry {
  JobId id = 0;
  std::string name;
  std::string user;
  JobState state = JobState::Queued;
  JobKind kind = JobKind::Batch;
  unsigned gpu_count = 1;
  std::optional<uint64_t> slice_mib;
  std::optional<unsigned> sm_percent;
  int priority = 0;
  std::vector<unsigned> gpus;
  double submit_time = 0;
  std::optional<double> start_time;
  std::string reason;
  std::optional<WaitReason> wait_reason;  // queued or held
  std::optional<std::string> mig_profile = std::nullopt;  // a --mig job's ("" for any profile)
  std::string mig_uuid = {};                               // its MIG device while it runs
  // A suspended job's GPU memory, held in host memory (docs/suspend.md); 0 for the others.
  uint64_t suspended_host_mib = 0;
};

QueueEntry queue_entry(const Job& job);

// What the loop publishes after each event.
struct QueueView {
  std::vector<QueueEntry> jobs;  // queued, held and running
  bool drained = false;
};

struct MonitorSettings {
  double sample_interval_s = 1;
  double history_s = 3600;
  double idle_flag_after_s = 1800;
  std::string hostname;
  std::string state_dir;  // whose file system's free space /metrics shows
  uint64_t state_reserve_bytes = 0;
  // HTTP has no users: its pages show only what anyone may see of the jobs.
  PrivateData private_data;
  std::string job_mapping_dir = {};  // dcgm-exporter's job-mapping files kept there; empty: none
  bool profiling = true;             // GPM activity sampled where the GPUs have it
};

// A usage report as `viewer` may see it: under private_data, other users' lines left out
// (usage) or their jobs' names withheld (jobs).
void withhold_from_report(protocol::ReportResponse& report, const std::string& viewer, const PrivateData& private_data);

class Monitor {
 public:
  // `machine` gives the GPUs' identities (index, UUID, name, memory). `on_sample` runs on the
  // sampler thread with every reading; it must only pass it on (asio::post to the loop).
  // The XID events that came since the previous reading come with it.
  Monitor(MonitorSettings settings, Machine machine, GpuBackend& backend, UsageStore store,
          std::function<void(Machine, std::vector<XidEvent>)> on_sample);
  ~Monitor();  // stops the sampler
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void start();
  void stop();

  // --- the loop's thread ---
  // The next reading comes within `delay` (sooner than the interval when the loop needs it).
  void sample_within(std::chrono::milliseconds delay);
  // The queue after an event: accounts jobs that stopped running, stores usage now and then.
  void publish(QueueView view);
  // A job ended at `end_time` (Unix seconds): its GPU time stops there, not at the next publish.
  void job_ended(const QueueEntry& job, double end_time);
  // What stands on each GPU (leases, outside processes), from the loop's survey of a reading.
  void set_pool(std::vector<GpuAvailability> pool);
  // Which GPUs the quarantine keeps from new jobs, by index.
  void set_quarantined(std::vector<bool> quarantined);
  // Readings the loop has surveyed (set_pool) since the start. Counted on the loop, so an answer
  // the loop sends after N has also seen what it did with the Nth reading.
  uint64_t samples_surveyed() const { return samples_surveyed_; }
  // The slice watchdog's reading of the latest sample: each watched slice job's worst GPU.
  void set_slice_uses(std::map<JobId, SliceUse> uses);
  // The processes the slice watchdog found for each slice job: what its own utilisation is read
  // from on a shared GPU (own_utilization).
  void set_slice_processes(std::map<JobId, std::set<uint32_t>> pids);
  // How long one start took (leases, record, supervisor).
  void observe_dispatch(double seconds);
  // Jobs whose latest change the job store refused and the daemon keeps trying to save.
  void set_unsaved_jobs(size_t count);
  // A job's usage (nullopt before its first sample, or when it never held GPUs): a running
  // job's so far, an ended one's as stored. `gpupool jobs`'s columns, `show`'s usage lines.
  std::optional<JobUsage> usage_of(JobId id);
  // `gpupool report`: stored usage plus what is not stored yet.
  Result<protocol::ReportResponse> report(std::optional<double> since);
  // Stores what is not stored yet (the daemon is stopping).
  void save_usage();

  // --- any thread (the HTTP server's) ---
  std::string metrics_text();
  std::string gpus_json();
  std::string jobs_json();
  // Samples newer than `since` (Unix seconds), column by column.
  std::string history_json(double since);

 private:
  void sample_loop();
  void take_sample();
  void xid_loop();
  std::vector<RunningJob> running_jobs(const QueueView& view) const;
  RunningJob running_job(const QueueEntry& job) const;
  void store_usage(const std::map<JobId, Accounting::JobAccount>& unsaved);
  void update_job_mapping();  // the loop's

  MonitorSettings settings_;
  const Machine machine_;
  GpuBackend& backend_;  // the sampler thread is its only user
  UsageStore store_;     // the loop's thread only
  std::function<void(Machine, std::vector<XidEvent>)> on_sample_;
  std::unique_ptr<XidWatch> xid_watch_;  // its thread's only
  std::optional<JobMappingDirectory> job_mapping_;  // the loop's; nullopt without job_mapping_dir
  std::string job_mapping_error_;                   // the last one said, so it is said once
  std::map<JobId, std::set<uint32_t>> slice_processes_;  // under mutex_
  double started_ = 0;   // Unix seconds
  std::chrono::steady_clock::time_point last_saved_;
  std::set<JobId> known_running_;  // running at the previous publish, or ended unseen since
  // Suspended jobs seen since they last ran: their GPU time counts again from their resumption,
  // not from where their accounting stopped.
  std::set<JobId> suspended_;
  uint64_t samples_surveyed_ = 0;

  std::mutex mutex_;  // guards everything below
  std::condition_variable wake_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point next_sample_;
  std::shared_ptr<const QueueView> view_;
  std::vector<RunningJob> running_;
  std::vector<GpuAvailability> pool_;
  std::map<JobId, SliceUse> slice_uses_;
  SampleHistory history_;
  std::vector<std::vector<MigDevice>> mig_devices_;  // per GPU, as last sampled (their activity)
  std::vector<bool> quarantined_;
  std::vector<std::optional<uint64_t>> unattributed_mib_;  // each GPU's at the latest sample
  std::vector<XidEvent> pending_xids_;         // come since the last reading
  std::map<std::string, uint64_t> last_xids_;  // by UUID; empty while no watch runs
  bool watching_xids_ = false;
  Accounting accounting_;
  Histogram dispatch_latency_;
  Histogram queue_wait_;
  std::optional<double> sample_duration_s_;
  size_t unsaved_jobs_ = 0;
  std::optional<double> last_sample_time_;
  std::vector<std::optional<uint64_t>> last_energy_mj_;  // each GPU's counter at the last sample (sampler thread)
  std::string last_error_;

  std::thread sampler_;
  std::thread xid_watcher_;
};

}  // namespace gpupool
