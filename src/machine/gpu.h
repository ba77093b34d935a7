// Domain types for what gpupool discovers about a machine's GPUs. Every
// measured field is optional: std::nullopt means "not available" (the driver
// lacks the call, or answered NOT_SUPPORTED), which is shown as "n/a" and as
// JSON null, never as 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpupool {

enum class ComputeMode { Default, ExclusiveThread, Prohibited, ExclusiveProcess };

enum class ProcessKind { Compute, Graphics, ComputeAndGraphics };

struct GpuProcess {
  uint32_t pid = 0;
  ProcessKind kind = ProcessKind::Compute;
  std::optional<uint64_t> used_memory_mib;
  // From /proc; absent when the process is gone or belongs to another PID namespace.
  std::optional<std::string> user;
  std::optional<std::string> command;
};

struct Gpu {
  unsigned index = 0;  // NVML / nvidia-smi index (PCI bus order)
  std::string uuid;
  std::string pci_bus_id;  // "00000000:3B:00.0", as NVML spells it
  std::string name;
  // Set when the GPU answered its identity calls but fails the rest (e.g. fallen off the bus).
  std::optional<std::string> fault;

  std::optional<unsigned> minor_number;
  std::optional<uint64_t> memory_total_mib;
  std::optional<uint64_t> memory_used_mib;
  std::optional<uint64_t> memory_free_mib;
  std::optional<unsigned> utilization_gpu;
  std::optional<unsigned> utilization_memory;
  std::optional<unsigned> temperature_c;
  // Current clocks in MHz, as nvidia-smi's "Clocks" section shows them.
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> memory_clock_mhz;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;
  std::optional<bool> persistence_mode;
  std::optional<ComputeMode> compute_mode;
  std::optional<bool> mig_enabled;
  std::optional<uint64_t> ecc_corrected_volatile;
  std::optional<uint64_t> ecc_uncorrected_volatile;
  // Memory repairs: pages retired after ECC errors (before Ampere), rows remapped (Ampere on).
  // A pending repair takes effect at the next GPU reset or driver load; a failed remap needs service.
  std::optional<unsigned> retired_pages;
  std::optional<bool> retired_pages_pending;
  std::optional<unsigned> remapped_rows;
  std::optional<bool> row_remapping_pending;
  std::optional<bool> row_remapping_failed;
  std::optional<int> numa_node;
  std::optional<std::string> cpu_affinity;  // CPU list, as in /sys: "0-15,32-47"
  std::optional<int> compute_capability_major;
  std::optional<int> compute_capability_minor;
  std::optional<unsigned> multiprocessors;
  std::vector<GpuProcess> processes;
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

const char* to_string(ComputeMode mode);
const char* to_string(ProcessKind kind);
const char* to_string(PcieLevel level);
// nvidia-smi topo -m's legend: NV#, PIX, PXB, PHB, NODE, SYS.
std::string topo_label(const Link& link);

}  // namespace gpupool
