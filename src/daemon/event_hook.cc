#include "daemon/event_hook.h"

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/quote.h"
#include "os/program.h"
#include "protocol/messages.h"

namespace gpupool {

std::vector<std::string> hook_environment(const Event& event) {
  std::vector<std::string> environment = {
      fmt::format("GPUPOOL_EVENT={}", to_string(event.kind)),
      fmt::format("GPUPOOL_EVENT_SEQ={}", event.seq),
      fmt::format("GPUPOOL_EVENT_TIME={:.3f}", event.time),
      fmt::format("GPUPOOL_EVENT_MESSAGE={}", describe_event(event)),
  };
  auto add = [&](const char* name, const std::string& value) {
    if (!value.empty()) environment.push_back(fmt::format("{}={}", name, value));
  };
  add("GPUPOOL_EVENT_JOB", event.job != 0 ? std::to_string(event.job) : "");
  add("GPUPOOL_EVENT_USER", event.user);
  add("GPUPOOL_EVENT_NAME", event.name);
  add("GPUPOOL_EVENT_GPUS", fmt::format("{}", fmt::join(event.gpus, ",")));
  add("GPUPOOL_EVENT_DETAIL", event.detail);
  add("GPUPOOL_EVENT_JOBS", fmt::format("{}", fmt::join(event.jobs, " ")));
  add("GPUPOOL_EVENT_USERS", fmt::format("{}", fmt::join(event.users, " ")));
  return environment;
}

EventHook::EventHook(const EventsConfig& config) : config_(config) {
  if (!config_.on_event.empty()) thread_ = std::thread([this] { run_pending(); });
}

EventHook::~EventHook() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void EventHook::offer(const Event& event) {
  if (config_.on_event.empty()) return;
  if (!config_.on_event_kinds.empty() && std::ranges::find(config_.on_event_kinds, event.kind) == config_.on_event_kinds.end()) {
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (pending_.size() >= kMaxPendingHookEvents) {
      ++dropped_;
      return;
    }
    pending_.push_back(event);
  }
  wake_.notify_one();
}

void EventHook::run_pending() {
  std::unique_lock lock(mutex_);
  // Once the daemon stops, what is queued gets one hook's timeout in all: a stop is not held up
  // by a backlog.
  std::optional<std::chrono::steady_clock::time_point> give_up_at;
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, with nothing left to run
    if (stopping_ && !give_up_at) {
      give_up_at = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(config_.on_event_timeout_s * 1000));
    }
    if (give_up_at && std::chrono::steady_clock::now() > *give_up_at) {
      fmt::print(stderr, "gpupoold: on_event: {} events were not given to the hook: gpupoold stopped first\n",
                 pending_.size());
      return;
    }
    Event event = std::move(pending_.front());
    pending_.pop_front();
    size_t dropped = std::exchange(dropped_, 0);
    lock.unlock();
    if (dropped > 0) {
      fmt::print(stderr, "gpupoold: on_event: {} events were not given to the hook: more than {} were waiting for it\n",
                 dropped, kMaxPendingHookEvents);
    }
    run_one(event);
    lock.lock();
  }
}

void EventHook::run_one(const Event& event) {
  ProgramOptions options;
  options.input = protocol::event_to_json(event).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  options.environment = hook_environment(event);
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(config_.on_event_timeout_s * 1000));
  auto outcome = run_program(config_.on_event, options);
  if (!outcome) {
    fmt::print(stderr, "gpupoold: on_event for event {} ({}): {}\n", event.seq, to_string(event.kind),
               outcome.error().message);
  } else if (outcome->exit_code != 0) {
    std::string said = printable(outcome->err.substr(0, outcome->err.find('\n')), 200);
    fmt::print(stderr, "gpupoold: on_event for event {} ({}) exited {}{}{}\n", event.seq, to_string(event.kind),
               outcome->exit_code, said.empty() ? "" : ": ", said);
  }
}

}  // namespace gpupool
