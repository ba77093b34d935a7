#include "sim/open_backend.h"

#include <stdlib.h>

#include <gtest/gtest.h>

#include "os/host_files.h"

namespace gpupool {
namespace {

// The CUDA driver follows the NVML library: simulated only where the simulated NVML is loaded.
TEST(OpenBackend, TheSimulatedMachineHasTheSimulatedCudaDriver) {
  unsetenv("GPUPOOL_NVML_LIBRARY");
  unsetenv("GPUPOOL_SIM");
  EXPECT_EQ(checkpoint_program().library, "libcuda.so.1");
  setenv("GPUPOOL_SIM", "hgx-h200", 1);
  EXPECT_EQ(checkpoint_program().library, private_library_directory() + "/sim/libcuda.so.1");
  setenv("GPUPOOL_NVML_LIBRARY", "/opt/nvidia/libnvidia-ml.so.1", 1);
  EXPECT_EQ(checkpoint_program().library, "libcuda.so.1");
  unsetenv("GPUPOOL_NVML_LIBRARY");
  unsetenv("GPUPOOL_SIM");
}

}  // namespace
}  // namespace gpupool
