// gpupool resolve: which physical GPUs a CUDA program would see for a
// CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER pair, from the model of the driver's
// rules or (--driver) from the real driver in a child process.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/quote.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "gpu/cuda_probe.h"
#include "gpu/gpu_backend.h"
#include "machine/cuda_visible_devices.h"
#include "machine/gpu_json.h"
#include "machine/numbering.h"
#include "os/environment.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

struct ResolveOptions {
  std::optional<std::string> value;  // nullopt: take this process's environment
  std::string order;                 // "pci", "fastest", or empty: the environment's
  bool json = false;
  bool driver = false;
};

// The MIG device a visible device is, or nullptr for a whole GPU.
const MigDevice* mig_device_of(const Gpu& gpu, const VisibleDevice& device) {
  if (!device.mig_index) return nullptr;
  auto found = std::find_if(gpu.mig_devices.begin(), gpu.mig_devices.end(),
                            [&](const MigDevice& mig) { return mig.index == *device.mig_index; });
  return found == gpu.mig_devices.end() ? nullptr : &*found;
}

nlohmann::json devices_json(const Machine& machine, const std::vector<VisibleDevice>& devices) {
  nlohmann::json out = nlohmann::json::array();
  for (const VisibleDevice& d : devices) {
    const Gpu& gpu = *find_gpu_by_index(machine.gpus, d.nvml_index);
    const MigDevice* mig = mig_device_of(gpu, d);
    out.push_back({{"cuda_index", d.cuda_index},
                   {"index", gpu.index},
                   {"uuid", gpu.uuid},
                   {"pci_bus_id", gpu.pci_bus_id},
                   {"name", gpu.name},
                   {"mig_device", mig != nullptr ? to_json(*mig) : nlohmann::json(nullptr)}});
  }
  return out;
}

void print_text(const Machine& machine, const std::optional<std::string>& value,
                const std::optional<std::string>& order, const VisibleDevicesResolution& r, bool from_driver) {
  fmt::print("CUDA_VISIBLE_DEVICES={}  CUDA_DEVICE_ORDER={}{}\n", quoted_variable(value), quoted_variable(order),
             from_driver ? "  (answered by the CUDA driver)" : "");
  for (const VisibleDevicesEntry& e : r.entries) {
    fmt::print("  entry {:<14} {}\n", nlohmann::json(e.text).dump(), e.explanation);
  }
  if (r.error) {
    fmt::print("CUDA initialisation fails: {}\n", *r.error);
  } else if (r.devices.empty()) {
    fmt::print("No GPU is visible: CUDA programs will find no device.\n");
  } else {
    for (const VisibleDevice& d : r.devices) {
      const Gpu& gpu = *find_gpu_by_index(machine.gpus, d.nvml_index);
      if (const MigDevice* mig = mig_device_of(gpu, d)) {
        fmt::print("cuda:{} = MIG device {}:{}  {}  {} of GPU {}  {}\n", d.cuda_index, gpu.index, mig->index,
                   mig->profile, mig->uuid, gpu.index, gpu.name);
        continue;
      }
      fmt::print("cuda:{} = GPU {}  {}  {}  {}\n", d.cuda_index, gpu.index, gpu.name, gpu.pci_bus_id, gpu.uuid);
    }
  }
  for (const std::string& warning : r.warnings) fmt::print("warning: {}\n", warning);
}

Result<int> run_resolve(const ResolveOptions& options) {
  std::optional<std::string> value = options.value ? options.value : environment_variable("CUDA_VISIBLE_DEVICES");
  std::optional<std::string> order = environment_variable("CUDA_DEVICE_ORDER");
  if (options.order == "pci") order = "PCI_BUS_ID";
  if (options.order == "fastest") order = "FASTEST_FIRST";

  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  VisibleDevicesResolution resolution;
  if (options.driver) {
    TRY_ASSIGN(resolution, probe_cuda_driver(machine, value, order));
  } else {
    resolution = resolve_visible_devices(machine.gpus, value, order);
  }
  if (options.json) {
    nlohmann::json out = {{"cuda_visible_devices", value ? nlohmann::json(*value) : nullptr},
                          {"cuda_device_order", order ? nlohmann::json(*order) : nullptr},
                          {"source", options.driver ? "driver" : "model"},
                          {"devices", devices_json(machine, resolution.devices)},
                          {"error", resolution.error ? nlohmann::json(*resolution.error) : nullptr},
                          {"warnings", resolution.warnings}};
    nlohmann::json entries = nlohmann::json::array();
    for (const VisibleDevicesEntry& e : resolution.entries) {
      entries.push_back({{"text", e.text},
                         {"reading", to_string(e.reading)},
                         {"index", e.nvml_index ? nlohmann::json(*e.nvml_index) : nullptr},
                         {"explanation", e.explanation}});
    }
    out["entries"] = entries;
    fmt::print("{}\n", out.dump(2));
  } else {
    print_text(machine, value, order, resolution, options.driver);
  }
  return resolution.error ? kExitError : kExitOk;
}

}  // namespace

void add_resolve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "resolve",
      "Show which physical GPUs a CUDA program would see for CUDA_VISIBLE_DEVICES, and every trap in it");
  auto options = std::make_shared<ResolveOptions>();
  cmd->add_option("value", options->value,
                  "CUDA_VISIBLE_DEVICES value to resolve (after --; an empty argument is the empty value, "
                  "not unset). Default: this process's own");
  cmd->add_option("--order", options->order, "CUDA_DEVICE_ORDER to assume (default: this process's own)")
      ->check(CLI::IsMember({"pci", "fastest"}));
  cmd->add_flag("--json", options->json, "Print {devices, error, warnings, entries} as JSON");
  cmd->add_flag("--driver", options->driver,
                "Ask the real CUDA driver (libcuda) in a child process instead of the model");
  cmd->footer("Exit code 1 when CUDA initialisation itself would fail (e.g. a GPU listed twice).");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return run_resolve(*options); }); });
}

}  // namespace gpupool::cli
