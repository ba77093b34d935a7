// CPU lists in the kernel's notation ("0-15,32-47"), as sysfs, taskset and
// nvidia-smi print them, converted to and from bit masks.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpupool {

// Renders CPU numbers (any order, duplicates allowed) as "0-3,8,10-11".
std::string format_cpu_list(std::vector<unsigned> cpus);

// Parses "0-3,8" into {0,1,2,3,8}. Empty input is an empty list.
Result<std::vector<unsigned>> parse_cpu_list(std::string_view text);

// The CPUs whose bits are set in a mask of 64-bit words (word 0 holds CPUs 0-63), as NVML fills it.
std::vector<unsigned> cpus_from_mask(const std::vector<unsigned long>& words);

}  // namespace gpupool
