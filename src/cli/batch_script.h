// What `gpupool submit` reads from a batch script, as sbatch does: the `#GPUPOOL` lines of its
// leading comment block (submit's options kept with the script), and the command that runs a
// script given on standard input. Pure: the caller reads the files.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpupool::cli {

// One `#GPUPOOL --gpu-count 2 --time 1h` line: its number (from 1) and its words.
struct ScriptDirective {
  size_t line = 0;
  std::vector<std::string> words;
};

// Whether `text` is a script: it starts with "#!".
bool is_script(std::string_view text);

// The directives of the leading comment block: every line up to the first that is neither blank
// nor a comment. Words are split at blanks; '...' and "..." quote, as in a shell (no expansion).
// An error names `source` and the line: "train.sh:3: a quote is not closed".
Result<std::vector<ScriptDirective>> script_directives(std::string_view script, std::string_view source);

// The command that runs a script read from standard input: its shell (from its "#!" line, which
// must name a shell; /bin/sh without one) with `-c` and the script's text, so the text travels in
// the job itself and nothing is written to a file another user could change.
Result<std::vector<std::string>> standard_input_command(std::string_view script);

}  // namespace gpupool::cli
