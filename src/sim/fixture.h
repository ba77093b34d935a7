// Topology fixtures: JSON descriptions of whole machines (GPUs, their state,
// PCIe placement and NVLinks) that the simulated libnvidia-ml.so.1 answers
// from, so every NVML code path runs in CI where no GPU exists.
// docs/fixtures.md describes the format.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool::sim {

// Where a GPU sits on the PCIe tree; NVML's common-ancestor level follows from two of these.
struct PcieLocation {
  int numa_node = 0;
  int host_bridge = 0;
  std::vector<std::string> switches;  // PCIe switches above the GPU, outermost first
  std::optional<std::string> board;   // GPUs sharing one board (e.g. a dual-GPU card)
};

struct NvLinkPeer {
  unsigned peer = 0;   // index of the GPU at the other end
  unsigned links = 0;  // how many NVLinks join the two
};

struct FixtureProcess {
  uint32_t pid = 0;
  std::optional<uint64_t> used_memory_mib;  // nullopt: NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
  ProcessKind kind = ProcessKind::Compute;
};

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

// One GPU. A std::optional field is null in the fixture when the driver answers
// NVML_ERROR_NOT_SUPPORTED for it.
struct FixtureGpu {
  std::string uuid;
  std::string pci_bus_id;  // "00000000:3B:00.0"
  std::string name;
  std::optional<std::string> fault;  // "lost": only identity calls answer

  std::optional<unsigned> minor_number;
  std::optional<uint64_t> memory_total_mib;
  uint64_t memory_reserved_mib = 0;  // held by the driver, neither used nor free
  uint64_t memory_used_mib = 0;
  std::optional<unsigned> utilization_gpu;  // null together with utilization_memory
  std::optional<unsigned> utilization_memory;
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> sm_clock_mhz;  // null: no clock readings (the default)
  std::optional<unsigned> memory_clock_mhz;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;
  std::optional<bool> persistence_mode;
  std::optional<ComputeMode> compute_mode;
  std::optional<bool> mig_enabled;
  std::optional<uint64_t> ecc_corrected_volatile;
  std::optional<uint64_t> ecc_uncorrected_volatile;
  std::optional<unsigned> retired_pages;  // null: no page retirement (the default)
  bool retired_pages_pending = false;
  std::optional<unsigned> remapped_rows;  // null: no row remapping (the default)
  bool row_remapping_pending = false;
  bool row_remapping_failed = false;
  std::optional<int> numa_node;             // what NVML reports; pcie.numa_node is the topology
  std::optional<std::string> cpu_affinity;  // canonical CPU list ("0-19,40-59")
  std::optional<ComputeCapability> compute_capability;
  std::optional<unsigned> cuda_cores;

  PcieLocation pcie;
  std::vector<NvLinkPeer> nvlinks;
  unsigned nvswitch_links = 0;  // links into the NVSwitch fabric
  std::vector<FixtureProcess> processes;
};

struct Fixture {
  std::string name;
  std::string description;
  std::string nvml_library =
      "current";  // which simulated library generation: "current" or "legacy"
  DriverInfo driver;
  std::map<int, std::string> numa_cpus;  // NUMA node -> CPU list
  std::vector<FixtureGpu> gpus;          // in NVML index order, which is PCI bus order
};

// Parses and validates a fixture; `label` names it in error lines ("fixture LABEL: gpus[3].uuid:
// ...").
Result<Fixture> parse_fixture(std::string_view json_text, std::string_view label);

// Parses a fixture with a live overlay merged in: {"gpus": {"INDEX": {KEY: VALUE, ...}}} replaces
// those keys of those GPUs, and the result is validated like any fixture.
Result<Fixture> parse_fixture_with_overlay(std::string_view json_text,
                                           std::string_view overlay_text, std::string_view label);

Result<std::string> read_text_file(const std::string& path);
Result<Fixture> load_fixture(const std::string& path);

// A value containing '/' or ending in ".json" is a path; otherwise NAME is looked up as NAME.json
// in each directory in order. Returns an absolute path.
Result<std::string> locate_fixture(const std::string& name_or_path,
                                   const std::vector<std::string>& dirs);

// The fixture names (file names without ".json") found in the directories, sorted, without
// duplicates.
std::vector<std::string> fixture_names(const std::vector<std::string>& dirs);

// How NVML places two GPUs on the PCIe tree (its common ancestor).
PcieLevel pcie_level(const PcieLocation& a, const PcieLocation& b);

// NVLinks joining gpus[i] and gpus[j] directly or through the NVSwitch fabric, as NVML reveals
// them.
Link fixture_link(const Fixture& fixture, size_t i, size_t j);

// The machine the fixture describes, computed directly: what the NVML backend must discover
// through the simulated library (gpus in fixture order, links filled).
Machine machine_from_fixture(const Fixture& fixture);

// The fault the NVML backend reports for a GPU whose fixture says "lost".
inline constexpr const char* kLostGpuFault = "GPU is lost (NVML error 15)";

}  // namespace gpupool::sim
