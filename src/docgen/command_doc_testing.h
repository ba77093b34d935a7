// Shorthand for the unit tests of the command-line renderers (completion_script, man_page).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "docgen/command_doc.h"

namespace gpupool::testing_support {

inline OptionDoc option(std::vector<std::string> long_names, std::vector<std::string> short_names,
                        std::string positional, std::string description, std::string value_name = "") {
  OptionDoc doc;
  doc.long_names = std::move(long_names);
  doc.short_names = std::move(short_names);
  doc.positional = std::move(positional);
  doc.description = std::move(description);
  doc.value_name = std::move(value_name);
  return doc;
}

}  // namespace gpupool::testing_support
