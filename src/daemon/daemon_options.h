// gpupoold's command line, built apart from its main so the man page and completions can be
// generated from it without starting anything.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

namespace gpupool {

struct DaemonOptions {
  std::string config_path;  // empty: $GPUPOOL_CONFIG, else the default path
  std::string state_dir;
  std::string runtime_dir;
  std::optional<std::string> http;
  std::optional<int> end_with;  // a process id: end with it (a Slurm job's daemon, docs/slurm.md)
  bool check_config = false;  // read the configuration, say whether it is valid, and exit
};

// The options are bound to `options`, which must outlive the App; the directories start at
// their defaults (os/paths).
std::unique_ptr<CLI::App> make_daemon_app(DaemonOptions& options);

}  // namespace gpupool
