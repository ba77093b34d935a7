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
  bool mps_client = false;  // also listed by nvmlDeviceGetMPSComputeRunningProcesses
  // The GPU instance it runs in, on a GPU in MIG mode (one of its MIG devices' gpu_instance_id).
  std::optional<unsigned> gpu_instance_id = std::nullopt;
  // Its utilisation sample's SM percentage (nvmlDeviceGetProcessUtilization); 0: no sample, as
  // for a process that runs no kernel.
  unsigned sm_utilization = 0;
};

// A MIG device of a GPU in MIG mode: one compute instance, as nvmlDeviceGetAttributes_v2 and the
// instance-id calls report it. Its position in the GPU's list is NVML's MIG device index.
struct FixtureMigDevice {
  std::string uuid;  // "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  unsigned gpu_instance_id = 0;
  unsigned compute_instance_id = 0;
  unsigned gpu_slices = 0;
  unsigned compute_slices = 0;  // the fixture's default: gpu_slices
  uint64_t memory_mib = 0;
  unsigned multiprocessors = 0;
  // Its GPU instance's GPM activity (machine/gpu.h); absent: idle where the GPU has GPM.
  MigActivity activity = {};
};

// A reading's member of FixtureGpu: a plain value where the fixture never gives null.
#define GPUPOOL_FIXTURE_READING(type, field, fixture, ...) GPUPOOL_FIXTURE_READING_##fixture(type, field)
#define GPUPOOL_FIXTURE_READING_Required(type, field) std::optional<type> field;
#define GPUPOOL_FIXTURE_READING_Zero(type, field) std::optional<type> field;
#define GPUPOOL_FIXTURE_READING_Null(type, field) std::optional<type> field;
#define GPUPOOL_FIXTURE_READING_ZeroNotNull(type, field) type field{};
#define GPUPOOL_FIXTURE_READING_ByHand(type, field) std::optional<type> field;
#define GPUPOOL_FIXTURE_READING_Derived(type, field)

// One GPU: its identity, the readings a fixture gives (machine/gpu_readings.h: all but the
// Derived ones) and its place in the machine. A std::optional field is null in the fixture when
// the driver answers NVML_ERROR_NOT_SUPPORTED for it.
struct FixtureGpu {
  std::string uuid;
  std::string pci_bus_id;  // "00000000:3B:00.0"
  std::string name;
  std::optional<std::string> fault;  // "lost": only identity calls answer

  GPUPOOL_GPU_READINGS(GPUPOOL_FIXTURE_READING)
  uint64_t memory_reserved_mib = 0;  // held by the driver, neither used nor free
  std::optional<unsigned> cuda_cores;  // the simulated library derives multiprocessors from it

  PcieLocation pcie;
  std::vector<NvLinkPeer> nvlinks;
  unsigned nvswitch_links = 0;  // links into the NVSwitch fabric
  std::vector<FixtureProcess> processes;
  std::vector<FixtureMigDevice> mig_devices;  // only where mig_enabled is true
  // The critical XIDs the driver reported since it loaded, oldest first; an overlay that appends
  // one raises an XID event.
  std::vector<unsigned long long> xid_events;
};

// Calls visit(info, value) for each reading of `gpu` (any FixtureGpu) that a fixture gives, in
// the table's order; value is a std::optional, or a plain value for ZeroNotNull readings.
template <typename G, typename Visit>
void for_each_fixture_reading(G&& gpu, Visit&& visit) {
#define GPUPOOL_VISIT_FIXTURE_READING(type, field, fixture, ...) \
  GPUPOOL_IF_IN_FIXTURE(fixture, visit(GPUPOOL_READING_INFO(type, field, fixture, __VA_ARGS__), gpu.field);)
  GPUPOOL_GPU_READINGS(GPUPOOL_VISIT_FIXTURE_READING)
#undef GPUPOOL_VISIT_FIXTURE_READING
}

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

// The most MIG devices a GPU has (seven one-slice instances on an A100, H100 or H200): what the
// simulated nvmlDeviceGetMaxMigDeviceCount answers for a GPU in MIG mode.
inline constexpr unsigned kMaxMigDevices = 7;

// The fault the NVML backend reports for a GPU whose fixture says "lost".
inline constexpr const char* kLostGpuFault = "GPU is lost (NVML error 15)";

}  // namespace gpupool::sim
