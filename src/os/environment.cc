#include "os/environment.h"

#include <cstdlib>

extern char** environ;  // NOLINT: POSIX names it so

namespace gpupool {
namespace {

void add_entry(EnvironmentMap& variables, std::string_view entry) {
  const size_t equals = entry.find('=');
  if (equals == std::string_view::npos) return;
  variables.emplace(entry.substr(0, equals), entry.substr(equals + 1));
}

}  // namespace

std::optional<std::string> environment_variable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::optional<std::string>(value) : std::nullopt;
}

void set_environment_variable(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

void unset_environment_variable(const char* name) { unsetenv(name); }

EnvironmentMap own_environment() {
  EnvironmentMap variables;
  for (const std::string& entry : own_environment_entries()) add_entry(variables, entry);
  return variables;
}

std::vector<std::string> own_environment_entries() {
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) entries.emplace_back(*entry);
  return entries;
}

EnvironmentMap environment_from_block(std::string_view block) {
  EnvironmentMap variables;
  while (!block.empty()) {
    const size_t end = std::min(block.find('\0'), block.size());
    add_entry(variables, block.substr(0, end));
    block.remove_prefix(std::min(end + 1, block.size()));
  }
  return variables;
}

}  // namespace gpupool
