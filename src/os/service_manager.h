// The service manager's notification protocol (systemd's sd_notify, documented as stable in
// sd_notify(3)): datagrams such as "READY=1" sent to the socket named by $NOTIFY_SOCKET. With
// Type=notify, systemd considers gpupoold started only once its socket accepts clients, and a
// watchdog restarts a daemon whose event loop has hung.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpupool {

class ServiceManager {
 public:
  // Reads $NOTIFY_SOCKET and $WATCHDOG_USEC/$WATCHDOG_PID, then removes them from the
  // environment: the daemon's children (supervisors, jobs) must not talk to the service manager
  // in its name. Without $NOTIFY_SOCKET every notification is a no-op.
  static ServiceManager from_environment();
  // A notifier for `socket_path` ("@name" is an abstract socket), for tests.
  explicit ServiceManager(std::string socket_path, std::optional<std::chrono::microseconds> watchdog = {});
  ServiceManager(ServiceManager&& other) noexcept;
  ServiceManager& operator=(ServiceManager&& other) noexcept;
  ServiceManager(const ServiceManager&) = delete;
  ServiceManager& operator=(const ServiceManager&) = delete;
  ~ServiceManager();

  bool enabled() const { return !socket_path_.empty(); }
  // How often the manager expects "WATCHDOG=1"; nullopt when it does not watch us.
  std::optional<std::chrono::microseconds> watchdog_interval() const { return watchdog_; }

  // Sends `state`, newline-separated assignments ("READY=1\nSTATUS=serving 8 GPUs"). Never
  // blocks: when the manager's queue is full the notification is lost and this is an error.
  Result<void> notify(std::string_view state);

 private:
  std::string socket_path_;
  std::optional<std::chrono::microseconds> watchdog_;
  int fd_ = -1;
};

}  // namespace gpupool
