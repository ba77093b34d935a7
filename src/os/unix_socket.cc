#include "os/unix_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace gpupool {
namespace {

constexpr size_t kMaxDescriptors = 64;

Result<sockaddr_un> socket_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) return fail("socket path too long: {}", path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// The descriptors a received message carries (SCM_RIGHTS), owned from now on.
void take_descriptors(msghdr& message, std::vector<Fd>& into) {
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      into.emplace_back(fd);
    }
  }
}

}  // namespace

Result<PeerCredentials> peer_credentials(int socket_fd) {
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return fail("cannot read the peer's credentials: {}", std::strerror(errno));
  }
  PeerCredentials peer{credentials.pid, credentials.uid, credentials.gid, std::nullopt};
  std::vector<gid_t> groups(64);
  for (;;) {
    auto bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno != ERANGE) break;  // ENOPROTOOPT: a kernel older than 4.13
    groups.resize(bytes / sizeof(gid_t));  // the kernel said how much room it needs
  }
  return peer;
}

Result<int> connect_unix_socket(const std::string& path) {
  TRY_ASSIGN(sockaddr_un address, socket_address(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("cannot create a socket: {}", std::strerror(errno));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    int error = errno;
    ::close(fd);
    return fail("cannot connect to {}: {}", path, std::strerror(error));
  }
  return fd;
}

Result<std::pair<Fd, Fd>> socket_pair() {
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return fail("cannot create a socket pair: {}", std::strerror(errno));
  }
  return std::make_pair(Fd(sockets[0]), Fd(sockets[1]));
}

Result<void> send_with_descriptors(int socket_fd, std::string_view data, const std::vector<int>& descriptors) {
  if (descriptors.size() > kMaxDescriptorsPerMessage) {
    return fail("too many descriptors to send ({})", descriptors.size());
  }
  std::vector<char> control(CMSG_SPACE(sizeof(int) * descriptors.size()));
  size_t sent = 0;
  bool attach = !descriptors.empty();
  while (sent < data.size()) {
    iovec io{const_cast<char*>(data.data()) + sent, data.size() - sent};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    if (attach) {
      size_t bytes = sizeof(int) * descriptors.size();
      message.msg_control = control.data();
      message.msg_controllen = control.size();
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(bytes);
      std::memcpy(CMSG_DATA(header), descriptors.data(), bytes);
    }
    ssize_t n = sendmsg(socket_fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot send to the socket: {}", std::strerror(errno));
    }
    attach = false;  // the descriptors went with the first byte
    sent += static_cast<size_t>(n);
  }
  return {};
}

Result<void> send_line(int socket_fd, const std::string& line, const std::vector<int>& descriptors) {
  // No more than a LineReader has room for.
  if (descriptors.size() > kMaxDescriptors) return fail("too many descriptors to send ({})", descriptors.size());
  return send_with_descriptors(socket_fd, line + '\n', descriptors);
}

Result<ReceivedByte> receive_byte_with_descriptors(int socket_fd, size_t max_descriptors) {
  ReceivedByte received;
  iovec data{&received.byte, 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * max_descriptors));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = recvmsg(socket_fd, &message, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return fail("cannot read from the socket: {}", std::strerror(errno));
  take_descriptors(message, received.descriptors);
  if (n == 0) return fail("the connection closed before any data");
  if ((message.msg_flags & MSG_CTRUNC) != 0) return fail("more than {} descriptors came", max_descriptors);
  return received;
}

Result<std::optional<ReceivedLine>> LineReader::read_line() {
  for (;;) {
    if (size_t end = buffer_.find('\n'); end != std::string::npos) {
      if (end > max_bytes_) return fail("message longer than {} bytes", max_bytes_);
      ReceivedLine received{buffer_.substr(0, end), {}};
      buffer_.erase(0, end + 1);
      // Those whose read ended within this line are its own; the others move up with the buffer.
      auto later = arrived_.begin();
      for (; later != arrived_.end() && later->end <= end + 1; ++later) {
        std::move(later->fds.begin(), later->fds.end(), std::back_inserter(received.descriptors));
      }
      arrived_.erase(arrived_.begin(), later);
      for (Arrived& arrived : arrived_) arrived.end -= end + 1;
      return std::optional<ReceivedLine>(std::move(received));
    }
    if (buffer_.size() > max_bytes_) return fail("message longer than {} bytes", max_bytes_);
    char data[65536];
    iovec io{data, sizeof(data)};
    msghdr message{};
    message.msg_iov = &io;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptors)];
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &message, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot read from the socket: {}", std::strerror(errno));
    }
    Arrived arrived{buffer_.size() + static_cast<size_t>(n), {}};
    take_descriptors(message, arrived.fds);
    if (!arrived.fds.empty()) arrived_.push_back(std::move(arrived));
    if (n == 0) {
      if (!buffer_.empty()) return fail("the connection closed in the middle of a message");
      return std::optional<ReceivedLine>();
    }
    buffer_.append(data, static_cast<size_t>(n));
  }
}

}  // namespace gpupool
