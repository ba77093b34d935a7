// Acquire + release round trips without a daemon, as `gpupool run` does them:
//   LeaseLocks    — the lock layer alone (open the lock file, lock, write the holder record, release);
//   LeaseAcquire  — the whole path on a simulated 8-GPU machine: NVML discovery through the simulated
//                   libnvidia-ml.so.1, the survey of leases and processes, placement, locking.
// Each reports p50 and p99 per round trip (microseconds) as counters.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <benchmark/benchmark.h>

#include "gpu/gpu_backend.h"
#include "lease/acquirer.h"
#include "sim/open_backend.h"

namespace gpupool {
namespace {

std::string temp_runtime_dir() {
  char pattern[] = "/tmp/gpupool-bench-XXXXXX";
  return std::string(mkdtemp(pattern)) + "/run";
}

void report_percentiles(benchmark::State& state, std::vector<double>& micros) {
  std::sort(micros.begin(), micros.end());
  auto at = [&](double q) { return micros[static_cast<size_t>(q * static_cast<double>(micros.size() - 1))]; };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
}

template <typename Body>
void timed_loop(benchmark::State& state, Body&& body) {
  std::vector<double> micros;
  for (auto _ : state) {
    auto start = std::chrono::steady_clock::now();
    body();
    micros.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  report_percentiles(state, micros);
}

void LeaseLocks(benchmark::State& state) {
  std::string dir = temp_runtime_dir();
  auto leases = LeaseDirectory::open(dir);
  if (!leases) return state.SkipWithError(leases.error().message.c_str());
  std::vector<LeaseClaim> claims = {{"GPU-00000000-0000-0000-0000-000000000000", 0, 143771, std::nullopt}};
  LeaseHolder holder{getpid(), "", "bench", 0};
  timed_loop(state, [&] {
    auto held = leases->try_acquire(claims, holder);
    if (!held || !*held) state.SkipWithError("lease not granted");
  });
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}
BENCHMARK(LeaseLocks)->Iterations(2000);

void LeaseAcquire(benchmark::State& state) {
  setenv("GPUPOOL_SIM", "hgx-h200", 1);
  std::string dir = temp_runtime_dir();
  auto backend = open_gpu_backend();
  auto leases = LeaseDirectory::open(dir);
  if (!backend || !leases) return state.SkipWithError("no simulated machine or lease directory");
  HostFiles host = host_files_from_environment();
  AcquireOptions options;
  options.request.count = static_cast<unsigned>(state.range(0));
  options.holder = LeaseHolder{getpid(), "", "bench", 0};
  timed_loop(state, [&] {
    auto acquired = acquire_gpus(**backend, *leases, host, options);
    if (!acquired) state.SkipWithError(acquired.error().message.c_str());
  });
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}
BENCHMARK(LeaseAcquire)->Arg(1)->Arg(4)->Iterations(1000);

}  // namespace
}  // namespace gpupool
