#include "sched/allocation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"
#include "sched/placement.h"

namespace gpupool {

bool may_use(const GpuRequest& request, unsigned index) {
  if (!request.allowed.empty() &&
      std::find(request.allowed.begin(), request.allowed.end(), index) == request.allowed.end()) {
    return false;
  }
  return std::find(request.excluded.begin(), request.excluded.end(), index) == request.excluded.end();
}

bool whole_gpu_free(const GpuAvailability& gpu) {
  return gpu.usable && !gpu.exclusive_held && gpu.shared_mib == 0 && !gpu.external_busy;
}

uint64_t slice_room(const Gpu& gpu, const GpuAvailability& state) {
  if (!state.usable || state.exclusive_held || !gpu.memory_total_mib) return 0;
  uint64_t taken = state.shared_mib + state.external_mib;
  return taken >= *gpu.memory_total_mib ? 0 : *gpu.memory_total_mib - taken;
}

Result<std::optional<std::vector<unsigned>>> choose_gpus(const Machine& machine,
                                                         const std::vector<GpuAvailability>& availability,
                                                         const GpuRequest& request) {
  if (request.count == 0) return fail("a request needs at least one GPU");
  std::vector<unsigned> eligible;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    if (request.slice_mib && gpu.memory_total_mib && *gpu.memory_total_mib < *request.slice_mib) continue;
    eligible.push_back(gpu.index);
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
                                  : whole_gpu_free(a);
    if (fits) candidates.push_back(index);
  }
  if (candidates.size() < request.count) return std::optional<std::vector<unsigned>>();

  if (request.slice_mib) {
    // Best fit: slices go where the least room is left, so that whole GPUs stay free for
    // exclusive jobs; GPUs already shared come first.
    auto key = [&](unsigned index) {
      const GpuAvailability& a = availability.at(index);
      bool untouched = a.shared_mib == 0 && a.external_mib == 0;
      return std::make_tuple(untouched, slice_room(machine.gpus.at(index), a), index);
    };
    std::sort(candidates.begin(), candidates.end(), [&](unsigned a, unsigned b) { return key(a) < key(b); });
    if (request.count == 1) return std::optional<std::vector<unsigned>>(std::vector<unsigned>{candidates[0]});
  }
  TRY_ASSIGN(Placement placement, place(machine.links, candidates, request.count));
  return std::optional<std::vector<unsigned>>(placement.gpus);
}

std::string describe_wait(const Machine& machine, const std::vector<GpuAvailability>& availability,
                          const GpuRequest& request) {
  // GPUs held by the same holders are named together: "GPU 0,1,2: alice (big)".
  std::vector<std::pair<std::string, std::vector<unsigned>>> by_holder;
  size_t busy = 0;
  for (const Gpu& gpu : machine.gpus) {
    if (!may_use(request, gpu.index)) continue;
    const GpuAvailability& a = availability.at(gpu.index);
    bool blocks = request.slice_mib ? slice_room(gpu, a) < *request.slice_mib : !whole_gpu_free(a);
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

std::vector<std::string> gpu_environment(const Machine& machine, const std::vector<unsigned>& gpus,
                                         const std::string& job, const std::optional<uint64_t>& slice_mib) {
  std::vector<std::string> uuids, indices;
  for (unsigned index : gpus) {
    uuids.push_back(machine.gpus.at(index).uuid);
    indices.push_back(std::to_string(index));
  }
  std::vector<std::string> env = {
      // Full UUIDs: they name the same card under any CUDA_DEVICE_ORDER and inside containers.
      fmt::format("CUDA_VISIBLE_DEVICES={}", fmt::join(uuids, ",")),
      "CUDA_DEVICE_ORDER=PCI_BUS_ID",
      fmt::format("GPUPOOL_JOB={}", job),
      fmt::format("GPUPOOL_GPUS={}", fmt::join(indices, ",")),
      fmt::format("GPUPOOL_GPU_UUIDS={}", fmt::join(uuids, ",")),
  };
  if (slice_mib) env.push_back(fmt::format("GPUPOOL_MEM_MIB={}", *slice_mib));
  return env;
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
                                           const std::vector<unsigned>& gpus, const std::string& job,
                                           const std::optional<uint64_t>& slice_mib) {
  return with_defaults(with_overrides(environment, gpu_environment(machine, gpus, job, slice_mib)),
                       slice_memory_limits(machine, gpus, slice_mib));
}

}  // namespace gpupool
