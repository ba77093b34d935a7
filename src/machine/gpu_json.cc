#include "machine/gpu_json.h"

#include <cmath>
#include <type_traits>

#include <fmt/format.h>

namespace gpupool {
namespace {

template <typename T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// A reading's JSON value. Watts get two decimals, as NVML's milliwatts allow and nvidia-smi
// prints (every reading of type double is in watts).
template <typename T>
nlohmann::json reading_json(const std::optional<T>& value) {
  if (!value) return nullptr;
  if constexpr (std::is_same_v<T, double>) {
    return std::round(*value * 100.0) / 100.0;
  } else if constexpr (std::is_same_v<T, ComputeMode> || std::is_same_v<T, ComputeCapability>) {
    return to_string(*value);
  } else {
    return *value;
  }
}

}  // namespace

std::string cuda_version_string(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

nlohmann::json to_json(const GpuProcess& process) {
  return {{"pid", process.pid},
          {"type", to_string(process.kind)},
          {"used_memory_mib", optional_json(process.used_memory_mib)},
          {"user", optional_json(process.user)},
          {"command", optional_json(process.command)},
          {"mps_client", optional_json(process.mps_client)},
          {"gpu_instance_id", optional_json(process.gpu_instance_id)},
          {"sm_utilization", optional_json(process.sm_utilization)}};
}

nlohmann::json to_json(const MigDevice& mig) {
  return {{"index", mig.index},
          {"uuid", mig.uuid},
          {"profile", mig.profile},
          {"gpu_instance_id", mig.gpu_instance_id},
          {"compute_instance_id", mig.compute_instance_id},
          {"gpu_slices", mig.gpu_slices},
          {"compute_slices", mig.compute_slices},
          {"memory_mib", mig.memory_mib},
          {"multiprocessors", mig.multiprocessors}};
}

nlohmann::json to_json(const Gpu& gpu) {
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& process : gpu.processes) processes.push_back(to_json(process));
  nlohmann::json mig_devices = nlohmann::json::array();
  for (const auto& mig : gpu.mig_devices) mig_devices.push_back(to_json(mig));
  nlohmann::json out = {{"index", gpu.index},
                        {"uuid", gpu.uuid},
                        {"pci_bus_id", gpu.pci_bus_id},
                        {"name", gpu.name},
                        {"fault", optional_json(gpu.fault)},
                        {"processes", processes},
                        {"mig_devices", mig_devices}};
  for_each_reading(gpu, [&](const ReadingInfo& reading, const auto& value) {
    if (reading.json == JsonUse::InJson) out[reading.key] = reading_json(value);
  });
  return out;
}

nlohmann::json to_json(const DriverInfo& driver) {
  return {{"driver_version", optional_json(driver.driver_version)},
          {"nvml_version", optional_json(driver.nvml_version)},
          {"cuda_version", driver.cuda_driver_version
                               ? nlohmann::json(cuda_version_string(*driver.cuda_driver_version))
                               : nullptr}};
}

nlohmann::json topology_json(const Machine& machine) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& gpu : machine.gpus) {
    nlohmann::json mig_devices = nlohmann::json::array();
    for (const auto& mig : gpu.mig_devices) mig_devices.push_back(mig.uuid);
    gpus.push_back({{"index", gpu.index},
                    {"uuid", gpu.uuid},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"numa_node", optional_json(gpu.numa_node)},
                    {"cpu_affinity", optional_json(gpu.cpu_affinity)},
                    {"mig_devices", mig_devices}});
  }
  nlohmann::json links = nlohmann::json::array();
  nlohmann::json matrix = nlohmann::json::array();
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t j = 0; j < machine.gpus.size(); ++j) {
      if (i == j) {
        row.push_back("X");
        continue;
      }
      const Link& link = machine.links[i][j];
      row.push_back(topo_label(link));
      if (j > i) {
        links.push_back({{"gpus", {machine.gpus[i].index, machine.gpus[j].index}},
                         {"label", topo_label(link)},
                         {"nvlinks", link.nvlinks},
                         {"via_nvswitch", link.via_nvswitch},
                         {"pcie", link.pcie ? nlohmann::json(to_string(*link.pcie)) : nullptr}});
      }
    }
    matrix.push_back(row);
  }
  return {{"gpus", gpus}, {"links", links}, {"matrix", matrix}};
}

}  // namespace gpupool
