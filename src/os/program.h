// Running another program and reading what it says: an argument vector handed to
// posix_spawnp (never a shell string, so no argument is ever re-read as shell syntax), optional
// text on its standard input, its standard output and error captured, its exit status.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpupool {

struct ProgramOptions {
  std::string input;                      // written to its standard input, then closed
  std::vector<std::string> environment;   // "NAME=value" added to (or replacing in) ours
  std::vector<std::string> unset;         // names taken out of ours
  std::string not_found_hint;             // added to the error when argv[0] is not found
  // How long it may take to close its output; past it the program is killed and it is an error.
  std::optional<std::chrono::milliseconds> timeout = std::nullopt;
};

struct ProgramOutcome {
  int exit_code = 0;  // the shell's view: the status, or 128 + the signal
  std::string out;
  std::string err;
};

// Runs argv (argv[0] looked up on PATH unless it is a path) to its end. An error only when it
// cannot run at all: "sbatch: not found on PATH; is Slurm's client installed?" (with
// options.not_found_hint), or when it outlives options.timeout (it is killed).
Result<ProgramOutcome> run_program(const std::vector<std::string>& argv, const ProgramOptions& options = {});

// Where `name` is found on PATH as an executable file; nullopt when it is not.
std::optional<std::string> find_program(const std::string& name);

}  // namespace gpupool
