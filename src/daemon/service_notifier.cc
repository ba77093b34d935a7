#include "daemon/service_notifier.h"

#include <fmt/format.h>

namespace gpupool {

ServiceNotifier::ServiceNotifier(asio::io_context& io)
    : manager_(ServiceManager::from_environment()), watchdog_timer_(io) {}

void ServiceNotifier::tell(const std::string& state) {
  auto told = manager_.notify(state);
  // Said once per run of failures, not once per watchdog ping.
  if (!told && !failing_) fmt::print(stderr, "gpupoold: {}\n", told.error().message);
  failing_ = !told;
}

void ServiceNotifier::tell_status(const std::string& status) {
  if (status == last_status_) return;
  last_status_ = status;
  tell(status);
}

void ServiceNotifier::feed_watchdog_periodically() {
  auto interval = manager_.watchdog_interval();
  if (!interval) return;
  tell("WATCHDOG=1");
  watchdog_timer_.expires_after(*interval / 2);
  watchdog_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) feed_watchdog_periodically();
  });
}

}  // namespace gpupool
