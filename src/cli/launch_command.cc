// gpupool launch: lease GPUs and start one process per GPU (or several), with the
// environment torchrun gives its workers on a single node; all of them or none.
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "base/cpu_list.h"
#include "base/text.h"
#include "cli/commands.h"
#include "cli/lease_options.h"
#include "cli/value_checks.h"
#include "os/child_group.h"
#include "os/environment.h"
#include "os/network.h"
#include "os/process.h"

namespace gpupool::cli {
namespace {

struct LaunchOptions {
  LeaseRequestOptions lease;
  unsigned per_gpu = 1;
  bool bind_numa = false;
  std::string grace = "10s";
  std::vector<std::string> command;
};

// What torchrun sets for each worker of a single-node job (without its agent's store).
std::vector<std::string> torchrun_environment(unsigned rank, unsigned world_size, unsigned port,
                                              const std::string& job) {
  std::vector<std::string> env = {
      fmt::format("RANK={}", rank),
      fmt::format("LOCAL_RANK={}", rank),
      fmt::format("WORLD_SIZE={}", world_size),
      fmt::format("LOCAL_WORLD_SIZE={}", world_size),
      "GROUP_RANK=0",
      "GROUP_WORLD_SIZE=1",
      "ROLE_NAME=default",
      fmt::format("ROLE_RANK={}", rank),
      fmt::format("ROLE_WORLD_SIZE={}", world_size),
      "MASTER_ADDR=127.0.0.1",
      fmt::format("MASTER_PORT={}", port),
      fmt::format("TORCHELASTIC_RUN_ID={}", job),
      "TORCHELASTIC_RESTART_COUNT=0",
      "TORCHELASTIC_MAX_RESTARTS=0",
  };
  // Like torchrun: many processes each with a thread per CPU would oversubscribe the machine.
  if (world_size > 1 && !environment_variable("OMP_NUM_THREADS"))
    env.push_back("OMP_NUM_THREADS=1");
  return env;
}

std::string signal_name(int signal) {
  const char* name = sigabbrev_np(signal);
  return name != nullptr ? fmt::format("SIG{}", name) : fmt::format("signal {}", signal);
}

// Binds `spec` to the CPUs and memory of `gpu`'s NUMA node; false when that is not known.
bool bind_to_numa_node(const Gpu& gpu, ChildSpec& spec) {
  if (!gpu.cpu_affinity || !gpu.numa_node) return false;
  Result<std::vector<unsigned>> cpus = parse_cpu_list(*gpu.cpu_affinity);
  if (!cpus.ok() || cpus->empty()) return false;
  spec.cpus = std::move(*cpus);
  spec.memory_node = *gpu.numa_node;
  return true;
}

Result<int> launch_job(LaunchOptions options) {
  if (options.command.empty()) return fail("no command to launch");
  TRY_ASSIGN(auto grace, parse_duration(options.grace));
  if (options.lease.name.empty()) options.lease.name = fmt::format("launch-{}", own_pid());
  TRY_ASSIGN(LeasedGpus leased, lease_gpus(options.lease, options.command));
  // For rank 0's rendezvous store, as torchrun picks it.
  auto port = free_loopback_tcp_port();
  if (!port) return fail("cannot pick a port for MASTER_PORT: {}", port.error().message);
  const unsigned world_size = static_cast<unsigned>(leased.gpus.size()) * options.per_gpu;

  std::vector<GroupChild> ranks;
  std::vector<unsigned> unbound_gpus;
  for (unsigned rank = 0; rank < world_size; ++rank) {
    unsigned gpu = leased.gpus[rank / options.per_gpu];
    GroupChild child{{}, fmt::format("[rank {}] ", rank)};
    child.spec.argv = options.command;
    child.spec.environment =
        with_overrides(job_environment(leased, {gpu}), torchrun_environment(rank, world_size, *port, leased.job));
    bool first_of_gpu = rank % options.per_gpu == 0;
    if (options.bind_numa && !bind_to_numa_node(leased.acquired.machine.gpus.at(gpu), child.spec) &&
        first_of_gpu) {
      unbound_gpus.push_back(gpu);
    }
    ranks.push_back(std::move(child));
  }
  if (!unbound_gpus.empty()) {
    fmt::print(stderr, "gpupool: the NUMA node of GPU {} is unknown; its ranks run unbound\n",
               fmt::join(unbound_gpus, ","));
  }

  TRY(start_unless_cancelled(leased));
  // Every rank holds the leases, so they outlive gpupool if it is killed.
  TRY(leased.acquired.leases.make_inheritable());
  GroupOptions group;
  group.grace = grace;
  TRY_ASSIGN(group.time_limit, parse_time_limit(options.lease.time_limit));
  group.on_started = [&](const std::vector<pid_t>& pids) {
    leased.acquired.leases.set_holder_pid(pids.front());
  };
  TRY_ASSIGN(GroupOutcome outcome, run_child_group(std::move(ranks), group));
  leased.acquired.leases.release();
  report_finished(leased, outcome.exit_code, outcome.timed_out);

  std::string stopped = outcome.stopped == 0
                            ? ""
                            : fmt::format("; stopped the other {} rank{}", outcome.stopped,
                                          outcome.stopped == 1 ? "" : "s");
  if (outcome.failed_child) {
    unsigned rank = static_cast<unsigned>(*outcome.failed_child);
    std::string how = outcome.failed_signal
                          ? fmt::format("was killed by {}", signal_name(*outcome.failed_signal))
                          : fmt::format("exited with code {}", outcome.exit_code);
    fmt::print(stderr, "gpupool: rank {} (GPU {}) {}{}\n", rank,
               leased.gpus[rank / options.per_gpu], how, stopped);
  } else if (outcome.timed_out) {
    fmt::print(stderr, "gpupool: {} reached its time limit ({}); stopped all {} running rank{}\n", leased.job,
               options.lease.time_limit, outcome.stopped, outcome.stopped == 1 ? "" : "s");
  } else if (outcome.signal) {
    fmt::print(stderr, "gpupool: got {}; stopped all {} running rank{}\n",
               signal_name(*outcome.signal), outcome.stopped, outcome.stopped == 1 ? "" : "s");
  }
  return outcome.exit_code;
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code, const std::vector<std::string>& program) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Lease GPUs and start one process per GPU with torchrun's environment; all or nothing");
  auto options = std::make_shared<LaunchOptions>();
  add_lease_options(*cmd, options->lease);
  cmd->add_option("--per-gpu", options->per_gpu, "Processes per GPU (default 1)")
      ->check(whole_number(1, 64));
  cmd->add_flag("--bind-numa", options->bind_numa,
                "Run each process on the CPUs and memory of its GPU's NUMA node");
  cmd->add_option("--grace", options->grace,
                  "When stopping, wait this long after SIGTERM before SIGKILL (default 10s)")
      ->type_name("DURATION")
      ->check(duration_value());
  cmd->add_option("command", options->command, "The command and its arguments: gpupool's options end at its first word or at --")
      ->type_name("COMMAND");
  cmd->footer(
      "Process R of N*K (K = --per-gpu) sees only GPU R/K of the lease (CUDA_VISIBLE_DEVICES is\n"
      "its UUID) and RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT... as torchrun sets\n"
      "them. Output lines are prefixed with [rank R]. When one process fails, or gpupool gets\n"
      "SIGINT, SIGTERM or SIGHUP, the others are stopped; the exit code is the failed process's\n"
      "(128+N for signal N).");
  cmd->callback([&exit_code, &program, options] {
    options->command = required_program(program);
    run_command(exit_code, [&] { return launch_job(*options); });
  });
}

}  // namespace gpupool::cli
