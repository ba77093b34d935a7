// Rendering /metrics for an 8-GPU machine with every GPU held by a job, every field sampled and
// both histograms filled: the target is under 2 ms a scrape (docs/benchmarks.md).
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "monitor/prometheus_metrics.h"

namespace gpupool {
namespace {

constexpr unsigned kGpus = 8;

struct Scrape {
  std::vector<Gpu> gpus;
  Histogram dispatch{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  Histogram wait{{1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400}};
  MetricsView view;

  Scrape() {
    for (unsigned i = 0; i < kGpus; ++i) {
      Gpu gpu;
      gpu.index = i;
      gpu.uuid = fmt::format("GPU-{:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a{:02x}", 0x5e3f1a00 + i, i);
      gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x18 + 0x10 * i);
      gpu.name = "NVIDIA H200";
      gpu.minor_number = i;
      gpus.push_back(gpu);
    }
    for (int i = 0; i < 1000; ++i) {
      dispatch.observe(0.0005 * (i % 40));
      wait.observe(3.7 * i);
    }
    view.hostname = "gpu-node-01.example.org";
    for (unsigned i = 0; i < kGpus; ++i) {
      GpuSample s;
      s.time = 1764748800.123 + i;
      s.utilization_gpu = 37 + i;
      s.utilization_memory = 12 + i;
      s.memory_used_mib = 81234 + i;
      s.memory_free_mib = 143771 - 81234 - i;
      s.temperature_c = 41 + i;
      s.sm_clock_mhz = 1980;
      s.memory_clock_mhz = 3201;
      s.power_w = 412.345 + i;
      JobId job = 1000 + i / 2;  // four 2-GPU jobs
      std::string user = fmt::format("user{}", i / 2);
      view.gpus.push_back(MetricsGpu{&gpus[i], s, {GpuHolder{job, user}}, true, 0, false});
      if (i % 2 == 0) view.running_jobs.push_back(MetricsJob{job, user, 12345.678 * (i + 1), 41.25 + i, false});
      view.user_gpu_seconds[user] += 98765.4321 * (i + 1);
    }
    view.queued = 120;
    view.held = 3;
    view.running = 4;
    view.dispatch_latency = &dispatch;
    view.queue_wait = &wait;
    view.sample_duration_s = 0.00123;
  }
};

void BM_RenderMetrics8Gpus(benchmark::State& state) {
  Scrape scrape;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = render_metrics(scrape.view);
    bytes = text.size();
    benchmark::DoNotOptimize(text);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderMetrics8Gpus)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpupool
