#include "os/timer.h"

#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace gpupool {

Result<Fd> timer_descriptor() {
  Fd timer(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer.valid()) return fail("cannot create a timer: {}", std::strerror(errno));
  return timer;
}

void arm_timer(int timer_fd, double seconds) {
  seconds = std::max(seconds, 0.0);
  double whole = std::floor(seconds);
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(whole);
  when.it_value.tv_nsec = static_cast<long>((seconds - whole) * 1e9);
  if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;
  timerfd_settime(timer_fd, 0, &when, nullptr);
}

double disarm_timer(int timer_fd) {
  itimerspec off{}, left{};
  if (timerfd_settime(timer_fd, 0, &off, &left) != 0) return 0;
  return static_cast<double>(left.it_value.tv_sec) + static_cast<double>(left.it_value.tv_nsec) / 1e9;
}

bool take_timer_expiry(int timer_fd) {
  uint64_t expirations = 0;
  return read_in_one_call(timer_fd, &expirations, sizeof expirations);
}

}  // namespace gpupool
