// gpupool topo: the link matrix with CPU and NUMA affinity, like `nvidia-smi topo -m`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "gpu/gpu_backend.h"
#include "machine/gpu_json.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

void print_matrix(const Machine& machine) {
  const size_t n = machine.gpus.size();
  fmt::print("{:<7}", "");
  for (const Gpu& gpu : machine.gpus) fmt::print("{:<6}", fmt::format("GPU{}", gpu.index));
  fmt::print("{:<16}{}\n", "CPU Affinity", "NUMA Affinity");
  for (size_t i = 0; i < n; ++i) {
    const Gpu& gpu = machine.gpus[i];
    fmt::print("{:<7}", fmt::format("GPU{}", gpu.index));
    for (size_t j = 0; j < n; ++j) fmt::print("{:<6}", i == j ? " X" : topo_label(machine.links[i][j]));
    fmt::print("{:<16}{}\n", gpu.cpu_affinity.value_or("n/a"),
               gpu.numa_node ? std::to_string(*gpu.numa_node) : "n/a");
  }
  fmt::print(
      "\nLegend:\n"
      "  X    = Self\n"
      "  SYS  = Connection traversing PCIe as well as the interconnect between NUMA nodes (e.g. QPI/UPI)\n"
      "  NODE = Connection traversing PCIe and the interconnect between host bridges within a NUMA node\n"
      "  PHB  = Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)\n"
      "  PXB  = Connection traversing multiple PCIe bridges (without traversing the host bridge)\n"
      "  PIX  = Connection traversing at most a single PCIe bridge\n"
      "  NV#  = Connection traversing a bonded set of # NVLinks (through NVSwitch where marked in --json)\n");
  // The links are the GPUs'; a MIG device has no peer-to-peer access over them (NVIDIA's MIG user guide).
  for (const Gpu& gpu : machine.gpus) {
    if (gpu.mig_devices.empty()) continue;
    std::vector<std::string> profiles;
    for (const MigDevice& mig : gpu.mig_devices) profiles.push_back(mig.profile);
    fmt::print("GPU{} is in MIG mode as {}: its MIG devices have no peer-to-peer access over these links\n", gpu.index,
               fmt::join(profiles, " + "));
  }
}

}  // namespace

void add_topo_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("topo", "Show how the GPUs are linked, with CPU and NUMA affinity");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print the GPUs, every pair's link and the label matrix as JSON");
  cmd->callback([&exit_code, json] {
    run_command(exit_code, [&]() -> Result<int> {
      TRY_ASSIGN(auto backend, open_gpu_backend());
      TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = true, .processes = false}));
      if (*json) {
        fmt::print("{}\n", topology_json(machine).dump(2));
      } else {
        print_matrix(machine);
      }
      return 0;
    });
  });
}

}  // namespace gpupool::cli
