// gpupool run: lease GPUs, run one command on them in the user's terminal,
// and release them when it exits.
#include <unistd.h>

#include <ctime>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/lease_options.h"
#include "os/child_process.h"
#include "os/host_files.h"
#include "sched/slice_watch.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

// As a batch job's default, and `timeout`'s exit code for a command it stopped.
constexpr std::chrono::seconds kKillGrace{10};
constexpr int kTimedOutExitCode = 124;

// How often the slice watchdog of a run without gpupoold samples: the daemon's default.
constexpr std::chrono::seconds kSliceWatchPeriod{1};

struct RunOptions {
  LeaseRequestOptions lease;
  std::string slice_overrun = "warn";  // without gpupoold: what its own watchdog does past the slice
  std::vector<std::string> command;
};

// Without gpupoold nobody else watches a slice, so `gpupool run` samples its program's processes
// itself, as the daemon's watchdog does (docs/leases.md, "The watchdog"): it warns once the
// program uses more GPU memory than its slice, and under "stop" ends it.
class SliceWatchdog {
 public:
  SliceWatchdog(std::unique_ptr<GpuBackend> backend, WatchedSlice slice, std::string job, SliceOverrunPolicy policy)
      : backend_(std::move(backend)), slice_(std::move(slice)), job_(std::move(job)), policy_(policy) {}

  // The program whose processes are the slice's, once it has started.
  void watch(pid_t program) { slice_.holder_pid = static_cast<uint32_t>(program); }

  // One sample; true: end the program.
  bool stop_now() {
    auto sample = backend_->discover(DiscoveryScope{.links = false, .processes = true});
    if (!sample) return false;  // a failed sample says nothing about the slice: the next one may
    auto worst = worst_use_per_job(slice_uses(*sample, {slice_}, [this](uint32_t pid) { return host_.parent_pid(pid); }));
    auto use = worst.find(slice_.job);
    if (use == worst.end() || !use->second.overrun()) return false;
    if (!peak_ || use->second.used_mib > peak_->used_mib) peak_ = use->second;
    if (policy_ == SliceOverrunPolicy::Stop) return true;
    if (!warned_) {
      fmt::print(stderr, "gpupool: {} is over its slice of GPU {}: {}\n", job_, use->second.gpu,
                 slice_overrun_text(use->second.used_mib, use->second.slice_mib));
      warned_ = true;
    }
    return false;
  }

  // After the program has ended: what it came to, where it was ever over its slice.
  void report(bool stopped) const {
    if (!peak_) return;
    std::string figures = slice_overrun_text(peak_->used_mib, peak_->slice_mib);
    if (stopped) {
      fmt::print(stderr, "gpupool: {} was stopped: {}\n", job_, figures);
    } else {
      fmt::print(stderr, "gpupool: {} was over its slice at its peak: {}\n", job_, figures);
    }
  }

 private:
  std::unique_ptr<GpuBackend> backend_;
  HostFiles host_ = host_files_from_environment();
  WatchedSlice slice_;
  std::string job_;
  SliceOverrunPolicy policy_;
  std::optional<SliceUse> peak_;
  bool warned_ = false;
};

// The watchdog of a slice leased without gpupoold (nullopt for whole GPUs, MIG devices and
// gpupoold's leases, which the daemon watches under its own policy).
Result<std::optional<SliceWatchdog>> slice_watchdog(const LeasedGpus& leased, const std::string& policy) {
  if (!leased.slice_mib || leased.daemon) return std::optional<SliceWatchdog>();
  TRY_ASSIGN(auto backend, open_pool_backend());
  WatchedSlice slice{0, 0, leased.gpus, *leased.slice_mib};
  return std::optional<SliceWatchdog>(std::in_place, std::move(backend), std::move(slice), leased.job,
                                      policy == "stop" ? SliceOverrunPolicy::Stop : SliceOverrunPolicy::Warn);
}

Result<int> run_job(const RunOptions& options) {
  TRY_ASSIGN(auto time_limit, parse_time_limit(options.lease.time_limit));
  TRY_ASSIGN(LeasedGpus leased, lease_gpus(options.lease, options.command));
  ChildSpec spec;
  spec.argv = options.command;
  spec.environment = job_environment(leased, leased.gpus);
  // Ready before the program starts: once it runs, nothing may fail before we wait for it.
  TRY_ASSIGN(auto watchdog, slice_watchdog(leased, options.slice_overrun));
  TRY(start_unless_cancelled(leased));
  TRY(leased.acquired.leases.make_inheritable());
  TRY_ASSIGN(pid_t child, spawn_child(spec));
  leased.acquired.leases.set_holder_pid(child);
  std::optional<RunTimeLimit> limit;
  if (time_limit) limit = RunTimeLimit{*time_limit, kKillGrace};
  std::optional<ChildWatch> watch;
  if (watchdog) {
    watchdog->watch(child);
    watch = ChildWatch{kSliceWatchPeriod, kKillGrace, [&watchdog] { return watchdog->stop_now(); }};
  }
  ChildEnd end = wait_forwarding_signals(child, limit, std::move(watch));
  leased.acquired.leases.release();
  report_finished(leased, end.exit_code, end.timed_out);
  if (watchdog) watchdog->report(end.stopped);
  if (!end.timed_out) return end.exit_code;
  fmt::print(stderr, "gpupool: {} reached its time limit ({}) and was stopped\n", leased.job, options.lease.time_limit);
  return kTimedOutExitCode;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& program) {
  auto* cmd = app.add_subcommand("run", "Lease GPUs, run a command on them, release them when it exits");
  auto options = std::make_shared<RunOptions>();
  add_lease_options(*cmd, options->lease);
  cmd->add_option("--slice-overrun", options->slice_overrun,
                  "Without gpupoold, what gpupool run does when the program uses more GPU memory than its --mem "
                  "slice: warn (the default) or stop it. gpupoold's own slice_overrun governs its leases")
      ->check(CLI::IsMember({"warn", "stop"}));
  cmd->add_option("command", options->command, "The command and its arguments: gpupool's options end at its first word or at --")
      ->type_name("COMMAND");
  cmd->footer(
      "The command sees exactly its GPUs: CUDA_VISIBLE_DEVICES lists their UUIDs in placement order and\n"
      "CUDA_DEVICE_ORDER=PCI_BUS_ID; GPUPOOL_JOB, GPUPOOL_GPUS (nvidia-smi indices) and GPUPOOL_GPU_UUIDS\n"
      "are set too. Its exit code is gpupool's (128+N when killed by signal N).");
  cmd->callback([&exit_code, &program, options] {
    options->command = required_program(program);
    run_command(exit_code, [&] { return run_job(*options); });
  });
}

}  // namespace gpupool::cli
