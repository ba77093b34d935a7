#include "daemon/event_stream.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace gpupool {
namespace {

constexpr uint64_t kTrimEvery = 4096;
// Half the message limit: the rest is the envelope and the encoding's escapes.
constexpr size_t kPageBytes = protocol::kMaxMessageBytes / 2;

}  // namespace

EventStream::EventStream(Sessions& sessions, EventLog log, const EventsConfig& config, PrivateData private_data)
    : sessions_(sessions), log_(std::move(log)), config_(config), private_data_(private_data), hook_(config) {}

void EventStream::add(Event event) {
  keep_within_limits(event);
  auto stored = log_.append(event);
  if (stored) {
    event = std::move(*stored);
  } else {
    fmt::print(stderr, "gpupoold: cannot store an event ({}): {}\n", to_string(event.kind), stored.error().message);
  }
  hook_.offer(event);
  std::erase_if(waiting_, [&](const Waiting& reader) {
    SessionPtr session = reader.session.lock();
    if (!session || session->closing) return true;
    // An event the log refused (numbered 0) still reaches those waiting now.
    if ((event.seq != 0 && event.seq <= reader.request.after) || !matches(reader.request.filter, event)) return false;
    if (hidden_from(*session, event)) return false;
    send(session, {shown_to(*session, event)}, false, std::max(event.seq, reader.request.after));
    return true;
  });
  if (++added_ % kTrimEvery == 0) trim(event.time);
}

void EventStream::answer(const SessionPtr& session, const protocol::EventsRequest& request) {
  EventQuery query{request.after, request.since, request.filter, request.limit, request.latest};
  auto page = log_.read(query);
  if (!page) return sessions_.send(session, protocol::ErrorResponse{page.error().message});
  // Where this page ends, whatever of it this reader may see.
  const uint64_t page_end = page->events.empty() ? request.after : page->events.back().seq;
  std::erase_if(page->events, [&](const Event& event) { return hidden_from(*session, event); });
  if (page->events.empty() && !page->more && request.wait) {
    // From the newest event on: what the log has passed over does not match. One waiting request
    // per connection: a new one replaces the last.
    forget(session);
    protocol::EventsRequest rest = request;
    rest.after = std::max(request.after, log_.last_seq());
    waiting_.push_back({session, std::move(rest)});
    return;
  }
  // A page fits one message: events with long reasons end it sooner (the oldest of the latest).
  std::vector<Event> shown;
  size_t bytes = 0;
  bool more = page->more;
  for (Event& event : page->events) {
    shown.push_back(shown_to(*session, std::move(event)));
    bytes += protocol::event_to_json(shown.back()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  }
  bool cut = false;
  while (bytes > kPageBytes && shown.size() > 1) {
    auto gone = request.latest ? shown.begin() : shown.end() - 1;
    bytes -= protocol::event_to_json(*gone).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
    shown.erase(gone);
    cut = true;
  }
  more = more || cut;
  uint64_t last = !more || request.latest ? log_.last_seq() : cut ? shown.back().seq : page_end;
  send(session, std::move(shown), more, last);
}

void EventStream::trim(double now) {
  auto trimmed = log_.trim(now - config_.keep_s, config_.keep_max);
  if (!trimmed) fmt::print(stderr, "gpupoold: cannot trim old events: {}\n", trimmed.error().message);
}

bool EventStream::told_since(JobId job, EventKind kind, double since) const {
  auto page = log_.read(EventQuery{.since = since, .filter = {.job = job, .kinds = {kind}}, .limit = 1, .latest = true});
  return page && !page->events.empty() && page->events.front().job == job;
}

void EventStream::forget(const SessionPtr& session) {
  std::erase_if(waiting_, [&](const Waiting& reader) {
    SessionPtr waiting = reader.session.lock();
    return !waiting || waiting == session;
  });
}

bool EventStream::hidden_from(const Session& session, const Event& event) const {
  // Under private_data = ["usage"], another user's idle flag and slice use are theirs alone.
  bool about_usage = event.kind == EventKind::JobIdle || event.kind == EventKind::SliceOverrun;
  return about_usage && private_data_.usage && !session.admin && event.user != session.owner.user;
}

Event EventStream::shown_to(const Session& session, Event event) const {
  if (private_data_.jobs && event.job != 0 && !session.admin && event.user != session.owner.user) {
    withhold_details(event);
  }
  return event;
}

void EventStream::send(const SessionPtr& session, std::vector<Event> events, bool more, uint64_t last) {
  sessions_.send(session, protocol::EventsResponse{std::move(events), more, last});
}

}  // namespace gpupool
