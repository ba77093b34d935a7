// Summary figures of a sample, shared by the scheduler's run-time estimates and the replay's
// measures.
#pragma once

#include <vector>

namespace gpupool {

// Nearest rank: the smallest value that at least `fraction` (0 to 1) of `values` do not exceed;
// 0 for none.
double nearest_rank(std::vector<double> values, double fraction);

// The arithmetic mean; 0 for none.
double mean(const std::vector<double>& values);

}  // namespace gpupool
