#include "cli/app.h"

#include <algorithm>
#include <exception>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/program_words.h"

namespace gpupool::cli {

int report(const Error& error) {
  fmt::print(stderr, "gpupool: {}\n", error.message);
  return kExitError;
}

std::unique_ptr<CLI::App> make_app(int& exit_code, const std::vector<std::string>& program) {
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
  add_run_command(app, exit_code, program);
  add_launch_command(app, exit_code, program);
  add_leases_command(app, exit_code);
  add_top_command(app, exit_code);
  add_queue_commands(app, exit_code, program);
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

const std::vector<std::string>& required_program(const std::vector<std::string>& program) {
  if (program.empty()) throw CLI::ValidationError("a command to run is required, after the options or after --");
  return program;
}

namespace {

// What CLI11 parses: the command line up to the program's words, which go to `program`.
std::vector<std::string> without_program(CLI::App& app, const std::vector<std::string>& words,
                                         std::vector<std::string>& program) {
  auto named = std::find_if(words.begin(), words.end(), [](const std::string& word) { return word.empty() || word[0] != '-'; });
  if (named == words.end() || kCommandsThatRunAProgram.count(*named) == 0) return words;
  const CLI::App* command = app.get_subcommand(*named);  // each of them is registered
  auto kind_of = [command](std::string_view word) {
    const CLI::Option* option = command->get_option_no_throw(std::string(word));
    if (option == nullptr) return OptionKind::Unknown;
    if (option->get_expected_max() == 0) return OptionKind::Flag;
    return option->get_expected_min() == 0 ? OptionKind::OptionalValue : OptionKind::Value;
  };
  SplitWords split = split_program_words(std::vector<std::string>(named + 1, words.end()), kind_of);
  program = std::move(split.program);
  std::vector<std::string> ours(words.begin(), named + 1);
  ours.insert(ours.end(), split.options.begin(), split.options.end());
  return ours;
}

}  // namespace

int run(int argc, char** argv) {
  int exit_code = kExitOk;
  std::vector<std::string> program;
  std::unique_ptr<CLI::App> owned = make_app(exit_code, program);
  CLI::App& app = *owned;
  try {
    std::vector<std::string> ours = without_program(app, std::vector<std::string>(argv + 1, argv + argc), program);
    std::reverse(ours.begin(), ours.end());  // CLI11 takes the words from the back
    app.parse(ours);
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
