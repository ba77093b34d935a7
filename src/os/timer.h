// A one-shot timer as a descriptor (timerfd): it turns readable when it expires, so an event loop
// waits for it together with its other descriptors.
#pragma once

#include "base/result.h"
#include "os/fd.h"

namespace gpupool {

// A disarmed timer on the monotonic clock (not moved by changes to the wall clock),
// non-blocking and close-on-exec.
Result<Fd> timer_descriptor();

// Expires once, `seconds` from now (at the earliest a nanosecond from now: zero would disarm it),
// replacing whatever it was set to before.
void arm_timer(int timer_fd, double seconds);

// Disarms it; returns how long it had left, in seconds (0 if it was not armed or has expired).
double disarm_timer(int timer_fd);

// Whether it has expired since last asked, taking the expiry.
bool take_timer_expiry(int timer_fd);

}  // namespace gpupool
