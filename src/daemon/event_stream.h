// The daemon's event stream (docs/events.md): each event the daemon's parts report is stored in
// the event log, given to the readers waiting for one like it (`gpupool events -f`) and offered
// to the on_event hook. Readers see another user's job events as `private_data` allows.
#pragma once

#include <memory>
#include <vector>

#include "daemon/config.h"
#include "daemon/event_hook.h"
#include "daemon/session.h"
#include "jobs/event_log.h"
#include "jobs/private_data.h"
#include "protocol/messages.h"

namespace gpupool {

class EventStream {
 public:
  EventStream(Sessions& sessions, EventLog log, const EventsConfig& config, PrivateData private_data);

  // Stores the event (its users' text cut to the limits; a store that refuses it is said, and the
  // event still reaches the readers waiting now and the hook), then hands it on.
  void add(Event event);
  // Answers now with what matches; a reader who asked to wait, and for whom nothing matches yet,
  // is answered when something does.
  void answer(const SessionPtr& session, const protocol::EventsRequest& request);
  // Whether the log has an event of this kind for the job at or after `since` (a restarted
  // daemon's told-once flags, from the log of the one before).
  bool told_since(JobId job, EventKind kind, double since) const;
  // The connection has gone: its waiting request, if any, with it.
  void forget(const SessionPtr& session);
  // Trims what is past the configured age and count (at start, then now and then).
  void trim(double now);

 private:
  // Events this reader may not see at all: another user's usage under private_data = ["usage"].
  bool hidden_from(const Session& session, const Event& event) const;
  // The event as this reader may see it.
  Event shown_to(const Session& session, Event event) const;
  void send(const SessionPtr& session, std::vector<Event> events, bool more, uint64_t last);

  Sessions& sessions_;
  EventLog log_;
  const EventsConfig config_;
  const PrivateData private_data_;
  struct Waiting {
    std::weak_ptr<Session> session;
    protocol::EventsRequest request;
  };
  std::vector<Waiting> waiting_;
  uint64_t added_ = 0;  // since start: trims come with every few thousand
  EventHook hook_;
};

}  // namespace gpupool
