#include "monitor/prometheus_metrics.h"

#include <limits>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

UsageTally held_for(double gpu_seconds, std::optional<unsigned> utilization = std::nullopt) {
  UsageTally usage;
  usage.add(gpu_seconds, {.utilization = utilization});
  return usage;
}

// A job on Hopper: its SM activity, energy and peak memory measured.
UsageTally measured_tally() {
  UsageTally usage;
  usage.add(3600.5, {.utilization = 50u, .sm_active_seconds = 1800.0, .energy_j = 720000.0, .memory_mib = 1024u});
  return usage;
}

Gpu identity(unsigned index, std::string uuid, std::string bus, std::optional<unsigned> minor = std::nullopt) {
  Gpu gpu;
  gpu.index = index;
  gpu.uuid = std::move(uuid);
  gpu.pci_bus_id = std::move(bus);
  gpu.name = "NVIDIA H200";
  gpu.minor_number = minor;
  return gpu;
}

GpuSample full_sample() {
  GpuSample s;
  s.time = 1000;
  s.utilization_gpu = 90;
  s.utilization_memory = 40;
  s.memory_used_mib = 1000;
  s.memory_free_mib = 2000;
  s.temperature_c = 50;
  s.sm_clock_mhz = 1980;
  s.memory_clock_mhz = 2619;
  s.power_w = 300.5;
  return s;
}

TEST(PrometheusMetrics, ProfilingActivityOnlyForTheGpusThatReportIt) {
  Gpu hopper = identity(0, "GPU-0", "00000000:18:00.0");
  Gpu ampere = identity(1, "GPU-1", "00000000:2A:00.0");
  GpuSample measured = full_sample();
  measured.sm_active = 0.85;
  measured.tensor_active = 0;  // measured idle: reported as 0
  measured.nvlink_rx_bytes_per_s = 1.5e9;
  MetricsView view;
  view.hostname = "node1";
  view.gpus.push_back(MetricsGpu{&hopper, measured, {}, false, 0, false});
  view.gpus.push_back(MetricsGpu{&ampere, full_sample(), {}, false, 0, false});
  const std::string text = render_metrics(view);
  const std::string labels = R"(gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0",device="nvidia0",)"
                             R"(modelName="NVIDIA H200",Hostname="node1")";
  EXPECT_NE(text.find("# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\nDCGM_FI_PROF_SM_ACTIVE{" + labels + "} 0.85\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{" + labels + "} 0\n"), std::string::npos);
  EXPECT_NE(text.find("DCGM_FI_PROF_NVLINK_RX_BYTES{" + labels + "} 1500000000\n"), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"1\""), std::string::npos) << "absent, never 0";
  EXPECT_EQ(text.find("DCGM_FI_PROF_DRAM_ACTIVE"), std::string::npos) << "no GPU reports it: no HELP either";
}

TEST(PrometheusMetrics, EachGpuInstanceOfAMigGpuHasItsOwnSeries) {
  Gpu gpu = identity(0, "GPU-0", "00000000:18:00.0");
  gpu.memory_total_mib = 143771;
  // GPU instance 1 as two compute instances (one series), instance 2 without GPM readings.
  MigDevice first{.index = 0, .uuid = "MIG-a", .gpu_instance_id = 1, .compute_instance_id = 0, .gpu_slices = 4,
                  .compute_slices = 2, .memory_mib = 70656};
  first.activity.tensor_active = 0.5;
  MigDevice second = first;
  second.index = 1;
  second.uuid = "MIG-b";
  second.compute_instance_id = 1;
  MigDevice unmeasured{.index = 2, .uuid = "MIG-c", .gpu_instance_id = 2, .gpu_slices = 3, .compute_slices = 3,
                       .memory_mib = 70656};
  MetricsView view;
  view.hostname = "node1";
  view.gpus.push_back(MetricsGpu{&gpu, full_sample(), {GpuHolder{3, "ana"}}, false, 0, false, {first, second, unmeasured}});
  const std::string text = render_metrics(view);
  const std::string labels = R"(gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0",device="nvidia0",)"
                             R"(modelName="NVIDIA H200",Hostname="node1")";
  // The header once, though only a GPU instance reports it; the instance's GPU profile, not the
  // compute instance's ("1c.4g..."); no job labels, which belong to the whole GPU's series.
  EXPECT_NE(text.find("# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge\nDCGM_FI_PROF_PIPE_TENSOR_ACTIVE{" + labels +
                      R"(,GPU_I_PROFILE="4g.71gb",GPU_I_ID="1"} 0.5)" + "\n# HELP"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("GPU_I_ID=\"2\""), std::string::npos) << text;
  EXPECT_EQ(text.find("DCGM_FI_PROF_SM_ACTIVE"), std::string::npos) << "no GPU or instance reports it";
}

TEST(PrometheusMetrics, RendersASmallMachineExactly) {
  Gpu gpu0 = identity(0, "GPU-0", "00000000:18:00.0");
  Gpu gpu1 = identity(1, "GPU-1", "00000000:2A:00.0", 3);  // device= follows the minor number
  GpuSample held = full_sample();
  held.memory_clock_mhz.reset();
  GpuSample unheld = full_sample();
  unheld.utilization_gpu = 0;
  unheld.power_w.reset();  // this GPU has no power series
  unheld.memory_clock_mhz.reset();  // no GPU reports it: no HELP/TYPE either

  MetricsView view;
  view.hostname = "node1";
  view.gpus.push_back(MetricsGpu{&gpu0, held, {GpuHolder{7, "ana"}}, true, 0, false});
  view.gpus.push_back(MetricsGpu{&gpu1, unheld, {}, false, 1, true});
  view.gpus[0].last_xid = 0;  // watched, no XID yet
  view.gpus[1].last_xid = 79;
  view.gpus[1].quarantined = true;
  view.gpus[0].unattributed_mib = 0;
  view.gpus[1].unattributed_mib = 2;
  view.queued = 2;
  view.held = 1;
  view.running = 1;
  view.running_jobs.push_back(MetricsJob{7, "ana", measured_tally(), false, std::nullopt});
  view.user_usage = {{"ana", measured_tally()}, {"bob", held_for(10)}};
  view.sample_duration_s = 0.25;

  const std::string g0 = R"(gpu="0",UUID="GPU-0",pci_bus_id="00000000:18:00.0",device="nvidia0",)"
                         R"(modelName="NVIDIA H200",Hostname="node1",job_id="7",user="ana")";
  const std::string g1 = R"(gpu="1",UUID="GPU-1",pci_bus_id="00000000:2A:00.0",device="nvidia3",)"
                         R"(modelName="NVIDIA H200",Hostname="node1")";
  const std::string expected =
      "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
      "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
      "DCGM_FI_DEV_GPU_UTIL{" + g0 + "} 90\n"
      "DCGM_FI_DEV_GPU_UTIL{" + g1 + "} 0\n"
      "# HELP DCGM_FI_DEV_MEM_COPY_UTIL Memory utilization (in %).\n"
      "# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge\n"
      "DCGM_FI_DEV_MEM_COPY_UTIL{" + g0 + "} 40\n"
      "DCGM_FI_DEV_MEM_COPY_UTIL{" + g1 + "} 40\n"
      "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
      "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
      "DCGM_FI_DEV_FB_USED{" + g0 + "} 1000\n"
      "DCGM_FI_DEV_FB_USED{" + g1 + "} 1000\n"
      "# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n"
      "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
      "DCGM_FI_DEV_FB_FREE{" + g0 + "} 2000\n"
      "DCGM_FI_DEV_FB_FREE{" + g1 + "} 2000\n"
      "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
      "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
      "DCGM_FI_DEV_GPU_TEMP{" + g0 + "} 50\n"
      "DCGM_FI_DEV_GPU_TEMP{" + g1 + "} 50\n"
      "# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n"
      "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n"
      "DCGM_FI_DEV_POWER_USAGE{" + g0 + "} 300.5\n"
      "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).\n"
      "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
      "DCGM_FI_DEV_SM_CLOCK{" + g0 + "} 1980\n"
      "DCGM_FI_DEV_SM_CLOCK{" + g1 + "} 1980\n"
      "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
      "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
      "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-0\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\","
      "modelName=\"NVIDIA H200\",Hostname=\"node1\",job_id=\"7\",user=\"ana\"} 0\n"
      "DCGM_FI_DEV_XID_ERRORS{gpu=\"1\",UUID=\"GPU-1\",pci_bus_id=\"00000000:2A:00.0\",device=\"nvidia3\","
      "modelName=\"NVIDIA H200\",Hostname=\"node1\"} 79\n"
      "# HELP gpupool_jobs Jobs in gpupoold's queue, by state.\n"
      "# TYPE gpupool_jobs gauge\n"
      "gpupool_jobs{state=\"queued\"} 2\n"
      "gpupool_jobs{state=\"held\"} 1\n"
      "gpupool_jobs{state=\"running\"} 1\n"
      "gpupool_jobs{state=\"suspended\"} 0\n"
      "# HELP gpupool_suspended_host_memory_bytes GPU memory of suspended jobs, held in host memory "
      "(suspend_host_memory_mb bounds it).\n"
      "# TYPE gpupool_suspended_host_memory_bytes gauge\n"
      "gpupool_suspended_host_memory_bytes 0\n"
      "# HELP gpupool_gpu_leased 1 while an exclusive gpupool lease holds the GPU.\n"
      "# TYPE gpupool_gpu_leased gauge\n"
      "gpupool_gpu_leased{gpu=\"0\",UUID=\"GPU-0\"} 1\n"
      "gpupool_gpu_leased{gpu=\"1\",UUID=\"GPU-1\"} 0\n"
      "# HELP gpupool_gpu_leased_memory_bytes GPU memory held by gpupool slices.\n"
      "# TYPE gpupool_gpu_leased_memory_bytes gauge\n"
      "gpupool_gpu_leased_memory_bytes{gpu=\"0\",UUID=\"GPU-0\"} 0\n"
      "gpupool_gpu_leased_memory_bytes{gpu=\"1\",UUID=\"GPU-1\"} 1048576\n"
      "# HELP gpupool_gpu_outside_busy 1 while processes gpupool did not start use the GPU.\n"
      "# TYPE gpupool_gpu_outside_busy gauge\n"
      "gpupool_gpu_outside_busy{gpu=\"0\",UUID=\"GPU-0\"} 0\n"
      "gpupool_gpu_outside_busy{gpu=\"1\",UUID=\"GPU-1\"} 1\n"
      "# HELP gpupool_gpu_quarantined 1 while gpupool keeps new jobs off the GPU for its health (a critical XID, "
      "uncorrectable ECC errors, a pending or failed row remap).\n"
      "# TYPE gpupool_gpu_quarantined gauge\n"
      "gpupool_gpu_quarantined{gpu=\"0\",UUID=\"GPU-0\"} 0\n"
      "gpupool_gpu_quarantined{gpu=\"1\",UUID=\"GPU-1\"} 1\n"
      "# HELP gpupool_gpu_unattributed_memory_bytes GPU memory in use that no listed process holds: what ended "
      "processes left behind (or processes the daemon cannot see).\n"
      "# TYPE gpupool_gpu_unattributed_memory_bytes gauge\n"
      "gpupool_gpu_unattributed_memory_bytes{gpu=\"0\",UUID=\"GPU-0\"} 0\n"
      "gpupool_gpu_unattributed_memory_bytes{gpu=\"1\",UUID=\"GPU-1\"} 2097152\n"
      "# HELP gpupool_user_gpu_seconds_total GPU time of each user's jobs (GPU-seconds; a slice counts its "
      "share of the GPU).\n"
      "# TYPE gpupool_user_gpu_seconds_total counter\n"
      "gpupool_user_gpu_seconds_total{user=\"ana\"} 3600.5\n"
      "gpupool_user_gpu_seconds_total{user=\"bob\"} 10\n"
      "# HELP gpupool_user_sm_active_gpu_seconds_total GPU time each user's jobs kept the SMs busy (GPU-seconds "
      "weighted by SM activity).\n"
      "# TYPE gpupool_user_sm_active_gpu_seconds_total counter\n"
      "gpupool_user_sm_active_gpu_seconds_total{user=\"ana\"} 1800\n"
      "# HELP gpupool_user_energy_joules_total Energy of each user's jobs (their part of their GPUs', in J).\n"
      "# TYPE gpupool_user_energy_joules_total counter\n"
      "gpupool_user_energy_joules_total{user=\"ana\"} 720000\n"
      "# HELP gpupool_job_gpu_seconds GPU time of each running job so far (GPU-seconds).\n"
      "# TYPE gpupool_job_gpu_seconds gauge\n"
      "gpupool_job_gpu_seconds{job_id=\"7\",user=\"ana\"} 3600.5\n"
      "# HELP gpupool_job_mean_utilization Mean utilisation of a running job's GPUs (in %).\n"
      "# TYPE gpupool_job_mean_utilization gauge\n"
      "gpupool_job_mean_utilization{job_id=\"7\",user=\"ana\"} 50\n"
      "# HELP gpupool_job_sm_active_gpu_seconds GPU time a running job kept the SMs busy so far (GPU-seconds "
      "weighted by SM activity).\n"
      "# TYPE gpupool_job_sm_active_gpu_seconds gauge\n"
      "gpupool_job_sm_active_gpu_seconds{job_id=\"7\",user=\"ana\"} 1800\n"
      "# HELP gpupool_job_energy_joules Energy of a running job so far (its part of its GPUs', in J).\n"
      "# TYPE gpupool_job_energy_joules gauge\n"
      "gpupool_job_energy_joules{job_id=\"7\",user=\"ana\"} 720000\n"
      "# HELP gpupool_job_peak_memory_bytes The most GPU memory a running job has used on one of its GPUs.\n"
      "# TYPE gpupool_job_peak_memory_bytes gauge\n"
      "gpupool_job_peak_memory_bytes{job_id=\"7\",user=\"ana\"} 1073741824\n"
      "# HELP gpupool_job_idle 1 while a running job has held its GPUs at about 0 % utilisation for longer "
      "than idle_flag_after.\n"
      "# TYPE gpupool_job_idle gauge\n"
      "gpupool_job_idle{job_id=\"7\",user=\"ana\"} 0\n"
      "# HELP gpupool_idle_jobs Running jobs flagged idle.\n"
      "# TYPE gpupool_idle_jobs gauge\n"
      "gpupool_idle_jobs 0\n"
      "# HELP gpupool_sample_duration_seconds Time the latest NVML sample of every GPU took.\n"
      "# TYPE gpupool_sample_duration_seconds gauge\n"
      "gpupool_sample_duration_seconds 0.25\n";
  EXPECT_EQ(render_metrics(view), expected);
}

TEST(PrometheusMetrics, EmptyViewHasOnlyTheQueue) {
  MetricsView view;
  view.suspended = 1;  // a suspended job's GPU memory is counted in host memory
  view.suspended_host_mib = 9316;
  EXPECT_EQ(render_metrics(view),
            "# HELP gpupool_jobs Jobs in gpupoold's queue, by state.\n"
            "# TYPE gpupool_jobs gauge\n"
            "gpupool_jobs{state=\"queued\"} 0\n"
            "gpupool_jobs{state=\"held\"} 0\n"
            "gpupool_jobs{state=\"running\"} 0\n"
            "gpupool_jobs{state=\"suspended\"} 1\n"
            "# HELP gpupool_suspended_host_memory_bytes GPU memory of suspended jobs, held in host memory "
            "(suspend_host_memory_mb bounds it).\n"
            "# TYPE gpupool_suspended_host_memory_bytes gauge\n"
            "gpupool_suspended_host_memory_bytes 9768534016\n"
            "# HELP gpupool_idle_jobs Running jobs flagged idle.\n"
            "# TYPE gpupool_idle_jobs gauge\n"
            "gpupool_idle_jobs 0\n");
}

TEST(PrometheusMetrics, GpuWithoutASampleHasNoGpuSeries) {
  Gpu gpu = identity(0, "GPU-0", "00000000:18:00.0");
  MetricsView view;
  view.gpus.push_back(MetricsGpu{&gpu, std::nullopt, {}, false, 0, false});
  std::string text = render_metrics(view);
  EXPECT_EQ(text.find("DCGM_"), std::string::npos);
  EXPECT_NE(text.find("gpupool_gpu_leased{gpu=\"0\",UUID=\"GPU-0\"} 0\n"), std::string::npos);
}

TEST(PrometheusMetrics, JobsWithoutMeanUtilizationHaveNoSeries) {
  MetricsView view;
  view.running_jobs.push_back(MetricsJob{1, "ana", held_for(5), true, std::nullopt});
  view.running_jobs.push_back(MetricsJob{2, "bob", held_for(5), true, std::nullopt});
  std::string text = render_metrics(view);
  EXPECT_EQ(text.find("gpupool_job_mean_utilization"), std::string::npos);
  EXPECT_NE(text.find("gpupool_job_idle{job_id=\"2\",user=\"bob\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("gpupool_idle_jobs 2\n"), std::string::npos);
}

TEST(PrometheusMetrics, WatchedSliceJobsShowTheirUseAndWhetherItIsPastTheSlice) {
  MetricsView view;
  view.running_jobs.push_back(MetricsJob{1, "ana", held_for(5), false, SliceUse{1, 3, 31949, 20480, 0}});
  view.running_jobs.push_back(MetricsJob{2, "bob", held_for(5), false, SliceUse{2, 3, 1000, 20480, 0}});
  view.running_jobs.push_back(MetricsJob{3, "cy", held_for(5), false, std::nullopt});  // whole GPUs
  std::string text = render_metrics(view);
  EXPECT_NE(text.find("gpupool_job_slice_used_bytes{job_id=\"1\",user=\"ana\",gpu=\"3\"} 33500954624\n"),
            std::string::npos);
  EXPECT_NE(text.find("gpupool_job_slice_overrun{job_id=\"1\",user=\"ana\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("gpupool_job_slice_overrun{job_id=\"2\",user=\"bob\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("gpupool_job_slice_overrun{job_id=\"3\""), std::string::npos);
  view.running_jobs.erase(view.running_jobs.begin(), view.running_jobs.begin() + 2);
  EXPECT_EQ(render_metrics(view).find("gpupool_job_slice"), std::string::npos);  // none watched: no series
}

TEST(PrometheusMetrics, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value(R"(a\b)"), R"(a\\b)");
  EXPECT_EQ(escape_label_value(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(escape_label_value("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(escape_label_value("\\\"\n"), R"(\\\"\n)");
  EXPECT_EQ(escape_label_value(""), "");
}

TEST(PrometheusMetrics, EscapesLabelsInTheOutput) {
  Gpu gpu = identity(0, "GPU-0", "00000000:18:00.0");
  gpu.name = R"(H200 "SXM" \ 141GB)";
  MetricsView view;
  view.hostname = "node\n1";
  view.gpus.push_back(MetricsGpu{&gpu, full_sample(), {GpuHolder{4, "o\"brien"}}, true, 0, false});
  view.user_usage = {{"back\\slash", held_for(1)}};
  std::string text = render_metrics(view);
  EXPECT_NE(text.find(R"(modelName="H200 \"SXM\" \\ 141GB",Hostname="node\n1",job_id="4",user="o\"brien"})"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(gpupool_user_gpu_seconds_total{user="back\\slash"} 1)"), std::string::npos) << text;
  // Every line is a comment or a series: no raw newline got into a label.
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string line = text.substr(start, end - start);
    EXPECT_TRUE(line.starts_with("# ") || line.starts_with("DCGM_") || line.starts_with("gpupool_")) << line;
    start = end + 1;
  }
}

TEST(PrometheusMetrics, SlicesSharedByTwoJobsJoinTheirLabels) {
  Gpu gpu = identity(0, "GPU-0", "00000000:18:00.0");
  MetricsView view;
  view.gpus.push_back(MetricsGpu{
      &gpu, full_sample(), {GpuHolder{3, "ana"}, GpuHolder{4, "bob"}, GpuHolder{5, "ana"}}, false, 2048, false});
  std::string text = render_metrics(view);
  // Each user once, in the order first met.
  EXPECT_NE(text.find(R"(Hostname="",job_id="3,4,5",user="ana,bob"} 90)"), std::string::npos) << text;
  EXPECT_NE(text.find("gpupool_gpu_leased_memory_bytes{gpu=\"0\",UUID=\"GPU-0\"} 2147483648\n"), std::string::npos);
}

TEST(PrometheusMetrics, HistogramBucketsAreCumulative) {
  Histogram latency({0.5, 1});
  for (double value : {0.25, 0.5, 0.75, 4.0}) latency.observe(value);  // 0.5 falls in le="0.5"
  EXPECT_EQ(latency.counts(), (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(latency.count(), 4u);
  EXPECT_DOUBLE_EQ(latency.sum(), 5.5);

  Histogram wait({1, 60});
  MetricsView view;
  view.dispatch_latency = &latency;
  view.queue_wait = &wait;
  std::string text = render_metrics(view);
  const std::string expected =
      "# HELP gpupool_dispatch_latency_seconds Time gpupoold took to start a job the scheduler chose (leases, "
      "record, supervisor).\n"
      "# TYPE gpupool_dispatch_latency_seconds histogram\n"
      "gpupool_dispatch_latency_seconds_bucket{le=\"0.5\"} 2\n"
      "gpupool_dispatch_latency_seconds_bucket{le=\"1\"} 3\n"
      "gpupool_dispatch_latency_seconds_bucket{le=\"+Inf\"} 4\n"
      "gpupool_dispatch_latency_seconds_sum 5.5\n"
      "gpupool_dispatch_latency_seconds_count 4\n"
      "# HELP gpupool_queue_wait_seconds Time from a job's submission to its start.\n"
      "# TYPE gpupool_queue_wait_seconds histogram\n"
      "gpupool_queue_wait_seconds_bucket{le=\"1\"} 0\n"
      "gpupool_queue_wait_seconds_bucket{le=\"60\"} 0\n"
      "gpupool_queue_wait_seconds_bucket{le=\"+Inf\"} 0\n"
      "gpupool_queue_wait_seconds_sum 0\n"
      "gpupool_queue_wait_seconds_count 0\n";
  size_t at = text.find("# HELP gpupool_dispatch_latency_seconds");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.substr(at), expected);
}

TEST(PrometheusMetrics, SpecialValuesAreSpelledAsTheFormatWants) {
  Gpu gpu = identity(0, "GPU-0", "00000000:18:00.0");
  GpuSample s;
  s.power_w = std::numeric_limits<double>::infinity();
  MetricsView view;
  view.gpus.push_back(MetricsGpu{&gpu, s, {}, false, 0, false});
  view.sample_duration_s = std::numeric_limits<double>::quiet_NaN();
  std::string text = render_metrics(view);
  EXPECT_NE(text.find("Hostname=\"\"} +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gpupool_sample_duration_seconds NaN\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpupool
