// Proves that our own NVML declarations (src/nvml/nvml_api.h) match NVIDIA's
// nvml.h: constants, struct sizes and field offsets, and every function
// signature we call. Compiled on a GPU machine against the CUDA toolkit's
// header (the abi step of scripts/device/verify); a mismatch is a compile error.
#include <cstddef>
#include <cstdio>
#include <type_traits>

namespace ours {
#include "nvml/nvml_api.h"
}

// nvml.h defines some constants as macros, which would rewrite our names once
// it is included: take our values first.
namespace captured {
constexpr unsigned uuid_buffer = ours::NVML_DEVICE_UUID_V2_BUFFER_SIZE;
constexpr unsigned name_buffer = ours::NVML_DEVICE_NAME_V2_BUFFER_SIZE;
constexpr unsigned driver_version_buffer = ours::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE;
constexpr unsigned nvml_version_buffer = ours::NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE;
constexpr unsigned pci_bus_id_buffer = ours::NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE;
constexpr unsigned pci_bus_id_v2_buffer = ours::NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE;
constexpr unsigned nvlink_max_links = ours::NVML_NVLINK_MAX_LINKS;
constexpr unsigned memory_v2_version = ours::nvmlMemory_v2;
constexpr unsigned long long value_not_available = ours::NVML_VALUE_NOT_AVAILABLE_ULL;
constexpr unsigned affinity_scope_node = ours::NVML_AFFINITY_SCOPE_NODE;
constexpr unsigned affinity_scope_socket = ours::NVML_AFFINITY_SCOPE_SOCKET;
constexpr unsigned gpm_metrics_get_version = ours::NVML_GPM_METRICS_GET_VERSION;
constexpr unsigned gpm_support_version = ours::NVML_GPM_SUPPORT_VERSION;
constexpr unsigned mig_disable = ours::NVML_DEVICE_MIG_DISABLE;
constexpr unsigned mig_enable = ours::NVML_DEVICE_MIG_ENABLE;
constexpr unsigned long long xid_critical_error = ours::nvmlEventTypeXidCriticalError;
constexpr unsigned nvlink_crc_flit_total = ours::NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL;
constexpr unsigned nvlink_crc_data_total = ours::NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL;
constexpr unsigned nvlink_replay_total = ours::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL;
constexpr unsigned nvlink_recovery_total = ours::NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL;
}  // namespace captured

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

static_assert(captured::uuid_buffer == NVML_DEVICE_UUID_V2_BUFFER_SIZE);
static_assert(captured::name_buffer == NVML_DEVICE_NAME_V2_BUFFER_SIZE);
static_assert(captured::driver_version_buffer == NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE);
static_assert(captured::nvml_version_buffer == NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE);
static_assert(captured::pci_bus_id_buffer == NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE);
static_assert(captured::pci_bus_id_v2_buffer == NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE);
static_assert(captured::nvlink_max_links == NVML_NVLINK_MAX_LINKS);
static_assert(captured::memory_v2_version == nvmlMemory_v2);
static_assert(captured::value_not_available == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE));
static_assert(captured::affinity_scope_node == NVML_AFFINITY_SCOPE_NODE);
static_assert(captured::affinity_scope_socket == NVML_AFFINITY_SCOPE_SOCKET);
static_assert(captured::gpm_metrics_get_version == NVML_GPM_METRICS_GET_VERSION);
static_assert(captured::gpm_support_version == NVML_GPM_SUPPORT_VERSION);
static_assert(captured::mig_disable == NVML_DEVICE_MIG_DISABLE);
static_assert(captured::mig_enable == NVML_DEVICE_MIG_ENABLE);
static_assert(captured::xid_critical_error == nvmlEventTypeXidCriticalError);
static_assert(captured::nvlink_crc_flit_total == NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL);
static_assert(captured::nvlink_crc_data_total == NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL);
static_assert(captured::nvlink_replay_total == NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL);
static_assert(captured::nvlink_recovery_total == NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL);

#define SAME_VALUE(name) static_assert(static_cast<long long>(ours::name) == static_cast<long long>(::name), #name)
SAME_VALUE(NVML_SUCCESS);
SAME_VALUE(NVML_ERROR_UNINITIALIZED);
SAME_VALUE(NVML_ERROR_INVALID_ARGUMENT);
SAME_VALUE(NVML_ERROR_NOT_SUPPORTED);
SAME_VALUE(NVML_ERROR_NO_PERMISSION);
SAME_VALUE(NVML_ERROR_NOT_FOUND);
SAME_VALUE(NVML_ERROR_INSUFFICIENT_SIZE);
SAME_VALUE(NVML_ERROR_DRIVER_NOT_LOADED);
SAME_VALUE(NVML_ERROR_TIMEOUT);
SAME_VALUE(NVML_ERROR_FUNCTION_NOT_FOUND);
SAME_VALUE(NVML_ERROR_GPU_IS_LOST);
SAME_VALUE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
SAME_VALUE(NVML_ERROR_UNKNOWN);
SAME_VALUE(NVML_FEATURE_DISABLED);
SAME_VALUE(NVML_FEATURE_ENABLED);
SAME_VALUE(NVML_COMPUTEMODE_DEFAULT);
SAME_VALUE(NVML_COMPUTEMODE_EXCLUSIVE_THREAD);
SAME_VALUE(NVML_COMPUTEMODE_PROHIBITED);
SAME_VALUE(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
SAME_VALUE(NVML_TOPOLOGY_INTERNAL);
SAME_VALUE(NVML_TOPOLOGY_SINGLE);
SAME_VALUE(NVML_TOPOLOGY_MULTIPLE);
SAME_VALUE(NVML_TOPOLOGY_HOSTBRIDGE);
SAME_VALUE(NVML_TOPOLOGY_NODE);
SAME_VALUE(NVML_TOPOLOGY_SYSTEM);
SAME_VALUE(NVML_TEMPERATURE_GPU);
SAME_VALUE(NVML_CLOCK_SM);
SAME_VALUE(NVML_CLOCK_MEM);
SAME_VALUE(NVML_MEMORY_ERROR_TYPE_CORRECTED);
SAME_VALUE(NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
SAME_VALUE(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS);
SAME_VALUE(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR);
SAME_VALUE(NVML_VOLATILE_ECC);
SAME_VALUE(NVML_AGGREGATE_ECC);
SAME_VALUE(NVML_NVLINK_DEVICE_TYPE_GPU);
SAME_VALUE(NVML_NVLINK_DEVICE_TYPE_IBMNPU);
SAME_VALUE(NVML_NVLINK_DEVICE_TYPE_SWITCH);
SAME_VALUE(NVML_GPM_METRIC_GRAPHICS_UTIL);
SAME_VALUE(NVML_GPM_METRIC_SM_UTIL);
SAME_VALUE(NVML_GPM_METRIC_SM_OCCUPANCY);
SAME_VALUE(NVML_GPM_METRIC_ANY_TENSOR_UTIL);
SAME_VALUE(NVML_GPM_METRIC_DRAM_BW_UTIL);
SAME_VALUE(NVML_GPM_METRIC_FP64_UTIL);
SAME_VALUE(NVML_GPM_METRIC_FP32_UTIL);
SAME_VALUE(NVML_GPM_METRIC_FP16_UTIL);
SAME_VALUE(NVML_VALUE_TYPE_DOUBLE);
SAME_VALUE(NVML_VALUE_TYPE_UNSIGNED_INT);
SAME_VALUE(NVML_VALUE_TYPE_UNSIGNED_LONG);
SAME_VALUE(NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
SAME_VALUE(NVML_VALUE_TYPE_SIGNED_LONG_LONG);
SAME_VALUE(NVML_VALUE_TYPE_SIGNED_INT);
SAME_VALUE(NVML_GPM_METRIC_PCIE_TX_PER_SEC);
SAME_VALUE(NVML_GPM_METRIC_PCIE_RX_PER_SEC);
SAME_VALUE(NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC);
SAME_VALUE(NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC);
// Every metric we ask for fits the array of our nvmlGpmMetricsGet_t, which is never longer than nvml.h's.
static_assert(ours::kGpmMetricsAsked <= NVML_GPM_METRIC_MAX);

// Enums are passed as int in our declarations.
#define INT_SIZED(type) static_assert(sizeof(::type) == sizeof(int), #type)
INT_SIZED(nvmlReturn_t);
INT_SIZED(nvmlEnableState_t);
INT_SIZED(nvmlComputeMode_t);
INT_SIZED(nvmlGpuTopologyLevel_t);
INT_SIZED(nvmlTemperatureSensors_t);
INT_SIZED(nvmlClockType_t);
INT_SIZED(nvmlMemoryErrorType_t);
INT_SIZED(nvmlPageRetirementCause_t);
INT_SIZED(nvmlEccCounterType_t);
INT_SIZED(nvmlIntNvLinkDeviceType_t);
INT_SIZED(nvmlGpmMetricId_t);
INT_SIZED(nvmlValueType_t);

#define SAME_LAYOUT(type) static_assert(sizeof(ours::type) == sizeof(::type) && alignof(ours::type) == alignof(::type), #type)
#define SAME_FIELD(type, field) static_assert(offsetof(ours::type, field) == offsetof(::type, field) && sizeof(ours::type::field) == sizeof(::type::field), #type "." #field)
SAME_LAYOUT(nvmlPciInfo_t);
SAME_FIELD(nvmlPciInfo_t, busIdLegacy);
SAME_FIELD(nvmlPciInfo_t, domain);
SAME_FIELD(nvmlPciInfo_t, bus);
SAME_FIELD(nvmlPciInfo_t, device);
SAME_FIELD(nvmlPciInfo_t, pciDeviceId);
SAME_FIELD(nvmlPciInfo_t, pciSubSystemId);
SAME_FIELD(nvmlPciInfo_t, busId);
SAME_LAYOUT(nvmlMemory_t);
SAME_FIELD(nvmlMemory_t, total);
SAME_FIELD(nvmlMemory_t, free);
SAME_FIELD(nvmlMemory_t, used);
SAME_LAYOUT(nvmlMemory_v2_t);
SAME_FIELD(nvmlMemory_v2_t, version);
SAME_FIELD(nvmlMemory_v2_t, total);
SAME_FIELD(nvmlMemory_v2_t, reserved);
SAME_FIELD(nvmlMemory_v2_t, free);
SAME_FIELD(nvmlMemory_v2_t, used);
SAME_LAYOUT(nvmlUtilization_t);
SAME_FIELD(nvmlUtilization_t, gpu);
SAME_FIELD(nvmlUtilization_t, memory);
SAME_LAYOUT(nvmlProcessInfo_v1_t);
SAME_FIELD(nvmlProcessInfo_v1_t, pid);
SAME_FIELD(nvmlProcessInfo_v1_t, usedGpuMemory);
SAME_LAYOUT(nvmlProcessInfo_v2_t);
SAME_FIELD(nvmlProcessInfo_v2_t, pid);
SAME_FIELD(nvmlProcessInfo_v2_t, usedGpuMemory);
SAME_FIELD(nvmlProcessInfo_v2_t, gpuInstanceId);
SAME_FIELD(nvmlProcessInfo_v2_t, computeInstanceId);
SAME_LAYOUT(nvmlProcessUtilizationSample_t);
SAME_FIELD(nvmlProcessUtilizationSample_t, pid);
SAME_FIELD(nvmlProcessUtilizationSample_t, timeStamp);
SAME_FIELD(nvmlProcessUtilizationSample_t, smUtil);
SAME_FIELD(nvmlProcessUtilizationSample_t, memUtil);
SAME_FIELD(nvmlProcessUtilizationSample_t, encUtil);
SAME_FIELD(nvmlProcessUtilizationSample_t, decUtil);
SAME_LAYOUT(nvmlGpmMetric_t);
SAME_FIELD(nvmlGpmMetric_t, metricId);
SAME_FIELD(nvmlGpmMetric_t, nvmlReturn);
SAME_FIELD(nvmlGpmMetric_t, value);
SAME_FIELD(nvmlGpmMetric_t, metricInfo);
static_assert(offsetof(ours::nvmlGpmMetric_t, metricInfo.shortName) == offsetof(::nvmlGpmMetric_t, metricInfo.shortName));
static_assert(offsetof(ours::nvmlGpmMetric_t, metricInfo.longName) == offsetof(::nvmlGpmMetric_t, metricInfo.longName));
static_assert(offsetof(ours::nvmlGpmMetric_t, metricInfo.unit) == offsetof(::nvmlGpmMetric_t, metricInfo.unit));
// Our metrics array is shorter (nvml_api.h says why): everything before it, and its elements, match.
SAME_FIELD(nvmlGpmMetricsGet_t, version);
SAME_FIELD(nvmlGpmMetricsGet_t, numMetrics);
SAME_FIELD(nvmlGpmMetricsGet_t, sample1);
SAME_FIELD(nvmlGpmMetricsGet_t, sample2);
static_assert(offsetof(ours::nvmlGpmMetricsGet_t, metrics) == offsetof(::nvmlGpmMetricsGet_t, metrics));
static_assert(sizeof(ours::nvmlGpmMetricsGet_t::metrics[0]) == sizeof(::nvmlGpmMetricsGet_t::metrics[0]));
SAME_LAYOUT(nvmlGpmSupport_t);
SAME_LAYOUT(nvmlValue_t);
SAME_FIELD(nvmlValue_t, dVal);
SAME_FIELD(nvmlValue_t, siVal);
SAME_FIELD(nvmlValue_t, uiVal);
SAME_FIELD(nvmlValue_t, ulVal);
SAME_FIELD(nvmlValue_t, ullVal);
SAME_FIELD(nvmlValue_t, sllVal);
SAME_LAYOUT(nvmlFieldValue_t);
SAME_FIELD(nvmlFieldValue_t, fieldId);
SAME_FIELD(nvmlFieldValue_t, scopeId);
SAME_FIELD(nvmlFieldValue_t, timestamp);
SAME_FIELD(nvmlFieldValue_t, latencyUsec);
SAME_FIELD(nvmlFieldValue_t, valueType);
SAME_FIELD(nvmlFieldValue_t, nvmlReturn);
SAME_FIELD(nvmlFieldValue_t, value);
SAME_FIELD(nvmlGpmSupport_t, version);
SAME_FIELD(nvmlGpmSupport_t, isSupportedDevice);
SAME_LAYOUT(nvmlEventData_t);
SAME_FIELD(nvmlEventData_t, device);
SAME_FIELD(nvmlEventData_t, eventType);
SAME_FIELD(nvmlEventData_t, eventData);
SAME_FIELD(nvmlEventData_t, gpuInstanceId);
SAME_FIELD(nvmlEventData_t, computeInstanceId);
SAME_LAYOUT(nvmlDeviceAttributes_t);
SAME_FIELD(nvmlDeviceAttributes_t, multiprocessorCount);
SAME_FIELD(nvmlDeviceAttributes_t, sharedCopyEngineCount);
SAME_FIELD(nvmlDeviceAttributes_t, sharedDecoderCount);
SAME_FIELD(nvmlDeviceAttributes_t, sharedEncoderCount);
SAME_FIELD(nvmlDeviceAttributes_t, sharedJpegCount);
SAME_FIELD(nvmlDeviceAttributes_t, sharedOfaCount);
SAME_FIELD(nvmlDeviceAttributes_t, gpuInstanceSliceCount);
SAME_FIELD(nvmlDeviceAttributes_t, computeInstanceSliceCount);
SAME_FIELD(nvmlDeviceAttributes_t, memorySizeMB);
// The _v3 process calls take nvmlProcessInfo_t: it must be the v2 record.
static_assert(std::is_same_v<::nvmlProcessInfo_t, ::nvmlProcessInfo_v2_t>);

// Function signatures: NVIDIA's types mapped onto ours must give our pointer types exactly.
template <typename T> struct to_ours { using type = T; };
template <typename T> struct to_ours<T*> { using type = typename to_ours<T>::type*; };
template <typename T> struct to_ours<const T> { using type = const typename to_ours<T>::type; };
template <typename R, typename... A> struct to_ours<R (*)(A...)> {
  using type = typename to_ours<R>::type (*)(typename to_ours<A>::type...);
};
#define MAP(real, mine) template <> struct to_ours<::real> { using type = mine; }
MAP(nvmlReturn_t, int);
MAP(nvmlEnableState_t, int);
MAP(nvmlComputeMode_t, int);
MAP(nvmlGpuTopologyLevel_t, int);
MAP(nvmlTemperatureSensors_t, int);
MAP(nvmlClockType_t, int);
MAP(nvmlMemoryErrorType_t, int);
MAP(nvmlPageRetirementCause_t, int);
MAP(nvmlEccCounterType_t, int);
MAP(nvmlIntNvLinkDeviceType_t, int);
MAP(nvmlDevice_st, ours::nvmlDevice_st);
MAP(nvmlPciInfo_t, ours::nvmlPciInfo_t);
MAP(nvmlMemory_t, ours::nvmlMemory_t);
MAP(nvmlMemory_v2_t, ours::nvmlMemory_v2_t);
MAP(nvmlUtilization_t, ours::nvmlUtilization_t);
MAP(nvmlProcessInfo_v1_t, ours::nvmlProcessInfo_v1_t);
MAP(nvmlProcessInfo_v2_t, ours::nvmlProcessInfo_v2_t);
MAP(nvmlProcessUtilizationSample_t, ours::nvmlProcessUtilizationSample_t);
MAP(nvmlGpmSample_st, ours::nvmlGpmSample_st);
MAP(nvmlGpmSupport_t, ours::nvmlGpmSupport_t);
MAP(nvmlGpmMetricsGet_t, ours::nvmlGpmMetricsGet_t);
MAP(nvmlDeviceAttributes_t, ours::nvmlDeviceAttributes_t);
MAP(nvmlEventSet_st, ours::nvmlEventSet_st);
MAP(nvmlEventData_t, ours::nvmlEventData_t);
MAP(nvmlFieldValue_t, ours::nvmlFieldValue_t);

namespace fn = ours::gpupool::nvml;
#define SAME_SIGNATURE(mine, real) static_assert(std::is_same_v<fn::mine, to_ours<decltype(&::real)>::type>, #real)
SAME_SIGNATURE(InitFn, nvmlInit_v2);
SAME_SIGNATURE(InitFn, nvmlInit);
SAME_SIGNATURE(ShutdownFn, nvmlShutdown);
SAME_SIGNATURE(DeviceGetProcessUtilizationFn, nvmlDeviceGetProcessUtilization);
SAME_SIGNATURE(ErrorStringFn, nvmlErrorString);
SAME_SIGNATURE(SystemGetStringFn, nvmlSystemGetDriverVersion);
SAME_SIGNATURE(SystemGetStringFn, nvmlSystemGetNVMLVersion);
SAME_SIGNATURE(SystemGetCudaDriverVersionFn, nvmlSystemGetCudaDriverVersion_v2);
SAME_SIGNATURE(SystemGetCudaDriverVersionFn, nvmlSystemGetCudaDriverVersion);
SAME_SIGNATURE(DeviceGetCountFn, nvmlDeviceGetCount_v2);
SAME_SIGNATURE(DeviceGetCountFn, nvmlDeviceGetCount);
SAME_SIGNATURE(DeviceGetHandleByIndexFn, nvmlDeviceGetHandleByIndex_v2);
SAME_SIGNATURE(DeviceGetHandleByIndexFn, nvmlDeviceGetHandleByIndex);
SAME_SIGNATURE(DeviceGetStringFn, nvmlDeviceGetName);
SAME_SIGNATURE(DeviceGetStringFn, nvmlDeviceGetUUID);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetMinorNumber);
SAME_SIGNATURE(DeviceGetPciInfoFn, nvmlDeviceGetPciInfo_v3);
SAME_SIGNATURE(DeviceGetPciInfoFn, nvmlDeviceGetPciInfo_v2);
SAME_SIGNATURE(DeviceGetPciInfoFn, nvmlDeviceGetPciInfo);
SAME_SIGNATURE(DeviceGetMemoryInfoV2Fn, nvmlDeviceGetMemoryInfo_v2);
SAME_SIGNATURE(DeviceGetMemoryInfoFn, nvmlDeviceGetMemoryInfo);
SAME_SIGNATURE(DeviceGetUtilizationRatesFn, nvmlDeviceGetUtilizationRates);
SAME_SIGNATURE(DeviceGetTemperatureFn, nvmlDeviceGetTemperature);
SAME_SIGNATURE(DeviceGetClockInfoFn, nvmlDeviceGetClockInfo);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetPowerUsage);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetEnforcedPowerLimit);
SAME_SIGNATURE(DeviceGetEnableStateFn, nvmlDeviceGetPersistenceMode);
SAME_SIGNATURE(DeviceGetComputeModeFn, nvmlDeviceGetComputeMode);
SAME_SIGNATURE(DeviceGetMigModeFn, nvmlDeviceGetMigMode);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetMaxMigDeviceCount);
SAME_SIGNATURE(DeviceGetMigDeviceHandleByIndexFn, nvmlDeviceGetMigDeviceHandleByIndex);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetGpuInstanceId);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetComputeInstanceId);
SAME_SIGNATURE(DeviceGetAttributesFn, nvmlDeviceGetAttributes_v2);
SAME_SIGNATURE(DeviceGetTotalEccErrorsFn, nvmlDeviceGetTotalEccErrors);
SAME_SIGNATURE(DeviceGetRetiredPagesFn, nvmlDeviceGetRetiredPages);
SAME_SIGNATURE(DeviceGetEnableStateFn, nvmlDeviceGetRetiredPagesPendingStatus);
SAME_SIGNATURE(DeviceGetRemappedRowsFn, nvmlDeviceGetRemappedRows);
SAME_SIGNATURE(DeviceGetMemoryAffinityFn, nvmlDeviceGetMemoryAffinity);
SAME_SIGNATURE(DeviceGetCpuAffinityFn, nvmlDeviceGetCpuAffinity);
SAME_SIGNATURE(DeviceGetCudaComputeCapabilityFn, nvmlDeviceGetCudaComputeCapability);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetNumGpuCores);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetComputeRunningProcesses_v3);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetComputeRunningProcesses_v2);
SAME_SIGNATURE(DeviceGetProcessesV1Fn, nvmlDeviceGetComputeRunningProcesses);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetMPSComputeRunningProcesses_v3);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetMPSComputeRunningProcesses_v2);
SAME_SIGNATURE(DeviceGetProcessesV1Fn, nvmlDeviceGetMPSComputeRunningProcesses);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetGraphicsRunningProcesses_v3);
SAME_SIGNATURE(DeviceGetProcessesV2Fn, nvmlDeviceGetGraphicsRunningProcesses_v2);
SAME_SIGNATURE(DeviceGetProcessesV1Fn, nvmlDeviceGetGraphicsRunningProcesses);
SAME_SIGNATURE(DeviceGetTopologyCommonAncestorFn, nvmlDeviceGetTopologyCommonAncestor);
SAME_SIGNATURE(DeviceGetNvLinkStateFn, nvmlDeviceGetNvLinkState);
SAME_SIGNATURE(DeviceGetNvLinkRemotePciInfoFn, nvmlDeviceGetNvLinkRemotePciInfo_v2);
SAME_SIGNATURE(DeviceGetNvLinkRemotePciInfoFn, nvmlDeviceGetNvLinkRemotePciInfo);
SAME_SIGNATURE(DeviceGetNvLinkRemoteDeviceTypeFn, nvmlDeviceGetNvLinkRemoteDeviceType);
SAME_SIGNATURE(GpmQueryDeviceSupportFn, nvmlGpmQueryDeviceSupport);
SAME_SIGNATURE(GpmSampleAllocFn, nvmlGpmSampleAlloc);
SAME_SIGNATURE(GpmSampleFreeFn, nvmlGpmSampleFree);
SAME_SIGNATURE(GpmSampleGetFn, nvmlGpmSampleGet);
SAME_SIGNATURE(GpmMigSampleGetFn, nvmlGpmMigSampleGet);
SAME_SIGNATURE(GpmMetricsGetFn, nvmlGpmMetricsGet);
SAME_SIGNATURE(DeviceGetUint64Fn, nvmlDeviceGetCurrentClocksEventReasons);
SAME_SIGNATURE(DeviceGetUint64Fn, nvmlDeviceGetCurrentClocksThrottleReasons);
SAME_SIGNATURE(DeviceGetUint64Fn, nvmlDeviceGetTotalEnergyConsumption);
SAME_SIGNATURE(DeviceGetUintFn, nvmlDeviceGetPcieReplayCounter);
SAME_SIGNATURE(DeviceGetFieldValuesFn, nvmlDeviceGetFieldValues);
SAME_SIGNATURE(EventSetCreateFn, nvmlEventSetCreate);
SAME_SIGNATURE(EventSetFreeFn, nvmlEventSetFree);
SAME_SIGNATURE(DeviceRegisterEventsFn, nvmlDeviceRegisterEvents);
SAME_SIGNATURE(EventSetWaitFn, nvmlEventSetWait_v2);
SAME_SIGNATURE(EventSetWaitFn, nvmlEventSetWait);

int main() {
  std::puts("nvml ABI check: every constant, struct layout and signature we declare matches nvml.h");
  return 0;
}
