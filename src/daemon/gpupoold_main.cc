// gpupoold: the job queue daemon (src/daemon/daemon.h), or one attempt's supervisor.
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/daemon_options.h"
#include "daemon/supervisor.h"
#include "os/accounts.h"
#include "os/environment.h"
#include "os/host_files.h"

namespace gpupool {
namespace {

// Options, then `Daemon::run` (or `supervise`).
int daemon_main(int argc, char** argv) {
  // The supervisor of one job attempt: gpupoold re-executed by itself (see supervisor.h).
  if (argc == 2 && std::string_view(argv[1]) == "supervise") return supervise_main();

  DaemonOptions options;
  std::unique_ptr<CLI::App> app = make_daemon_app(options);
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }
  const std::optional<std::string>& http = options.http;
  if (http && *http != "off" && !split_http_address(*http)) {
    fmt::print(stderr, "gpupoold: --http {}: expected HOST:PORT or off\n", *http);
    return 2;
  }
  std::string& config_path = options.config_path;
  bool named = !config_path.empty();
  if (!named) {
    std::optional<std::string> env = environment_variable("GPUPOOL_CONFIG");
    named = env && !env->empty();
    config_path = named ? *env : kDefaultConfigPath;
  }
  auto config = load_config(config_path, named);
  if (!config) {
    fmt::print(stderr, "gpupoold: {}\n", config.error().message);
    return 1;
  }
  if (options.check_config) {
    // What start-up would refuse, --check-config refuses too.
    if (config->admin_group) {
      if (auto admins = group_id(*config->admin_group); !admins) {
        fmt::print(stderr, "gpupoold: {}: admin_group: {}\n", config_path, admins.error().message);
        return 1;
      }
    }
    fmt::print("{}: OK\n", config_path);
    return 0;
  }
  if (http) config->http = *http == "off" ? std::nullopt : http;
  auto self = executable_path();
  if (!self) {
    fmt::print(stderr, "gpupoold: cannot find its own program: {}\n", self.error().message);
    return 1;
  }
  DaemonSettings settings{options.runtime_dir, options.state_dir, std::move(*self), std::move(*config),
                          options.end_with};
  auto daemon = Daemon::create(std::move(settings));
  if (!daemon) {
    fmt::print(stderr, "gpupoold: {}\n", daemon.error().message);
    return 1;
  }
  if (auto served = (*daemon)->run(); !served) {
    fmt::print(stderr, "gpupoold: {}\n", served.error().message);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gpupool

int main(int argc, char** argv) { return gpupool::daemon_main(argc, argv); }
