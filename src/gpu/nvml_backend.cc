#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <iterator>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "base/cpu_list.h"
#include "gpu/field_values.h"
#include "gpu/gpm_metrics.h"
#include "gpu/gpu_backend.h"
#include "gpu/nvml_library.h"
#include "os/clock.h"
#include "machine/cuda_arch.h"
#include "machine/mig_profile.h"
#include "os/host_files.h"

namespace gpupool {
namespace {

// How far back a process's utilisation samples are taken. The driver stamps them irregularly (a
// running process's newest may be seconds old), so a window of one sample interval would often
// find none and read a busy process as 0.
constexpr double kProcessUtilizationWindowS = 3.0;

constexpr uint64_t kMiB = 1024 * 1024;
// NVML refreshes the GPM counters about every 100 ms: samples closer than that measure nothing.
constexpr auto kGpmMinimumGap = std::chrono::milliseconds(100);

// Calls an optional NVML getter; a missing symbol or any failure is "n/a".
template <typename Fn, typename... Args>
bool call_ok(Fn fn, Args... args) {
  return fn != nullptr && fn(args...) == NVML_SUCCESS;
}

// A count the driver gave as a field value; nullopt where it refused the field or gave no count.
std::optional<uint64_t> field_count(const nvmlFieldValue_t& field) {
  if (field.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  switch (field.valueType) {
    case NVML_VALUE_TYPE_UNSIGNED_INT: return field.value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return field.value.ulVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return field.value.ullVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      if (field.value.sllVal >= 0) return static_cast<uint64_t>(field.value.sllVal);
      return std::nullopt;
    case NVML_VALUE_TYPE_SIGNED_INT:
      if (field.value.siVal >= 0) return static_cast<uint64_t>(field.value.siVal);
      return std::nullopt;
    default: return std::nullopt;
  }
}

using PciAddress = std::tuple<unsigned, unsigned, unsigned>;

PciAddress pci_address(const nvmlPciInfo_t& pci) { return {pci.domain, pci.bus, pci.device}; }

std::string bounded_string(const char* buffer, size_t size) {
  size_t length = 0;
  while (length < size && buffer[length] != '\0') ++length;
  return std::string(buffer, length);
}

// One NVML event set with every GPU that accepts critical XID events registered. It borrows the
// library, which the backend keeps loaded for the life of the process.
class NvmlXidWatch final : public XidWatch {
 public:
  NvmlXidWatch(const NvmlLibrary& lib, nvmlEventSet_t set, std::map<nvmlDevice_t, std::string> uuids)
      : lib_(lib), set_(set), uuids_(std::move(uuids)) {}
  ~NvmlXidWatch() override { lib_.api().event_set_free(set_); }
  NvmlXidWatch(const NvmlXidWatch&) = delete;
  NvmlXidWatch& operator=(const NvmlXidWatch&) = delete;

  Result<std::vector<XidEvent>> wait(std::chrono::milliseconds timeout) override {
    std::vector<XidEvent> events;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {  // the first event within the timeout, then whatever else is already there
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto wait_ms = events.empty() ? static_cast<unsigned>(std::max<int64_t>(0, left.count())) : 0u;
      nvmlEventData_t data{};
      nvmlReturn_t rc = lib_.api().event_set_wait(set_, &data, wait_ms);
      if (rc == NVML_ERROR_TIMEOUT) return events;
      if (rc != NVML_SUCCESS) {
        // Those already read are not lost: the error comes again with the next wait.
        if (!events.empty()) return events;
        return fail("NVML could not wait for XID events: {}", lib_.describe(rc));
      }
      auto uuid = uuids_.find(data.device);
      if ((data.eventType & nvmlEventTypeXidCriticalError) == 0 || uuid == uuids_.end()) continue;
      events.push_back(XidEvent{uuid->second, data.eventData});
    }
  }
  size_t gpus_watched() const override { return uuids_.size(); }

 private:
  const NvmlLibrary& lib_;
  nvmlEventSet_t set_;
  std::map<nvmlDevice_t, std::string> uuids_;  // the registered GPUs
};

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(std::unique_ptr<NvmlLibrary> lib, HostFiles host, std::string simulated)
      : lib_(std::move(lib)), host_(std::move(host)), simulated_(std::move(simulated)) {}
  ~NvmlBackend() override {
    for (GpmBuffers& buffers : gpm_) free_gpm_buffers(buffers);
    for (auto& [instance, buffers] : gpm_mig_) free_gpm_buffers(buffers);
  }
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  std::string description() const override {
    if (!simulated_.empty()) return fmt::format("simulated: {}", simulated_);
    return fmt::format("NVML: {}", lib_->path());
  }

  std::string simulated_machine() const override { return simulated_; }

  Result<std::unique_ptr<XidWatch>> watch_xid_events() override {
    const NvmlEntryPoints& api = lib_->api();
    if (api.event_set_create == nullptr || api.event_set_free == nullptr || api.device_register_events == nullptr ||
        api.event_set_wait == nullptr) {
      return fail("this driver's NVML has no events");
    }
    nvmlEventSet_t set = nullptr;
    if (nvmlReturn_t rc = api.event_set_create(&set); rc != NVML_SUCCESS) {
      return fail("NVML could not make an event set: {}", lib_->describe(rc));
    }
    std::map<nvmlDevice_t, std::string> uuids;
    std::string refused;
    unsigned count = 0;
    if (api.device_get_count(&count) != NVML_SUCCESS) count = 0;
    for (unsigned index = 0; index < count; ++index) {
      nvmlDevice_t handle = nullptr;
      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      if (api.device_get_handle_by_index(index, &handle) != NVML_SUCCESS ||
          api.device_get_uuid(handle, uuid, sizeof uuid) != NVML_SUCCESS) {
        continue;
      }
      nvmlReturn_t rc = api.device_register_events(handle, nvmlEventTypeXidCriticalError, set);
      if (rc == NVML_SUCCESS) {
        uuids[handle] = bounded_string(uuid, sizeof uuid);
      } else if (refused.empty()) {
        refused = lib_->describe(rc);
      }
    }
    if (uuids.empty()) {
      api.event_set_free(set);
      return fail("NVML watches no GPU's XID events{}", refused.empty() ? "" : ": " + refused);
    }
    return std::unique_ptr<XidWatch>(std::make_unique<NvmlXidWatch>(*lib_, set, std::move(uuids)));
  }

  Result<Machine> discover(DiscoveryScope scope) override {
    const NvmlEntryPoints& api = lib_->api();
    Machine machine;
    machine.driver = driver_info();
    unsigned count = 0;
    if (nvmlReturn_t rc = api.device_get_count(&count); rc != NVML_SUCCESS) {
      return fail("NVML could not count GPUs: {}", lib_->describe(rc));
    }
    std::vector<nvmlDevice_t> handles;
    std::vector<PciAddress> addresses;
    for (unsigned index = 0; index < count; ++index) {
      nvmlDevice_t handle = nullptr;
      Gpu gpu;
      gpu.index = index;
      if (nvmlReturn_t rc = api.device_get_handle_by_index(index, &handle); rc != NVML_SUCCESS) {
        gpu.fault = lib_->describe(rc);
        machine.gpus.push_back(std::move(gpu));
        handles.push_back(nullptr);
        addresses.emplace_back();
        continue;
      }
      nvmlPciInfo_t pci{};
      bool have_pci = api.device_get_pci_info(handle, &pci) == NVML_SUCCESS;
      read_identity(handle, pci, have_pci, gpu);
      read_state(handle, scope, gpu);
      if (scope.activity && !gpu.fault) read_activity(handle, index, gpu);
      handles.push_back(handle);
      addresses.push_back(have_pci ? pci_address(pci) : PciAddress{});
      machine.gpus.push_back(std::move(gpu));
    }
    if (scope.links) {
      machine.links = read_links(handles, addresses);
    } else {
      machine.links.assign(handles.size(), std::vector<Link>(handles.size()));
    }
    return machine;
  }

 private:
  DriverInfo driver_info() const {
    const NvmlEntryPoints& api = lib_->api();
    DriverInfo info;
    char text[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (call_ok(api.system_get_driver_version, text, static_cast<unsigned>(sizeof text))) {
      info.driver_version = bounded_string(text, sizeof text);
    }
    if (call_ok(api.system_get_nvml_version, text, static_cast<unsigned>(sizeof text))) {
      info.nvml_version = bounded_string(text, sizeof text);
    }
    int cuda = 0;
    if (call_ok(api.system_get_cuda_driver_version, &cuda)) info.cuda_driver_version = cuda;
    return info;
  }

  void read_identity(nvmlDevice_t handle, const nvmlPciInfo_t& pci, bool have_pci, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (api.device_get_uuid(handle, uuid, sizeof uuid) == NVML_SUCCESS) {
      gpu.uuid = bounded_string(uuid, sizeof uuid);
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (api.device_get_name(handle, name, sizeof name) == NVML_SUCCESS) {
      gpu.name = bounded_string(name, sizeof name);
    }
    if (have_pci) gpu.pci_bus_id = bounded_string(pci.busId, sizeof pci.busId);
    unsigned minor = 0;
    if (call_ok(api.device_get_minor_number, handle, &minor)) gpu.minor_number = minor;
  }

  void read_state(nvmlDevice_t handle, DiscoveryScope scope, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    read_memory(handle, gpu);
    nvmlUtilization_t utilization{};
    nvmlReturn_t rc = api.device_get_utilization_rates != nullptr
                          ? api.device_get_utilization_rates(handle, &utilization)
                          : NVML_ERROR_FUNCTION_NOT_FOUND;
    if (rc == NVML_ERROR_GPU_IS_LOST) {
      // The GPU answered who it is but nothing else: report it, do not guess.
      gpu.fault = lib_->describe(rc);
      gpu.memory_total_mib.reset();
      gpu.memory_used_mib.reset();
      gpu.memory_free_mib.reset();
      return;
    }
    if (rc == NVML_SUCCESS) {
      gpu.utilization_gpu = utilization.gpu;
      gpu.utilization_memory = utilization.memory;
    }
    unsigned value = 0;
    if (call_ok(api.device_get_temperature, handle, NVML_TEMPERATURE_GPU, &value)) gpu.temperature_c = value;
    if (call_ok(api.device_get_clock_info, handle, NVML_CLOCK_SM, &value)) gpu.sm_clock_mhz = value;
    if (call_ok(api.device_get_clock_info, handle, NVML_CLOCK_MEM, &value)) gpu.memory_clock_mhz = value;
    if (call_ok(api.device_get_power_usage, handle, &value)) gpu.power_w = value / 1000.0;
    if (call_ok(api.device_get_enforced_power_limit, handle, &value)) gpu.power_limit_w = value / 1000.0;
    nvmlEnableState_t state = 0;
    if (call_ok(api.device_get_persistence_mode, handle, &state)) gpu.persistence_mode = state == NVML_FEATURE_ENABLED;
    nvmlComputeMode_t mode = 0;
    if (call_ok(api.device_get_compute_mode, handle, &mode) && mode >= 0 && mode <= 3) {
      gpu.compute_mode = static_cast<ComputeMode>(mode);
    }
    unsigned mig_current = 0, mig_pending = 0;
    if (call_ok(api.device_get_mig_mode, handle, &mig_current, &mig_pending)) {
      gpu.mig_enabled = mig_current == NVML_DEVICE_MIG_ENABLE;
    }
    if (gpu.mig_enabled.value_or(false)) read_mig_devices(handle, gpu);
    unsigned long long errors = 0;
    if (call_ok(api.device_get_total_ecc_errors, handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &errors)) {
      gpu.ecc_corrected_volatile = errors;
    }
    if (call_ok(api.device_get_total_ecc_errors, handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors)) {
      gpu.ecc_uncorrected_volatile = errors;
    }
    if (scope.health) read_health(handle, gpu);
    int major = 0, minor = 0;
    if (call_ok(api.device_get_cuda_compute_capability, handle, &major, &minor)) {
      gpu.compute_capability = ComputeCapability{major, minor};
      unsigned cores = 0;
      unsigned per_sm = cores_per_multiprocessor(major, minor);
      if (per_sm > 0 && call_ok(api.device_get_num_gpu_cores, handle, &cores)) gpu.multiprocessors = cores / per_sm;
    }
    read_affinity(handle, gpu);
    if (scope.processes) read_processes(handle, gpu);
  }

  // DiscoveryScope::health's readings.
  void read_health(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    unsigned long long errors = 0;
    if (call_ok(api.device_get_total_ecc_errors, handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &errors)) {
      gpu.ecc_corrected_aggregate = errors;
    }
    if (call_ok(api.device_get_total_ecc_errors, handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &errors)) {
      gpu.ecc_uncorrected_aggregate = errors;
    }
    read_memory_repairs(handle, gpu);
    unsigned long long reasons = 0;
    if (call_ok(api.device_get_clocks_event_reasons, handle, &reasons)) gpu.clocks_event_reasons = reasons;
    unsigned replays = 0;
    if (call_ok(api.device_get_pcie_replay_counter, handle, &replays)) gpu.pcie_replay_count = replays;
    read_nvlink_errors(handle, gpu);
    unsigned long long energy = 0;
    if (call_ok(api.device_get_total_energy_consumption, handle, &energy)) gpu.energy_mj = energy;
  }

  // The NVLink error totals, in one field-values call; each left out where the driver refuses
  // it (no NVLink on the GPU, or a field it does not know).
  void read_nvlink_errors(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    if (api.device_get_field_values == nullptr) return;
#define GPUPOOL_FIELD(id, reading) std::pair{id, &Gpu::reading},
    constexpr std::pair<unsigned, std::optional<uint64_t> Gpu::*> fields[] = {GPUPOOL_NVLINK_ERROR_FIELDS(GPUPOOL_FIELD)};
#undef GPUPOOL_FIELD
    nvmlFieldValue_t values[std::size(fields)] = {};
    for (size_t i = 0; i < std::size(fields); ++i) values[i].fieldId = fields[i].first;
    if (api.device_get_field_values(handle, static_cast<int>(std::size(values)), values) != NVML_SUCCESS) return;
    for (size_t i = 0; i < std::size(fields); ++i) {
      if (auto count = field_count(values[i])) gpu.*fields[i].second = *count;
    }
  }

  void read_memory(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    // v2 reports reserved memory apart from used, as nvidia-smi shows it.
    nvmlMemory_v2_t v2{};
    v2.version = nvmlMemory_v2;
    if (call_ok(api.device_get_memory_info_v2, handle, &v2)) {
      gpu.memory_total_mib = v2.total / kMiB;
      gpu.memory_used_mib = v2.used / kMiB;
      gpu.memory_free_mib = v2.free / kMiB;
      return;
    }
    nvmlMemory_t v1{};
    if (call_ok(api.device_get_memory_info, handle, &v1)) {
      gpu.memory_total_mib = v1.total / kMiB;
      gpu.memory_used_mib = v1.used / kMiB;
      gpu.memory_free_mib = v1.free / kMiB;
    }
  }

  // The GPU's MIG devices (compute instances), each answering by its own handle. A driver
  // without the MIG calls, or a device that does not answer all of them, lists none: a MIG
  // device is only of use with its UUID, instance ids and size all known.
  void read_mig_devices(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    unsigned count = 0;
    if (api.device_get_mig_device_handle_by_index == nullptr || api.device_get_gpu_instance_id == nullptr ||
        api.device_get_compute_instance_id == nullptr || api.device_get_attributes == nullptr ||
        !call_ok(api.device_get_max_mig_device_count, handle, &count)) {
      return;
    }
    for (unsigned index = 0; index < count; ++index) {
      nvmlDevice_t mig = nullptr;
      // NOT_FOUND: no compute instance at this index (the count is a maximum).
      if (api.device_get_mig_device_handle_by_index(handle, index, &mig) != NVML_SUCCESS) continue;
      MigDevice device;
      device.index = index;
      char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
      nvmlDeviceAttributes_t attributes{};
      if (api.device_get_uuid(mig, uuid, sizeof uuid) != NVML_SUCCESS ||
          api.device_get_gpu_instance_id(mig, &device.gpu_instance_id) != NVML_SUCCESS ||
          api.device_get_compute_instance_id(mig, &device.compute_instance_id) != NVML_SUCCESS ||
          api.device_get_attributes(mig, &attributes) != NVML_SUCCESS) {
        continue;
      }
      device.uuid = bounded_string(uuid, sizeof uuid);
      device.gpu_slices = attributes.gpuInstanceSliceCount;
      device.compute_slices = attributes.computeInstanceSliceCount;
      device.memory_mib = attributes.memorySizeMB;
      device.multiprocessors = attributes.multiprocessorCount;
      device.profile = mig_profile_name(device.gpu_slices, device.compute_slices, device.memory_mib,
                                        gpu.memory_total_mib.value_or(0));
      gpu.mig_devices.push_back(std::move(device));
    }
  }

  // Retired pages (both causes) and remapped rows; each stays n/a where the GPU or driver lacks it.
  void read_memory_repairs(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    if (api.device_get_retired_pages != nullptr) {
      unsigned total = 0;
      bool known = true;
      for (nvmlPageRetirementCause_t cause : {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                              NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}) {
        // A zero-sized buffer asks for the count only (INSUFFICIENT_SIZE when there are pages).
        unsigned count = 0;
        nvmlReturn_t rc = api.device_get_retired_pages(handle, cause, &count, nullptr);
        known = known && (rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE);
        total += count;
      }
      if (known) gpu.retired_pages = total;
    }
    nvmlEnableState_t pending = 0;
    if (call_ok(api.device_get_retired_pages_pending_status, handle, &pending)) {
      gpu.retired_pages_pending = pending == NVML_FEATURE_ENABLED;
    }
    unsigned correctable = 0, uncorrectable = 0, remap_pending = 0, failed = 0;
    if (call_ok(api.device_get_remapped_rows, handle, &correctable, &uncorrectable, &remap_pending, &failed)) {
      gpu.remapped_rows = correctable + uncorrectable;
      gpu.row_remapping_pending = remap_pending != 0;
      gpu.row_remapping_failed = failed != 0;
    }
  }

  void read_affinity(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    constexpr unsigned kWords = 64;  // room for 4096 CPUs / NUMA nodes
    std::vector<unsigned long> mask(kWords, 0);
    // sysfs first: NVML's first affinity call (memory or CPU, whichever comes first) costs
    // ~11 ms on an H200 machine, which made `gpupool list` slower than nvidia-smi. A simulated
    // GPU has no sysfs entry of its own (its PCI address may belong to a real device here), so
    // only NVML.
    bool use_sysfs = simulated_.empty() && !gpu.pci_bus_id.empty();
    if (use_sysfs) {
      gpu.numa_node = host_.pci_numa_node(gpu.pci_bus_id);
      // One NUMA node (a workstation, a VM): sysfs says -1, but there is only node 0.
      if (!gpu.numa_node && host_.numa_node_count() == 1) gpu.numa_node = 0;
      if (auto text = host_.pci_local_cpus(gpu.pci_bus_id)) {
        auto cpus = parse_cpu_list(*text);
        if (cpus && !cpus->empty()) gpu.cpu_affinity = format_cpu_list(*cpus);
      }
    }
    if (!gpu.numa_node &&
        call_ok(api.device_get_memory_affinity, handle, kWords, mask.data(), NVML_AFFINITY_SCOPE_NODE)) {
      auto nodes = cpus_from_mask(mask);
      if (!nodes.empty()) gpu.numa_node = static_cast<int>(nodes.front());
    }
    std::fill(mask.begin(), mask.end(), 0UL);
    if (!gpu.cpu_affinity && call_ok(api.device_get_cpu_affinity, handle, kWords, mask.data())) {
      auto cpus = cpus_from_mask(mask);
      if (!cpus.empty()) gpu.cpu_affinity = format_cpu_list(cpus);
    }
  }

  // Two GPM sample buffers of one GPU, kept across snapshots: each snapshot samples into `later`
  // and computes the activity since `earlier`, the previous snapshot's sample, then swaps them.
  struct GpmBuffers {
    bool probed = false;  // support asked and, where supported, buffers allocated
    nvmlGpmSample_t earlier = nullptr;
    nvmlGpmSample_t later = nullptr;
    std::optional<std::chrono::steady_clock::time_point> earlier_time;
    Gpu last;  // the activity readings computed last, repeated for a snapshot that comes too soon
  };

  void free_gpm_buffers(GpmBuffers& buffers) const {
    for (nvmlGpmSample_t* sample : {&buffers.earlier, &buffers.later}) {
      if (*sample != nullptr) lib_->api().gpm_sample_free(*sample);
      *sample = nullptr;
    }
  }

  // Allocates the GPU's buffers where the driver and the GPU support GPM; false where not.
  bool prepare_gpm(nvmlDevice_t handle, GpmBuffers& buffers) const {
    const NvmlEntryPoints& api = lib_->api();
    if (buffers.probed) return buffers.later != nullptr;
    buffers.probed = true;
    if (api.gpm_query_device_support == nullptr || api.gpm_sample_alloc == nullptr ||
        api.gpm_sample_free == nullptr || api.gpm_sample_get == nullptr || api.gpm_metrics_get == nullptr) {
      return false;  // a driver older than GPM
    }
    nvmlGpmSupport_t support{};
    support.version = NVML_GPM_SUPPORT_VERSION;
    if (api.gpm_query_device_support(handle, &support) != NVML_SUCCESS || support.isSupportedDevice == 0) return false;
    if (api.gpm_sample_alloc(&buffers.earlier) != NVML_SUCCESS || api.gpm_sample_alloc(&buffers.later) != NVML_SUCCESS) {
      free_gpm_buffers(buffers);
      return false;
    }
    return true;
  }

  void read_activity(nvmlDevice_t handle, unsigned index, Gpu& gpu) {
    const NvmlEntryPoints& api = lib_->api();
    if (gpm_.size() <= index) gpm_.resize(index + 1);
    sample_gpm(handle, gpm_[index], [&](nvmlGpmSample_t sample) { return api.gpm_sample_get(handle, sample); }, gpu);
    if (api.gpm_mig_sample_get == nullptr) return;
    // One sample per GPU instance, shared by its compute instances (its MIG devices).
    for (MigDevice& device : gpu.mig_devices) {
      unsigned instance = device.gpu_instance_id;
      sample_gpm(handle, gpm_mig_[{index, instance}],
                 [&](nvmlGpmSample_t sample) { return api.gpm_mig_sample_get(handle, instance, sample); },
                 device.activity);
    }
  }

  // Samples into `buffers` with `get` and sets `target`'s GPM readings to the activity since the
  // previous sample (the previous result again for a sample that comes too soon).
  template <typename Target, typename Get>
  void sample_gpm(nvmlDevice_t handle, GpmBuffers& buffers, const Get& get, Target& target) {
    const NvmlEntryPoints& api = lib_->api();
    if (!prepare_gpm(handle, buffers)) return;
    auto now = std::chrono::steady_clock::now();
    if (buffers.earlier_time && now - *buffers.earlier_time < kGpmMinimumGap) {
      copy_gpm_readings(buffers.last, target);
      return;
    }
    if (get(buffers.later) != NVML_SUCCESS) {
      buffers.earlier_time.reset();  // the next snapshot starts afresh
      return;
    }
    buffers.last = Gpu{};
    if (buffers.earlier_time) {
      nvmlGpmMetricsGet_t request = gpm_request(buffers.earlier, buffers.later);
      if (api.gpm_metrics_get(&request) == NVML_SUCCESS) set_gpm_readings(request, buffers.last);
    }
    std::swap(buffers.earlier, buffers.later);
    buffers.earlier_time = now;
    copy_gpm_readings(buffers.last, target);
  }

  // Fetches one process list, growing the buffer while processes keep appearing.
  template <typename Record, typename Fn>
  std::optional<std::vector<Record>> list_processes(Fn fn, nvmlDevice_t handle) const {
    if (fn == nullptr) return std::nullopt;
    std::vector<Record> records(32);
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto count = static_cast<unsigned>(records.size());
      nvmlReturn_t rc = fn(handle, &count, records.data());
      if (rc == NVML_SUCCESS) {
        records.resize(count);
        return records;
      }
      if (rc != NVML_ERROR_INSUFFICIENT_SIZE) return std::nullopt;
      records.resize(count + 16);
    }
    return std::nullopt;
  }

  template <typename Record>
  static void merge_processes(const std::vector<Record>& records, ProcessKind kind,
                              std::map<uint32_t, GpuProcess>& by_pid) {
    for (const Record& record : records) {
      auto [it, inserted] = by_pid.try_emplace(record.pid);
      GpuProcess& process = it->second;
      process.pid = record.pid;
      if (inserted) {
        process.kind = kind;
      } else if (process.kind != kind) {
        process.kind = ProcessKind::ComputeAndGraphics;
      }
      if (record.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE_ULL) {
        process.used_memory_mib = std::max(process.used_memory_mib.value_or(0),
                                           static_cast<uint64_t>(record.usedGpuMemory / kMiB));
      }
      if constexpr (std::is_same_v<Record, nvmlProcessInfo_v2_t>) {
        if (record.gpuInstanceId != kNoGpuInstance) process.gpu_instance_id = record.gpuInstanceId;
      }
    }
  }

  // False when neither version of the list could be read.
  template <typename V2Fn, typename V1Fn>
  bool read_process_kind(V2Fn v2, V1Fn v1, nvmlDevice_t handle, ProcessKind kind,
                         std::map<uint32_t, GpuProcess>& by_pid) const {
    if (auto records = list_processes<nvmlProcessInfo_v2_t>(v2, handle)) {
      merge_processes(*records, kind, by_pid);
    } else if (auto old_records = list_processes<nvmlProcessInfo_v1_t>(v1, handle)) {
      merge_processes(*old_records, kind, by_pid);
    } else {
      return false;
    }
    return true;
  }

  // Each listed process's SM utilisation, the mean of the driver's samples of the last few
  // seconds; 0 for one without a sample (it ran no kernel then). Nothing where NVML cannot say.
  void read_process_utilization(nvmlDevice_t handle, std::map<uint32_t, GpuProcess>& by_pid) const {
    auto fn = lib_->api().device_get_process_utilization;
    if (fn == nullptr || by_pid.empty()) return;
    const auto since_us = static_cast<unsigned long long>((unix_now() - kProcessUtilizationWindowS) * 1e6);
    std::vector<nvmlProcessUtilizationSample_t> samples;
    unsigned count = 0;
    nvmlReturn_t rc = fn(handle, nullptr, &count, since_us);
    for (int attempt = 0; rc == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 4; ++attempt) {
      samples.resize(count + 8);
      count = static_cast<unsigned>(samples.size());
      rc = fn(handle, samples.data(), &count, since_us);
    }
    if (rc == NVML_ERROR_NOT_FOUND) count = 0;  // no process ran a kernel in the window
    else if (rc != NVML_SUCCESS) return;
    samples.resize(std::min<size_t>(count, samples.size()));
    std::map<uint32_t, std::pair<unsigned, unsigned>> sum_and_count;
    for (const nvmlProcessUtilizationSample_t& sample : samples) {
      if (sample.timeStamp < since_us || sample.smUtil > 100) continue;
      auto& [sum, n] = sum_and_count[sample.pid];
      sum += sample.smUtil;
      ++n;
    }
    for (auto& [pid, process] : by_pid) {
      auto found = sum_and_count.find(pid);
      process.sm_utilization = found == sum_and_count.end() ? 0 : found->second.first / found->second.second;
    }
  }

  void read_processes(nvmlDevice_t handle, Gpu& gpu) const {
    const NvmlEntryPoints& api = lib_->api();
    std::map<uint32_t, GpuProcess> by_pid;
    read_process_kind(api.device_get_compute_processes_v2, api.device_get_compute_processes_v1, handle,
                      ProcessKind::Compute, by_pid);
    read_process_kind(api.device_get_graphics_processes_v2, api.device_get_graphics_processes_v1, handle,
                      ProcessKind::Graphics, by_pid);
    // MPS clients are compute processes too; the MPS list says which of them reach a server.
    std::map<uint32_t, GpuProcess> clients;
    bool known = read_process_kind(api.device_get_mps_processes_v2, api.device_get_mps_processes_v1, handle,
                                   ProcessKind::Compute, clients);
    for (auto& [pid, client] : clients) by_pid.try_emplace(pid, std::move(client));
    if (!gpu.mig_enabled.value_or(false)) read_process_utilization(handle, by_pid);
    for (auto& [pid, process] : by_pid) {
      if (known) process.mps_client = clients.contains(pid);
      // Outside MIG mode the field says nothing (NVML leaves it 0xFFFFFFFF, or 0 on some drivers).
      if (!gpu.mig_enabled.value_or(false)) process.gpu_instance_id.reset();
      if (auto identity = host_.process_identity(pid)) {
        process.user = identity->user;
        process.command = identity->command;
      }
      gpu.processes.push_back(std::move(process));
    }
  }

  struct NvLinkEnds {
    std::map<size_t, unsigned> to_gpu;  // peer position -> links
    unsigned to_switch = 0;
  };

  NvLinkEnds read_nvlinks(nvmlDevice_t handle, const std::vector<PciAddress>& addresses) const {
    const NvmlEntryPoints& api = lib_->api();
    NvLinkEnds ends;
    if (api.device_get_nvlink_state == nullptr || api.device_get_nvlink_remote_pci_info == nullptr) return ends;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
      nvmlEnableState_t state = NVML_FEATURE_DISABLED;
      if (api.device_get_nvlink_state(handle, link, &state) != NVML_SUCCESS || state != NVML_FEATURE_ENABLED) continue;
      nvmlPciInfo_t remote{};
      if (api.device_get_nvlink_remote_pci_info(handle, link, &remote) != NVML_SUCCESS) continue;
      nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_GPU;
      bool typed = call_ok(api.device_get_nvlink_remote_device_type, handle, link, &type);
      auto peer = std::find(addresses.begin(), addresses.end(), pci_address(remote));
      if (typed && type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
        ++ends.to_switch;
      } else if (peer != addresses.end()) {
        ++ends.to_gpu[static_cast<size_t>(peer - addresses.begin())];
      } else if (!typed) {
        // Old drivers cannot say what is at the far end; a link to no GPU we know is an NVSwitch.
        ++ends.to_switch;
      }
    }
    return ends;
  }

  std::vector<std::vector<Link>> read_links(const std::vector<nvmlDevice_t>& handles,
                                            const std::vector<PciAddress>& addresses) const {
    const NvmlEntryPoints& api = lib_->api();
    const size_t n = handles.size();
    std::vector<NvLinkEnds> ends(n);
    for (size_t i = 0; i < n; ++i) {
      if (handles[i] != nullptr) ends[i] = read_nvlinks(handles[i], addresses);
    }
    std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        Link link;
        if (auto it = ends[i].to_gpu.find(j); it != ends[i].to_gpu.end()) link.nvlinks = it->second;
        // GPUs that both reach the NVSwitch fabric are fully connected through it.
        if (ends[i].to_switch > 0 && ends[j].to_switch > 0) {
          link.nvlinks += std::min(ends[i].to_switch, ends[j].to_switch);
          link.via_nvswitch = true;
        }
        nvmlGpuTopologyLevel_t level = 0;
        if (handles[i] != nullptr && handles[j] != nullptr &&
            call_ok(api.device_get_topology_common_ancestor, handles[i], handles[j], &level)) {
          link.pcie = pcie_level(level);
        }
        links[i][j] = link;
        links[j][i] = link;
      }
    }
    return links;
  }

  static std::optional<PcieLevel> pcie_level(nvmlGpuTopologyLevel_t level) {
    switch (level) {
      case NVML_TOPOLOGY_INTERNAL: return PcieLevel::Board;
      case NVML_TOPOLOGY_SINGLE: return PcieLevel::SingleSwitch;
      case NVML_TOPOLOGY_MULTIPLE: return PcieLevel::MultipleSwitches;
      case NVML_TOPOLOGY_HOSTBRIDGE: return PcieLevel::HostBridge;
      case NVML_TOPOLOGY_NODE: return PcieLevel::NumaNode;
      case NVML_TOPOLOGY_SYSTEM: return PcieLevel::System;
      default: return std::nullopt;
    }
  }

  std::unique_ptr<NvmlLibrary> lib_;
  HostFiles host_;
  std::string simulated_;
  std::vector<GpmBuffers> gpm_;  // by GPU index
  std::map<std::pair<unsigned, unsigned>, GpmBuffers> gpm_mig_;  // by GPU index and GPU instance id
};

}  // namespace

Result<std::unique_ptr<GpuBackend>> open_nvml_backend(const NvmlSource& source) {
  auto opened = NvmlLibrary::open(source.libraries);
  if (!opened.ok() && source.simulated_machine.empty()) {
    return fail("{}; install the NVIDIA driver, or set GPUPOOL_SIM=hgx-h200 to try a simulated machine",
                opened.error().message);
  }
  TRY_ASSIGN(std::unique_ptr<NvmlLibrary> lib, std::move(opened));
  return std::unique_ptr<GpuBackend>(
      std::make_unique<NvmlBackend>(std::move(lib), host_files_from_environment(), source.simulated_machine));
}

}  // namespace gpupool
