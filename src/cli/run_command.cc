// gpupool run: lease GPUs, run one command on them in the user's terminal,
// and release them when it exits.
#include <unistd.h>

#include <ctime>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/lease_options.h"
#include "os/child_process.h"

namespace gpupool::cli {
namespace {

// As a batch job's default, and `timeout`'s exit code for a command it stopped.
constexpr std::chrono::seconds kKillGrace{10};
constexpr int kTimedOutExitCode = 124;

struct RunOptions {
  LeaseRequestOptions lease;
  std::vector<std::string> command;
};

Result<int> run_job(const RunOptions& options) {
  TRY_ASSIGN(auto time_limit, parse_time_limit(options.lease.time_limit));
  TRY_ASSIGN(LeasedGpus leased, lease_gpus(options.lease, options.command));
  ChildSpec spec;
  spec.argv = options.command;
  spec.environment = job_environment(leased, leased.gpus);
  TRY(start_unless_cancelled(leased));
  TRY(leased.acquired.leases.make_inheritable());
  TRY_ASSIGN(pid_t child, spawn_child(spec));
  leased.acquired.leases.set_holder_pid(child);
  std::optional<RunTimeLimit> limit;
  if (time_limit) limit = RunTimeLimit{*time_limit, kKillGrace};
  ChildEnd end = wait_forwarding_signals(child, limit);
  leased.acquired.leases.release();
  report_finished(leased, end.exit_code, end.timed_out);
  if (!end.timed_out) return end.exit_code;
  fmt::print(stderr, "gpupool: {} reached its time limit ({}) and was stopped\n", leased.job, options.lease.time_limit);
  return kTimedOutExitCode;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& program) {
  auto* cmd = app.add_subcommand("run", "Lease GPUs, run a command on them, release them when it exits");
  auto options = std::make_shared<RunOptions>();
  add_lease_options(*cmd, options->lease);
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
