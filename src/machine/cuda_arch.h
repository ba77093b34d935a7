// Facts about CUDA architectures that NVML does not report directly.
#pragma once

namespace gpupool {

// CUDA cores per streaming multiprocessor for a compute capability, so that a
// core count from NVML can be turned into the multiprocessor count CUDA shows.
// 0 for an architecture this table does not know.
unsigned cores_per_multiprocessor(int major, int minor);

}  // namespace gpupool
