// Where the event stream outlives the daemon: a table `events` in the jobs database
// (gpupool.db), one row per event, in the order they happened. A table of its own, created when
// missing, as the accounting's: the jobs schema and its version stay as they are, and an older
// gpupoold ignores it. Events older than the configured age, and all but the newest
// configured number, are trimmed. Used on the daemon's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/event.h"

struct sqlite3;

namespace gpupool {

struct EventQuery {
  uint64_t after = 0;           // only events with a larger sequence number
  std::optional<double> since = std::nullopt;  // only events at or after this Unix time
  EventFilter filter = {};
  size_t limit = 100;           // at most this many
  bool latest = false;          // the newest `limit` that match (else the oldest), in order
};

struct EventPage {
  std::vector<Event> events;  // in sequence order
  bool more = false;          // more match beyond the page
};

class EventLog {
 public:
  static Result<EventLog> open(const std::string& path);
  EventLog(EventLog&& other) noexcept;
  EventLog& operator=(EventLog&& other) noexcept;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;
  ~EventLog();

  // Stores the event with the next sequence number (never one given before, trimmed or not),
  // and returns it so numbered.
  Result<Event> append(Event event);
  Result<EventPage> read(const EventQuery& query) const;
  // The newest event's sequence number (0: none yet).
  uint64_t last_seq() const { return last_seq_; }
  // Removes events older than `older_than` (Unix seconds) and all but the newest `keep_at_most`;
  // returns how many went.
  Result<size_t> trim(double older_than, uint64_t keep_at_most);

 private:
  explicit EventLog(sqlite3* db) : db_(db) {}
  // The event's row and whom it concerns, within the caller's transaction; its number.
  Result<uint64_t> insert(const Event& event);
  sqlite3* db_ = nullptr;
  uint64_t last_seq_ = 0;
};

}  // namespace gpupool
