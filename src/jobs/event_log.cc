#include "jobs/event_log.h"

#include <sqlite3.h>

#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jobs/sqlite_database.h"

namespace gpupool {
namespace {

using sqlite::column_text;
using sqlite::database_error;
using sqlite::exec;
using sqlite::prepare;
using sqlite::Statement;

// AUTOINCREMENT: a trimmed event's number is never given again, so a reader's `after` stays true.
constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS events ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,"
    " job INTEGER NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL, gpus TEXT NOT NULL,"
    " detail TEXT NOT NULL, jobs TEXT NOT NULL, users TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_by_time ON events (time);";

constexpr const char* kColumns = "seq, time, kind, job, user, name, gpus, detail, jobs, users";

// A list column: a JSON array, as the jobs table keeps its lists.
template <typename T>
std::vector<T> list_column(sqlite3_stmt* s, int column) {
  auto parsed = nlohmann::json::parse(column_text(s, column), nullptr, false);
  std::vector<T> values;
  if (!parsed.is_array()) return values;
  for (const auto& item : parsed) {
    if (item.is_number_unsigned() || item.is_string()) values.push_back(item.get<T>());
  }
  return values;
}

Result<Event> read_row(sqlite3_stmt* s) {
  Event event;
  event.seq = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  event.time = sqlite3_column_double(s, 1);
  TRY_ASSIGN(event.kind, parse_event_kind(column_text(s, 2)));
  event.job = static_cast<JobId>(sqlite3_column_int64(s, 3));
  event.user = column_text(s, 4);
  event.name = column_text(s, 5);
  event.gpus = list_column<unsigned>(s, 6);
  event.detail = column_text(s, 7);
  event.jobs = list_column<JobId>(s, 8);
  event.users = list_column<std::string>(s, 9);
  return event;
}

}  // namespace

Result<EventLog> EventLog::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  EventLog log(db);  // closes it on every way out
  if (rc != SQLITE_OK) return fail("cannot open {}: {}", path, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_busy_timeout(db, sqlite::kBusyTimeoutMs);
  // The last events before a power cut may go; a sync per event is not worth it.
  TRY(exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous mode"));
  TRY(exec(db, kSchema, "creating the events table"));
  // The largest number ever given, trimmed or not (AUTOINCREMENT's own record of it).
  TRY_ASSIGN(Statement last, prepare(db, "SELECT seq FROM sqlite_sequence WHERE name = 'events'"));
  if (sqlite3_step(last.get()) == SQLITE_ROW) log.last_seq_ = static_cast<uint64_t>(sqlite3_column_int64(last.get(), 0));
  return log;
}

EventLog::EventLog(EventLog&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), last_seq_(other.last_seq_) {}

EventLog& EventLog::operator=(EventLog&& other) noexcept {
  std::swap(db_, other.db_);
  std::swap(last_seq_, other.last_seq_);
  return *this;
}

EventLog::~EventLog() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Result<Event> EventLog::append(Event event) {
  TRY_ASSIGN(Statement insert,
             prepare(db_, fmt::format("INSERT INTO events ({}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)", kColumns)));
  sqlite3_stmt* s = insert.get();
  const std::string gpus = nlohmann::json(event.gpus).dump();
  const std::string jobs = nlohmann::json(event.jobs).dump();
  const std::string users = nlohmann::json(event.users).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  sqlite3_bind_double(s, 1, event.time);
  sqlite3_bind_text(s, 2, to_string(event.kind), -1, SQLITE_STATIC);
  sqlite3_bind_int64(s, 3, static_cast<sqlite3_int64>(event.job));
  sqlite3_bind_text(s, 4, event.user.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 5, event.name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 6, gpus.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 7, event.detail.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 8, jobs.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 9, users.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(s) != SQLITE_DONE) return database_error(db_, fmt::format("storing a {} event", to_string(event.kind)));
  event.seq = static_cast<uint64_t>(sqlite3_last_insert_rowid(db_));
  last_seq_ = event.seq;
  return event;
}

Result<EventPage> EventLog::read(const EventQuery& query) const {
  // The filter reads the lists, so it is applied here, row by row; a page costs the rows it
  // passes over, which the time index and `after` keep to those asked about.
  TRY_ASSIGN(Statement select,
             prepare(db_, fmt::format("SELECT {} FROM events WHERE seq > ? AND time >= ? ORDER BY seq {}", kColumns,
                                      query.latest ? "DESC" : "ASC")));
  sqlite3_bind_int64(select.get(), 1, static_cast<sqlite3_int64>(std::min<uint64_t>(
                                          query.after, std::numeric_limits<sqlite3_int64>::max())));
  sqlite3_bind_double(select.get(), 2, query.since.value_or(-std::numeric_limits<double>::infinity()));
  EventPage page;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    TRY_ASSIGN(Event event, read_row(select.get()));
    if (!matches(query.filter, event)) continue;
    if (page.events.size() == query.limit) {
      page.more = true;
      break;
    }
    page.events.push_back(std::move(event));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return database_error(db_, "reading events");
  if (query.latest) std::ranges::reverse(page.events);
  return page;
}

Result<size_t> EventLog::trim(double older_than, uint64_t keep_at_most) {
  TRY_ASSIGN(Statement remove, prepare(db_, "DELETE FROM events WHERE time < ? OR seq <= ?"));
  sqlite3_bind_double(remove.get(), 1, older_than);
  const uint64_t below = last_seq_ > keep_at_most ? last_seq_ - keep_at_most : 0;
  sqlite3_bind_int64(remove.get(), 2, static_cast<sqlite3_int64>(below));
  if (sqlite3_step(remove.get()) != SQLITE_DONE) return database_error(db_, "trimming old events");
  return static_cast<size_t>(sqlite3_changes(db_));
}

}  // namespace gpupool
