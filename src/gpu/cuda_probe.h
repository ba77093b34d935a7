// Asks the real CUDA driver which GPUs a program would see, by running
// gpupool-cuda-probe (in lib/gpupool, os/host_files.h) with the given variables.
// A child process per question: the driver reads them once, at cuInit.
#pragma once

#include <optional>
#include <string>

#include "base/result.h"
#include "machine/cuda_visible_devices.h"
#include "machine/gpu.h"

namespace gpupool {

// nullopt values are unset in the child. Devices are mapped to `machine` by UUID.
Result<VisibleDevicesResolution> probe_cuda_driver(const Machine& machine,
                                                   const std::optional<std::string>& visible_devices,
                                                   const std::optional<std::string>& device_order);

}  // namespace gpupool
