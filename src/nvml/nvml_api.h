// Our own declarations of the part of NVML that gpupool calls. NVML is loaded
// at run time with dlopen, so no NVIDIA header or library is needed to build;
// scripts/device/nvml-abi-check compiles nvml_abi_check.cc against the real
// nvml.h on a GPU machine to prove these match NVIDIA's ABI.
//
// Names mirror NVIDIA's so they are easy to look up; only what we use is here.
#pragma once

#include <cstddef>

extern "C" {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEnableState_t = int;
using nvmlComputeMode_t = int;
using nvmlGpuTopologyLevel_t = int;
using nvmlTemperatureSensors_t = int;
using nvmlClockType_t = int;
using nvmlMemoryErrorType_t = int;
using nvmlPageRetirementCause_t = int;
using nvmlEccCounterType_t = int;
using nvmlIntNvLinkDeviceType_t = int;
using nvmlAffinityScope_t = unsigned int;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE = 80;
constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr unsigned NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;

// nvmlDeviceGetMigMode's modes (macros in nvml.h).
constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0x0;
constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 0x1;

constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;

constexpr nvmlComputeMode_t NVML_COMPUTEMODE_DEFAULT = 0;
constexpr nvmlComputeMode_t NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1;
constexpr nvmlComputeMode_t NVML_COMPUTEMODE_PROHIBITED = 2;
constexpr nvmlComputeMode_t NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3;

constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_INTERNAL = 0;
constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_SINGLE = 10;
constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_MULTIPLE = 20;
constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_HOSTBRIDGE = 30;
constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_NODE = 40;
constexpr nvmlGpuTopologyLevel_t NVML_TOPOLOGY_SYSTEM = 50;

constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;
constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
constexpr nvmlClockType_t NVML_CLOCK_MEM = 2;
constexpr nvmlAffinityScope_t NVML_AFFINITY_SCOPE_NODE = 0;  // NUMA node (memory affinity)
constexpr nvmlAffinityScope_t NVML_AFFINITY_SCOPE_SOCKET = 1;
constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;
constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;
constexpr nvmlEccCounterType_t NVML_AGGREGATE_ECC = 1;

constexpr nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_GPU = 0x00;
constexpr nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01;
constexpr nvmlIntNvLinkDeviceType_t NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02;

struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

struct nvmlMemory_t {  // for nvmlDeviceGetMemoryInfo (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlMemory_v2_t {  // for nvmlDeviceGetMemoryInfo_v2; `version` must be nvmlMemory_v2
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned int nvmlMemory_v2 = static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2u << 24);

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

// The process-list calls changed their element layout: the unsuffixed call
// takes v1 records, _v2 and _v3 take the larger record (v3 only changed which
// processes are reported, e.g. under MIG).
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// One process's utilisation over one of the driver's sample periods
// (nvmlDeviceGetProcessUtilization); timeStamp is CPU time in microseconds since the epoch.
struct nvmlProcessUtilizationSample_t {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};

// Field values (nvmlDeviceGetFieldValues): the caller fills fieldId (and scopeId), the driver
// the rest. valueType says which member of `value` holds the answer.
using nvmlValueType_t = int;
constexpr nvmlValueType_t NVML_VALUE_TYPE_DOUBLE = 0;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
constexpr nvmlValueType_t NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
constexpr nvmlValueType_t NVML_VALUE_TYPE_SIGNED_INT = 5;
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  nvmlValueType_t valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
// NVLink error counts summed over every link (nvml.h's _TOTAL fields; NVLink 1 to 4).
constexpr unsigned NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = 38;
constexpr unsigned NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 45;
constexpr unsigned NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL = 52;
constexpr unsigned NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 59;

// What nvmlDeviceGetAttributes_v2 reports about a MIG device (a compute instance in its GPU
// instance); NVML answers it for MIG device handles only.
struct nvmlDeviceAttributes_t {
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;  // MiB
};

// NVML_VALUE_NOT_AVAILABLE (-1) as a process's used memory: NVML may not tell it.
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE_ULL = ~0ULL;
// A process record's gpuInstanceId / computeInstanceId outside a MIG instance (not a macro of nvml.h).
constexpr unsigned int kNoGpuInstance = 0xFFFFFFFFu;

// GPM (GPU performance monitoring, Hopper on): counters read into sample buffers; a metric is
// computed from two samples taken more than 100 ms apart. Utilisations are percent (0-100),
// rates MiB per second.
using nvmlGpmSample_t = struct nvmlGpmSample_st*;
using nvmlGpmMetricId_t = int;

constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_GRAPHICS_UTIL = 1;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_UTIL = 2;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_SM_OCCUPANCY = 3;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_DRAM_BW_UTIL = 10;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP64_UTIL = 11;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP32_UTIL = 12;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_FP16_UTIL = 13;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60;
constexpr nvmlGpmMetricId_t NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61;

constexpr unsigned int NVML_GPM_METRICS_GET_VERSION = 1;
constexpr unsigned int NVML_GPM_SUPPORT_VERSION = 1;

struct nvmlGpmMetric_t {
  unsigned int metricId;    // in
  nvmlReturn_t nvmlReturn;  // out: value is valid only when NVML_SUCCESS
  double value;             // out
  struct {
    char* shortName;
    char* longName;
    char* unit;
  } metricInfo;  // out; any may be null
};

// nvml.h sizes `metrics` by NVML_GPM_METRIC_MAX, which grows with every release; the driver reads
// and writes only the first `numMetrics`, so an array as long as we ask for is enough. The fields
// before it are laid out as in nvml.h (the ABI check compares their offsets).
constexpr unsigned int kGpmMetricsAsked = 16;
struct nvmlGpmMetricsGet_t {
  unsigned int version;  // NVML_GPM_METRICS_GET_VERSION
  unsigned int numMetrics;
  nvmlGpmSample_t sample1;
  nvmlGpmSample_t sample2;
  nvmlGpmMetric_t metrics[kGpmMetricsAsked];
};

struct nvmlGpmSupport_t {
  unsigned int version;  // NVML_GPM_SUPPORT_VERSION
  unsigned int isSupportedDevice;
};

// Events (nvmlDeviceRegisterEvents): an event set collects what the registered GPUs report and
// nvmlEventSetWait_v2 waits for the next. A critical XID event's `eventData` is the XID.
using nvmlEventSet_t = struct nvmlEventSet_st*;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

}  // extern "C"

namespace gpupool::nvml {

// Function pointer types, one per symbol we look up.
using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();  // the simulated library implements it; gpupool never calls it
using ErrorStringFn = const char* (*)(nvmlReturn_t);
using SystemGetStringFn = nvmlReturn_t (*)(char*, unsigned int);
using SystemGetCudaDriverVersionFn = nvmlReturn_t (*)(int*);
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int*);
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using DeviceGetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using DeviceGetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using DeviceGetUtilizationRatesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*);
using DeviceGetClockInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*);  // MHz
using DeviceGetEnableStateFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*);
using DeviceGetComputeModeFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlComputeMode_t*);
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
// MIG devices: a GPU's MIG device handles answer the device calls (UUID, memory) for one
// compute instance; nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetGpuInstanceId and
// nvmlDeviceGetComputeInstanceId are DeviceGetUintFn.
using DeviceGetMigDeviceHandleByIndexFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlDevice_t*);
using DeviceGetAttributesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDeviceAttributes_t*);
using DeviceGetTotalEccErrorsFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemoryErrorType_t,
                                                   nvmlEccCounterType_t, unsigned long long*);
using DeviceGetRetiredPagesFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPageRetirementCause_t, unsigned int*,
                                                 unsigned long long*);
using DeviceGetRemappedRowsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*,
                                                 unsigned int*);
using DeviceGetCpuAffinityFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned long*);
using DeviceGetMemoryAffinityFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned long*,
                                                   nvmlAffinityScope_t);
using DeviceGetCudaComputeCapabilityFn = nvmlReturn_t (*)(nvmlDevice_t, int*, int*);
using DeviceGetProcessesV1Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v1_t*);
using DeviceGetProcessesV2Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*);
// The samples newer than the last argument (CPU microseconds); a null buffer asks for the count.
using DeviceGetProcessUtilizationFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned int*,
                                                       unsigned long long);
using DeviceGetTopologyCommonAncestorFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t,
                                                           nvmlGpuTopologyLevel_t*);
using DeviceGetNvLinkStateFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlEnableState_t*);
using DeviceGetNvLinkRemotePciInfoFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*);
using DeviceGetNvLinkRemoteDeviceTypeFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                           nvmlIntNvLinkDeviceType_t*);
using GpmQueryDeviceSupportFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSupport_t*);
using GpmSampleAllocFn = nvmlReturn_t (*)(nvmlGpmSample_t*);
using GpmSampleFreeFn = nvmlReturn_t (*)(nvmlGpmSample_t);
using GpmSampleGetFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlGpmSample_t);
// One GPU instance of a GPU in MIG mode, by its GPU instance id; `device` is the GPU's handle.
using GpmMigSampleGetFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlGpmSample_t);
using GpmMetricsGetFn = nvmlReturn_t (*)(nvmlGpmMetricsGet_t*);
using DeviceGetUint64Fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using DeviceGetFieldValuesFn = nvmlReturn_t (*)(nvmlDevice_t, int, nvmlFieldValue_t*);
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);
using DeviceRegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);  // timeout in ms

}  // namespace gpupool::nvml
