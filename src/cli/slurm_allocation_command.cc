// `gpupool slurm start | stop | status`: a gpupoold for one Slurm allocation, whose pool is the
// allocation's GPUs, so that one job can pack many small ones (docs/slurm.md, "Inside an
// allocation").
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "gpu/gpu_backend.h"
#include "os/child_process.h"
#include "os/files.h"
#include "os/host_files.h"
#include "os/paths.h"
#include "os/process.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

constexpr auto kStartTimeout = std::chrono::seconds(60);
constexpr auto kPoll = std::chrono::milliseconds(50);

Result<std::string> slurm_job_directory_here() {
  auto directory = slurm_job_directory();
  if (!directory) return fail("not inside a Slurm job (SLURM_JOB_ID is not set)");
  return *directory;
}

// The last non-empty line of the daemon's log: why it did not start.
std::string last_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.empty() ? "it said nothing" : last;
}

// The status of the job's gpupoold; nullopt when none is running.
Result<std::optional<proto::StatusResponse>> job_daemon_status() {
  TRY_ASSIGN(auto client, DaemonClient::connect_if_running(default_runtime_dir()));
  if (!client) return std::optional<proto::StatusResponse>();
  TRY_ASSIGN(proto::Response response, client->request(proto::StatusRequest{}));
  auto* status = std::get_if<proto::StatusResponse>(&response);
  if (status == nullptr) return fail("gpupoold sent an unexpected answer: {}", proto::encode(response));
  return std::optional<proto::StatusResponse>(*status);
}

struct StartOptions {
  std::string config;
  std::string http = "off";
  int end_with = 0;  // 0: the shell that runs `gpupool slurm start`
};

// Starts gpupoold in its own session, its output in the job directory, and waits until it
// answers on its socket (or has died, when its last line says why).
Result<int> start(const StartOptions& options) {
  TRY_ASSIGN(std::string job_directory, slurm_job_directory_here());
  TRY(prepare_slurm_job_directory());
  std::string runtime = default_runtime_dir();
  TRY_ASSIGN(auto running, job_daemon_status());
  if (running) {
    fmt::print("gpupoold already serves this Slurm job: pid {}, {} GPUs, socket {}\n", running->pid, running->gpus,
               proto::socket_path(runtime));
    return 0;
  }
  // The allocation is read here as the daemon will read it, so a job without GPUs is told at once.
  TRY_ASSIGN(auto backend, open_pool_backend());
  std::string description = backend->description();
  backend.reset();

  pid_t end_with = options.end_with > 0 ? options.end_with : own_parent_pid();
  std::string log = job_directory + "/gpupoold.log";
  ChildSpec spec;
  spec.argv = {executable_directory() + "/gpupoold", "--end-with", std::to_string(end_with), "--http", options.http};
  if (!options.config.empty()) spec.argv.insert(spec.argv.end(), {"--config", options.config});
  spec.environment = environment_with({});
  TRY_ASSIGN(Fd log_fd, open_file(log, O_WRONLY | O_CREAT | O_APPEND, 0600));
  TRY_ASSIGN(Fd null, open_file("/dev/null", O_RDONLY));
  spec.stdin_fd = null.get();
  spec.stdout_fd = log_fd.get();
  spec.stderr_fd = log_fd.get();
  // Its own session: a Ctrl-C or hang-up meant for the shell is not for the daemon.
  spec.own_session = true;
  auto started = spawn_child(spec);
  if (!started) return fail("cannot start gpupoold: {}", started.error().message);
  pid_t daemon = *started;
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  for (;;) {
    if (exit_code_if_ended(daemon)) return fail("gpupoold did not start ({}): {}", log, last_line_of(log));
    TRY_ASSIGN(auto client, DaemonClient::connect_if_running(runtime));
    if (client) break;
    if (std::chrono::steady_clock::now() > deadline) {
      (void)send_signal(daemon, SIGKILL);
      return fail("gpupoold did not answer within {} s ({})", kStartTimeout.count(), log);
    }
    std::this_thread::sleep_for(kPoll);
  }
  fmt::print("gpupoold (pid {}) serves {}\n", daemon, description);
  fmt::print("  socket {}; log {}\n", proto::socket_path(runtime), log);
  fmt::print("  it stops with process {} (the job's shell), or with `gpupool slurm stop`\n", end_with);
  return 0;
}

// SIGTERM: a daemon started for a job cancels its jobs, waits for them, and stops.
Result<int> stop() {
  TRY(slurm_job_directory_here());
  TRY_ASSIGN(auto running, job_daemon_status());
  if (!running) {
    fmt::print("no gpupoold is running for this Slurm job\n");
    return 0;
  }
  const proto::StatusResponse& status = *running;
  pid_t pid = static_cast<pid_t>(status.pid);
  // A pidfd turns readable at the exit itself: the daemon is nobody's child by now, and as a
  // zombie waiting for init it would still answer kill(pid, 0).
  TRY_ASSIGN(Fd pidfd, open_process_fd(pid));
  TRY(send_signal(pid, SIGTERM));
  TRY(wait_until_ready({pidfd.get()}, std::nullopt));
  fmt::print("gpupoold (pid {}) stopped; it cancelled its {} queued and {} running jobs\n", pid, status.queued,
             status.running);
  return 0;
}

Result<int> status() {
  TRY(slurm_job_directory_here());
  TRY_ASSIGN(auto backend, open_pool_backend());
  TRY_ASSIGN(Machine pool, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  fmt::print("{}\n", backend->description());
  for (const Gpu& gpu : pool.gpus) {
    fmt::print("  GPU {}  /dev/nvidia{}  {}  {}  {}\n", gpu.index,
               gpu.minor_number ? std::to_string(*gpu.minor_number) : "?", gpu.uuid, gpu.pci_bus_id, gpu.name);
  }
  TRY_ASSIGN(auto daemon, job_daemon_status());
  if (!daemon) {
    fmt::print("no gpupoold is running for this job: start one with `gpupool slurm start`\n");
    return 0;
  }
  fmt::print("gpupoold pid {} on {}: {} queued, {} held, {} running\n", daemon->pid,
             proto::socket_path(default_runtime_dir()), daemon->queued, daemon->held, daemon->running);
  return 0;
}

}  // namespace

void add_slurm_allocation_commands(CLI::App& slurm, int& exit_code) {
  {
    auto* cmd = slurm.add_subcommand("start", "Inside a Slurm job: start a gpupoold whose pool is the job's GPUs");
    auto options = std::make_shared<StartOptions>();
    cmd->add_option("--config", options->config, "gpupoold's configuration file")->type_name("FILE");
    cmd->add_option("--http", options->http, "gpupoold's HTTP address, or \"off\" (default: off)")
        ->type_name("ADDRESS");
    cmd->add_option("--end-with", options->end_with,
                    "Stop when this process exits (default: the shell that runs this command)")
        ->type_name("PID")
        ->check(CLI::PositiveNumber);
    cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return start(*options); }); });
  }
  slurm.add_subcommand("stop", "Inside a Slurm job: cancel the job's gpupool jobs and stop its gpupoold")
      ->callback([&exit_code] { run_command(exit_code, [] { return stop(); }); });
  slurm.add_subcommand("status", "Inside a Slurm job: its GPUs (how Slurm named them) and its gpupoold")
      ->callback([&exit_code] { run_command(exit_code, [] { return status(); }); });
}

}  // namespace gpupool::cli
