// Where gpupool learns about GPUs. The one implementation talks NVML; on a
// machine without GPUs it talks to the simulated libnvidia-ml.so.1 built from
// a fixture (GPUPOOL_SIM), so the same code path runs everywhere.
#pragma once

#include <memory>
#include <string>

#include "core/gpu.h"
#include "core/result.h"

namespace gpupool {

// What a caller needs from a snapshot. Each NVML call is a round trip to the driver, so
// what is not needed is not asked (`gpupool list` must be as quick as nvidia-smi).
struct DiscoveryScope {
  bool links = true;      // NVLink and PCIe levels between every pair (topo, placement)
  bool processes = true;  // the processes on each GPU and their owners
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // A snapshot of every GPU, with its processes and the links between GPUs as `scope` asks.
  virtual Result<Machine> discover(DiscoveryScope scope) = 0;
  // One line for humans: which library answered, simulated or not.
  virtual std::string description() const = 0;
  // The name the fixture of a simulated machine gives itself; "" for real GPUs.
  virtual std::string simulated_machine() const = 0;
};

// Chooses the NVML library from the environment:
//   GPUPOOL_NVML_LIBRARY=PATH  that library;
//   GPUPOOL_SIM=NAME|PATH      the simulated NVML answering from that fixture;
//   otherwise                  the system's libnvidia-ml.so.1, then libnvidia-ml.so.
Result<std::unique_ptr<GpuBackend>> open_gpu_backend();

// The GPUs this process may hand out: inside a Slurm allocation only the allocation's (read by
// core/slurm_allocation from SLURM_STEP_GPUS, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES), numbered
// 0..k-1; elsewhere the whole machine. For the daemon and the commands that lease GPUs; the
// commands that describe the hardware (list, topo, resolve) look at the whole machine.
Result<std::unique_ptr<GpuBackend>> open_pool_backend();

// Directories searched for fixtures by name: $GPUPOOL_FIXTURE_DIR, then share/gpupool/fixtures
// beside the executable.
std::vector<std::string> fixture_search_dirs();

}  // namespace gpupool
