// A command line's shape as plain data: commands, subcommands and options, read from the CLI11
// definitions (src/docgen/describe_app.h) and rendered into shell completions and man pages
// (completion_script.h, man_page.h), so both come from the one definition of each command.
#pragma once

#include <string>
#include <vector>

namespace gpupool {

// What an option's value is, as far as completing it goes.
enum class ValueKind {
  Text,       // anything: nothing to offer
  File,       // a path to a file
  Directory,  // a path to a directory
  Job,        // a gpupoold job, by its id
  Command,    // a program and its arguments (after --)
};

struct OptionDoc {
  std::vector<std::string> long_names;   // without dashes: "gpu-count"
  std::vector<std::string> short_names;  // without the dash: "g"
  std::string positional;                // a positional argument's name ("ids"), else empty
  std::string description;
  std::string value_name;       // "COUNT", "FILE", ...; empty for a flag
  bool value_optional = false;  // may be given without its value (`--wait` alone)
  bool repeatable = false;      // takes several values, or may be given more than once
  bool required = false;
  std::string default_value;
  std::vector<std::string> choices;  // the only values accepted, when there is such a list
  ValueKind kind = ValueKind::Text;

  bool is_positional() const { return !positional.empty(); }
  bool takes_value() const { return !value_name.empty(); }
};

struct CommandDoc {
  std::string name;
  std::string description;
  std::string footer;
  std::vector<OptionDoc> options;  // options first, then positionals in their order
  std::vector<CommandDoc> commands;
};

}  // namespace gpupool
