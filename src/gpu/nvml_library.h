// NVML loaded at run time: dlopen, then every entry point we use looked up by
// name, newest version first. Optional entry points may be missing (older
// drivers lack them); callers treat a missing one like NOT_SUPPORTED.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "nvml/nvml_api.h"
#include "os/shared_library.h"

namespace gpupool {

struct NvmlEntryPoints {
  nvml::InitFn init = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn device_get_count = nullptr;
  nvml::DeviceGetHandleByIndexFn device_get_handle_by_index = nullptr;
  nvml::DeviceGetStringFn device_get_name = nullptr;
  nvml::DeviceGetStringFn device_get_uuid = nullptr;
  nvml::DeviceGetPciInfoFn device_get_pci_info = nullptr;
  // Everything below is optional.
  nvml::SystemGetStringFn system_get_driver_version = nullptr;
  nvml::SystemGetStringFn system_get_nvml_version = nullptr;
  nvml::SystemGetCudaDriverVersionFn system_get_cuda_driver_version = nullptr;
  nvml::DeviceGetUintFn device_get_minor_number = nullptr;
  nvml::DeviceGetMemoryInfoV2Fn device_get_memory_info_v2 = nullptr;
  nvml::DeviceGetMemoryInfoFn device_get_memory_info = nullptr;
  nvml::DeviceGetUtilizationRatesFn device_get_utilization_rates = nullptr;
  nvml::DeviceGetTemperatureFn device_get_temperature = nullptr;
  nvml::DeviceGetClockInfoFn device_get_clock_info = nullptr;
  nvml::DeviceGetUintFn device_get_power_usage = nullptr;
  nvml::DeviceGetUintFn device_get_enforced_power_limit = nullptr;
  nvml::DeviceGetEnableStateFn device_get_persistence_mode = nullptr;
  nvml::DeviceGetComputeModeFn device_get_compute_mode = nullptr;
  nvml::DeviceGetMigModeFn device_get_mig_mode = nullptr;
  // MIG devices; without them a GPU lists no MIG devices.
  nvml::DeviceGetUintFn device_get_max_mig_device_count = nullptr;
  nvml::DeviceGetMigDeviceHandleByIndexFn device_get_mig_device_handle_by_index = nullptr;
  nvml::DeviceGetUintFn device_get_gpu_instance_id = nullptr;
  nvml::DeviceGetUintFn device_get_compute_instance_id = nullptr;
  nvml::DeviceGetAttributesFn device_get_attributes = nullptr;
  nvml::DeviceGetTotalEccErrorsFn device_get_total_ecc_errors = nullptr;
  nvml::DeviceGetRetiredPagesFn device_get_retired_pages = nullptr;
  nvml::DeviceGetEnableStateFn device_get_retired_pages_pending_status = nullptr;
  nvml::DeviceGetRemappedRowsFn device_get_remapped_rows = nullptr;
  // Health beyond memory: why the clocks are held down (a bitmask of nvmlClocksEventReasons),
  // PCIe link replays, NVLink error counts (as field values).
  nvml::DeviceGetUint64Fn device_get_clocks_event_reasons = nullptr;
  nvml::DeviceGetUintFn device_get_pcie_replay_counter = nullptr;
  nvml::DeviceGetFieldValuesFn device_get_field_values = nullptr;
  // Energy used since the driver loaded, in mJ (Volta on): what a job's energy is counted from.
  nvml::DeviceGetUint64Fn device_get_total_energy_consumption = nullptr;
  // Critical XID events; all four or none are used.
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;
  nvml::DeviceRegisterEventsFn device_register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::DeviceGetMemoryAffinityFn device_get_memory_affinity = nullptr;
  nvml::DeviceGetCpuAffinityFn device_get_cpu_affinity = nullptr;
  nvml::DeviceGetCudaComputeCapabilityFn device_get_cuda_compute_capability = nullptr;
  nvml::DeviceGetUintFn device_get_num_gpu_cores = nullptr;
  // Process lists: _v3 or _v2 take v2 records, the unsuffixed call v1 records.
  nvml::DeviceGetProcessesV2Fn device_get_compute_processes_v2 = nullptr;
  nvml::DeviceGetProcessesV1Fn device_get_compute_processes_v1 = nullptr;
  nvml::DeviceGetProcessesV2Fn device_get_graphics_processes_v2 = nullptr;
  nvml::DeviceGetProcessesV1Fn device_get_graphics_processes_v1 = nullptr;
  nvml::DeviceGetProcessesV2Fn device_get_mps_processes_v2 = nullptr;
  nvml::DeviceGetProcessesV1Fn device_get_mps_processes_v1 = nullptr;
  nvml::DeviceGetProcessUtilizationFn device_get_process_utilization = nullptr;
  nvml::DeviceGetTopologyCommonAncestorFn device_get_topology_common_ancestor = nullptr;
  nvml::DeviceGetNvLinkStateFn device_get_nvlink_state = nullptr;
  nvml::DeviceGetNvLinkRemotePciInfoFn device_get_nvlink_remote_pci_info = nullptr;
  nvml::DeviceGetNvLinkRemoteDeviceTypeFn device_get_nvlink_remote_device_type = nullptr;
  // GPM (drivers for Hopper on); all five or none are used.
  nvml::GpmQueryDeviceSupportFn gpm_query_device_support = nullptr;
  nvml::GpmSampleAllocFn gpm_sample_alloc = nullptr;
  nvml::GpmSampleFreeFn gpm_sample_free = nullptr;
  nvml::GpmSampleGetFn gpm_sample_get = nullptr;
  nvml::GpmMetricsGetFn gpm_metrics_get = nullptr;
  // Per GPU instance of a GPU in MIG mode; optional beside the five.
  nvml::GpmMigSampleGetFn gpm_mig_sample_get = nullptr;
};

class NvmlLibrary {
 public:
  // Loads the first of `candidates` that dlopen accepts and initialises NVML.
  static Result<std::unique_ptr<NvmlLibrary>> open(const std::vector<std::string>& candidates);
  // Never shut down or unloaded: nvmlShutdown costs tens of milliseconds on a real driver, a
  // command is about to exit anyway, and the kernel releases the driver's handles with the process.
  ~NvmlLibrary() = default;  // NOLINT: deliberately no nvmlShutdown / dlclose
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlEntryPoints& api() const { return api_; }
  const std::string& path() const { return path_; }
  // The names actually bound, e.g. "nvmlInit_v2", for diagnostics.
  const std::vector<std::string>& bound_symbols() const { return bound_; }
  std::string describe(nvmlReturn_t code) const;

 private:
  NvmlLibrary(SharedLibrary library, std::string path) : library_(library), path_(std::move(path)) {}
  template <typename Fn>
  bool bind(Fn& slot, std::initializer_list<const char*> names);

  SharedLibrary library_;
  std::string path_;
  NvmlEntryPoints api_;
  std::vector<std::string> bound_;
};

}  // namespace gpupool
