#include "os/fd.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace gpupool {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<void> set_inherited_by_exec(int fd, bool inherited) {
  if (fcntl(fd, F_SETFD, inherited ? 0 : FD_CLOEXEC) != 0) {
    return fail("cannot change close-on-exec of descriptor {}: {}", fd, std::strerror(errno));
  }
  return {};
}

Result<Fd> duplicate(int fd) {
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (copy < 0) return fail("cannot duplicate descriptor {}: {}", fd, std::strerror(errno));
  return Fd(copy);
}

bool is_terminal(int fd) { return isatty(fd) == 1; }

Result<std::vector<bool>> wait_until_ready(const std::vector<int>& fds,
                                           std::optional<std::chrono::milliseconds> timeout) {
  std::vector<pollfd> polled;
  for (int fd : fds) polled.push_back({fd, POLLIN, 0});
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(std::chrono::milliseconds(0));
  for (;;) {
    int wait_ms = -1;
    if (timeout) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    int ready = poll(polled.data(), polled.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return fail("cannot wait for descriptors: {}", std::strerror(errno));
    std::vector<bool> readable;
    for (const pollfd& p : polled) readable.push_back(p.revents != 0);
    return readable;
  }
}

void close_descriptors(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

bool write_in_one_call(int fd, const void* data, size_t size) {
  return ::write(fd, data, size) == static_cast<ssize_t>(size);
}

bool read_in_one_call(int fd, void* buffer, size_t size) {
  ssize_t got = 0;
  do {
    got = ::read(fd, buffer, size);
  } while (got < 0 && errno == EINTR);
  return got == static_cast<ssize_t>(size);
}

Result<std::pair<Fd, Fd>> make_pipe() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return fail("cannot create a pipe: {}", std::strerror(errno));
  return std::make_pair(Fd(ends[0]), Fd(ends[1]));
}

}  // namespace gpupool
