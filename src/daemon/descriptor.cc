#include "daemon/descriptor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpupool {

void Descriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<std::pair<Descriptor, Descriptor>> make_pipe() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return fail("cannot create a pipe: {}", std::strerror(errno));
  return std::make_pair(Descriptor(ends[0]), Descriptor(ends[1]));
}

std::optional<std::string> read_all(int fd) {
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got == 0) return text;
    if (got < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    text.append(buffer, static_cast<size_t>(got));
  }
}

}  // namespace gpupool
