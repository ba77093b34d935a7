// This process's environment, and other processes' (/proc/PID/environ), as values and maps: the
// one place that reads `environ` and splits NAME=VALUE entries.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

using EnvironmentMap = std::map<std::string, std::string>;

// nullopt when unset; set but empty is "".
std::optional<std::string> environment_variable(const char* name);

// Sets (or replaces) a variable of this process, which the children it starts inherit.
void set_environment_variable(const char* name, const std::string& value);

void unset_environment_variable(const char* name);

// Every variable of this process.
EnvironmentMap own_environment();
// The same as "NAME=value" entries, in the order the process holds them (what exec passes on).
std::vector<std::string> own_environment_entries();

// A NUL-separated block as /proc/PID/environ holds it. Entries without '=' are skipped: they name
// no variable.
EnvironmentMap environment_from_block(std::string_view block);

}  // namespace gpupool
