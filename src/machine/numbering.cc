#include "machine/numbering.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"
#include "machine/cuda_visible_devices.h"
#include "machine/gpu_selection.h"

namespace gpupool {
namespace {

std::optional<std::string> lookup(const std::map<std::string, std::string>& variables,
                                  const std::string& name) {
  auto it = variables.find(name);
  return it != variables.end() ? std::optional<std::string>(it->second) : std::nullopt;
}

std::string quoted_list(std::span<const std::string> uuids) {
  std::vector<std::string> quoted;
  for (const std::string& uuid : uuids) quoted.push_back(nlohmann::json(uuid).dump());
  return fmt::format("[{}]", fmt::join(quoted, ", "));
}

}  // namespace

GpuEnvironment gpu_environment_from(const std::map<std::string, std::string>& variables) {
  return {lookup(variables, "CUDA_VISIBLE_DEVICES"), lookup(variables, "CUDA_DEVICE_ORDER"),
          lookup(variables, "NVIDIA_VISIBLE_DEVICES")};
}

std::string describe_nvidia_visible_devices(const std::optional<std::string>& value) {
  if (!value) return "unset: no GPU was asked for through this variable";
  if (value->empty() || *value == "void") {
    return "no GPU and no driver: the NVIDIA runtime leaves the container alone";
  }
  if (*value == "none") return "no GPU, but the driver's libraries and tools are mounted";
  if (*value == "all") return "every GPU of the host";
  std::vector<std::string> parts;
  for (const std::string& entry : split(*value, ',')) {
    if (all_digits(entry)) {
      parts.push_back(fmt::format("host GPU {}", entry));
    } else if (entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0) {
      parts.push_back(entry);
    } else if (entry.find(':') != std::string::npos) {
      parts.push_back(fmt::format("MIG device {} (GPU:instance)", entry));
    } else {
      parts.push_back(fmt::format("'{}' (not understood by the runtime)", entry));
    }
  }
  return fmt::format("{} (host indices are nvidia-smi's on the host)", fmt::join(parts, ", "));
}

Result<std::vector<HostGpu>> parse_host_inventory(std::string_view json_text) {
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded()) return fail("it is not JSON");
  if (!doc.is_array()) return fail("it is not the array `gpupool list --json` prints");
  std::vector<HostGpu> gpus;
  for (const nlohmann::json& gpu : doc) {
    if (!gpu.is_object() || !gpu.contains("index") || !gpu["index"].is_number_unsigned() ||
        !gpu.contains("uuid") || !gpu["uuid"].is_string()) {
      return fail("a GPU in it lacks a numeric \"index\" or a string \"uuid\"");
    }
    gpus.push_back({gpu["index"].get<unsigned>(), gpu["uuid"].get<std::string>()});
  }
  return gpus;
}

NumberingMap build_numbering_map(std::span<const Gpu> gpus, const NumberingInputs& inputs) {
  const GpuEnvironment& env = inputs.environment;
  VisibleDevicesResolution resolution =
      resolve_visible_devices(gpus, env.cuda_visible_devices, env.cuda_device_order);
  std::map<unsigned, const VisibleDevice*> cuda_device_of;  // nvidia-smi index -> what CUDA sees of it
  for (const VisibleDevice& device : resolution.devices) cuda_device_of[device.nvml_index] = &device;
  NumberingMap map;
  const bool use_inventory = inputs.in_container && inputs.host_inventory;
  if (inputs.in_container && !inputs.host_inventory && !gpus.empty()) {
    map.warnings.push_back(
        "inside a container the host's GPU indices are unknown (the indices and minor numbers here "
        "are the container's): run `gpupool list --json > FILE` on the host and set "
        "GPUPOOL_HOST_INVENTORY=FILE to see them");
  }
  const bool runtime_asked = env.nvidia_visible_devices && !env.nvidia_visible_devices->empty() &&
                             *env.nvidia_visible_devices != "void";
  if (!inputs.in_container && runtime_asked) {
    map.warnings.push_back(
        "NVIDIA_VISIBLE_DEVICES is set, as the NVIDIA container runtime sets it, but no container "
        "was detected: if this is one, the host indices shown are the container's own");
  }
  for (const Gpu& gpu : gpus) {
    NumberingRow row;
    row.container_index = gpu.index;
    row.minor_number = gpu.minor_number;
    row.pci_bus_id = gpu.pci_bus_id;
    row.uuid = gpu.uuid;
    row.name = gpu.name;
    if (auto it = cuda_device_of.find(gpu.index); it != cuda_device_of.end()) {
      row.cuda_index = it->second->cuda_index;
      for (const MigDevice& mig : gpu.mig_devices) {
        if (it->second->mig_index == mig.index) row.cuda_mig_device = mig;
      }
    }
    if (!inputs.in_container) {
      row.host_index = gpu.index;
    } else if (use_inventory) {
      auto host =
          std::find_if(inputs.host_inventory->begin(), inputs.host_inventory->end(),
                       [&](const HostGpu& h) { return lowercase(h.uuid) == lowercase(gpu.uuid); });
      if (host != inputs.host_inventory->end()) {
        row.host_index = host->index;
      } else {
        map.warnings.push_back(fmt::format(
            "GPU {} ({}) is not in the host inventory {}: was it written on another machine?",
            gpu.index, gpu.uuid, inputs.host_inventory_source));
      }
    }
    map.rows.push_back(std::move(row));
  }
  map.error = std::move(resolution.error);
  for (std::string& warning : resolution.warnings) map.warnings.push_back(std::move(warning));
  return map;
}

Result<std::vector<std::string>> select_gpu_uuids(std::span<const Gpu> gpus,
                                                  std::span<const std::string> names) {
  std::vector<std::string> gpu_names;
  for (const std::string& name : names) {
    if (!names_mig_device(name)) gpu_names.push_back(name);
  }
  TRY_ASSIGN(std::vector<unsigned> indices, find_gpus(gpus, gpu_names));
  std::vector<std::string> uuids;
  std::map<std::string, std::string> mig_named_by;  // MIG UUID -> the name that picked it
  auto next_gpu = indices.begin();
  for (const std::string& name : names) {
    if (!names_mig_device(name)) {
      uuids.push_back(find_gpu_by_index(gpus, *next_gpu++)->uuid);
      continue;
    }
    TRY_ASSIGN(const MigDevice* mig, find_mig_device(gpus, name));
    if (auto [it, fresh] = mig_named_by.emplace(mig->uuid, name); !fresh) {
      return fail("MIG device {} is named twice ({} and {})", mig->uuid, quote(it->second), quote(name));
    }
    uuids.push_back(mig->uuid);
  }
  return uuids;
}

std::string docker_gpus_argument(std::span<const std::string> uuids) {
  return fmt::format("--gpus '\"device={}\"'", fmt::join(uuids, ","));
}

std::string docker_gpus_words(std::span<const std::string> uuids) {
  return fmt::format("--gpus \"device={}\"", fmt::join(uuids, ","));
}

nlohmann::json compose_gpu_reservation(std::span<const std::string> uuids) {
  nlohmann::json device = nlohmann::json::object();
  device["driver"] = "nvidia";
  device["device_ids"] = std::vector<std::string>(uuids.begin(), uuids.end());
  device["capabilities"] = nlohmann::json::array({"gpu"});
  nlohmann::json compose;
  compose["deploy"]["resources"]["reservations"]["devices"] = nlohmann::json::array({device});
  return compose;
}

std::string compose_gpu_reservation_yaml(std::span<const std::string> uuids) {
  return fmt::format(
      "deploy:\n"
      "  resources:\n"
      "    reservations:\n"
      "      devices:\n"
      "        - driver: nvidia\n"
      "          device_ids: {}\n"
      "          capabilities: [gpu]\n",
      quoted_list(uuids));
}

}  // namespace gpupool
