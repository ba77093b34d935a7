#include "daemon/daemon_options.h"

#include <fmt/format.h>

#include "daemon/config.h"
#include "lease/lease_directory.h"
#include "os/paths.h"

namespace gpupool {

std::unique_ptr<CLI::App> make_daemon_app(DaemonOptions& options) {
  auto app = std::make_unique<CLI::App>("gpupoold: the GPU job queue of a shared machine", "gpupoold");
  app->set_version_flag("--version", std::string("gpupoold ") + GPUPOOL_VERSION);
  options.state_dir = default_daemon_state_dir();
  options.runtime_dir = LeaseDirectory::default_path();
  app->add_option("--config", options.config_path,
                  fmt::format("Configuration file (default: $GPUPOOL_CONFIG, else {})", kDefaultConfigPath))
      ->type_name("FILE");
  app->add_option("--state-dir", options.state_dir,
                  "Jobs database and logs (default: $GPUPOOL_STATE_DIR, else in a Slurm job /tmp/gpupool-JOBID/state, "
                  "else /var/lib/gpupool for root, ~/.local/state/gpupool for others)")
      ->type_name("DIR");
  app->add_option("--runtime-dir", options.runtime_dir,
                  "Lease directory holding the socket (default: $GPUPOOL_RUNTIME_DIR, else in a Slurm job "
                  "/tmp/gpupool-JOBID/run, else /run/gpupool or /tmp/gpupool)")
      ->type_name("DIR");
  app->add_option("--http", options.http,
                  fmt::format("Serve /metrics, /api and the dashboard on HOST:PORT, or \"off\" (default: the "
                              "configuration's [monitor] http, else {})",
                              kDefaultHttpAddress))
      ->type_name("ADDRESS");
  app->add_option("--end-with", options.end_with,
                  "Live as long as this process: when it exits, cancel every job and stop (how `gpupool slurm "
                  "start` ties a daemon to a Slurm job's shell)")
      ->type_name("PID")
      ->check(CLI::PositiveNumber);
  app->add_flag("--check-config", options.check_config,
                "Read the configuration file, print the first problem (FILE:LINE: what) or \"FILE: OK\", and exit: "
                "0 when the daemon would accept it. Run it before restarting the daemon after an edit");
  app->footer("Set GPUPOOL_SIM=NAME (e.g. hgx-h200) to serve a simulated machine instead of the real GPUs.");
  return app;
}

}  // namespace gpupool
