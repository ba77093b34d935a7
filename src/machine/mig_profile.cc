#include "machine/mig_profile.h"

#include <fmt/format.h>

namespace gpupool {

std::string mig_profile_name(unsigned gpu_slices, unsigned compute_slices, uint64_t memory_mib,
                             uint64_t gpu_memory_total_mib) {
  constexpr uint64_t kEighths = 8;
  constexpr uint64_t kMibPerGib = 1024;
  uint64_t gb = 0;
  if (gpu_memory_total_mib > 0) {
    // Whole numbers throughout: eighths = ceil(8 * memory / total), GB = round(eighths * GiB / 8).
    uint64_t eighths = (kEighths * memory_mib + gpu_memory_total_mib - 1) / gpu_memory_total_mib;
    uint64_t total_gib = (gpu_memory_total_mib + kMibPerGib - 1) / kMibPerGib;
    gb = (eighths * total_gib * 2 + kEighths) / (2 * kEighths);
  }
  if (compute_slices != gpu_slices) return fmt::format("{}c.{}g.{}gb", compute_slices, gpu_slices, gb);
  return fmt::format("{}g.{}gb", gpu_slices, gb);
}

}  // namespace gpupool
