// Where gpupool learns about GPUs. The one implementation talks NVML; on a
// machine without GPUs it talks to the simulated libnvidia-ml.so.1 built from
// a fixture (GPUPOOL_SIM), so the same code path runs everywhere.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "os/environment.h"

namespace gpupool {

// What a caller needs from a snapshot. Each NVML call is a round trip to the driver, so
// what is not needed is not asked (`gpupool list` must be as quick as nvidia-smi).
struct DiscoveryScope {
  bool links = true;      // NVLink and PCIe levels between every pair (topo, placement)
  bool processes = true;  // the processes on each GPU and their owners
  // The profiling activity (GPM, Hopper on) since the previous snapshot that asked for it. The
  // first such snapshot has none: a rate takes two samples, so only a repeated caller (the
  // monitor's sampler) asks.
  bool activity = false;
  // The health counters beyond volatile ECC (aggregate ECC, memory repairs, clocks event
  // reasons, PCIe replays, NVLink errors) and the energy counter: what the monitor, doctor and
  // fixtures need. Each call's first use costs the driver milliseconds, which `list` does not pay.
  bool health = true;
};

// Critical XID events as the driver reports them, waited for on the caller's thread.
class XidWatch {
 public:
  virtual ~XidWatch() = default;
  // The events that came within `timeout`; none when it passed without one.
  virtual Result<std::vector<XidEvent>> wait(std::chrono::milliseconds timeout) = 0;
  // How many GPUs it watches (a driver may refuse events for some).
  virtual size_t gpus_watched() const = 0;
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
  // A watch of every GPU's critical XID events; an error where the driver has no events or
  // watches none of the GPUs. Usable from another thread than discover's.
  virtual Result<std::unique_ptr<XidWatch>> watch_xid_events() = 0;
};

// Where to load NVML from. The backend is told; it never decides between real and simulated
// GPUs itself (sim/open_backend does, from the environment).
struct NvmlSource {
  std::vector<std::string> libraries;  // tried in order
  std::string simulated_machine;       // the fixture's name when the library is the simulated one
};

// The backend over the first of `source.libraries` that loads.
Result<std::unique_ptr<GpuBackend>> open_nvml_backend(const NvmlSource& source);

// Inside a Slurm job (SLURM_JOB_ID set in `environment`) every snapshot of `machine` cut down to
// the allocation's GPUs (read by slurm/slurm_allocation from SLURM_STEP_GPUS, SLURM_JOB_GPUS or
// CUDA_VISIBLE_DEVICES), numbered 0..k-1; elsewhere `machine` itself.
Result<std::unique_ptr<GpuBackend>> restrict_to_slurm_allocation(std::unique_ptr<GpuBackend> machine,
                                                                 const EnvironmentMap& environment);

}  // namespace gpupool
