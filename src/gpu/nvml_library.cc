#include "gpu/nvml_library.h"

#include <fmt/format.h>

#include "os/signals.h"

namespace gpupool {

template <typename Fn>
bool NvmlLibrary::bind(Fn& slot, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    void* symbol = library_.symbol(name);
    if (symbol != nullptr) {
      // POSIX guarantees that data and function pointers convert through dlsym.
      slot = reinterpret_cast<Fn>(symbol);
      bound_.emplace_back(name);
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::open(const std::vector<std::string>& candidates) {
  // The driver's library starts threads of its own, which inherit the signal mask of the thread
  // that loads it. gpupool takes SIGCHLD and SIGTERM from a signalfd or sigwaitinfo with them
  // blocked; the kernel hands such a process-wide signal to any thread that does not block it,
  // where SIGCHLD's default action drops it (gpupool launch then waited forever for a rank that
  // had exited) and SIGTERM's ends gpupool without stopping its job. So the library is loaded
  // and initialised with every signal blocked.
  AllSignalsBlocked blocked;
  std::string failures;
  for (const auto& candidate : candidates) {
    // Lazy binding: the driver library is large and we call a few dozen of its functions.
    auto library = SharedLibrary::load(candidate);
    if (!library) {
      // The first failure says it all ("libnvidia-ml.so.1: cannot open shared object file").
      if (failures.empty()) failures = library.error().message;
      continue;
    }
    std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(*library, candidate));
    NvmlEntryPoints& a = lib->api_;
    bool required = lib->bind(a.init, {"nvmlInit_v2", "nvmlInit"}) &&
                    lib->bind(a.device_get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}) &&
                    lib->bind(a.device_get_handle_by_index,
                              {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}) &&
                    lib->bind(a.device_get_name, {"nvmlDeviceGetName"}) &&
                    lib->bind(a.device_get_uuid, {"nvmlDeviceGetUUID"}) &&
                    lib->bind(a.device_get_pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2",
                                                      "nvmlDeviceGetPciInfo"});
    if (!required) {
      return fail("{} is not a usable NVML library (it lacks the basic device calls)", candidate);
    }
    lib->bind(a.error_string, {"nvmlErrorString"});
    lib->bind(a.system_get_driver_version, {"nvmlSystemGetDriverVersion"});
    lib->bind(a.system_get_nvml_version, {"nvmlSystemGetNVMLVersion"});
    lib->bind(a.system_get_cuda_driver_version,
              {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
    lib->bind(a.device_get_minor_number, {"nvmlDeviceGetMinorNumber"});
    lib->bind(a.device_get_memory_info_v2, {"nvmlDeviceGetMemoryInfo_v2"});
    lib->bind(a.device_get_memory_info, {"nvmlDeviceGetMemoryInfo"});
    lib->bind(a.device_get_utilization_rates, {"nvmlDeviceGetUtilizationRates"});
    lib->bind(a.device_get_temperature, {"nvmlDeviceGetTemperature"});
    lib->bind(a.device_get_clock_info, {"nvmlDeviceGetClockInfo"});
    lib->bind(a.device_get_power_usage, {"nvmlDeviceGetPowerUsage"});
    lib->bind(a.device_get_enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
    lib->bind(a.device_get_persistence_mode, {"nvmlDeviceGetPersistenceMode"});
    lib->bind(a.device_get_compute_mode, {"nvmlDeviceGetComputeMode"});
    lib->bind(a.device_get_mig_mode, {"nvmlDeviceGetMigMode"});
    lib->bind(a.device_get_max_mig_device_count, {"nvmlDeviceGetMaxMigDeviceCount"});
    lib->bind(a.device_get_mig_device_handle_by_index, {"nvmlDeviceGetMigDeviceHandleByIndex"});
    lib->bind(a.device_get_gpu_instance_id, {"nvmlDeviceGetGpuInstanceId"});
    lib->bind(a.device_get_compute_instance_id, {"nvmlDeviceGetComputeInstanceId"});
    // The unsuffixed call is older; only _v2's record is verified against nvml.h.
    lib->bind(a.device_get_attributes, {"nvmlDeviceGetAttributes_v2"});
    lib->bind(a.device_get_total_ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
    lib->bind(a.device_get_retired_pages, {"nvmlDeviceGetRetiredPages"});
    lib->bind(a.device_get_retired_pages_pending_status, {"nvmlDeviceGetRetiredPagesPendingStatus"});
    lib->bind(a.device_get_remapped_rows, {"nvmlDeviceGetRemappedRows"});
    lib->bind(a.device_get_clocks_event_reasons,
              {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
    lib->bind(a.device_get_pcie_replay_counter, {"nvmlDeviceGetPcieReplayCounter"});
    lib->bind(a.device_get_field_values, {"nvmlDeviceGetFieldValues"});
    lib->bind(a.device_get_total_energy_consumption, {"nvmlDeviceGetTotalEnergyConsumption"});
    lib->bind(a.event_set_create, {"nvmlEventSetCreate"});
    lib->bind(a.event_set_free, {"nvmlEventSetFree"});
    lib->bind(a.device_register_events, {"nvmlDeviceRegisterEvents"});
    lib->bind(a.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
    lib->bind(a.device_get_memory_affinity, {"nvmlDeviceGetMemoryAffinity"});
    lib->bind(a.device_get_cpu_affinity, {"nvmlDeviceGetCpuAffinity"});
    lib->bind(a.device_get_cuda_compute_capability, {"nvmlDeviceGetCudaComputeCapability"});
    lib->bind(a.device_get_num_gpu_cores, {"nvmlDeviceGetNumGpuCores"});
    lib->bind(a.device_get_compute_processes_v2,
              {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
    lib->bind(a.device_get_compute_processes_v1, {"nvmlDeviceGetComputeRunningProcesses"});
    lib->bind(a.device_get_process_utilization, {"nvmlDeviceGetProcessUtilization"});
    lib->bind(a.device_get_graphics_processes_v2,
              {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2"});
    lib->bind(a.device_get_graphics_processes_v1, {"nvmlDeviceGetGraphicsRunningProcesses"});
    lib->bind(a.device_get_mps_processes_v2,
              {"nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2"});
    lib->bind(a.device_get_mps_processes_v1, {"nvmlDeviceGetMPSComputeRunningProcesses"});
    lib->bind(a.device_get_topology_common_ancestor, {"nvmlDeviceGetTopologyCommonAncestor"});
    lib->bind(a.device_get_nvlink_state, {"nvmlDeviceGetNvLinkState"});
    lib->bind(a.device_get_nvlink_remote_pci_info,
              {"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"});
    lib->bind(a.device_get_nvlink_remote_device_type, {"nvmlDeviceGetNvLinkRemoteDeviceType"});
    lib->bind(a.gpm_query_device_support, {"nvmlGpmQueryDeviceSupport"});
    lib->bind(a.gpm_sample_alloc, {"nvmlGpmSampleAlloc"});
    lib->bind(a.gpm_sample_free, {"nvmlGpmSampleFree"});
    lib->bind(a.gpm_sample_get, {"nvmlGpmSampleGet"});
    lib->bind(a.gpm_mig_sample_get, {"nvmlGpmMigSampleGet"});
    lib->bind(a.gpm_metrics_get, {"nvmlGpmMetricsGet"});

    nvmlReturn_t rc = a.init();
    if (rc != NVML_SUCCESS) {
      return fail("NVML in {} failed to initialise: {}", candidate, lib->describe(rc));
    }
    return lib;
  }
  return fail("NVIDIA driver not found: {}", failures);
}


std::string NvmlLibrary::describe(nvmlReturn_t code) const {
  const char* text = api_.error_string != nullptr ? api_.error_string(code) : nullptr;
  if (text != nullptr) return fmt::format("{} (NVML error {})", text, code);
  return fmt::format("NVML error {}", code);
}

}  // namespace gpupool
