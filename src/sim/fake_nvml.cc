// The simulated libnvidia-ml.so.1: answers NVML calls from a topology fixture
// (GPUPOOL_SIM) plus an optional live overlay (GPUPOOL_SIM_STATE), so gpupool's
// real NVML code path runs on machines without a GPU. Built in two generations:
// "current" exports today's versioned entry points, "legacy"
// (GPUPOOL_FAKE_NVML_LEGACY) only those an old driver had, so the loader's
// fallbacks run too. docs/fixtures.md describes both.

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/cpu_list.h"
#include "gpu/field_values.h"
#include "gpu/gpm_metrics.h"
#include "nvml/nvml_api.h"
#include "sim/fake_cuda_state.h"
#include "sim/fake_nvml_simulator.h"
#include "sim/fixture.h"

#define GPUPOOL_NVML_EXPORT extern "C" __attribute__((visibility("default")))

// A GPM sample buffer: the GPU (and GPU instance) it sampled and the activity readings at the time.
struct nvmlGpmSample_st {
  std::optional<unsigned> index;  // empty until sampled
  std::optional<unsigned> gpu_instance;  // a MIG sample's
  gpupool::sim::FixtureGpu gpu;
  gpupool::MigActivity instance;  // a MIG sample's, idle (0) where the fixture gives none
};

namespace gpupool::sim {
namespace {

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;
constexpr unsigned kSimulatedNvSwitches =
    6;  // NVSwitch chips the made-up fabric spreads links over

nvmlReturn_t copy_string(std::string_view value, char* buffer, unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, value.data(), value.size());
  buffer[value.size()] = '\0';
  return NVML_SUCCESS;
}

nvmlReturn_t copy_optional_string(const std::optional<std::string>& value, char* buffer,
                                  unsigned length) {
  if (buffer == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value) return NVML_ERROR_NOT_SUPPORTED;
  return copy_string(*value, buffer, length);
}

// Writes a fixture value to an NVML out-parameter; a null fixture value is NOT_SUPPORTED.
template <typename Out, typename Value>
nvmlReturn_t report(const std::optional<Value>& value, Out* out) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!value) return NVML_ERROR_NOT_SUPPORTED;
  *out = static_cast<Out>(*value);
  return NVML_SUCCESS;
}

std::optional<nvmlEnableState_t> enable_state(const std::optional<bool>& enabled) {
  if (!enabled) return std::nullopt;
  return *enabled ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
}

unsigned hex_field(std::string_view text) {
  unsigned value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value, 16);
  return value;
}

// The fixture validated the form "DDDDDDDD:BB:DD.F".
nvmlPciInfo_t pci_info(const std::string& bus_id) {
  nvmlPciInfo_t info{};
  info.domain = hex_field(std::string_view(bus_id).substr(0, 8));
  info.bus = hex_field(std::string_view(bus_id).substr(9, 2));
  info.device = hex_field(std::string_view(bus_id).substr(12, 2));
  info.pciDeviceId = 0x10DE;  // NVIDIA's vendor id; fixtures do not model device ids
  copy_string(bus_id, info.busId, sizeof info.busId);
  copy_string(
      fmt::format("{:04X}:{:02X}:{:02X}.{}", info.domain, info.bus, info.device, bus_id.back()),
      info.busIdLegacy, sizeof info.busIdLegacy);
  return info;
}

nvmlReturn_t report_pci_info(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return simulator().device(device, Needs::Identity, [&](const Query& query) {
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *pci = pci_info(query.gpu.pci_bus_id);
    return NVML_SUCCESS;
  });
}

// A made-up bus id for NVSwitch chip `chip`: one no GPU of the machine uses, so the far end
// of a switch link is never mistaken for a GPU.
std::string nvswitch_bus_id(const Fixture& machine, unsigned chip) {
  std::vector<unsigned> used;
  for (const FixtureGpu& gpu : machine.gpus) used.push_back(pci_info(gpu.pci_bus_id).bus);
  unsigned skipped = 0;
  for (unsigned bus = 0xFF; bus > 0; --bus) {
    if (std::find(used.begin(), used.end(), bus) != used.end()) continue;
    if (skipped++ == chip) return fmt::format("00000000:{:02X}:00.0", bus);
  }
  return "00000000:00:00.0";
}

// What is at the far end of one NVLink: a GPU, or the NVSwitch fabric.
struct LinkEnd {
  std::optional<unsigned> peer;
  unsigned switch_link = 0;  // ordinal among the GPU's NVSwitch links
};

// The GPU's links in fixture order: peer entries, then NVSwitch links.
std::vector<LinkEnd> link_ends(const FixtureGpu& gpu) {
  std::vector<LinkEnd> ends;
  for (const NvLinkPeer& peer : gpu.nvlinks)
    ends.insert(ends.end(), peer.links, LinkEnd{peer.peer, 0});
  for (unsigned k = 0; k < gpu.nvswitch_links; ++k) ends.push_back(LinkEnd{std::nullopt, k});
  return ends;
}

// Runs `answer` with the far end of the link, or nullptr for a link that is down: one past
// the GPU's NVLinks, or one to a lost GPU. A GPU without NVLinks supports no link calls.
template <typename Answer>
nvmlReturn_t nvlink(nvmlDevice_t device, unsigned link, Answer&& answer) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<LinkEnd> ends = link_ends(query.gpu);
    if (ends.empty()) return NVML_ERROR_NOT_SUPPORTED;
    const LinkEnd* end = link < ends.size() ? &ends[link] : nullptr;
    if (end != nullptr && end->peer && query.machine.gpus[*end->peer].fault) end = nullptr;
    return answer(query.machine, end);
  });
}

nvmlReturn_t nvlink_remote_pci(nvmlDevice_t device, unsigned link, nvmlPciInfo_t* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return nvlink(device, link, [&](const Fixture& machine, const LinkEnd* end) {
    if (end == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *pci = pci_info(end->peer ? machine.gpus[*end->peer].pci_bus_id
                              : nvswitch_bus_id(machine, end->switch_link % kSimulatedNvSwitches));
    return NVML_SUCCESS;
  });
}

std::optional<unsigned> milliwatts(const std::optional<double>& watts) {
  if (!watts) return std::nullopt;
  return static_cast<unsigned>(std::lround(*watts * 1000.0));
}

nvmlReturn_t device_count(unsigned* count) {
  return simulator().system([&](const Fixture& machine) {
    return report(std::optional<size_t>(machine.gpus.size()), count);
  });
}

nvmlReturn_t memory_info(nvmlDevice_t device, nvmlMemory_t* memory) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!query.gpu.memory_total_mib) return NVML_ERROR_NOT_SUPPORTED;
    // The first memory call knew no "reserved": the driver's share counted as used.
    memory->total = *query.gpu.memory_total_mib * kMiB;
    memory->used = (query.gpu.memory_used_mib + query.gpu.memory_reserved_mib) * kMiB;
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
  });
}

// Lists the processes of one kind; compute+graphics processes appear in both lists. A process the
// simulated CUDA driver checkpointed is left out, here and in the utilisation samples: the real
// driver frees its GPU memory and contexts, and NVML then lists it nowhere.
// `mps_clients_only`: nvmlDeviceGetMPSComputeRunningProcesses, the compute processes that are
// clients of an MPS server.
template <typename Record>
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned* count, Record* infos,
                               ProcessKind kind, bool mps_clients_only = false) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    std::vector<const FixtureProcess*> listed;
    for (const FixtureProcess& process : query.gpu.processes) {
      if (is_checkpointed(static_cast<int>(process.pid))) continue;
      if ((process.kind == kind || process.kind == ProcessKind::ComputeAndGraphics) &&
          (!mps_clients_only || process.mps_client))
        listed.push_back(&process);
    }
    if (*count < listed.size()) {
      *count = static_cast<unsigned>(listed.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (infos == nullptr && !listed.empty()) return NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < listed.size(); ++i) {
      Record record{};
      record.pid = listed[i]->pid;
      record.usedGpuMemory = listed[i]->used_memory_mib ? *listed[i]->used_memory_mib * kMiB
                                                        : NVML_VALUE_NOT_AVAILABLE_ULL;
      if constexpr (std::is_same_v<Record, nvmlProcessInfo_v2_t>) {
        record.gpuInstanceId = listed[i]->gpu_instance_id.value_or(kNoGpuInstance);
        record.computeInstanceId = listed[i]->gpu_instance_id ? 0 : kNoGpuInstance;
      }
      infos[i] = record;
    }
    *count = static_cast<unsigned>(listed.size());
    return NVML_SUCCESS;
  });
}

// One sample per process that ran kernels (a non-zero sm_utilization), stamped now; NVML's
// NOT_FOUND when there is none, INSUFFICIENT_SIZE with the count for a buffer too small.
nvmlReturn_t process_utilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples, unsigned* count) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (query.gpu.mig_enabled.value_or(false)) return NVML_ERROR_NOT_SUPPORTED;
    std::vector<nvmlProcessUtilizationSample_t> taken;
    const auto now_us = static_cast<unsigned long long>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    for (const FixtureProcess& process : query.gpu.processes) {
      if (process.sm_utilization > 0 && !is_checkpointed(static_cast<int>(process.pid))) {
        taken.push_back({process.pid, now_us, process.sm_utilization, 0, 0, 0});
      }
    }
    if (taken.empty()) return NVML_ERROR_NOT_FOUND;
    if (samples == nullptr || *count < taken.size()) {
      *count = static_cast<unsigned>(taken.size());
      return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::copy(taken.begin(), taken.end(), samples);
    *count = static_cast<unsigned>(taken.size());
    return NVML_SUCCESS;
  });
}

// Sets bit n of a mask of unsigned long words for each n listed; numbers beyond the mask are
// dropped.
nvmlReturn_t fill_mask(const std::vector<unsigned>& bits, unsigned words, unsigned long* mask) {
  if (mask == nullptr || words == 0) return NVML_ERROR_INVALID_ARGUMENT;
  constexpr unsigned kBitsPerWord = sizeof(unsigned long) * CHAR_BIT;
  std::fill(mask, mask + words, 0UL);
  for (unsigned bit : bits) {
    if (bit / kBitsPerWord < words) mask[bit / kBitsPerWord] |= 1UL << (bit % kBitsPerWord);
  }
  return NVML_SUCCESS;
}

nvmlReturn_t cuda_driver_version(int* version) {
  return simulator().system(
      [&](const Fixture& machine) { return report(machine.driver.cuda_driver_version, version); });
}

const char* error_string(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

}  // namespace
}  // namespace gpupool::sim

using gpupool::ComputeMode;
using gpupool::ProcessKind;
using gpupool::sim::process_utilization;
using gpupool::sim::Fixture;
using gpupool::sim::FixtureGpu;
using gpupool::sim::LinkEnd;
using gpupool::sim::MigQuery;
using gpupool::sim::Needs;
using gpupool::sim::Query;
using gpupool::sim::report;
using gpupool::sim::simulator;

// ---- Initialisation and system queries ----

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlInit() { return simulator().init(); }
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlShutdown() { return simulator().shutdown(); }
GPUPOOL_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
  return gpupool::sim::error_string(result);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return simulator().system([&](const Fixture& machine) {
    return gpupool::sim::copy_optional_string(machine.driver.driver_version, version, length);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return simulator().system([&](const Fixture& machine) {
    return gpupool::sim::copy_optional_string(machine.driver.nvml_version, version, length);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return gpupool::sim::cuda_driver_version(version);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return gpupool::sim::device_count(count);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                            nvmlDevice_t* device) {
  return simulator().handle_by_index(index, device);
}

// ---- Identity: answered even by a lost GPU ----

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                   unsigned int length) {
  return simulator().device(device, Needs::Identity, [&](const Query& query) {
    return gpupool::sim::copy_string(query.gpu.name, name, length);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                   unsigned int length) {
  if (simulator().is_mig_handle(device)) {
    return simulator().mig_device(
        device, [&](const MigQuery& query) { return gpupool::sim::copy_string(query.mig.uuid, uuid, length); });
  }
  return simulator().device(device, Needs::Identity, [&](const Query& query) {
    return gpupool::sim::copy_string(query.gpu.uuid, uuid, length);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                          unsigned int* minor) {
  return simulator().device(device, Needs::Identity, [&](const Query& query) {
    return report(query.gpu.minor_number, minor);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return gpupool::sim::report_pci_info(device, pci);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return gpupool::sim::report_pci_info(device, pci);
}

// ---- State ----

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device,
                                                         nvmlMemory_t* memory) {
  return gpupool::sim::memory_info(device, memory);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                               nvmlUtilization_t* rates) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (rates == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!query.gpu.utilization_gpu || !query.gpu.utilization_memory)
      return NVML_ERROR_NOT_SUPPORTED;
    rates->gpu = *query.gpu.utilization_gpu;
    rates->memory = *query.gpu.utilization_memory;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                          nvmlTemperatureSensors_t sensor,
                                                          unsigned int* celsius) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return report(query.gpu.temperature_c, celsius);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                                        unsigned int* mhz) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    switch (type) {
      case NVML_CLOCK_SM:
        return report(query.gpu.sm_clock_mhz, mhz);
      case NVML_CLOCK_MEM:
        return report(query.gpu.memory_clock_mhz, mhz);
      default:  // graphics and video clocks: fixtures do not model them
        return mhz == nullptr ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    }
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device,
                                                         unsigned int* milliwatt) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    return report(gpupool::sim::milliwatts(query.gpu.power_w), milliwatt);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                                     unsigned long long* millijoules) {
  return simulator().device(device, Needs::Health, [&](const Query& query) -> nvmlReturn_t {
    if (millijoules == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    // The driver counts from Volta on, where it reads the power draw.
    const auto& capability = query.gpu.compute_capability;
    if (!query.gpu.power_w || !capability || capability->major < 7) return NVML_ERROR_NOT_SUPPORTED;
    *millijoules = simulator().energy_mj(query.index, *query.gpu.power_w);
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device,
                                                                 unsigned int* milliwatt) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    return report(gpupool::sim::milliwatts(query.gpu.power_limit_w), milliwatt);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device,
                                                              nvmlEnableState_t* mode) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    return report(gpupool::sim::enable_state(query.gpu.persistence_mode), mode);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device,
                                                          nvmlComputeMode_t* mode) {
  // ComputeMode's enumerators follow NVML's numbering.
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    return report(query.gpu.compute_mode, mode);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                             nvmlMemoryErrorType_t error_type,
                                                             nvmlEccCounterType_t counter_type,
                                                             unsigned long long* count) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (counter_type != NVML_VOLATILE_ECC && counter_type != NVML_AGGREGATE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
    bool aggregate = counter_type == NVML_AGGREGATE_ECC;
    switch (error_type) {
      case NVML_MEMORY_ERROR_TYPE_CORRECTED:
        return report(aggregate ? query.gpu.ecc_corrected_aggregate : query.gpu.ecc_corrected_volatile, count);
      case NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
        return report(aggregate ? query.gpu.ecc_uncorrected_aggregate : query.gpu.ecc_uncorrected_volatile, count);
      default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device,
                                                           nvmlPageRetirementCause_t cause,
                                                           unsigned int* count,
                                                           unsigned long long* addresses) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (count == nullptr || (cause != NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS &&
                             cause != NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!query.gpu.retired_pages) return NVML_ERROR_NOT_SUPPORTED;
    // A fixture's retired pages all count as retired for double-bit errors.
    unsigned pages = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? *query.gpu.retired_pages : 0;
    unsigned room = *count;
    *count = pages;
    if (room < pages) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (pages > 0 && addresses == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < pages; ++i) addresses[i] = (i + 1) * 0x1000ULL;  // made-up page addresses
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                                        nvmlEnableState_t* pending) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (!query.gpu.retired_pages) return report(std::optional<nvmlEnableState_t>(), pending);
    return report(gpupool::sim::enable_state(query.gpu.retired_pages_pending), pending);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int words,
                                                          unsigned long* cpus) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (!query.gpu.cpu_affinity)
      return cpus == nullptr ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    auto listed =
        gpupool::parse_cpu_list(*query.gpu.cpu_affinity);  // canonical since the fixture parsed
    return gpupool::sim::fill_mask(listed ? *listed : std::vector<unsigned>{}, words, cpus);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major,
                                                                    int* minor) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!query.gpu.compute_capability) return NVML_ERROR_NOT_SUPPORTED;
    *major = query.gpu.compute_capability->major;
    *minor = query.gpu.compute_capability->minor;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                                  nvmlProcessUtilizationSample_t* samples,
                                                                  unsigned int* count, unsigned long long) {
  return process_utilization(device, samples, count);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                      unsigned int* count,
                                                                      nvmlProcessInfo_v1_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Graphics);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute, true);
}

// ---- Topology ----

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(
    nvmlDevice_t first, nvmlDevice_t second, nvmlGpuTopologyLevel_t* level) {
  return simulator().pair(first, second, [&](const FixtureGpu& a, const FixtureGpu& b) {
    if (level == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (&a == &b) {
      *level = NVML_TOPOLOGY_INTERNAL;
      return NVML_SUCCESS;
    }
    switch (gpupool::sim::pcie_level(a.pcie, b.pcie)) {
      case gpupool::PcieLevel::Board:
        *level = NVML_TOPOLOGY_INTERNAL;
        break;
      case gpupool::PcieLevel::SingleSwitch:
        *level = NVML_TOPOLOGY_SINGLE;
        break;
      case gpupool::PcieLevel::MultipleSwitches:
        *level = NVML_TOPOLOGY_MULTIPLE;
        break;
      case gpupool::PcieLevel::HostBridge:
        *level = NVML_TOPOLOGY_HOSTBRIDGE;
        break;
      case gpupool::PcieLevel::NumaNode:
        *level = NVML_TOPOLOGY_NODE;
        break;
      case gpupool::PcieLevel::System:
        *level = NVML_TOPOLOGY_SYSTEM;
        break;
    }
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                          nvmlEnableState_t* active) {
  if (active == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return gpupool::sim::nvlink(device, link, [&](const Fixture&, const LinkEnd* end) {
    *active = end != nullptr ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device,
                                                                  unsigned int link,
                                                                  nvmlPciInfo_t* pci) {
  return gpupool::sim::nvlink_remote_pci(device, link, pci);
}

// ---- Entry points a current driver has and an old one lacks ----
#if !GPUPOOL_FAKE_NVML_LEGACY

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlInit_v2() { return simulator().init(); }

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return gpupool::sim::cuda_driver_version(version);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  return gpupool::sim::device_count(count);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                               nvmlDevice_t* device) {
  return simulator().handle_by_index(index, device);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return gpupool::sim::report_pci_info(device, pci);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                            nvmlMemory_v2_t* memory) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!query.gpu.memory_total_mib) return NVML_ERROR_NOT_SUPPORTED;
    memory->total = *query.gpu.memory_total_mib * gpupool::sim::kMiB;
    memory->reserved = query.gpu.memory_reserved_mib * gpupool::sim::kMiB;
    memory->used = query.gpu.memory_used_mib * gpupool::sim::kMiB;
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current,
                                                      unsigned int* pending) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t result = report(query.gpu.mig_enabled, current);
    if (result == NVML_SUCCESS) *pending = *current;
    return result;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device,
                                                             unsigned int words,
                                                             unsigned long* nodes,
                                                             nvmlAffinityScope_t scope) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)
      return NVML_ERROR_INVALID_ARGUMENT;
    if (!query.gpu.numa_node)
      return nodes == nullptr ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    // The fixtures have one NUMA node per socket, so both scopes name the same node.
    return gpupool::sim::fill_mask({static_cast<unsigned>(*query.gpu.numa_node)}, words, nodes);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device,
                                                          unsigned int* cores) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    return report(query.gpu.cuda_cores, cores);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Graphics);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Graphics);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute, true);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(
    nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {
  return gpupool::sim::running_processes(device, count, infos, ProcessKind::Compute, true);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                     unsigned int link,
                                                                     nvmlPciInfo_t* pci) {
  return gpupool::sim::nvlink_remote_pci(device, link, pci);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t* type) {
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  return gpupool::sim::nvlink(device, link, [&](const Fixture&, const LinkEnd* end) {
    if (end == nullptr) return NVML_ERROR_NOT_SUPPORTED;
    *type = end->peer ? NVML_NVLINK_DEVICE_TYPE_GPU : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* correctable,
                                                           unsigned int* uncorrectable, unsigned int* pending,
                                                           unsigned int* failed) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (correctable == nullptr || uncorrectable == nullptr || pending == nullptr || failed == nullptr) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    // A fixture's remapped rows all count as remapped for uncorrectable errors.
    nvmlReturn_t result = report(query.gpu.remapped_rows, uncorrectable);
    if (result != NVML_SUCCESS) return result;
    *correctable = 0;
    *pending = query.gpu.row_remapping_pending ? 1 : 0;
    *failed = query.gpu.row_remapping_failed ? 1 : 0;
    return NVML_SUCCESS;
  });
}

#endif  // !GPUPOOL_FAKE_NVML_LEGACY, resumed below

// ---- Health and events, which an old driver has too ----
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                          unsigned long long* reasons) {
  return simulator().device(device, Needs::Health,
                            [&](const Query& query) { return report(query.gpu.clocks_event_reasons, reasons); });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int* count) {
  return simulator().device(device, Needs::Health,
                            [&](const Query& query) { return report(query.gpu.pcie_replay_count, count); });
}

// Field values: the NVLink error totals, each answered on its own as the driver does (a GPU
// whose fixture lacks a count refuses that field); any other field is not supported.
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t* values) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (count < 0 || (count > 0 && values == nullptr)) return NVML_ERROR_INVALID_ARGUMENT;
    for (nvmlFieldValue_t& field : std::span(values, static_cast<size_t>(count))) {
      const std::optional<uint64_t>* reading = nullptr;
      switch (field.fieldId) {
#define GPUPOOL_FIELD(id, name) \
  case id: reading = &query.gpu.name; break;
        GPUPOOL_NVLINK_ERROR_FIELDS(GPUPOOL_FIELD)
#undef GPUPOOL_FIELD
        default: break;
      }
      field.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
      unsigned long long value = 0;
      field.nvmlReturn = reading == nullptr ? NVML_ERROR_NOT_SUPPORTED : report(*reading, &value);
      field.value.ullVal = value;
    }
    return NVML_SUCCESS;
  });
}

// Events: an event set delivers the critical XIDs a registered GPU's fixture lists (`xid_events`)
// beyond those it listed when the GPU was registered; an overlay that appends one raises it.
struct nvmlEventSet_st {
  std::map<unsigned, size_t> delivered;  // GPU index -> how many of its XIDs the set has seen
};

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = new nvmlEventSet_st();
  return NVML_SUCCESS;
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  delete set;
  return NVML_SUCCESS;
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                                          nvmlEventSet_t set) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if ((types & ~nvmlEventTypeXidCriticalError) != 0) return NVML_ERROR_NOT_SUPPORTED;
    set->delivered[query.index] = query.gpu.xid_events.size();
    return NVML_SUCCESS;
  });
}

// An old driver's name for nvmlEventSetWait_v2, which a current one has too.
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  if (set == nullptr || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  // Polls the fixture (and its overlay) without holding the simulator while it sleeps.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    for (auto& [index, delivered] : set->delivered) {
      nvmlDevice_t device = nullptr;
      if (simulator().handle_by_index(index, &device) != NVML_SUCCESS) continue;
      nvmlReturn_t found = simulator().device(device, Needs::Identity, [&](const Query& query) {
        if (delivered >= query.gpu.xid_events.size()) return NVML_ERROR_NOT_FOUND;
        *data = nvmlEventData_t{device, nvmlEventTypeXidCriticalError, query.gpu.xid_events[delivered], kNoGpuInstance,
                                kNoGpuInstance};
        ++delivered;
        return NVML_SUCCESS;
      });
      if (found == NVML_SUCCESS) return NVML_SUCCESS;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return NVML_ERROR_TIMEOUT;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(20)));
  }
}

#if !GPUPOOL_FAKE_NVML_LEGACY  // a current driver's names
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms) {
  return nvmlEventSetWait(set, data, timeout_ms);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                                      unsigned long long* reasons) {
  return nvmlDeviceGetCurrentClocksThrottleReasons(device, reasons);
}
#endif

#if !GPUPOOL_FAKE_NVML_LEGACY

// GPM: a GPU supports it when its fixture gives any activity reading (Hopper and later do by
// default). A metric between two samples is the later sample's reading, in NVML's unit.
namespace gpupool::sim {
namespace {

bool gpm_supported(const FixtureGpu& gpu) {
  bool any = false;
#define GPUPOOL_ANY_ACTIVITY(id, field, unit) any = any || gpu.field.has_value();
  GPUPOOL_GPM_METRICS(GPUPOOL_ANY_ACTIVITY)
#undef GPUPOOL_ANY_ACTIVITY
  return any;
}

// Of a GPU (FixtureGpu) or a GPU instance (MigActivity).
template <typename Readings>
std::optional<double> gpm_value(const Readings& readings, unsigned metric) {
#define GPUPOOL_GPM_VALUE(id, field, unit)                                                 \
  if (metric == static_cast<unsigned>(id)) {                                              \
    if (!readings.field) return std::nullopt;                                             \
    return gpm_from_reading(*readings.field, GpmUnit::unit);                              \
  }
  GPUPOOL_GPM_METRICS(GPUPOOL_GPM_VALUE)
#undef GPUPOOL_GPM_VALUE
  return std::nullopt;
}

}  // namespace
}  // namespace gpupool::sim

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t* support) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (support == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (support->version != NVML_GPM_SUPPORT_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    support->isSupportedDevice = gpupool::sim::gpm_supported(query.gpu) ? 1 : 0;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = query.gpu.mig_enabled.value_or(false) ? gpupool::sim::kMaxMigDevices : 0;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t* sample) {
  if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *sample = new nvmlGpmSample_st{};
  return NVML_SUCCESS;
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
  if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  delete sample;
  return NVML_SUCCESS;
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpupool::sim::gpm_supported(query.gpu)) return NVML_ERROR_NOT_SUPPORTED;
    sample->index = query.index;
    sample->gpu_instance.reset();
    sample->gpu = query.gpu;
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpu_instance,
                                                     nvmlGpmSample_t sample) {
  return simulator().device(device, Needs::Health, [&](const Query& query) {
    if (sample == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpupool::sim::gpm_supported(query.gpu)) return NVML_ERROR_NOT_SUPPORTED;
    auto instance = std::ranges::find(query.gpu.mig_devices, gpu_instance, &gpupool::sim::FixtureMigDevice::gpu_instance_id);
    if (instance == query.gpu.mig_devices.end()) return NVML_ERROR_NOT_FOUND;
    sample->index = query.index;
    sample->gpu_instance = gpu_instance;
    sample->instance = instance->activity;
#define GPUPOOL_IDLE_BY_DEFAULT(id, field, unit) \
  if (!sample->instance.field) sample->instance.field = 0;
    GPUPOOL_GPM_METRICS(GPUPOOL_IDLE_BY_DEFAULT)
#undef GPUPOOL_IDLE_BY_DEFAULT
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t* request) {
  return simulator().system([&](const Fixture&) {
    if (request == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (request->version != NVML_GPM_METRICS_GET_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const nvmlGpmSample_st* earlier = request->sample1;
    const nvmlGpmSample_st* later = request->sample2;
    if (earlier == nullptr || later == nullptr || !earlier->index || earlier->index != later->index ||
        earlier->gpu_instance != later->gpu_instance || request->numMetrics > kGpmMetricsAsked) {
      return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned i = 0; i < request->numMetrics; ++i) {
      nvmlGpmMetric_t& metric = request->metrics[i];
      std::optional<double> value = later->gpu_instance ? gpupool::sim::gpm_value(later->instance, metric.metricId)
                                                        : gpupool::sim::gpm_value(later->gpu, metric.metricId);
      metric.nvmlReturn = value ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
      metric.value = value.value_or(0);
    }
    return NVML_SUCCESS;
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                                     nvmlDevice_t* mig) {
  return simulator().mig_handle_by_index(device, index, mig);
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  return simulator().mig_device(device, [&](const MigQuery& query) {
    return gpupool::sim::report(std::optional(query.mig.gpu_instance_id), id);
  });
}

GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  return simulator().mig_device(device, [&](const MigQuery& query) {
    return gpupool::sim::report(std::optional(query.mig.compute_instance_id), id);
  });
}

// NVML answers it for MIG device handles only.
GPUPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t* attributes) {
  return simulator().mig_device(device, [&](const MigQuery& query) {
    if (attributes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *attributes = nvmlDeviceAttributes_t{};
    attributes->multiprocessorCount = query.mig.multiprocessors;
    attributes->gpuInstanceSliceCount = query.mig.gpu_slices;
    attributes->computeInstanceSliceCount = query.mig.compute_slices;
    attributes->memorySizeMB = query.mig.memory_mib;
    return NVML_SUCCESS;
  });
}

#endif  // !GPUPOOL_FAKE_NVML_LEGACY
