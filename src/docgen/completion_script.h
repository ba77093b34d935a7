// Shell completion scripts rendered from a command line's shape (command_doc.h): bash, zsh and
// fish. Each completes subcommands, then the options of the command typed so far, the values of
// options that have a list of choices, file and directory paths where an option's value is one,
// and job ids from `job_ids_command`; after `--` the rest is the user's own command.
#pragma once

#include <string>

#include "docgen/command_doc.h"

namespace gpupool {

struct CompletionSettings {
  // A shell pipeline that prints one job id a line (the same text works in bash, zsh and fish),
  // or nothing when there is no daemon; used where a value is a job id.
  std::string job_ids_command;
};

std::string bash_completion(const CommandDoc& program, const CompletionSettings& settings);
std::string zsh_completion(const CommandDoc& program, const CompletionSettings& settings);
std::string fish_completion(const CommandDoc& program, const CompletionSettings& settings);

}  // namespace gpupool
