// One registration function per command; each adds a CLI11 subcommand whose
// callback stores the command's exit code in `exit_code`.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "cli/daemon_client.h"

namespace gpupool::cli {

void add_list_command(CLI::App& app, int& exit_code);
void add_topo_command(CLI::App& app, int& exit_code);
void add_resolve_command(CLI::App& app, int& exit_code);
void add_doctor_command(CLI::App& app, int& exit_code);
void add_map_command(CLI::App& app, int& exit_code);
void add_docker_args_command(CLI::App& app, int& exit_code);
// `program`: the words of the program to run, filled in before parsing (cli/program_words.h).
void add_run_command(CLI::App& app, int& exit_code, const std::vector<std::string>& program);
void add_launch_command(CLI::App& app, int& exit_code, const std::vector<std::string>& program);
void add_leases_command(CLI::App& app, int& exit_code);
// Hidden: the lease behind the Python package's acquire() when no gpupoold runs.
void add_acquire_command(CLI::App& app, int& exit_code);
void add_top_command(CLI::App& app, int& exit_code);
void add_sim_command(CLI::App& app, int& exit_code);
void add_queue_commands(CLI::App& app, int& exit_code, const std::vector<std::string>& program);
void add_wait_command(CLI::App& app, int& exit_code);
void add_suspend_command(CLI::App& app, int& exit_code);
// `gpupool resume JOB...` (registered with the queue's resume): restores suspended jobs, waiting
// until they run again unless `wait` is false.
Result<int> resume_jobs(const std::vector<std::string>& ids, bool wait);
// Waits until the daemon has suspended the job it began to suspend (0, saying so on stdout), or
// says it did not (1, the reason on stderr).
Result<int> await_suspend(DaemonClient& client, JobId id);
void add_report_command(CLI::App& app, int& exit_code);
void add_events_command(CLI::App& app, int& exit_code);
void add_completion_command(CLI::App& app, int& exit_code);
// Under `gpupool slurm` (made in app.cc): gres-conf and node-conf.
void add_slurm_node_commands(CLI::App& slurm, int& exit_code);
// The subcommands of `gpupool slurm`, registered on it.
void add_slurm_allocation_commands(CLI::App& slurm, int& exit_code);

// The whole command line, every command registered; callbacks store their exit code in
// `exit_code` and read the words of a program to run from `program`, both of which must
// outlive the App. Parsing runs a command; building runs nothing.
std::unique_ptr<CLI::App> make_app(int& exit_code, const std::vector<std::string>& program);

// The program to run, for a command's callback: a usage error when there is none.
const std::vector<std::string>& required_program(const std::vector<std::string>& program);

// Prints "gpupool: MESSAGE" on stderr and returns the error exit code.
int report(const Error& error);

// Runs a command body that returns Result<int>, reporting its error if any.
template <typename Body>
void run_command(int& exit_code, Body&& body) {
  auto result = body();
  exit_code = result.ok() ? *result : report(result.error());
}

}  // namespace gpupool::cli
