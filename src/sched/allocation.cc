#include "sched/allocation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"
#include "sched/placement.h"

namespace gpupool {
namespace {

// Whether `device` of `gpu` is taken: it, or another compute instance of its GPU instance, whose
// memory it shares (a GPU instance's compute instances are not isolated from each other).
bool mig_device_held(const Gpu& gpu, const GpuAvailability& state, const MigDevice& device) {
  auto taken = [&](const std::string& uuid) {
    return std::ranges::find(state.mig_taken, uuid) != state.mig_taken.end() ||
           std::ranges::find(state.mig_external, uuid) != state.mig_external.end();
  };
  return std::ranges::any_of(gpu.mig_devices, [&](const MigDevice& other) {
    return other.gpu_instance_id == device.gpu_instance_id && taken(other.uuid);
  });
}

}  // namespace

void take_out_of_service(GpuAvailability& gpu, const std::string& why) {
  gpu.usable = false;
  gpu.holders = gpu.holders.empty() ? why : gpu.holders + "; " + why;
}

bool may_use(const GpuRequest& request, unsigned index) {
  if (!request.allowed.empty() &&
      std::find(request.allowed.begin(), request.allowed.end(), index) == request.allowed.end()) {
    return false;
  }
  return std::find(request.excluded.begin(), request.excluded.end(), index) == request.excluded.end();
}

bool whole_gpu_free(const Gpu& gpu, const GpuAvailability& state) {
  return state.usable && !gpu.mig_enabled.value_or(false) && !state.exclusive_held && state.shared_mib == 0 &&
         !state.external_busy;
}

uint64_t slice_room(const Gpu& gpu, const GpuAvailability& state) {
  if (!state.usable || gpu.mig_enabled.value_or(false) || state.exclusive_held || !gpu.memory_total_mib) return 0;
  uint64_t taken = state.shared_mib + state.external_mib;
  return taken >= *gpu.memory_total_mib ? 0 : *gpu.memory_total_mib - taken;
}

bool mig_device_matches(const MigDevice& device, const MigRequest& request) {
  return (request.profile.empty() || device.profile == request.profile) && device.memory_mib >= request.min_memory_mib;
}

const MigDevice* free_mig_device(const Gpu& gpu, const GpuAvailability& state, const MigRequest& request) {
  if (!state.usable) return nullptr;
  const MigDevice* best = nullptr;
  for (const MigDevice& device : gpu.mig_devices) {
    if (!mig_device_matches(device, request) || mig_device_held(gpu, state, device)) continue;
    auto key = [](const MigDevice& d) { return std::make_tuple(d.memory_mib, d.compute_slices, d.index); };
    if (best == nullptr || key(device) < key(*best)) best = &device;
  }
  return best;
}

std::string describe_mig_request(const MigRequest& request) {
  std::string what = request.profile.empty() ? "a MIG device" : fmt::format("a {} MIG device", request.profile);
  if (request.min_memory_mib > 0) what += fmt::format(" of at least {} MiB", request.min_memory_mib);
  return what;
}

namespace {

// The MIG profiles of the GPUs a request may use, counted: "1g.10gb x7, 7g.80gb x1".
std::string mig_profiles_allowed(const Machine& machine, const GpuRequest& request) {
  std::map<std::string, unsigned> profiles;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    for (const MigDevice& device : gpu.mig_devices) ++profiles[device.profile];
  }
  std::vector<std::string> parts;
  for (const auto& [profile, count] : profiles) parts.push_back(fmt::format("{} x{}", profile, count));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ", "));
}

Result<std::optional<std::vector<unsigned>>> choose_mig_gpu(const Machine& machine,
                                                            const std::vector<GpuAvailability>& availability,
                                                            const GpuRequest& request) {
  const MigRequest& mig = *request.mig;
  // CUDA enumerates a single MIG device per process (NVIDIA's MIG user guide).
  if (request.count != 1) return fail("a job gets one MIG device: CUDA runs a process on one MIG device only");
  bool exists = false;
  std::optional<std::tuple<uint64_t, unsigned, size_t, unsigned>> best_key;
  unsigned best = 0;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    exists = exists || std::ranges::any_of(gpu.mig_devices, [&](auto& d) { return mig_device_matches(d, mig); });
    const GpuAvailability& state = availability.at(gpu.index);
    const MigDevice* device = free_mig_device(gpu, state, mig);
    if (device == nullptr) continue;
    // Best fit, as for slices: the smallest device, on the GPU with the fewest devices still
    // free, so that GPUs with all their devices free stay whole for larger profiles.
    size_t free_here = 0;
    for (const MigDevice& other : gpu.mig_devices) {
      if (!mig_device_held(gpu, state, other)) ++free_here;
    }
    auto key = std::make_tuple(device->memory_mib, device->compute_slices, free_here, gpu.index);
    if (!best_key || key < *best_key) {
      best_key = key;
      best = gpu.index;
    }
  }
  if (!exists) {
    return fail("no allowed GPU has {} (MIG devices here: {})", describe_mig_request(mig),
                mig_profiles_allowed(machine, request));
  }
  if (!best_key) return std::optional<std::vector<unsigned>>();
  return std::optional<std::vector<unsigned>>(std::vector<unsigned>{best});
}

}  // namespace

Result<std::optional<std::vector<unsigned>>> choose_gpus(const Machine& machine,
                                                         const std::vector<GpuAvailability>& availability,
                                                         const GpuRequest& request,
                                                         const RequestMix* recent) {
  if (request.count == 0) return fail("a request needs at least one GPU");
  if (request.mig) return choose_mig_gpu(machine, availability, request);
  std::vector<unsigned> eligible;
  std::vector<unsigned> in_mig_mode;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    if (gpu.mig_enabled.value_or(false)) {
      in_mig_mode.push_back(gpu.index);
      continue;
    }
    if (request.slice_mib && gpu.memory_total_mib && *gpu.memory_total_mib < *request.slice_mib) continue;
    eligible.push_back(gpu.index);
  }
  if (eligible.size() < request.count && !in_mig_mode.empty()) {
    return fail("need {} GPU{}, but {} of the allowed GPUs {} in MIG mode (GPU {}), where CUDA runs only on "
                "MIG devices: ask for one with --mig PROFILE",
                request.count, request.count == 1 ? "" : "s", in_mig_mode.size(),
                in_mig_mode.size() == 1 ? "is" : "are", fmt::join(in_mig_mode, ","));
  }
  if (eligible.size() < request.count) {
    if (request.slice_mib) {
      return fail("need {} GPU{} with {} MiB to share, but only {} of the allowed GPUs are that large",
                  request.count, request.count == 1 ? "" : "s", *request.slice_mib, eligible.size());
    }
    return fail("need {} GPU{}, but only {} {} allowed on this machine", request.count,
                request.count == 1 ? "" : "s", eligible.size(), eligible.size() == 1 ? "is" : "are");
  }
  std::vector<unsigned> candidates;
  for (unsigned index : eligible) {
    const GpuAvailability& a = availability.at(index);
    bool fits = request.slice_mib ? slice_room(machine.gpus.at(index), a) >= *request.slice_mib
                                  : whole_gpu_free(machine.gpus.at(index), a);
    if (fits) candidates.push_back(index);
  }
  if (candidates.size() < request.count) return std::optional<std::vector<unsigned>>();

  if (request.slice_mib) {
    // Best fit: slices go where the least room is left, so that whole GPUs stay free for
    // exclusive jobs; GPUs already shared come first. Given the recent requests, the growth of
    // what they could not use decides first.
    bool by_fragmentation = recent && !recent->empty();
    std::map<unsigned, std::tuple<double, bool, uint64_t, unsigned>> keys;  // computed once per GPU
    for (unsigned index : candidates) {
      const GpuAvailability& a = availability.at(index);
      bool untouched = a.shared_mib == 0 && a.external_mib == 0;
      uint64_t room = slice_room(machine.gpus.at(index), a);
      double growth =
          by_fragmentation ? fragmentation_growth(*recent, room, whole_gpu_free(machine.gpus.at(index), a), *request.slice_mib) : 0;
      keys[index] = std::make_tuple(growth, untouched, room, index);
    }
    std::sort(candidates.begin(), candidates.end(), [&](unsigned a, unsigned b) { return keys[a] < keys[b]; });
    if (request.count == 1) return std::optional<std::vector<unsigned>>(std::vector<unsigned>{candidates[0]});
  }
  TRY_ASSIGN(Placement placement, place(machine.links, candidates, request.count));
  return std::optional<std::vector<unsigned>>(placement.gpus);
}

std::string describe_wait(const Machine& machine, const std::vector<GpuAvailability>& availability,
                          const GpuRequest& request) {
  if (request.mig) {
    // "waiting for a 1g.10gb MIG device: 7 of 7 taken (GPU 0: 7)".
    size_t matching = 0, taken = 0;
    std::vector<std::string> parts;
    for (const Gpu& gpu : machine.gpus) {
      if (!may_use(request, gpu.index)) continue;
      const GpuAvailability& a = availability.at(gpu.index);
      size_t here = 0, taken_here = 0;
      for (const MigDevice& device : gpu.mig_devices) {
        if (!mig_device_matches(device, *request.mig)) continue;
        ++here;
        if (mig_device_held(gpu, a, device) || !a.usable) ++taken_here;
      }
      matching += here;
      taken += taken_here;
      if (taken_here > 0) parts.push_back(fmt::format("GPU {}: {}", gpu.index, taken_here));
    }
    return fmt::format("waiting for {}: {} of {} taken ({})", describe_mig_request(*request.mig), taken, matching,
                       fmt::join(parts, "; "));
  }
  // GPUs held by the same holders are named together: "GPU 0,1,2: alice (big)".
  std::vector<std::pair<std::string, std::vector<unsigned>>> by_holder;
  size_t busy = 0;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    const GpuAvailability& a = availability.at(gpu.index);
    bool blocks = request.slice_mib ? slice_room(gpu, a) < *request.slice_mib : !whole_gpu_free(gpu, a);
    if (!blocks) continue;
    ++busy;
    std::string who = !a.holders.empty() ? a.holders : !a.usable ? "unusable" : "in use";
    auto same = std::find_if(by_holder.begin(), by_holder.end(), [&](auto& entry) { return entry.first == who; });
    if (same == by_holder.end()) {
      by_holder.push_back({who, {gpu.index}});
    } else {
      same->second.push_back(gpu.index);
    }
  }
  std::vector<std::string> parts;
  for (const auto& [who, gpus] : by_holder) parts.push_back(fmt::format("GPU {}: {}", fmt::join(gpus, ","), who));
  std::string what = request.slice_mib ? fmt::format("{} MiB on {} GPU{}", *request.slice_mib, request.count,
                                                     request.count == 1 ? "" : "s")
                                       : fmt::format("{} GPU{}", request.count, request.count == 1 ? "" : "s");
  return fmt::format("waiting for {}: {} busy ({})", what, busy, fmt::join(parts, "; "));
}

Result<uint64_t> parse_memory_mib(const std::string& text) {
  std::string unit;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(value) || value <= 0) {
    return fail("invalid memory size {}: expected e.g. 20G, 512M or a number of MiB", quote(text));
  }
  for (const char* p = end; *p != '\0'; ++p) unit += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  double mib = 0;
  if (unit.empty() || unit == "M" || unit == "MB" || unit == "MIB") {
    mib = value;
  } else if (unit == "G" || unit == "GB" || unit == "GIB") {
    mib = value * 1024;
  } else if (unit == "T" || unit == "TB" || unit == "TIB") {
    mib = value * 1024 * 1024;
  } else {
    return fail("invalid memory size {}: unknown unit {} (use M, G or T)", quote(text), quote(unit));
  }
  if (mib < 1 || mib > 1e12) return fail("invalid memory size {}: out of range", quote(text));
  return static_cast<uint64_t>(std::ceil(mib));
}

LeasedDevices devices_for(const Machine& machine, const std::vector<GpuAvailability>& availability,
                          const GpuRequest& request, std::vector<unsigned> gpus) {
  LeasedDevices leased{std::move(gpus), request.slice_mib};
  if (request.mig && leased.gpus.size() == 1) {
    unsigned gpu = leased.gpus.front();
    if (const MigDevice* device = free_mig_device(machine.gpus.at(gpu), availability.at(gpu), *request.mig)) {
      leased.mig_uuid = device->uuid;
    }
  }
  return leased;
}

std::vector<std::string> mig_environment(const Machine& machine, const LeasedDevices& leased) {
  if (leased.mig_uuid.empty()) return {};
  std::vector<std::string> env = {fmt::format("CUDA_VISIBLE_DEVICES={}", leased.mig_uuid)};
  for (unsigned index : leased.gpus) {
    const Gpu& gpu = machine.gpus.at(index);
    env.push_back(fmt::format("GPUPOOL_GPU_UUIDS={}", gpu.uuid));
    env.push_back(fmt::format("GPUPOOL_MIG_UUID={}", leased.mig_uuid));
    if (const MigDevice* device = mig_device_with_uuid(gpu, leased.mig_uuid)) {
      env.push_back(fmt::format("GPUPOOL_MEM_MIB={}", device->memory_mib));
    }
  }
  return env;
}

std::vector<std::string> gpu_environment(const Machine& machine, const LeasedDevices& leased, const std::string& job) {
  std::vector<std::string> uuids, indices;
  for (unsigned index : leased.gpus) {
    uuids.push_back(machine.gpus.at(index).uuid);
    indices.push_back(std::to_string(index));
  }
  std::vector<std::string> env = {
      // Full UUIDs: they name the same card under any CUDA_DEVICE_ORDER and inside containers.
      // The driver takes a MIG device's UUID there too (R470 and later): mig_environment.
      fmt::format("CUDA_VISIBLE_DEVICES={}", fmt::join(uuids, ",")),
      "CUDA_DEVICE_ORDER=PCI_BUS_ID",
      fmt::format("GPUPOOL_JOB={}", job),
      fmt::format("GPUPOOL_GPUS={}", fmt::join(indices, ",")),
      fmt::format("GPUPOOL_GPU_UUIDS={}", fmt::join(uuids, ",")),
  };
  if (leased.slice_mib) env.push_back(fmt::format("GPUPOOL_MEM_MIB={}", *leased.slice_mib));
  return with_overrides(env, mig_environment(machine, leased));
}

std::vector<std::string> slice_memory_limits(const Machine& machine, const std::vector<unsigned>& gpus,
                                             const std::optional<uint64_t>& slice_mib) {
  if (!slice_mib) return {};
  std::optional<uint64_t> smallest_mib;
  for (unsigned index : gpus) {
    if (auto total = machine.gpus.at(index).memory_total_mib; total && *total > 0) {
      smallest_mib = std::min(smallest_mib.value_or(*total), *total);
    }
  }
  std::vector<std::string> env;
  if (smallest_mib) {
    // Rounded down: JAX takes the fraction of the card it sees, and more than the slice is an overrun.
    double fraction = std::min(1.0, static_cast<double>(*slice_mib) / static_cast<double>(*smallest_mib));
    env.push_back(fmt::format("XLA_PYTHON_CLIENT_MEM_FRACTION={:.4f}", std::floor(fraction * 10000) / 10000));
  }
  env.push_back("XLA_PYTHON_CLIENT_PREALLOCATE=false");
  env.push_back("TF_FORCE_GPU_ALLOW_GROWTH=true");
  env.push_back(fmt::format("CUPY_GPU_MEMORY_LIMIT={}", *slice_mib << 20));
  return env;
}

std::vector<std::string> lease_environment(const std::vector<std::string>& environment, const Machine& machine,
                                           const LeasedDevices& leased, const std::string& job) {
  return with_defaults(with_overrides(environment, gpu_environment(machine, leased, job)),
                       slice_memory_limits(machine, leased.gpus, leased.slice_mib));
}

}  // namespace gpupool
