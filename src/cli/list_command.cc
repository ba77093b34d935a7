// gpupool list: one line per GPU, with who holds it, and one per process on it, for 80 columns.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "base/display_text.h"
#include "cli/commands.h"
#include "cli/gpu_holders.h"
#include "gpu/gpu_backend.h"
#include "machine/gpu_json.h"
#include "monitor/dashboard.h"
#include "os/fd.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

constexpr size_t kWidth = 80;
constexpr size_t kNameCells = 12;
// What is left of 80 columns for HELD BY: "job 329 (alice, pretrain)" fits.
constexpr size_t kHolderCells = kWidth - (3 + 1 + kNameCells + 1 + 13 + 1 + 4 + 1 + 5 + 1 + 4 + 1 + 7 + 1);

template <typename T>
std::string or_na(const std::optional<T>& value, const char* format) {
  return value ? fmt::format(fmt::runtime(format), *value) : std::string("n/a");
}

std::string memory_cell(const Gpu& gpu) {
  if (!gpu.memory_total_mib) return "n/a";
  return fmt::format("{}/{}", or_na(gpu.memory_used_mib, "{}"), *gpu.memory_total_mib);
}

std::string power_cell(const Gpu& gpu) {
  if (!gpu.power_w && !gpu.power_limit_w) return "n/a";
  return fmt::format("{}/{}", or_na(gpu.power_w, "{:.0f}"), or_na(gpu.power_limit_w, "{:.0f}"));
}

std::string name_cell(const Gpu& gpu) {
  std::string name = gpu.name.empty() ? "?" : gpu.name;
  if (name.starts_with("NVIDIA ")) name = name.substr(7);  // every card says it
  return pad_cells(name, kNameCells);
}

// One line per MIG device under its GPU, in 80 columns: "0:3" (GPU 0's MIG device 3, as the NVIDIA
// container toolkit names it), its profile, GPU and compute instance, memory and UUID.
void print_mig_devices(const Gpu& gpu) {
  if (gpu.mig_enabled.value_or(false) && gpu.mig_devices.empty()) {
    fmt::print("    MIG mode, no MIG devices\n");
    return;
  }
  for (const MigDevice& mig : gpu.mig_devices) {
    std::string name = fmt::format("{}:{}", gpu.index, mig.index);
    std::string instances = fmt::format("GI {} CI {}", mig.gpu_instance_id, mig.compute_instance_id);
    fmt::print("  {:<4} {:<10} {:<9} {:>6} MiB {}\n", name, mig.profile, instances, mig.memory_mib, mig.uuid);
  }
}

// MEMBW is NVML's memory utilisation: the share of time the memory controller was busy, not the
// memory in use (MEMORY MiB is that). SM, the share of SMs busy (GPM), needs two samples: it
// appears from the second table of --watch, on GPUs that report it.
void print_table(const DashboardInput& holders, const std::string& source) {
  const Machine& machine = holders.machine;
  const DriverInfo& d = machine.driver;
  fmt::print("Driver {}  CUDA {}  {} GPU{}  ({})\n", d.driver_version.value_or("n/a"),
             d.cuda_driver_version ? cuda_version_string(*d.cuda_driver_version) : "n/a",
             machine.gpus.size(), machine.gpus.size() == 1 ? "" : "s", source);
  const bool with_sm =
      std::any_of(machine.gpus.begin(), machine.gpus.end(), [](const Gpu& gpu) { return gpu.sm_active.has_value(); });
  auto sm_cell = [&](std::string text) { return with_sm ? fmt::format("{:>4} ", text) : std::string(); };
  const size_t holder_cells = kHolderCells - (with_sm ? 5 : 0);
  fmt::print("{:>3} {} {:>13} {:>4} {}{:>5} {:>4} {:>7} {}\n", "GPU", pad_cells("NAME", kNameCells), "MEMORY MiB",
             "UTIL", sm_cell("SM"), "MEMBW", "TEMP", "POWER W", "HELD BY");
  for (const Gpu& gpu : machine.gpus) {
    if (gpu.fault) {
      fmt::print("{:>3} {} {}\n", gpu.index, name_cell(gpu),
                 fit_cells("FAULT: " + *gpu.fault, kWidth - (3 + 1 + kNameCells + 1), "..."));
      continue;
    }
    std::string holder = card_use(holders, gpu).holder;
    std::optional<long> sm_percent;
    if (gpu.sm_active) sm_percent = std::lround(*gpu.sm_active * 100);
    fmt::print("{:>3} {} {:>13} {:>4} {}{:>5} {:>4} {:>7} {}\n", gpu.index, name_cell(gpu), memory_cell(gpu),
               or_na(gpu.utilization_gpu, "{}%"), sm_cell(or_na(sm_percent, "{}%")), or_na(gpu.utilization_memory, "{}%"),
               or_na(gpu.temperature_c, "{}C"), power_cell(gpu), fit_cells(holder.empty() ? "-" : holder, holder_cells));
    print_mig_devices(gpu);
    for (const GpuProcess& p : gpu.processes) {
      std::string head = fmt::format("    pid {:<7} {} {:>9} ", p.pid, pad_cells(process_user_text(p), 12),
                                     or_na(p.used_memory_mib, "{} MiB"));
      std::string tail = p.kind == ProcessKind::Compute ? "" : fmt::format("[{}] ", to_string(p.kind));
      tail += process_command_text(p);
      fmt::print("{}{}\n", head, fit_cells(tail, kWidth - head.size(), "..."));
    }
  }
}

struct ListOptions {
  bool json = false;
  bool watch = false;
  double interval_s = 1.0;
};

Result<void> print_once(GpuBackend& backend, const ListOptions& options) {
  // Watching, each table measures the activity since the one before.
  TRY_ASSIGN(Machine machine,
             backend.discover(DiscoveryScope{.links = false, .processes = true, .activity = options.watch, .health = false}));
  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Gpu& gpu : machine.gpus) out.push_back(to_json(gpu));
    // Watching, one array per line (JSON Lines), so a log of samples stays easy to parse.
    fmt::print("{}\n", out.dump(options.watch ? -1 : 2));
  } else {
    DashboardInput holders;
    holders.machine = std::move(machine);
    read_gpu_holders(holders);
    print_table(holders, backend.description());
  }
  return {};
}

Result<int> list_gpus(const ListOptions& options) {
  if (options.interval_s < 0.1) return fail("--interval must be at least 0.1 s, not {}", options.interval_s);
  TRY_ASSIGN(auto backend, open_gpu_backend());
  if (!options.watch) {
    TRY(print_once(*backend, options));
    return 0;
  }
  // Like watch(1): the screen is cleared before each table on a terminal; piped, the tables
  // follow each other. It runs until interrupted.
  const bool clear = !options.json && is_terminal(STDOUT_FILENO);
  for (;;) {
    if (clear) fmt::print("\x1b[H\x1b[2J");
    TRY(print_once(*backend, options));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
  }
}

}  // namespace

void add_list_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("list", "List the GPUs, their state, who holds each and the processes on them");
  auto options = std::make_shared<ListOptions>();
  cmd->add_flag("--json", options->json, "Print a JSON array, one object per GPU");
  cmd->add_flag("--watch", options->watch, "Print again every --interval seconds until interrupted");
  cmd->add_option("-n,--interval", options->interval_s, "Seconds between tables with --watch (default 1)");
  cmd->footer(
      "MEMORY MiB is the memory in use and the total; MEMBW the share of time the memory was being read\n"
      "or written (NVML's memory utilisation); SM, with --watch on GPUs with profiling counters (Hopper\n"
      "on), the share of SMs that were busy, from the second table on. HELD BY names the holder as `top`\n"
      "does: a gpupool job, a lease, or `outside: pid PID USER` for a process gpupool did not start. A GPU\n"
      "in MIG mode lists its MIG devices (GPU:DEVICE, profile, GPU and compute instance, memory, UUID).");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return list_gpus(*options); }); });
}

}  // namespace gpupool::cli
