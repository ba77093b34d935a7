#include "os/service_manager.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// A datagram socket standing in for systemd's notification socket.
struct ListeningSocket {
  explicit ListeningSocket(const std::string& name) : path(name) {
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), name.size());
    if (name[0] == '@') address.sun_path[0] = '\0';
    auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0) << std::strerror(errno);
  }
  ~ListeningSocket() {
    close(fd);
    if (path[0] == '/') unlink(path.c_str());
  }
  std::string receive() const {
    char buffer[512];
    ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    return n < 0 ? std::string("<nothing>") : std::string(buffer, static_cast<size_t>(n));
  }
  std::string path;
  int fd = -1;
};

std::string temporary_socket_path() {
  return testing::TempDir() + "notify-" + std::to_string(getpid()) + ".sock";
}

TEST(ServiceManager, SendsEachNotificationAsOneDatagram) {
  ListeningSocket manager(temporary_socket_path());
  ServiceManager notifier(manager.path);
  ASSERT_TRUE(notifier.notify("READY=1\nSTATUS=serving 8 GPUs").ok());
  ASSERT_TRUE(notifier.notify("STOPPING=1").ok());
  EXPECT_EQ(manager.receive(), "READY=1\nSTATUS=serving 8 GPUs");
  EXPECT_EQ(manager.receive(), "STOPPING=1");
}

TEST(ServiceManager, ReachesAnAbstractSocket) {
  ListeningSocket manager("@gpupool-notify-test-" + std::to_string(getpid()));
  ServiceManager notifier(manager.path);
  ASSERT_TRUE(notifier.notify("READY=1").ok());
  EXPECT_EQ(manager.receive(), "READY=1");
}

TEST(ServiceManager, WithoutASocketNotificationsAreNoOps) {
  ServiceManager notifier("");
  EXPECT_FALSE(notifier.enabled());
  EXPECT_TRUE(notifier.notify("READY=1").ok());
}

TEST(ServiceManager, AManagerThatIsGoneIsAnError) {
  ServiceManager notifier(temporary_socket_path() + ".absent");
  auto sent = notifier.notify("READY=1");
  ASSERT_FALSE(sent.ok());
  EXPECT_NE(sent.error().message.find("cannot notify the service manager"), std::string::npos);
}

// A manager that stops reading: its queue fills, and the daemon's loop must not wait for it.
TEST(ServiceManager, NeverWaitsForAManagerThatDoesNotRead) {
  ListeningSocket manager(temporary_socket_path());
  ServiceManager notifier(manager.path);
  bool dropped = false;
  for (int i = 0; i < 1000 && !dropped; ++i) dropped = !notifier.notify("WATCHDOG=1").ok();
  EXPECT_TRUE(dropped) << "a thousand datagrams all queued: the test did not fill the queue";
  EXPECT_EQ(manager.receive(), "WATCHDOG=1");  // what was queued is intact
}

TEST(ServiceManager, TakesItsSettingsOutOfTheEnvironment) {
  ListeningSocket manager(temporary_socket_path());
  setenv("NOTIFY_SOCKET", manager.path.c_str(), 1);
  setenv("WATCHDOG_USEC", "3000000", 1);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  ServiceManager notifier = ServiceManager::from_environment();
  // Children must not inherit them.
  EXPECT_EQ(std::getenv("NOTIFY_SOCKET"), nullptr);
  EXPECT_EQ(std::getenv("WATCHDOG_USEC"), nullptr);
  EXPECT_EQ(std::getenv("WATCHDOG_PID"), nullptr);
  ASSERT_TRUE(notifier.watchdog_interval().has_value());
  EXPECT_EQ(notifier.watchdog_interval()->count(), 3000000);
  ASSERT_TRUE(notifier.notify("READY=1").ok());
  EXPECT_EQ(manager.receive(), "READY=1");
}

TEST(ServiceManager, IgnoresAWatchdogMeantForAnotherProcess) {
  setenv("NOTIFY_SOCKET", "/run/systemd/notify", 1);
  setenv("WATCHDOG_USEC", "3000000", 1);
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_FALSE(ServiceManager::from_environment().watchdog_interval().has_value());
}

}  // namespace
}  // namespace gpupool
