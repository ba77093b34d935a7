// An owned file descriptor and the two things the supervisor and the attempt records do with
// raw descriptors: make a pipe, read to the end.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "base/result.h"

namespace gpupool {

// Closes its descriptor when it goes out of scope.
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Both ends close-on-exec: read end first.
Result<std::pair<Descriptor, Descriptor>> make_pipe();

// Everything up to the end of the stream; nullopt on a read error (errno says which).
std::optional<std::string> read_all(int fd);

}  // namespace gpupool
