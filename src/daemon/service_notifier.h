// The daemon's side of the service manager (systemd, Type=notify): readiness, the status line,
// the watchdog, stopping. Failures to notify are said once per run of failures.
#pragma once

#include <string>

#include <asio.hpp>

#include "os/service_manager.h"

namespace gpupool {

class ServiceNotifier {
 public:
  // Takes over $NOTIFY_SOCKET and the watchdog's variables (ServiceManager::from_environment).
  explicit ServiceNotifier(asio::io_context& io);

  // Newline-separated assignments: "READY=1\nSTATUS=...", "STOPPING=1".
  void tell(const std::string& state);
  // "STATUS=...", sent only when it differs from the last one.
  void tell_status(const std::string& status);
  // Pings the watchdog from the event loop, so a hung loop stops the pings and the service
  // manager restarts the daemon. Nothing when the manager does not watch it.
  void feed_watchdog_periodically();

 private:
  ServiceManager manager_;
  bool failing_ = false;
  std::string last_status_;
  asio::steady_timer watchdog_timer_;
};

}  // namespace gpupool
