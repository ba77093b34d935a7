// The GPU backend the commands and the daemon use, chosen from the environment: the real NVML,
// another library, or the simulated one answering from a fixture. It lives above both the
// backend and the fixtures, so the backend never reads fixtures and nothing writes the
// environment that jobs inherit.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "gpu/gpu_backend.h"
#include "gpu/process_checkpoint.h"

namespace gpupool {

// Chooses the NVML library from the environment:
//   GPUPOOL_NVML_LIBRARY=PATH  that library;
//   GPUPOOL_SIM=NAME|PATH      the simulated NVML answering from that fixture;
//   otherwise                  the system's libnvidia-ml.so.1, then libnvidia-ml.so.
Result<std::unique_ptr<GpuBackend>> open_gpu_backend();

// The GPUs this process may hand out: inside a Slurm allocation only the allocation's
// (restrict_to_slurm_allocation), elsewhere the whole machine. For the daemon and the commands
// that lease GPUs; the commands that describe the hardware (list, topo, resolve) look at the
// whole machine.
Result<std::unique_ptr<GpuBackend>> open_pool_backend();

// The CUDA driver that suspends and resumes jobs (gpu/process_checkpoint.h): the simulated
// libcuda.so.1 beside the simulated NVML where open_gpu_backend loads that, else the system's.
CheckpointProgram checkpoint_program();

// Directories searched for fixtures by name: $GPUPOOL_FIXTURE_DIR, then share/gpupool/fixtures
// beside the executable. The simulated library searches the same way from where it lies.
std::vector<std::string> fixture_search_dirs();

}  // namespace gpupool
