// Reads a CLI11 command line into its plain shape (docgen/command_doc.h), which the completion
// scripts and man pages are rendered from.
#pragma once

#include <CLI/CLI.hpp>

#include "docgen/command_doc.h"

namespace gpupool::cli {

// Every visible subcommand (recursively), option, flag and positional with its description,
// value type, default and choices (from IsMember and CheckedTransformer validators), and the
// footer. A value's kind comes from its type name: FILE, DIR, JOB_ID, COMMAND (or the
// ExistingFile / ExistingDirectory validators).
CommandDoc describe_app(const CLI::App& app);

}  // namespace gpupool::cli
