// An owned file descriptor: closed when its owner goes, moved but never copied, so a descriptor
// has exactly one owner and no path forgets to close it (or closes it twice).
#pragma once

#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "base/result.h"

namespace gpupool {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  // Gives up ownership: the caller closes what this returns.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held now (if any) and owns `fd` instead.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Whether an exec'd program keeps the descriptor (close-on-exec cleared) or not.
Result<void> set_inherited_by_exec(int fd, bool inherited);

// A second descriptor for the same open file, close-on-exec, numbered 3 or above (so it never
// takes the place of a standard stream).
Result<Fd> duplicate(int fd);

// Closes descriptors held as plain numbers (a batch handed over, or what a forked child must not
// keep). Async-signal-safe: allocates nothing.
void close_descriptors(const std::vector<int>& fds);

// All of `data` in one write(2): on a pipe (up to PIPE_BUF) or a file opened O_APPEND a reader
// sees it whole or not at all. false when the kernel took less or failed; errno says why then.
// Async-signal-safe.
bool write_in_one_call(int fd, const void* data, size_t size);
// One read(2) (again if a signal interrupts it) that fills all of `buffer`: the counterpart of
// write_in_one_call for fixed-size messages. false when it brought less: the end of the file, an
// error, or nothing yet on a non-blocking descriptor. Async-signal-safe.
bool read_in_one_call(int fd, void* buffer, size_t size);

// A pipe, both ends close-on-exec: the read end first.
Result<std::pair<Fd, Fd>> make_pipe();

// Whether the descriptor is a terminal (and so a person may be reading or typing).
bool is_terminal(int fd);

// Waits until one of `fds` is readable, has hung up or failed, or `timeout` has passed (nullopt:
// no limit); says which are. A signal handled meanwhile does not end the wait.
Result<std::vector<bool>> wait_until_ready(const std::vector<int>& fds,
                                           std::optional<std::chrono::milliseconds> timeout);

}  // namespace gpupool
