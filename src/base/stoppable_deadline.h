// A deadline whose clock can stand still: a time limit that the time a job is suspended does not
// count against. `gpupool run` and `gpupool launch` keep their limits with it.
#pragma once

#include <chrono>
#include <optional>

namespace gpupool {

class StoppableDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  // Falls due at `at`, running (a stopped clock's time left is forgotten).
  void set(Clock::time_point at) {
    at_ = at;
    left_.reset();
  }
  void clear() {
    at_.reset();
    left_.reset();
  }
  // When it falls due while its clock runs; nullopt while stopped, or when none is set.
  const std::optional<Clock::time_point>& at() const { return at_; }
  // Stops the clock with the time left kept; nothing when it is stopped or not set.
  void stop(Clock::time_point now) {
    if (!at_) return;
    left_ = *at_ - now;
    at_.reset();
  }
  // Starts it again with the time it had left; nothing when it was not stopped.
  void start(Clock::time_point now) {
    if (!left_) return;
    at_ = now + *left_;
    left_.reset();
  }

 private:
  std::optional<Clock::time_point> at_;
  std::optional<Clock::duration> left_;
};

}  // namespace gpupool
