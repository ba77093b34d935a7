#include "cli/app.h"

#include <fcntl.h>

#include <algorithm>
#include <clocale>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "base/display_text.h"
#include "base/quote.h"
#include "base/text.h"
#include "cli/batch_script.h"
#include "cli/program_words.h"
#include "os/fd.h"
#include "os/files.h"

namespace gpupool::cli {

int report(const Error& error) {
  // An error may quote another user's text (a job's name or reason): escaped, on one line.
  fmt::print(stderr, "gpupool: {}\n", printable(error.message, kMaxShownBytes));
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
  add_acquire_command(app, exit_code);
  add_top_command(app, exit_code);
  add_queue_commands(app, exit_code, program);
  add_wait_command(app, exit_code);
  add_suspend_command(app, exit_code);
  add_report_command(app, exit_code);
  add_events_command(app, exit_code);
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

// What a command that runs a program says without one; directive_options() relies on it.
constexpr const char* kNoProgram = "a command to run is required, after the options or after --";

const std::vector<std::string>& required_program(const std::vector<std::string>& program) {
  if (program.empty()) throw CLI::ValidationError(kNoProgram);
  return program;
}

namespace {

// What each option word of `command` is, for split_program_words.
std::function<OptionKind(std::string_view)> option_kinds(const CLI::App& command) {
  return [&command](std::string_view word) {
    const CLI::Option* option = command.get_option_no_throw(std::string(word));
    if (option == nullptr) return OptionKind::Unknown;
    if (option->get_expected_max() == 0) return OptionKind::Flag;
    return option->get_expected_min() == 0 ? OptionKind::OptionalValue : OptionKind::Value;
  };
}

// The first word that is not an option: the command a command line names, if it names one.
std::string named_command(const std::vector<std::string>& words) {
  auto named = std::find_if(words.begin(), words.end(), [](const std::string& word) { return word.empty() || word[0] != '-'; });
  return named == words.end() ? "" : *named;
}

// What CLI11 parses: the command line up to the program's words, which go to `program`.
std::vector<std::string> without_program(CLI::App& app, const std::vector<std::string>& words,
                                         std::vector<std::string>& program) {
  auto named = std::find(words.begin(), words.end(), named_command(words));
  if (named == words.end() || kCommandsThatRunAProgram.count(*named) == 0) return words;
  const CLI::App* command = app.get_subcommand(*named);  // each of them is registered
  SplitWords split = split_program_words(std::vector<std::string>(named + 1, words.end()), option_kinds(*command));
  program = std::move(split.program);
  std::vector<std::string> ours(words.begin(), named + 1);
  ours.insert(ours.end(), split.options.begin(), split.options.end());
  return ours;
}

// "unknown command 'lsit' (did you mean 'list'?)": the nearest command by edit distance, when
// it is near enough to be what was meant.
std::string unknown_command(const CLI::App& app, const std::string& typed) {
  std::string nearest;
  size_t best = 3;  // more edits than this is another word
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    size_t distance = edit_distance(typed, command->get_name());
    if (distance < best) {
      best = distance;
      nearest = command->get_name();
    }
  }
  return fmt::format("unknown command '{}'{}", typed, nearest.empty() ? "" : fmt::format(" (did you mean '{}'?)", nearest));
}

// The parser's complaint as one line of ours: "unknown option '--bogus'" rather than "The
// following argument was not expected: --bogus".
std::string complaint(const CLI::ParseError& error) {
  std::string_view text = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    size_t colon = text.find(": ");
    std::string word = colon == std::string_view::npos ? std::string(text) : split(text.substr(colon + 2), ' ').front();
    return fmt::format("{} '{}'", word.size() > 1 && word[0] == '-' ? "unknown option" : "unexpected argument", word);
  }
  return std::string(text);
}

// A batch script's directives are in its first mebibyte, however long the script.
constexpr size_t kScriptHeadBytes = 1 << 20;

// The head of `path` when it names a regular file that starts with "#!"; nullopt for anything
// else (a program found on PATH, a binary, a file that cannot be read).
std::optional<std::string> script_head(const std::string& path) {
  auto status = file_status(path);
  if (!status || status->type != FileType::regular) return std::nullopt;
  auto fd = open_existing(path, O_RDONLY);
  if (!fd || !*fd) return std::nullopt;
  auto head = read_at((*fd)->get(), kScriptHeadBytes, 0);
  if (!head || !is_script(*head)) return std::nullopt;
  return std::move(*head);
}

// One directive line's options, checked on their own so that an error can name its line.
Result<std::vector<std::string>> directive_options(const ScriptDirective& directive, const std::string& source) {
  int ignored_exit = kExitOk;
  std::vector<std::string> no_program;
  std::unique_ptr<CLI::App> checker = make_app(ignored_exit, no_program);
  CLI::App* submit = checker->get_subcommand("submit");
  SplitWords split = split_program_words(directive.words, option_kinds(*submit));
  if (!split.program.empty()) {
    return fail("{}:{}: {} is not an option of submit", source, directive.line, quote(split.program.front()));
  }
  std::vector<std::string> words = {"submit"};
  words.insert(words.end(), split.options.begin(), split.options.end());
  std::reverse(words.begin(), words.end());
  // submit's own callback runs once the options have parsed and passed their checks; with no
  // program it stops at once, before anything is submitted. It must stay: replacing it would
  // free what its options write into.
  try {
    checker->parse(words);
  } catch (const CLI::ParseError& error) {
    if (std::string_view(error.what()).find(kNoProgram) == std::string_view::npos) {
      return fail("{}:{}: {}", source, directive.line, complaint(error));
    }
  }
  return std::move(split.options);
}

// submit's words with its batch script's #GPUPOOL directives before the command line's options,
// which win: submit's options take the last value given. The script is the program's first word
// when that names a file starting with "#!" (one in this directory runs as ./NAME, as sbatch
// runs it), or, with no program and standard input not a terminal, standard input, as sbatch
// reads it.
Result<std::vector<std::string>> with_batch_script(std::vector<std::string> ours, std::vector<std::string>& program) {
  std::string source;
  std::optional<std::string> script;
  if (!program.empty()) {
    source = program.front();
    script = script_head(source);
    if (script && source.find('/') == std::string::npos) program.front() = "./" + source;
  } else if (!is_terminal(0) && std::find_if(ours.begin(), ours.end(), [](const std::string& word) {
               return word == "-h" || word == "--help";
             }) == ours.end()) {
    source = "standard input";
    TRY_ASSIGN(script, read_to_end(0));
    if (script->empty()) return ours;  // nothing to run: the usual complaint follows
    TRY_ASSIGN(program, standard_input_command(*script));
  }
  if (!script) return ours;
  TRY_ASSIGN(std::vector<ScriptDirective> directives, script_directives(*script, source));
  auto after_command = std::find(ours.begin(), ours.end(), "submit") + 1;
  std::vector<std::string> words(ours.begin(), after_command);
  for (const ScriptDirective& directive : directives) {
    TRY_ASSIGN(std::vector<std::string> options, directive_options(directive, source));
    words.insert(words.end(), options.begin(), options.end());
  }
  words.insert(words.end(), after_command, ours.end());
  return words;
}

int usage_error(const std::string& message, const std::string& command) {
  fmt::print(stderr, "gpupool: {} (see gpupool {}--help)\n", message, command.empty() ? "" : command + " ");
  return kExitUsage;
}

}  // namespace

int run(int argc, char** argv) {
  // Display widths of UTF-8 text (base/display_text.h) and ncurses' wide characters need it.
  std::setlocale(LC_CTYPE, "C.UTF-8");
  int exit_code = kExitOk;
  std::vector<std::string> program;
  std::unique_ptr<CLI::App> owned = make_app(exit_code, program);
  CLI::App& app = *owned;
  const std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    fmt::print("{}", app.help());
    return kExitUsage;
  }
  std::string command = named_command(words);
  if (command == "help" && words.size() == 1) {
    fmt::print("{}", app.help());
    return kExitOk;
  }
  bool known = !command.empty() && !app.get_subcommands([&](const CLI::App* c) { return c->get_name() == command; }).empty();
  if (!command.empty() && !known) return usage_error(unknown_command(app, command), "");
  try {
    std::vector<std::string> ours = without_program(app, words, program);
    if (command == "submit") {
      auto with_script = with_batch_script(std::move(ours), program);
      if (!with_script) {
        fmt::print(stderr, "gpupool: {}\n", printable(with_script.error().message, kMaxShownBytes));
        return kExitUsage;
      }
      ours = std::move(*with_script);
    }
    std::reverse(ours.begin(), ours.end());  // CLI11 takes the words from the back
    app.parse(ours);
  } catch (const CLI::Success& e) {  // --help and --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(complaint(e), command);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpupool: {}\n", e.what());
    return kExitError;
  }
  return exit_code;
}

}  // namespace gpupool::cli
