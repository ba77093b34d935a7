// The many ways one GPU is numbered — nvidia-smi's index on the host, NVML's index inside a
// container, the /dev/nvidiaN minor number, the CUDA ordinal after CUDA_VISIBLE_DEVICES — put side
// by side; and the container runtime's ways of asking for GPUs (docker --gpus, compose, the
// NVIDIA_VISIBLE_DEVICES variable), which only full UUIDs fill safely.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "machine/gpu_selection.h"

namespace gpupool {

// The variables that decide which GPUs a process gets; nullopt means unset.
struct GpuEnvironment {
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> cuda_device_order;
  std::optional<std::string> nvidia_visible_devices;
};

GpuEnvironment gpu_environment_from(const std::map<std::string, std::string>& variables);

// NVIDIA_VISIBLE_DEVICES as the NVIDIA container runtime reads it, in one phrase.
std::string describe_nvidia_visible_devices(const std::optional<std::string>& value);

// What the host said about its GPUs (`gpupool list --json` run there): index by UUID.
struct HostGpu {
  unsigned index = 0;
  std::string uuid;
};

Result<std::vector<HostGpu>> parse_host_inventory(std::string_view json_text);

// One GPU NVML lists here, numbered every way.
struct NumberingRow {
  std::optional<unsigned> host_index;  // nullopt: in a container and no host inventory says
  unsigned container_index = 0;        // NVML's index as seen here
  std::optional<unsigned> minor_number;
  std::string pci_bus_id;
  std::string uuid;
  std::string name;
  std::optional<unsigned> cuda_index;  // nullopt: CUDA_VISIBLE_DEVICES hides it
  // Set when what CUDA sees as cuda_index is one of this GPU's MIG devices, not the GPU itself.
  std::optional<MigDevice> cuda_mig_device;
};

struct NumberingMap {
  std::vector<NumberingRow> rows;
  std::optional<std::string> error;  // the CUDA resolver's: cuInit would fail
  std::vector<std::string> warnings;
};

struct NumberingInputs {
  bool in_container = false;
  // The host's GPUs, when a host inventory was read; only used inside a container.
  std::optional<std::vector<HostGpu>> host_inventory;
  std::string host_inventory_source;  // where it came from, for messages
  GpuEnvironment environment;
};

// `gpus` are NVML's GPUs as seen here. Inside a container the host index comes from the inventory
// by UUID only: indices and minor numbers are renumbered or reused by the runtime.
NumberingMap build_numbering_map(std::span<const Gpu> gpus, const NumberingInputs& inputs);

// The full UUIDs of the GPUs named by nvidia-smi indices or (prefixes of) UUIDs, and of the MIG
// devices named by MIG UUID or GPU:DEVICE (docker and the NVIDIA container toolkit take MIG UUIDs
// as they take GPU UUIDs), in the order given. An unknown, ambiguous or repeated name is an error.
Result<std::vector<std::string>> select_gpu_uuids(std::span<const Gpu> gpus,
                                                  std::span<const std::string> names);

// `--gpus '"device=GPU-a,GPU-b"'`: the inner quotes keep docker from splitting at the comma.
std::string docker_gpus_argument(std::span<const std::string> uuids);
// The same words for `docker run $(...)`: the shell does not remove quotes from a substitution,
// so the argument carries the double quotes docker needs and no single ones.
std::string docker_gpus_words(std::span<const std::string> uuids);
// {"deploy": {"resources": {"reservations": {"devices": [{driver, device_ids, capabilities}]}}}}
nlohmann::json compose_gpu_reservation(std::span<const std::string> uuids);
// The same as YAML, for pasting under a compose service.
std::string compose_gpu_reservation_yaml(std::span<const std::string> uuids);

}  // namespace gpupool
