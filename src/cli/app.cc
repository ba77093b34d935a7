#include "cli/app.h"

#include <exception>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"

namespace gpupool::cli {

int report(const Error& error) {
  fmt::print(stderr, "gpupool: {}\n", error.message);
  return kExitError;
}

std::unique_ptr<CLI::App> make_app(int& exit_code) {
  auto owned = std::make_unique<CLI::App>("gpupool: discover, lease and schedule the GPUs of a shared machine", "gpupool");
  CLI::App& app = *owned;
  app.set_version_flag("--version", std::string("gpupool ") + GPUPOOL_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Set GPUPOOL_SIM=NAME (e.g. hgx-h200) to use a simulated machine instead of the real GPUs.");
  add_list_command(app, exit_code);
  add_topo_command(app, exit_code);
  add_resolve_command(app, exit_code);
  add_doctor_command(app, exit_code);
  add_map_command(app, exit_code);
  add_docker_args_command(app, exit_code);
  add_run_command(app, exit_code);
  add_launch_command(app, exit_code);
  add_leases_command(app, exit_code);
  add_top_command(app, exit_code);
  add_queue_commands(app, exit_code);
  add_report_command(app, exit_code);
  add_sim_command(app, exit_code);
  {
    // `gpupool slurm ...`: node configuration, and a gpupoold inside an allocation (docs/slurm.md).
    CLI::App* slurm = app.add_subcommand("slurm", "Work with Slurm: node configuration and per-allocation daemons");
    slurm->require_subcommand(1);
    add_slurm_node_commands(*slurm, exit_code);
    add_slurm_allocation_commands(*slurm, exit_code);
  }
  add_completion_command(app, exit_code);
  return owned;
}

int run(int argc, char** argv) {
  int exit_code = kExitOk;
  std::unique_ptr<CLI::App> owned = make_app(exit_code);
  CLI::App& app = *owned;
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help and --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "gpupool: {} (see gpupool --help)\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpupool: {}\n", e.what());
    return kExitError;
  }
  return exit_code;
}

}  // namespace gpupool::cli
