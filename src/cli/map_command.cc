// gpupool map: every numbering of every GPU side by side — host index, index in this container,
// /dev/nvidiaN minor, PCI bus id, UUID, and the CUDA ordinal a process would use — for this
// process's environment or a running process's.
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/quote.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "gpu/gpu_backend.h"
#include "machine/gpu_json.h"
#include "machine/numbering.h"
#include "os/container.h"
#include "os/environment.h"
#include "os/host_files.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

struct MapOptions {
  std::optional<uint32_t> pid;
  bool json = false;
};

Result<GpuEnvironment> target_environment(const HostFiles& files, std::optional<uint32_t> pid) {
  if (!pid) {
    return GpuEnvironment{environment_variable("CUDA_VISIBLE_DEVICES"), environment_variable("CUDA_DEVICE_ORDER"),
                          environment_variable("NVIDIA_VISIBLE_DEVICES")};
  }
  auto variables = files.process_environment(*pid);
  if (!variables) {
    return fail("cannot read the environment of process {} (no such process, or not yours)", *pid);
  }
  return gpu_environment_from(*variables);
}

// The host inventory named by GPUPOOL_HOST_INVENTORY; a problem with it is a warning, not a
// failure.
std::optional<std::vector<HostGpu>> host_inventory(const std::string& path,
                                                   std::vector<std::string>& warnings) {
  auto text = HostFiles("/").read(path);
  if (!text) {
    warnings.push_back(fmt::format("GPUPOOL_HOST_INVENTORY={} cannot be read", path));
    return std::nullopt;
  }
  auto inventory = parse_host_inventory(*text);
  if (!inventory.ok()) {
    warnings.push_back(fmt::format("GPUPOOL_HOST_INVENTORY={} is not a host inventory: {}", path,
                                   inventory.error().message));
    return std::nullopt;
  }
  return *inventory;
}

template <typename T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

template <typename T>
std::string or_na(const std::optional<T>& value) {
  return value ? fmt::format("{}", *value) : "n/a";
}

nlohmann::json map_json(const ContainerDetection& container, const GpuEnvironment& env,
                        const NumberingMap& map) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const NumberingRow& row : map.rows) {
    gpus.push_back({{"host_index", or_null(row.host_index)},
                    {"container_index", row.container_index},
                    {"minor_number", or_null(row.minor_number)},
                    {"pci_bus_id", row.pci_bus_id},
                    {"uuid", row.uuid},
                    {"name", row.name},
                    {"cuda_index", or_null(row.cuda_index)},
                    {"cuda_mig_device", row.cuda_mig_device ? to_json(*row.cuda_mig_device) : nullptr}});
  }
  return {{"container", {{"detected", container.detected}, {"how", or_null(container.how)}}},
          {"nvidia_visible_devices", or_null(env.nvidia_visible_devices)},
          {"cuda_visible_devices", or_null(env.cuda_visible_devices)},
          {"cuda_device_order", or_null(env.cuda_device_order)},
          {"gpus", gpus},
          {"error", or_null(map.error)},
          {"warnings", map.warnings}};
}

void print_text(const ContainerDetection& container, const GpuEnvironment& env,
                std::optional<uint32_t> pid, const NumberingMap& map) {
  fmt::print("Container: {}\n", container.detected ? "yes, " + *container.how : "none detected");
  fmt::print("NVIDIA_VISIBLE_DEVICES={}  ({})\n", quoted_variable(env.nvidia_visible_devices),
             describe_nvidia_visible_devices(env.nvidia_visible_devices));
  fmt::print("CUDA_VISIBLE_DEVICES={}  CUDA_DEVICE_ORDER={}  ({})\n\n",
             quoted_variable(env.cuda_visible_devices), quoted_variable(env.cuda_device_order),
             pid ? fmt::format("process {}", *pid) : std::string("this shell"));
  const char* row_format = "{:>4} {:>9} {:>5} {:>6}  {:<16}  {:<40}  {}\n";
  fmt::print(fmt::runtime(row_format), "HOST", "CONTAINER", "MINOR", "CUDA", "PCI BUS ID", "UUID",
             "NAME");
  for (const NumberingRow& row : map.rows) {
    fmt::print(fmt::runtime(row_format), or_na(row.host_index), row.container_index,
               or_na(row.minor_number),
               row.cuda_index ? fmt::format("cuda:{}", *row.cuda_index) : "-", row.pci_bus_id,
               row.uuid, row.name);
  }
  for (const NumberingRow& row : map.rows) {
    if (!row.cuda_mig_device) continue;
    const MigDevice& mig = *row.cuda_mig_device;
    fmt::print("cuda:{} is MIG device {}:{} of GPU {}: {}, {}\n", *row.cuda_index, row.container_index, mig.index,
               row.container_index, mig.profile, mig.uuid);
  }
  if (map.error) fmt::print("\nCUDA initialisation fails: {}\n", *map.error);
  for (const std::string& warning : map.warnings) fmt::print("warning: {}\n", warning);
}

Result<int> run_map(const MapOptions& options) {
  const HostFiles files = host_files_from_environment();
  TRY_ASSIGN(GpuEnvironment env, target_environment(files, options.pid));
  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  const ContainerDetection container = detect_container(files);

  NumberingInputs inputs;
  inputs.in_container = container.detected;
  inputs.environment = env;
  std::vector<std::string> inventory_warnings;
  const std::optional<std::string> inventory_path = environment_variable("GPUPOOL_HOST_INVENTORY");
  if (container.detected && inventory_path && !inventory_path->empty()) {
    inputs.host_inventory = host_inventory(*inventory_path, inventory_warnings);
    inputs.host_inventory_source = *inventory_path;
  }
  NumberingMap map = build_numbering_map(machine.gpus, inputs);
  map.warnings.insert(map.warnings.begin(), inventory_warnings.begin(), inventory_warnings.end());

  if (options.json) {
    fmt::print("{}\n", map_json(container, env, map).dump(2));
  } else {
    print_text(container, env, options.pid, map);
  }
  return map.error ? kExitError : kExitOk;
}

}  // namespace

void add_map_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("map",
                                 "Show every numbering of every GPU side by side: host, container, "
                                 "/dev/nvidiaN, PCI, UUID, CUDA");
  auto options = std::make_shared<MapOptions>();
  cmd->add_option("--pid", options->pid,
                  "Use this running process's CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and "
                  "NVIDIA_VISIBLE_DEVICES (default: this shell's)");
  cmd->add_flag(
      "--json", options->json,
      "Print {container, nvidia_visible_devices, cuda_visible_devices, cuda_device_order, "
      "gpus, error, warnings} as JSON");
  cmd->footer(
      "Inside a container the host's indices come only from GPUPOOL_HOST_INVENTORY=FILE, the "
      "output "
      "of `gpupool list --json` on the host, matched by UUID. Exit code 1 when CUDA initialisation "
      "would fail.");
  cmd->callback(
      [&exit_code, options] { run_command(exit_code, [&] { return run_map(*options); }); });
}

}  // namespace gpupool::cli
