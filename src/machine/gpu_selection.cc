#include "machine/gpu_selection.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"

namespace gpupool {
namespace {

std::string index_list(std::span<const Gpu> gpus) {
  std::vector<unsigned> indices;
  for (const Gpu& gpu : gpus) indices.push_back(gpu.index);
  return fmt::format("{}", fmt::join(indices, ", "));
}

}  // namespace

const Gpu* find_gpu_by_index(std::span<const Gpu> gpus, unsigned index) {
  auto it = std::find_if(gpus.begin(), gpus.end(), [&](const Gpu& gpu) { return gpu.index == index; });
  return it != gpus.end() ? &*it : nullptr;
}

Result<unsigned> find_gpu(std::span<const Gpu> gpus, std::string_view name) {
  if (all_digits(name)) {
    const Gpu* gpu = name.size() <= 9 ? find_gpu_by_index(gpus, static_cast<unsigned>(std::stoul(std::string(name))))
                                      : nullptr;
    if (gpu == nullptr) return fail("no GPU {} here: the GPU indices are {}", name, index_list(gpus));
    return gpu->index;
  }
  std::string wanted = lowercase(name);
  if (wanted.rfind("gpu-", 0) != 0 || wanted.size() == 4) {
    return fail("{} is neither a GPU index nor a GPU UUID (GPU-...)", quote(name));
  }
  std::vector<unsigned> matches;
  for (const Gpu& gpu : gpus) {
    if (lowercase(gpu.uuid).rfind(wanted, 0) == 0) matches.push_back(gpu.index);
  }
  if (matches.empty()) return fail("no GPU here has a UUID starting with {}", quote(name));
  if (matches.size() > 1) {
    return fail("{} fits the UUIDs of GPUs {}: give more of the UUID", quote(name), fmt::join(matches, ", "));
  }
  return matches.front();
}

bool names_mig_device(std::string_view name) {
  const size_t colon = name.find(':');
  if (colon != std::string_view::npos) return all_digits(name.substr(0, colon)) && all_digits(name.substr(colon + 1));
  return lowercase(name).rfind("mig-", 0) == 0;
}

Result<const MigDevice*> find_mig_device(std::span<const Gpu> gpus, std::string_view name) {
  if (!names_mig_device(name)) return fail("{} is neither a MIG UUID (MIG-...) nor GPU:DEVICE", quote(name));
  const size_t colon = name.find(':');
  if (colon != std::string_view::npos) {
    TRY_ASSIGN(unsigned index, find_gpu(gpus, name.substr(0, colon)));
    const Gpu& gpu = *find_gpu_by_index(gpus, index);
    const std::string_view device = name.substr(colon + 1);
    for (const MigDevice& mig : gpu.mig_devices) {
      if (device.size() <= 9 && mig.index == std::stoul(std::string(device))) return &mig;
    }
    if (gpu.mig_devices.empty()) return fail("GPU {} has no MIG devices", gpu.index);
    std::vector<unsigned> indices;
    for (const MigDevice& mig : gpu.mig_devices) indices.push_back(mig.index);
    return fail("GPU {} has no MIG device {}: its MIG devices are {}", gpu.index, device, fmt::join(indices, ", "));
  }
  const std::string wanted = lowercase(name);
  if (wanted.size() == 4) return fail("{} is not followed by a UUID", quote(name));
  std::vector<const MigDevice*> matches;
  for (const Gpu& gpu : gpus) {
    for (const MigDevice& mig : gpu.mig_devices) {
      if (lowercase(mig.uuid).rfind(wanted, 0) == 0) matches.push_back(&mig);
    }
  }
  if (matches.empty()) return fail("no MIG device here has a UUID starting with {}", quote(name));
  if (matches.size() > 1) {
    return fail("{} fits the UUIDs of {} MIG devices: give more of the UUID", quote(name), matches.size());
  }
  return matches.front();
}

Result<std::vector<unsigned>> find_gpus(std::span<const Gpu> gpus, std::span<const std::string> names) {
  std::vector<unsigned> out;
  std::map<unsigned, std::string> named_by;  // GPU index -> the name that picked it
  for (const std::string& name : names) {
    TRY_ASSIGN(unsigned index, find_gpu(gpus, name));
    if (auto [it, fresh] = named_by.emplace(index, name); !fresh) {
      return fail("GPU {} is named twice ({} and {})", index, quote(it->second), quote(name));
    }
    out.push_back(index);
  }
  return out;
}

}  // namespace gpupool
