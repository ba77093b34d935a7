// The on_event hook ([events] on_event, docs/events.md): the configured command run once for each
// event it asks for, one at a time, on a thread of its own, so a slow mail server never holds
// the daemon's loop. It gets the event's JSON on its standard input and GPUPOOL_EVENT_* in its
// environment; past on_event_timeout its process group is killed. Events that come while more than
// kMaxPendingHookEvents wait are dropped, and the drop said.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "jobs/event.h"

namespace gpupool {

inline constexpr size_t kMaxPendingHookEvents = 1000;

// What the hook finds in its environment: GPUPOOL_EVENT (the kind), GPUPOOL_EVENT_SEQ,
// GPUPOOL_EVENT_TIME, GPUPOOL_EVENT_MESSAGE (the line `gpupool events` shows), and where they
// apply GPUPOOL_EVENT_JOB, GPUPOOL_EVENT_USER, GPUPOOL_EVENT_NAME, GPUPOOL_EVENT_GPUS ("0,1"),
// GPUPOOL_EVENT_DETAIL, GPUPOOL_EVENT_JOBS and GPUPOOL_EVENT_USERS (space-separated).
std::vector<std::string> hook_environment(const Event& event);

class EventHook {
 public:
  // Runs nothing when `config.on_event` is empty.
  explicit EventHook(const EventsConfig& config);
  // Runs the hook for what is queued, for one on_event_timeout in all (the rest is dropped and
  // said), then stops.
  ~EventHook();
  EventHook(const EventHook&) = delete;
  EventHook& operator=(const EventHook&) = delete;

  // Queues the event for the hook when it asks for its kind.
  void offer(const Event& event);

 private:
  void run_pending();
  void run_one(const Event& event);

  const EventsConfig config_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Event> pending_;
  size_t dropped_ = 0;  // since the last drop was said
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace gpupool
