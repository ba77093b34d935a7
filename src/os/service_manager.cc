#include "os/service_manager.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "os/environment.h"
#include "os/process.h"

namespace gpupool {

namespace {

std::optional<std::chrono::microseconds> watchdog_from_environment() {
  std::optional<std::string> usec = environment_variable("WATCHDOG_USEC");
  if (!usec) return std::nullopt;
  // WATCHDOG_PID names the process meant, when the variable was inherited by a child.
  if (auto pid = environment_variable("WATCHDOG_PID"); pid && std::atol(pid->c_str()) != own_pid()) {
    return std::nullopt;
  }
  long long value = 0;
  std::string_view text(*usec);
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value <= 0) return std::nullopt;
  return std::chrono::microseconds(value);
}

}  // namespace

ServiceManager ServiceManager::from_environment() {
  ServiceManager manager(environment_variable("NOTIFY_SOCKET").value_or(""), watchdog_from_environment());
  for (const char* name : {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"}) unset_environment_variable(name);
  return manager;
}

ServiceManager::ServiceManager(std::string socket_path, std::optional<std::chrono::microseconds> watchdog)
    : socket_path_(std::move(socket_path)), watchdog_(socket_path_.empty() ? std::nullopt : watchdog) {}

ServiceManager::ServiceManager(ServiceManager&& other) noexcept
    : socket_path_(std::move(other.socket_path_)),
      watchdog_(other.watchdog_),
      fd_(std::exchange(other.fd_, -1)) {
  other.socket_path_.clear();
}

ServiceManager& ServiceManager::operator=(ServiceManager&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    socket_path_ = std::exchange(other.socket_path_, {});
    watchdog_ = other.watchdog_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ServiceManager::~ServiceManager() {
  if (fd_ >= 0) close(fd_);
}

Result<void> ServiceManager::notify(std::string_view state) {
  if (!enabled()) return {};
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path_.size() >= sizeof(address.sun_path) || (socket_path_[0] != '/' && socket_path_[0] != '@')) {
    return fail("NOTIFY_SOCKET={}: not a socket path", socket_path_);
  }
  std::memcpy(address.sun_path, socket_path_.data(), socket_path_.size());
  if (socket_path_[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket_path_.size());
  if (fd_ < 0) {
    // Non-blocking: a manager that stops reading (its queue holds only net.unix.max_dgram_qlen
    // datagrams) must not stall the daemon's event loop; a notification is dropped instead.
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0) return fail("cannot create the notification socket: {}", std::strerror(errno));
  }
  ssize_t sent = sendto(fd_, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&address), length);
  if (sent < 0) return fail("cannot notify the service manager at {}: {}", socket_path_, std::strerror(errno));
  return {};
}

}  // namespace gpupool
