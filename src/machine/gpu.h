// Domain types for what gpupool discovers about a machine's GPUs. Every
// measured field is optional: std::nullopt means "not available" (the driver
// lacks the call, or answered NOT_SUPPORTED), which is shown as "n/a" and as
// JSON null, never as 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "machine/gpu_readings.h"

namespace gpupool {

enum class ComputeMode { Default, ExclusiveThread, Prohibited, ExclusiveProcess };

enum class ProcessKind { Compute, Graphics, ComputeAndGraphics };

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  friend bool operator==(const ComputeCapability&, const ComputeCapability&) = default;
};

struct GpuProcess {
  uint32_t pid = 0;
  ProcessKind kind = ProcessKind::Compute;
  std::optional<uint64_t> used_memory_mib;
  // From /proc; absent when the process is gone or belongs to another PID namespace.
  std::optional<std::string> user;
  std::optional<std::string> command;
  // Whether NVML lists it among the clients of an MPS server (nvidia-smi's "M+C"); nullopt where
  // NVML cannot say (a driver without the MPS process list).
  std::optional<bool> mps_client;
  // On a GPU in MIG mode, the GPU instance it runs in (the MIG devices of that instance); nullopt
  // elsewhere, or where NVML cannot say (a driver without the _v2 process records).
  std::optional<unsigned> gpu_instance_id = std::nullopt;
  // Its share of the GPU's time running kernels over the last few seconds, in percent
  // (nvmlDeviceGetProcessUtilization): what tells apart the jobs sharing one GPU. 0 for a process
  // without a kernel then; nullopt where NVML cannot say.
  std::optional<unsigned> sm_utilization = std::nullopt;
};

// A MIG device: one compute instance of one GPU instance of a GPU in MIG mode, which CUDA sees
// as a device of its own (docs/mig.md).
// The profiling activity NVML's GPM gives for one GPU instance, named and measured as the GPU's
// own readings of the same names (machine/gpu_readings.h): ratios 0-1 and bytes per second.
#define GPUPOOL_MIG_ACTIVITY(A)                                                                     \
  A(gr_engine_active) A(sm_active) A(sm_occupancy) A(tensor_active) A(dram_active) A(fp64_active) \
  A(fp32_active) A(fp16_active) A(pcie_tx_bytes_per_s) A(pcie_rx_bytes_per_s) A(nvlink_tx_bytes_per_s) \
  A(nvlink_rx_bytes_per_s)

struct MigActivity {
#define GPUPOOL_MIG_ACTIVITY_FIELD(field) std::optional<double> field = std::nullopt;
  GPUPOOL_MIG_ACTIVITY(GPUPOOL_MIG_ACTIVITY_FIELD)
#undef GPUPOOL_MIG_ACTIVITY_FIELD
  friend bool operator==(const MigActivity&, const MigActivity&) = default;
};

// The reading of `activity` named `key` (a GPU reading's key, "sm_active"); nullopt when it has
// none or `key` is not an activity.
std::optional<double> mig_activity_reading(const MigActivity& activity, std::string_view key);

struct MigDevice {
  unsigned index = 0;  // NVML's MIG device index under its GPU
  std::string uuid = {};  // "MIG-...", as nvidia-smi -L prints it
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  unsigned gpu_slices = 0;      // the GPU instance's compute slices: the "3g" of "3g.71gb"
  unsigned compute_slices = 0;  // the compute instance's; fewer than gpu_slices: "1c.3g.71gb"
  uint64_t memory_mib = 0;      // the GPU instance's memory
  unsigned multiprocessors = 0;
  std::string profile = {};  // as nvidia-smi names it: "1g.18gb" (machine/mig_profile.h)
  // Its GPU instance's, between two samples of the daemon's monitor (GPM, Hopper on); empty
  // elsewhere, as for the GPU's.
  MigActivity activity = {};
  friend bool operator==(const MigDevice&, const MigDevice&) = default;
};

// A GPU's identity, its readings (machine/gpu_readings.h) and its processes.
struct Gpu {
  unsigned index = 0;  // NVML / nvidia-smi index (PCI bus order)
  std::string uuid;
  std::string pci_bus_id;  // "00000000:3B:00.0", as NVML spells it
  std::string name;
  // Set when the GPU answered its identity calls but fails the rest (e.g. fallen off the bus).
  std::optional<std::string> fault;

#define GPUPOOL_READING_FIELD(type, field, ...) std::optional<type> field;
  GPUPOOL_GPU_READINGS(GPUPOOL_READING_FIELD)
#undef GPUPOOL_READING_FIELD
  std::vector<GpuProcess> processes;
  std::vector<MigDevice> mig_devices;  // empty unless MIG is enabled and instances exist
};

// How two GPUs reach each other, best first. The PCIe levels are NVML's
// nvmlGpuTopologyLevel_t; NVLink (direct or through an NVSwitch fabric) beats all.
enum class PcieLevel { Board, SingleSwitch, MultipleSwitches, HostBridge, NumaNode, System };

struct Link {
  unsigned nvlinks = 0;        // NVLinks between the pair; through NVSwitch counts as direct
  bool via_nvswitch = false;   // the NVLinks go through an NVSwitch fabric
  std::optional<PcieLevel> pcie;  // nullopt when the driver would not say
};

struct DriverInfo {
  std::optional<std::string> driver_version;
  std::optional<std::string> nvml_version;
  std::optional<int> cuda_driver_version;  // e.g. 13000 for CUDA 13.0
};

struct Machine {
  DriverInfo driver;
  std::vector<Gpu> gpus;
  // links[i][j] between gpus[i] and gpus[j]; the diagonal is unused.
  std::vector<std::vector<Link>> links;
};

// A critical XID event the driver reported for a GPU (its UUID: the one number that means the
// same GPU in every view of the machine).
struct XidEvent {
  std::string gpu_uuid;
  uint64_t xid = 0;
  bool operator==(const XidEvent&) const = default;
};

// The MIG device of `gpu` with that UUID; nullptr when it has none (an empty UUID included).
const MigDevice* mig_device_with_uuid(const Gpu& gpu, std::string_view uuid);

const char* to_string(ComputeMode mode);
const char* to_string(ProcessKind kind);
const char* to_string(PcieLevel level);
// "MAJOR.MINOR", as nvidia-smi prints it.
std::string to_string(const ComputeCapability& capability);
// nvidia-smi topo -m's legend: NV#, PIX, PXB, PHB, NODE, SYS.
std::string topo_label(const Link& link);
// Who runs a GPU process, for people: its user, or "unknown user" where /proc cannot say (the
// process ended, or runs in another PID namespace); and its command, or "(not visible from here)".
std::string process_user_text(const GpuProcess& process);
std::string process_command_text(const GpuProcess& process);

// Calls visit(info, value) for each reading of `gpu` (any Gpu), in the table's
// order; value is the std::optional member.
template <typename G, typename Visit>
void for_each_reading(G&& gpu, Visit&& visit) {
#define GPUPOOL_VISIT_READING(type, field, ...) visit(GPUPOOL_READING_INFO(type, field, __VA_ARGS__), gpu.field);
  GPUPOOL_GPU_READINGS(GPUPOOL_VISIT_READING)
#undef GPUPOOL_VISIT_READING
}

}  // namespace gpupool
