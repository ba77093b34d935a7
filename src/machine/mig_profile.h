// The name NVIDIA gives a MIG device's profile ("1g.18gb", "1c.3g.71gb"), from what NVML reports
// about it: nvidia-smi -L and NVIDIA's device plugins print these names, and people ask for them.
#pragma once

#include <cstdint>
#include <string>

namespace gpupool {

// "{gpu_slices}g.{GB}gb", with "{compute_slices}c." in front when the compute instance is
// smaller than its GPU instance. GB is not the instance's memory rounded: memory comes in eighths
// of the GPU, so the instance's share of `gpu_memory_total_mib` is rounded up to eighths and
// multiplied by the GPU's memory in whole GiB (rounded up), then rounded to the nearest whole
// number: on an H200 (143771 MiB, 141 GiB) one eighth is "18gb", four eighths "71gb".
std::string mig_profile_name(unsigned gpu_slices, unsigned compute_slices, uint64_t memory_mib,
                             uint64_t gpu_memory_total_mib);

}  // namespace gpupool
