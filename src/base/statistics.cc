#include "base/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

namespace gpupool {

double nearest_rank(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  size_t rank = std::clamp<size_t>(
      static_cast<size_t>(std::ceil(fraction * static_cast<double>(values.size()))), 1, values.size());
  auto at = values.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace gpupool
