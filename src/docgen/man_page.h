// Man pages in roff (man(7) macros) rendered from a command line's shape (command_doc.h): the
// synopsis, description, options and subcommands come from the definitions; what they cannot
// say (environment, files, exit status) comes with the page.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "docgen/command_doc.h"

namespace gpupool {

struct ManEntry {
  std::string term;  // shown in bold: a variable, a file, an exit code
  std::string text;
};

struct ManSection {
  std::string title;  // "ENVIRONMENT"
  std::string text;   // paragraphs, separated by an empty line
  std::vector<ManEntry> entries;
};

struct ManPageSpec {
  std::string name;                       // "gpupool-run": the page's own name
  int section = 1;
  std::string source;                     // "gpupool 0.1.0"
  std::string manual;                     // "User Commands"
  std::vector<std::string> command_path;  // how the command is typed: {"gpupool", "run"}
  // Subcommands listed as pages of their own (PROGRAM-COMMAND(section)) rather than described here.
  bool subcommand_pages = false;
  std::vector<ManSection> sections;  // after OPTIONS, in order
  std::vector<std::string> see_also;  // "gpupool(1)"
};

std::string man_page(const CommandDoc& command, const ManPageSpec& spec);

// Text for a roff body line: backslashes and the hyphens of options escaped, `code` in bold,
// no line starting with a control character, non-ASCII as \[uXXXX].
std::string roff_text(std::string_view text);

// A command's description without a leading "NAME: " (how the programs introduce themselves).
std::string summary_of(const CommandDoc& command);

}  // namespace gpupool
