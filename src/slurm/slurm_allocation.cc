#include "slurm/slurm_allocation.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/quote.h"
#include "base/text.h"
#include "machine/cuda_visible_devices.h"

namespace gpupool {
namespace {

std::optional<std::string> lookup(const std::map<std::string, std::string>& environment, const char* name) {
  auto it = environment.find(name);
  if (it == environment.end()) return std::nullopt;
  return it->second;
}

// Slurm's number for a GPU: the N of its /dev/nvidiaN, which is the minor number. Where the
// driver would not say, the nvidia-smi index is the best guess (they agree on most machines).
unsigned device_number(const Gpu& gpu) { return gpu.minor_number.value_or(gpu.index); }

// The positions (in machine.gpus) that a Slurm GPU list names.
Result<std::set<size_t>> read_slurm_list(const std::string& variable, const std::string& value,
                                         const Machine& machine) {
  std::set<size_t> chosen;
  for (const std::string& raw : split(value, ',')) {
    const std::string& name = raw;
    if (name.empty()) continue;
    std::optional<size_t> found;
    if (all_digits(name) && name.size() <= 9) {
      unsigned number = static_cast<unsigned>(std::stoul(name));
      for (size_t i = 0; i < machine.gpus.size(); ++i) {
        if (device_number(machine.gpus[i]) == number) found = i;
      }
      if (!found) return fail("{}={}: no GPU here is /dev/nvidia{}", variable, value, number);
    } else if (lowercase(name).rfind("mig-", 0) == 0) {
      return fail("{}={}: MIG devices cannot make a pool yet; ask Slurm for whole GPUs", variable, value);
    } else if (lowercase(name).rfind("gpu-", 0) == 0) {
      for (size_t i = 0; i < machine.gpus.size(); ++i) {
        if (lowercase(machine.gpus[i].uuid) == lowercase(name)) found = i;
      }
      if (!found) return fail("{}={}: no GPU here has the UUID {}", variable, value, name);
    } else {
      return fail("{}={}: {} is neither a device number nor a GPU UUID", variable, value, quote(name));
    }
    chosen.insert(*found);
  }
  return chosen;
}

Result<std::set<size_t>> read_cuda_visible_devices(const std::string& value,
                                                   const std::optional<std::string>& order,
                                                   const Machine& machine) {
  VisibleDevicesResolution resolution = resolve_visible_devices(machine.gpus, value, order);
  if (resolution.error) return fail("CUDA_VISIBLE_DEVICES={}: {}", value, *resolution.error);
  std::set<size_t> chosen;
  for (const VisibleDevice& device : resolution.devices) {
    for (size_t i = 0; i < machine.gpus.size(); ++i) {
      if (machine.gpus[i].index == device.nvml_index) chosen.insert(i);
    }
  }
  return chosen;
}

}  // namespace

Result<std::optional<SlurmAllocation>> slurm_allocation(const std::map<std::string, std::string>& environment,
                                                        const Machine& machine) {
  std::optional<std::string> job_id = lookup(environment, "SLURM_JOB_ID");
  if (!job_id || job_id->empty()) return std::optional<SlurmAllocation>();
  SlurmAllocation allocation;
  allocation.job_id = *job_id;
  std::set<size_t> chosen;
  bool named = false;
  for (const char* variable : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    std::optional<std::string> value = lookup(environment, variable);
    if (!value || value->empty()) continue;
    TRY_ASSIGN(chosen, read_slurm_list(variable, *value, machine));
    allocation.source = fmt::format("{}={}", variable, *value);
    named = true;
    break;
  }
  if (!named) {
    if (std::optional<std::string> visible = lookup(environment, "CUDA_VISIBLE_DEVICES")) {
      TRY_ASSIGN(chosen, read_cuda_visible_devices(*visible, lookup(environment, "CUDA_DEVICE_ORDER"), machine));
      allocation.source = fmt::format("CUDA_VISIBLE_DEVICES={}", *visible);
    }
  }
  if (chosen.empty()) {
    return fail("Slurm job {} has no GPUs ({}): ask for them with --gres=gpu:N or --gpus=N", *job_id,
                allocation.source.empty() ? "SLURM_JOB_GPUS is not set" : allocation.source);
  }
  for (size_t i : chosen) allocation.uuids.push_back(machine.gpus[i].uuid);
  return std::optional<SlurmAllocation>(std::move(allocation));
}

Result<Machine> machine_restricted_to(const Machine& machine, const std::vector<std::string>& uuids) {
  std::vector<size_t> kept;
  for (const std::string& uuid : uuids) {
    auto it = std::find_if(machine.gpus.begin(), machine.gpus.end(), [&](const Gpu& gpu) { return gpu.uuid == uuid; });
    if (it == machine.gpus.end()) return fail("GPU {} is not on this machine", uuid);
    kept.push_back(static_cast<size_t>(it - machine.gpus.begin()));
  }
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  Machine restricted;
  restricted.driver = machine.driver;
  for (size_t i : kept) {
    Gpu gpu = machine.gpus[i];
    gpu.index = static_cast<unsigned>(restricted.gpus.size());
    restricted.gpus.push_back(std::move(gpu));
  }
  // Some discoveries skip the links (DiscoveryScope): then there are none to cut down.
  if (!machine.links.empty()) {
    for (size_t i : kept) {
      std::vector<Link> row;
      for (size_t j : kept) row.push_back(machine.links.at(i).at(j));
      restricted.links.push_back(std::move(row));
    }
  }
  return restricted;
}

}  // namespace gpupool
