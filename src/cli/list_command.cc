// gpupool list: one line per GPU and one per process on it, for 80 columns.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "base/display_text.h"
#include "cli/commands.h"
#include "gpu/gpu_backend.h"
#include "machine/gpu_json.h"
#include "os/fd.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

constexpr size_t kWidth = 80;

template <typename T>
std::string or_na(const std::optional<T>& value, const char* format) {
  return value ? fmt::format(fmt::runtime(format), *value) : std::string("n/a");
}

std::string memory_cell(const Gpu& gpu) {
  if (!gpu.memory_total_mib) return "n/a";
  return fmt::format("{}/{} MiB", or_na(gpu.memory_used_mib, "{}"), *gpu.memory_total_mib);
}

std::string power_cell(const Gpu& gpu) {
  if (!gpu.power_w && !gpu.power_limit_w) return "n/a";
  return fmt::format("{}/{} W", or_na(gpu.power_w, "{:.0f}"), or_na(gpu.power_limit_w, "{:.0f}"));
}

void print_table(const Machine& machine, const std::string& source) {
  const DriverInfo& d = machine.driver;
  fmt::print("Driver {}  CUDA {}  {} GPU{}  ({})\n", d.driver_version.value_or("n/a"),
             d.cuda_driver_version ? cuda_version_string(*d.cuda_driver_version) : "n/a",
             machine.gpus.size(), machine.gpus.size() == 1 ? "" : "s", source);
  fmt::print("{:>3} {:<24} {:>18} {:>5} {:>5} {:>5} {:>11}\n", "GPU", "NAME", "MEMORY USED/TOTAL", "UTIL",
             "MEM%", "TEMP", "POWER");
  for (const Gpu& gpu : machine.gpus) {
    if (gpu.fault) {
      fmt::print("{:>3} {} {}\n", gpu.index, pad_cells(gpu.name.empty() ? "?" : gpu.name, 24),
                 fit_cells("FAULT: " + *gpu.fault, kWidth - 29, "..."));
      continue;
    }
    fmt::print("{:>3} {} {:>18} {:>5} {:>5} {:>5} {:>11}\n", gpu.index, pad_cells(gpu.name, 24), memory_cell(gpu),
               or_na(gpu.utilization_gpu, "{}%"), or_na(gpu.utilization_memory, "{}%"),
               or_na(gpu.temperature_c, "{}C"), power_cell(gpu));
    for (const GpuProcess& p : gpu.processes) {
      std::string head = fmt::format("    pid {:<7} {} {:>9} ", p.pid, pad_cells(p.user.value_or("?"), 10),
                                     or_na(p.used_memory_mib, "{} MiB"));
      std::string tail = p.kind == ProcessKind::Compute ? "" : fmt::format("[{}] ", to_string(p.kind));
      tail += p.command.value_or("(not visible from here)");
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
  TRY_ASSIGN(Machine machine, backend.discover(DiscoveryScope{.links = false, .processes = true}));
  if (options.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Gpu& gpu : machine.gpus) out.push_back(to_json(gpu));
    // Watching, one array per line (JSON Lines), so a log of samples stays easy to parse.
    fmt::print("{}\n", out.dump(options.watch ? -1 : 2));
  } else {
    print_table(machine, backend.description());
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
  auto* cmd = app.add_subcommand("list", "List the GPUs, their state and the processes on them");
  auto options = std::make_shared<ListOptions>();
  cmd->add_flag("--json", options->json, "Print a JSON array, one object per GPU");
  cmd->add_flag("--watch", options->watch, "Print again every --interval seconds until interrupted");
  cmd->add_option("-n,--interval", options->interval_s, "Seconds between tables with --watch (default 1)");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return list_gpus(*options); }); });
}

}  // namespace gpupool::cli
