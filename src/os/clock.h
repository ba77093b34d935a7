// The wall clock as the job records, the accounting and the APIs keep it: seconds since the Unix
// epoch, with the fraction (job-to-job gaps are milliseconds).
#pragma once

#include <chrono>

namespace gpupool {

inline double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace gpupool
