#include "os/network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "os/fd.h"

namespace gpupool {

Result<unsigned> free_loopback_tcp_port() {
  Fd sock(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return fail("cannot open a TCP socket: {}", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  auto* generic = reinterpret_cast<sockaddr*>(&address);
  if (bind(sock.get(), generic, sizeof address) != 0 || getsockname(sock.get(), generic, &length) != 0) {
    return fail("cannot bind a TCP socket: {}", std::strerror(errno));
  }
  return static_cast<unsigned>(ntohs(address.sin_port));
}

Result<void> allow_address_reuse(int socket_fd) {
  int on = 1;
  if (setsockopt(socket_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0) {
    return fail("cannot set SO_REUSEADDR: {}", std::strerror(errno));
  }
  return {};
}

}  // namespace gpupool
