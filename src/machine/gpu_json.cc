#include "machine/gpu_json.h"

#include <cmath>

#include <fmt/format.h>

namespace gpupool {
namespace {

template <typename T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// Watts with two decimals, as NVML's milliwatts allow and nvidia-smi prints.
nlohmann::json watts_json(const std::optional<double>& watts) {
  if (!watts) return nullptr;
  return std::round(*watts * 100.0) / 100.0;
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
          {"command", optional_json(process.command)}};
}

nlohmann::json to_json(const Gpu& gpu) {
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& process : gpu.processes) processes.push_back(to_json(process));
  nlohmann::json compute_capability = nullptr;
  if (gpu.compute_capability_major && gpu.compute_capability_minor) {
    compute_capability = fmt::format("{}.{}", *gpu.compute_capability_major, *gpu.compute_capability_minor);
  }
  return {{"index", gpu.index},
          {"uuid", gpu.uuid},
          {"pci_bus_id", gpu.pci_bus_id},
          {"name", gpu.name},
          {"fault", optional_json(gpu.fault)},
          {"minor_number", optional_json(gpu.minor_number)},
          {"memory_total_mib", optional_json(gpu.memory_total_mib)},
          {"memory_used_mib", optional_json(gpu.memory_used_mib)},
          {"memory_free_mib", optional_json(gpu.memory_free_mib)},
          {"utilization_gpu", optional_json(gpu.utilization_gpu)},
          {"utilization_memory", optional_json(gpu.utilization_memory)},
          {"temperature_c", optional_json(gpu.temperature_c)},
          {"sm_clock_mhz", optional_json(gpu.sm_clock_mhz)},
          {"memory_clock_mhz", optional_json(gpu.memory_clock_mhz)},
          {"power_w", watts_json(gpu.power_w)},
          {"power_limit_w", watts_json(gpu.power_limit_w)},
          {"persistence_mode", optional_json(gpu.persistence_mode)},
          {"compute_mode", gpu.compute_mode ? nlohmann::json(to_string(*gpu.compute_mode)) : nullptr},
          {"mig_enabled", optional_json(gpu.mig_enabled)},
          {"ecc_errors_corrected_volatile", optional_json(gpu.ecc_corrected_volatile)},
          {"ecc_errors_uncorrected_volatile", optional_json(gpu.ecc_uncorrected_volatile)},
          {"numa_node", optional_json(gpu.numa_node)},
          {"cpu_affinity", optional_json(gpu.cpu_affinity)},
          {"compute_capability", compute_capability},
          {"multiprocessors", optional_json(gpu.multiprocessors)},
          {"processes", processes}};
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
    gpus.push_back({{"index", gpu.index},
                    {"uuid", gpu.uuid},
                    {"pci_bus_id", gpu.pci_bus_id},
                    {"numa_node", optional_json(gpu.numa_node)},
                    {"cpu_affinity", optional_json(gpu.cpu_affinity)}});
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
