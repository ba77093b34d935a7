// Naming GPUs on the command line: nvidia-smi indices or UUIDs (full, or a
// prefix that names exactly one GPU, any letter case), as `--gpus`,
// `--exclude` and `docker-args` accept them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool {

// The GPU with nvidia-smi index `index`, or nullptr.
const Gpu* find_gpu_by_index(std::span<const Gpu> gpus, unsigned index);
// One GPU by "3", "GPU-16fb8516" or a full UUID; returns its index.
Result<unsigned> find_gpu(std::span<const Gpu> gpus, std::string_view name);
// A MIG device by (a prefix of) its UUID, "MIG-..." in any letter case, or as GPU:DEVICE ("0:3",
// NVML's MIG device index under nvidia-smi's GPU index, as the NVIDIA container toolkit takes it).
// Any other name is an error.
Result<const MigDevice*> find_mig_device(std::span<const Gpu> gpus, std::string_view name);
// Whether `name` is spelled as a MIG device ("MIG-...", "0:3") rather than a GPU.
bool names_mig_device(std::string_view name);
// Several, in the order given; naming one GPU twice is an error.
Result<std::vector<unsigned>> find_gpus(std::span<const Gpu> gpus, std::span<const std::string> names);

}  // namespace gpupool
