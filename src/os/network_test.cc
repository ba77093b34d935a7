#include "os/network.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(Network, OffersAPortThatCanBeTaken) {
  auto port = free_loopback_tcp_port();
  ASSERT_TRUE(port.ok()) << port.error().message;
  EXPECT_GT(*port, 0u);
  EXPECT_LT(*port, 65536u);
  int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(allow_address_reuse(sock).ok());
  int reuse = 0;
  socklen_t size = sizeof reuse;
  ASSERT_EQ(getsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &reuse, &size), 0);
  EXPECT_EQ(reuse, 1);
  ::close(sock);
  EXPECT_FALSE(allow_address_reuse(-1).ok());
}

}  // namespace
}  // namespace gpupool
