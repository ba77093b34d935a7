// The shell completions and man pages of gpupool and gpupoold, rendered from their CLI11
// definitions: printed by `gpupool completion SHELL` and written at build time by
// gpupool-docgen into the build tree (share/man, share/bash-completion, ...).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpupool::cli {

// The completion script of `program` for "bash", "zsh" or "fish".
Result<std::string> completion_script(const CLI::App& program, std::string_view shell);

struct GeneratedFile {
  std::string path;  // relative to the data directory (share/): "man/man1/gpupool.1"
  std::string text;
};

// Every completion script and man page of both programs.
std::vector<GeneratedFile> generated_files(const CLI::App& gpupool, const CLI::App& gpupoold);

}  // namespace gpupool::cli
