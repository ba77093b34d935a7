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
// event_subjects: the jobs and users each event concerns (a job's event its job and owner, a
// GPU's event the jobs running there and theirs), so that a filtered read is an index lookup.
constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS events ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,"
    " job INTEGER NOT NULL, user TEXT NOT NULL, name TEXT NOT NULL, gpus TEXT NOT NULL,"
    " detail TEXT NOT NULL, jobs TEXT NOT NULL, users TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_by_time ON events (time);"
    "CREATE INDEX IF NOT EXISTS events_by_kind ON events (kind, seq);"
    "CREATE TABLE IF NOT EXISTS event_subjects (seq INTEGER NOT NULL, job INTEGER NOT NULL, user TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS event_subjects_by_job ON event_subjects (job, seq);"
    "CREATE INDEX IF NOT EXISTS event_subjects_by_user ON event_subjects (user, seq);"
    "CREATE INDEX IF NOT EXISTS event_subjects_by_seq ON event_subjects (seq);";  // the trim's

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
  auto opened = sqlite::open_side_table(path, kSchema, "the events tables", db);
  EventLog log(db);  // closes it on every way out
  TRY(opened);
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
  TRY(exec(db_, "BEGIN IMMEDIATE", "starting to store an event"));
  auto stored = insert(event);
  if (!stored) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return stored.error();
  }
  if (auto committed = exec(db_, "COMMIT", "committing an event"); !committed) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return committed.error();
  }
  event.seq = *stored;
  last_seq_ = event.seq;
  return event;
}

Result<uint64_t> EventLog::insert(const Event& event) {
  TRY_ASSIGN(Statement row,
             prepare(db_, fmt::format("INSERT INTO events ({}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?)", kColumns)));
  sqlite3_stmt* s = row.get();
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
  const auto seq = static_cast<uint64_t>(sqlite3_last_insert_rowid(db_));
  std::vector<std::pair<JobId, std::string>> subjects;
  if (event.job != 0) subjects.emplace_back(event.job, event.user);
  for (size_t i = 0; i < event.jobs.size(); ++i) subjects.emplace_back(event.jobs[i], i < event.users.size() ? event.users[i] : "");
  TRY_ASSIGN(Statement subject, prepare(db_, "INSERT INTO event_subjects (seq, job, user) VALUES (?, ?, ?)"));
  for (const auto& [job, user] : subjects) {
    sqlite3_bind_int64(subject.get(), 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(subject.get(), 2, static_cast<sqlite3_int64>(job));
    sqlite3_bind_text(subject.get(), 3, user.c_str(), -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(subject.get());
    sqlite3_reset(subject.get());
    if (rc != SQLITE_DONE) return database_error(db_, "storing whom an event concerns");
  }
  return seq;
}

Result<EventPage> EventLog::read(const EventQuery& query) const {
  // Every filter is an index lookup: a page costs its rows, however long the history.
  std::string where = "seq > ? AND time >= ?";
  if (!query.filter.kinds.empty()) {
    std::vector<std::string> marks(query.filter.kinds.size(), "?");
    where += fmt::format(" AND kind IN ({})", fmt::join(marks, ", "));
  }
  if (query.filter.job) where += " AND seq IN (SELECT seq FROM event_subjects WHERE job = ?)";
  if (query.filter.user) where += " AND seq IN (SELECT seq FROM event_subjects WHERE user = ?)";
  TRY_ASSIGN(Statement select, prepare(db_, fmt::format("SELECT {} FROM events WHERE {} ORDER BY seq {} LIMIT ?",
                                                        kColumns, where, query.latest ? "DESC" : "ASC")));
  sqlite3_stmt* s = select.get();
  int column = 1;
  sqlite3_bind_int64(s, column++, static_cast<sqlite3_int64>(std::min<uint64_t>(
                                      query.after, std::numeric_limits<sqlite3_int64>::max())));
  sqlite3_bind_double(s, column++, query.since.value_or(-std::numeric_limits<double>::infinity()));
  for (EventKind kind : query.filter.kinds) sqlite3_bind_text(s, column++, to_string(kind), -1, SQLITE_STATIC);
  if (query.filter.job) sqlite3_bind_int64(s, column++, static_cast<sqlite3_int64>(*query.filter.job));
  if (query.filter.user) sqlite3_bind_text(s, column++, query.filter.user->c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, column++, static_cast<sqlite3_int64>(query.limit) + 1);  // one more: whether there are more
  EventPage page;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (page.events.size() == query.limit) {
      page.more = true;
      break;
    }
    TRY_ASSIGN(Event event, read_row(s));
    page.events.push_back(std::move(event));
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return database_error(db_, "reading events");
  if (query.latest) std::ranges::reverse(page.events);
  return page;
}

Result<size_t> EventLog::trim(double older_than, uint64_t keep_at_most) {
  // By number: everything up to the newest event older than `older_than`, and beyond the count.
  // (An event stamped earlier than one before it, the clock set back, goes with the older ones.)
  TRY_ASSIGN(Statement newest_old, prepare(db_, "SELECT MAX(seq) FROM events WHERE time < ?"));
  sqlite3_bind_double(newest_old.get(), 1, older_than);
  uint64_t cutoff = last_seq_ > keep_at_most ? last_seq_ - keep_at_most : 0;
  if (sqlite3_step(newest_old.get()) == SQLITE_ROW && sqlite3_column_type(newest_old.get(), 0) != SQLITE_NULL) {
    cutoff = std::max(cutoff, static_cast<uint64_t>(sqlite3_column_int64(newest_old.get(), 0)));
  }
  if (cutoff == 0) return size_t{0};
  TRY(exec(db_, "BEGIN IMMEDIATE", "starting to trim old events"));
  size_t removed = 0;
  for (const char* table : {"events", "event_subjects"}) {
    auto remove = prepare(db_, fmt::format("DELETE FROM {} WHERE seq <= ?", table));
    if (remove) sqlite3_bind_int64(remove->get(), 1, static_cast<sqlite3_int64>(cutoff));
    if (!remove || sqlite3_step(remove->get()) != SQLITE_DONE) {
      Error error = database_error(db_, "trimming old events");
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return error;
    }
    if (std::string_view(table) == "events") removed = static_cast<size_t>(sqlite3_changes(db_));
  }
  if (auto committed = exec(db_, "COMMIT", "committing the trim of old events"); !committed) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return committed.error();
  }
  return removed;
}

}  // namespace gpupool
