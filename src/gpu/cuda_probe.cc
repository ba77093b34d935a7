#include "gpu/cuda_probe.h"

#include <nlohmann/json.hpp>

#include "os/host_files.h"
#include "os/program.h"

namespace gpupool {

Result<VisibleDevicesResolution> probe_cuda_driver(const Machine& machine,
                                                   const std::optional<std::string>& visible_devices,
                                                   const std::optional<std::string>& device_order) {
  // Ours, with the two CUDA variables set or taken out as asked.
  ProgramOptions options;
  auto set_or_unset = [&options](const char* name, const std::optional<std::string>& value) {
    if (value) {
      options.environment.push_back(fmt::format("{}={}", name, *value));
    } else {
      options.unset.emplace_back(name);
    }
  };
  set_or_unset("CUDA_VISIBLE_DEVICES", visible_devices);
  set_or_unset("CUDA_DEVICE_ORDER", device_order);
  TRY_ASSIGN(ProgramOutcome probe, run_program({private_library_directory() + "/gpupool-cuda-probe"}, options));
  const std::string& output = probe.out;
  nlohmann::json answer = nlohmann::json::parse(output, nullptr, false);
  if (answer.is_discarded() || !answer.is_object()) {
    return fail("gpupool-cuda-probe gave no answer (exit {}, output '{}', errors '{}')", probe.exit_code,
                output.substr(0, 200), probe.err.substr(0, 200));
  }
  if (answer.contains("error")) {
    return fail("cannot ask the CUDA driver: {} ({})", answer["error"].get<std::string>(),
                answer.value("detail", std::string("libcuda.so.1 missing or incomplete")));
  }
  VisibleDevicesResolution resolution;
  std::string init = answer.value("init", std::string("?"));
  if (init != "CUDA_SUCCESS" && init != "CUDA_ERROR_NO_DEVICE") resolution.error = init;
  if (answer.contains("count_error")) resolution.error = answer["count_error"].get<std::string>();
  unsigned cuda_index = 0;
  for (const auto& device : answer.value("devices", nlohmann::json::array())) {
    std::string uuid = device.value("uuid", std::string());
    auto gpu = std::find_if(machine.gpus.begin(), machine.gpus.end(),
                            [&](const Gpu& g) { return g.uuid == uuid; });
    if (gpu == machine.gpus.end()) {
      return fail("the CUDA driver reports GPU {} that NVML does not list", uuid);
    }
    resolution.devices.push_back({cuda_index++, gpu->index});
  }
  return resolution;
}

}  // namespace gpupool
