#include "jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "jobs/sqlite_database.h"

namespace gpupool {
namespace {

using sqlite::database_error;
using sqlite::database_name;
using sqlite::exec;
using sqlite::prepare;
using sqlite::Statement;

constexpr int kSchemaVersion = 9;

struct Column {
  const char* name;
  const char* type;
};

// The columns of `jobs` after `id`, in the order bind_job binds and decode_job reads them.
// Lists are JSON arrays, the state and kind their names. Changing this changes the schema.
constexpr std::array<Column, 42> kJobColumns = {{
    {"name", "TEXT NOT NULL"},
    {"argv", "TEXT NOT NULL"},
    {"environment", "TEXT NOT NULL"},
    {"cwd", "TEXT NOT NULL"},
    {"umask", "INTEGER NOT NULL"},
    {"gpu_count", "INTEGER NOT NULL"},
    {"slice_mib", "INTEGER"},
    {"priority", "INTEGER NOT NULL"},
    {"after_jobs", "TEXT NOT NULL"},  // AFTER and GROUPS are SQL keywords
    {"retries", "INTEGER NOT NULL"},
    {"time_limit_s", "REAL"},
    {"kind", "TEXT NOT NULL"},
    {"uid", "INTEGER NOT NULL"},
    {"gid", "INTEGER NOT NULL"},
    {"user_groups", "TEXT NOT NULL"},
    {"user", "TEXT NOT NULL"},
    {"state", "TEXT NOT NULL"},
    {"reason", "TEXT NOT NULL"},
    {"attempts", "INTEGER NOT NULL"},
    {"submit_time", "REAL NOT NULL"},
    {"start_time", "REAL"},
    {"end_time", "REAL"},
    {"gpus", "TEXT NOT NULL"},
    {"gpu_uuids", "TEXT NOT NULL"},
    {"exit_code", "INTEGER"},
    {"signal", "INTEGER"},
    {"pid", "INTEGER"},
    {"pid_start_ticks", "INTEGER"},
    {"stdout_path", "TEXT NOT NULL"},
    {"stderr_path", "TEXT NOT NULL"},
    // Schema 2: a task of an array job; NULL in the other jobs' rows.
    {"array_id", "INTEGER"},
    {"array_index", "INTEGER"},
    {"array_limit", "INTEGER"},
    // Schema 3: the client's token of the submission, so that one sent again is stored once.
    {"submit_token", "TEXT"},
    // Schema 4: --sm, a slice's share of its GPU's multiprocessors; NULL: none asked for.
    {"sm_percent", "INTEGER"},
    // Schema 5: --mig, a MIG device's profile ('' for any) and least memory; NULL: no MIG device.
    {"mig_profile", "TEXT"},
    {"mig_min_mib", "INTEGER"},
    // Schema 6: a suspended job's checkpoint, a JSON object (jobs/job.h, Suspension); NULL: none.
    {"suspension", "TEXT"},
    // Schema 7: 1 when the latest attempt started as an MPS client, 0 when not; NULL: not known.
    {"started_under_mps", "INTEGER"},
    // Schema 7: how long the latest attempt was suspended, its suspension under way not counted.
    {"suspended_s", "REAL NOT NULL DEFAULT 0"},
    // Schema 8: 1 when the latest attempt started on loan (jobs/job.h).
    {"started_on_loan", "INTEGER NOT NULL DEFAULT 0"},
    // Schema 9: when the job last entered the queue (jobs/job.h); NULL: at its submission.
    {"queued_at", "REAL"},
}};

// What schema 1 lacks, added in place: its rows are jobs of no array.
constexpr const char* kSchema1To2 =
    "ALTER TABLE jobs ADD COLUMN array_id INTEGER;"
    "ALTER TABLE jobs ADD COLUMN array_index INTEGER;"
    "ALTER TABLE jobs ADD COLUMN array_limit INTEGER;"
    "UPDATE meta SET value = '2' WHERE name = 'schema_version';";
// What schema 2 lacks: its jobs came without tokens.
constexpr const char* kSchema2To3 =
    "ALTER TABLE jobs ADD COLUMN submit_token TEXT;"
    "CREATE INDEX jobs_by_token ON jobs (uid, submit_token) WHERE submit_token IS NOT NULL;"
    "UPDATE meta SET value = '3' WHERE name = 'schema_version';";

constexpr const char* kSchema3To4 =
    "ALTER TABLE jobs ADD COLUMN sm_percent INTEGER;"
    "UPDATE meta SET value = '4' WHERE name = 'schema_version';";

constexpr const char* kSchema4To5 =
    "ALTER TABLE jobs ADD COLUMN mig_profile TEXT;"
    "ALTER TABLE jobs ADD COLUMN mig_min_mib INTEGER;"
    "UPDATE meta SET value = '5' WHERE name = 'schema_version';";

constexpr const char* kSchema5To6 =
    "ALTER TABLE jobs ADD COLUMN suspension TEXT;"
    "UPDATE meta SET value = '6' WHERE name = 'schema_version';";

constexpr const char* kSchema6To7 =
    "ALTER TABLE jobs ADD COLUMN started_under_mps INTEGER;"
    "ALTER TABLE jobs ADD COLUMN suspended_s REAL NOT NULL DEFAULT 0;"
    "UPDATE meta SET value = '7' WHERE name = 'schema_version';";

constexpr const char* kSchema7To8 =
    "ALTER TABLE jobs ADD COLUMN started_on_loan INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meta SET value = '8' WHERE name = 'schema_version';";

constexpr const char* kSchema8To9 =
    "ALTER TABLE jobs ADD COLUMN queued_at REAL;"
    "UPDATE meta SET value = '9' WHERE name = 'schema_version';";

constexpr std::array<JobState, 4> kUnfinishedStates = {JobState::Queued, JobState::Held, JobState::Running,
                                                       JobState::Suspended};

std::string schema_sql() {
  std::string columns;
  for (const Column& column : kJobColumns) columns += fmt::format(", {} {}", column.name, column.type);
  // AUTOINCREMENT: an id is never handed out twice, even when the newest row is gone.
  return fmt::format(
      "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE settings (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT{});"
      "CREATE INDEX jobs_by_state ON jobs (state);"
      "CREATE INDEX jobs_by_user ON jobs (user);"
      "CREATE INDEX jobs_by_token ON jobs (uid, submit_token) WHERE submit_token IS NOT NULL;"
      "INSERT INTO meta (name, value) VALUES ('schema_version', '{}');",
      columns, kSchemaVersion);
}

std::string column_names() {
  std::string names;
  for (const Column& column : kJobColumns) {
    if (!names.empty()) names += ", ";
    names += column.name;
  }
  return names;
}

// What a SELECT reads for kJobColumns: all of them, or an empty list in place of the
// environment, which SQLite then neither copies nor hands over.
std::string selected_columns(bool with_environment) {
  std::string names;
  for (const Column& column : kJobColumns) {
    if (!names.empty()) names += ", ";
    bool left_out = !with_environment && std::string_view(column.name) == "environment";
    names += left_out ? "'[]' AS environment" : column.name;
  }
  return names;
}

std::string placeholders() {
  std::string marks = "?";
  for (size_t i = 1; i < kJobColumns.size(); ++i) marks += ", ?";
  return marks;
}

enum class StateMatch { Any, One, Unfinished };
constexpr std::array<StateMatch, 3> kStateMatches = {StateMatch::Any, StateMatch::One,
                                                     StateMatch::Unfinished};

// The list statements, one per shape of filter, so that SQLite can pick the right index for
// each. Parameters in order: the state(s), the user, the id to start after, the limit (-1:
// none). The indexes keep equal keys in id order, so a page is a range of one index (or of the
// table): it reads its own rows, not the history before it.
std::string list_sql(bool by_user, StateMatch states, bool with_environment) {
  std::vector<std::string> conditions;
  if (states == StateMatch::One) conditions.emplace_back("state = ?");
  if (states == StateMatch::Unfinished) conditions.emplace_back("state IN (?, ?, ?, ?)");
  // A user's history may be long, their jobs in one state usually are not: with a state given,
  // the unary + keeps SQLite on the state index rather than the user index.
  if (by_user) conditions.emplace_back(states == StateMatch::Any ? "user = ?" : "+user = ?");
  conditions.emplace_back("id > ?");
  std::string where;
  for (const std::string& condition : conditions) where += (where.empty() ? " WHERE " : " AND ") + condition;
  return fmt::format("SELECT id, {} FROM jobs{} ORDER BY id LIMIT ?", selected_columns(with_environment), where);
}

size_t list_index(bool by_user, StateMatch states, bool with_environment) {
  return ((with_environment ? 2 : 0) + (by_user ? 1 : 0)) * kStateMatches.size() + static_cast<size_t>(states);
}

// Resets a statement when a call is done with it, so that no finished read keeps a
// transaction open and the next call starts with no parameters bound.
class StatementUse {
 public:
  explicit StatementUse(const Statement& statement) : statement_(statement.get()) {}
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;
  ~StatementUse() {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }
  sqlite3_stmt* get() const { return statement_; }

 private:
  sqlite3_stmt* statement_;
};

// The first column of the first row of a one-off query, if there is a row.
Result<std::optional<std::string>> query_text(sqlite3* db, const std::string& sql, std::string_view doing) {
  TRY_ASSIGN(Statement statement, prepare(db, sql));
  int rc = sqlite3_step(statement.get());
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return database_error(db, doing);
  return std::optional<std::string>(sqlite::column_text(statement.get(), 0));
}

Result<void> step_to_end(sqlite3* db, sqlite3_stmt* statement, std::string_view doing) {
  if (sqlite3_step(statement) != SQLITE_DONE) return database_error(db, doing);
  return {};
}

template <typename T>
Result<std::string> encode_list(const std::vector<T>& items, std::string_view what) {
  try {
    return nlohmann::json(items).dump();
  } catch (const nlohmann::json::exception&) {  // strings that are not UTF-8
    return fail("the job's {} is not valid UTF-8", what);
  }
}

// Binds parameters left to right, remembering the first failure.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* statement) : statement_(statement) {}

  void add(std::string_view text) {
    check(sqlite3_bind_text64(statement_, next_++, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  void add(double value) { check(sqlite3_bind_double(statement_, next_++, value)); }
  // 64-bit unsigned values are stored as their bit pattern and read back the same way.
  void add(std::integral auto value) {
    check(sqlite3_bind_int64(statement_, next_++, static_cast<sqlite3_int64>(value)));
  }
  template <typename T>
  void add(const std::optional<T>& value) {
    if (value) add(*value);
    else check(sqlite3_bind_null(statement_, next_++));
  }
  Result<void> status(sqlite3* db) const {
    if (!ok_) return database_error(db, "binding parameters");
    return {};
  }

 private:
  void check(int rc) { ok_ = ok_ && rc == SQLITE_OK; }
  sqlite3_stmt* statement_;
  int next_ = 1;
  bool ok_ = true;
};

std::string suspension_json(const Suspension& suspension) {
  return nlohmann::json{{"pids", suspension.pids},
                        {"by", suspension.by},
                        {"since", suspension.since},
                        {"host_mib", suspension.host_mib},
                        {"resume", suspension.resume},
                        {"restoring", suspension.restoring},
                        {"gave_way", suspension.gave_way}}
      .dump();
}

Result<Suspension> parse_suspension(const std::string& text) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("pids") || !json["pids"].is_array() || !json.contains("by") ||
      !json["by"].is_string() || !json.contains("since") || !json["since"].is_number() ||
      !json.contains("host_mib") || !json["host_mib"].is_number_unsigned() || !json.contains("resume") ||
      !json["resume"].is_boolean()) {
    return fail("column 'suspension' is not a suspension: {}", text);
  }
  Suspension suspension;
  for (const auto& pid : json["pids"]) {
    if (!pid.is_number_unsigned() || !std::in_range<pid_t>(pid.get<uint64_t>()) || pid.get<uint64_t>() == 0) {
      return fail("column 'suspension' holds a pid out of range: {}", text);
    }
    suspension.pids.push_back(pid.get<pid_t>());
  }
  suspension.by = json["by"].get<std::string>();
  suspension.since = json["since"].get<double>();
  suspension.host_mib = json["host_mib"].get<uint64_t>();
  suspension.resume = json["resume"].get<bool>();
  // Absent from the rows of the versions that had no such things.
  for (auto [name, field] : {std::pair{"restoring", &Suspension::restoring}, std::pair{"gave_way", &Suspension::gave_way}}) {
    if (!json.contains(name)) continue;
    if (!json[name].is_boolean()) return fail("column 'suspension' is not a suspension: {}", text);
    suspension.*field = json[name].get<bool>();
  }
  return suspension;
}

// Binds every column of kJobColumns, in order.
Result<void> bind_job(Binder& row, const Job& job) {
  TRY_ASSIGN(std::string argv, encode_list(job.spec.argv, "command"));
  TRY_ASSIGN(std::string environment, encode_list(job.spec.environment, "environment"));
  TRY_ASSIGN(std::string gpu_uuids, encode_list(job.gpu_uuids, "GPU UUID list"));
  row.add(job.spec.name);
  row.add(argv);
  row.add(environment);
  row.add(job.spec.cwd);
  row.add(job.spec.umask);
  row.add(job.spec.gpus.count);
  row.add(job.spec.gpus.slice_mib);
  row.add(job.spec.priority);
  row.add(nlohmann::json(job.spec.after).dump());
  row.add(job.spec.retries);
  row.add(job.spec.time_limit_s);
  row.add(to_string(job.spec.kind));
  row.add(job.owner.uid);
  row.add(job.owner.gid);
  row.add(nlohmann::json(job.owner.groups).dump());
  row.add(job.owner.user);
  row.add(to_string(job.state));
  row.add(job.reason);
  row.add(job.attempts);
  row.add(job.submit_time);
  row.add(job.start_time);
  row.add(job.end_time);
  row.add(nlohmann::json(job.gpus).dump());
  row.add(gpu_uuids);
  row.add(job.exit_code);
  row.add(job.signal);
  row.add(job.pid);
  row.add(job.pid_start_ticks);
  row.add(job.stdout_path);
  row.add(job.stderr_path);
  row.add(job.array ? std::optional(job.array->array_id) : std::nullopt);
  row.add(job.array ? std::optional(job.array->index) : std::nullopt);
  row.add(job.array ? std::optional(job.array->limit) : std::nullopt);
  row.add(job.submit_token);
  row.add(job.spec.gpus.sm_percent);
  const std::optional<MigRequest>& mig = job.spec.gpus.mig;
  row.add(mig ? std::optional(mig->profile) : std::nullopt);
  row.add(mig ? std::optional(mig->min_memory_mib) : std::nullopt);
  row.add(job.suspension ? std::optional(suspension_json(*job.suspension)) : std::nullopt);
  row.add(job.started_under_mps ? std::optional(*job.started_under_mps ? 1 : 0) : std::nullopt);
  row.add(job.suspended_s);
  row.add(job.started_on_loan ? 1 : 0);
  row.add(job.queued_at);
  return {};
}

// Reads a row's columns left to right; each error names the column.
class RowReader {
 public:
  RowReader(sqlite3_stmt* statement, int first) : statement_(statement), column_(first) {}

  Result<std::string> text() {
    TRY(expect(SQLITE_TEXT, "text"));
    const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(statement_, column_));
    size_t size = static_cast<size_t>(sqlite3_column_bytes(statement_, column_));
    ++column_;
    return std::string(data != nullptr ? data : "", size);
  }

  template <std::integral T>
  Result<T> integer() {
    TRY(expect(SQLITE_INTEGER, "a whole number"));
    sqlite3_int64 value = sqlite3_column_int64(statement_, column_);
    if constexpr (std::is_same_v<T, uint64_t>) {
      ++column_;
      return static_cast<uint64_t>(value);  // stored as its bit pattern
    } else {
      if (!std::in_range<T>(value)) return problem(fmt::format("{} is out of range", value));
      ++column_;
      return static_cast<T>(value);
    }
  }

  Result<double> real() {
    TRY(expect(SQLITE_FLOAT, "a number"));
    return sqlite3_column_double(statement_, column_++);
  }

  template <std::integral T>
  Result<std::optional<T>> optional_integer() {
    if (at_null()) return std::optional<T>();
    TRY_ASSIGN(T value, integer<T>());
    return std::optional<T>(value);
  }

  Result<std::optional<std::string>> optional_text() {
    if (at_null()) return std::optional<std::string>();
    TRY_ASSIGN(std::string value, text());
    return std::optional<std::string>(std::move(value));
  }

  Result<std::optional<double>> optional_real() {
    if (at_null()) return std::optional<double>();
    TRY_ASSIGN(double value, real());
    return std::optional<double>(value);
  }

  // A JSON array of strings or of whole numbers that fit T.
  template <typename T>
  Result<std::vector<T>> list() {
    int column = column_;
    TRY_ASSIGN(std::string encoded, text());
    column_ = column;  // errors below name this column
    auto parsed = nlohmann::json::parse(encoded, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_array()) return problem("is not a JSON array");
    std::vector<T> items;
    items.reserve(parsed.size());
    for (const auto& item : parsed) {
      if constexpr (std::is_same_v<T, std::string>) {
        if (!item.is_string()) return problem("holds something other than strings");
        items.push_back(item.get<std::string>());
      } else {
        if (!item.is_number_unsigned() || !std::in_range<T>(item.get<uint64_t>())) {
          return problem("holds something other than whole numbers in range");
        }
        items.push_back(static_cast<T>(item.get<uint64_t>()));
      }
    }
    ++column_;
    return items;
  }

  // A name that `parse` turns into an enum value.
  template <typename T>
  Result<T> name(Result<T> (*parse)(std::string_view)) {
    int column = column_;
    TRY_ASSIGN(std::string text_value, text());
    auto value = parse(text_value);
    if (!value.ok()) {
      column_ = column;
      return problem(value.error().message);
    }
    return value;
  }

 private:
  bool at_null() {
    if (sqlite3_column_type(statement_, column_) != SQLITE_NULL) return false;
    ++column_;
    return true;
  }
  Result<void> expect(int type, std::string_view what) {
    if (sqlite3_column_type(statement_, column_) == type) return {};
    return problem(fmt::format("is not {}", what));
  }
  Error problem(std::string_view what) const {
    return fail("column '{}' {}", sqlite3_column_name(statement_, column_), what);
  }

  sqlite3_stmt* statement_;
  int column_;
};

// Reads the columns of kJobColumns, in order, from column 1 on.
Result<Job> decode_job(sqlite3_stmt* statement) {
  RowReader row(statement, 1);
  Job job;
  TRY_ASSIGN(job.spec.name, row.text());
  TRY_ASSIGN(job.spec.argv, row.list<std::string>());
  TRY_ASSIGN(job.spec.environment, row.list<std::string>());
  TRY_ASSIGN(job.spec.cwd, row.text());
  TRY_ASSIGN(job.spec.umask, row.integer<mode_t>());
  TRY_ASSIGN(job.spec.gpus.count, row.integer<unsigned>());
  TRY_ASSIGN(job.spec.gpus.slice_mib, row.optional_integer<uint64_t>());
  TRY_ASSIGN(job.spec.priority, row.integer<int>());
  TRY_ASSIGN(job.spec.after, row.list<JobId>());
  TRY_ASSIGN(job.spec.retries, row.integer<unsigned>());
  TRY_ASSIGN(job.spec.time_limit_s, row.optional_real());
  TRY_ASSIGN(job.spec.kind, row.name(parse_job_kind));
  TRY_ASSIGN(job.owner.uid, row.integer<uid_t>());
  TRY_ASSIGN(job.owner.gid, row.integer<gid_t>());
  TRY_ASSIGN(job.owner.groups, row.list<gid_t>());
  TRY_ASSIGN(job.owner.user, row.text());
  TRY_ASSIGN(job.state, row.name(parse_job_state));
  TRY_ASSIGN(job.reason, row.text());
  TRY_ASSIGN(job.attempts, row.integer<unsigned>());
  TRY_ASSIGN(job.submit_time, row.real());
  TRY_ASSIGN(job.start_time, row.optional_real());
  TRY_ASSIGN(job.end_time, row.optional_real());
  TRY_ASSIGN(job.gpus, row.list<unsigned>());
  TRY_ASSIGN(job.gpu_uuids, row.list<std::string>());
  TRY_ASSIGN(job.exit_code, row.optional_integer<int>());
  TRY_ASSIGN(job.signal, row.optional_integer<int>());
  TRY_ASSIGN(job.pid, row.optional_integer<pid_t>());
  TRY_ASSIGN(job.pid_start_ticks, row.optional_integer<uint64_t>());
  TRY_ASSIGN(job.stdout_path, row.text());
  TRY_ASSIGN(job.stderr_path, row.text());
  TRY_ASSIGN(std::optional<JobId> array_id, row.optional_integer<JobId>());
  TRY_ASSIGN(std::optional<unsigned> array_index, row.optional_integer<unsigned>());
  TRY_ASSIGN(std::optional<unsigned> array_limit, row.optional_integer<unsigned>());
  if (array_id) job.array = ArrayTask{*array_id, array_index.value_or(0), array_limit.value_or(0)};
  TRY_ASSIGN(job.submit_token, row.optional_text());
  TRY_ASSIGN(job.spec.gpus.sm_percent, row.optional_integer<unsigned>());
  TRY_ASSIGN(std::optional<std::string> mig_profile, row.optional_text());
  TRY_ASSIGN(std::optional<uint64_t> mig_min_mib, row.optional_integer<uint64_t>());
  if (mig_profile) job.spec.gpus.mig = MigRequest{*mig_profile, mig_min_mib.value_or(0)};
  TRY_ASSIGN(std::optional<std::string> suspension, row.optional_text());
  if (suspension) {
    TRY_ASSIGN(job.suspension, parse_suspension(*suspension));
  }
  TRY_ASSIGN(std::optional<unsigned> under_mps, row.optional_integer<unsigned>());
  if (under_mps) job.started_under_mps = *under_mps != 0;
  TRY_ASSIGN(job.suspended_s, row.real());
  TRY_ASSIGN(unsigned on_loan, row.integer<unsigned>());
  job.started_on_loan = on_loan != 0;
  TRY_ASSIGN(job.queued_at, row.optional_real());
  return job;
}

// A row of `SELECT id, <kJobColumns>`.
Result<Job> read_job(sqlite3* db, sqlite3_stmt* statement) {
  auto id = static_cast<JobId>(sqlite3_column_int64(statement, 0));
  auto job = decode_job(statement);
  if (!job.ok()) {
    return fail("state database {}: job {} cannot be read: {}", database_name(db), id, job.error().message);
  }
  job->id = id;
  return job;
}

// Creates the schema in an empty database, or checks that an existing one is ours and of our
// version. Runs inside a write transaction, so two daemons started at once create it once.
Result<void> create_or_check_schema(sqlite3* db) {
  const char* find_meta = "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'";
  TRY_ASSIGN(auto meta, query_text(db, find_meta, "reading the schema"));
  if (!meta) {
    TRY_ASSIGN(auto other, query_text(db, "SELECT name FROM sqlite_master", "reading the schema"));
    if (other) {
      return fail("{} is an SQLite database but not gpupoold's state (it has no schema version)",
                  database_name(db));
    }
    return exec(db, schema_sql(), "creating the schema");
  }
  TRY_ASSIGN(auto version, query_text(db, "SELECT value FROM meta WHERE name = 'schema_version'",
                                      "reading the schema version"));
  if (version == "1") {
    TRY(exec(db, kSchema1To2, "adding array jobs to the schema"));
    version = "2";
  }
  if (version == "2") {
    TRY(exec(db, kSchema2To3, "adding submission tokens to the schema"));
    version = "3";
  }
  if (version == "3") {
    TRY(exec(db, kSchema3To4, "adding compute shares to the schema"));
    version = "4";
  }
  if (version == "4") {
    TRY(exec(db, kSchema4To5, "adding MIG devices to the schema"));
    version = "5";
  }
  if (version == "5") {
    TRY(exec(db, kSchema5To6, "adding suspended jobs to the schema"));
    version = "6";
  }
  if (version == "6") {
    TRY(exec(db, kSchema6To7, "adding MPS clients and suspended time to the schema"));
    version = "7";
  }
  if (version == "7") {
    TRY(exec(db, kSchema7To8, "adding jobs on loan to the schema"));
    version = "8";
  }
  if (version == "8") return exec(db, kSchema8To9, "adding the time jobs entered the queue to the schema");
  if (version != std::to_string(kSchemaVersion)) {
    return fail("state database {} has schema {}; this gpupoold reads {}", database_name(db),
                version.value_or("(none)"), kSchemaVersion);
  }
  return {};
}

}  // namespace

struct JobStore::Statements {
  Statement insert, update, get, setting, set_setting, first_from, by_token;
  std::array<Statement, 4 * kStateMatches.size()> list;  // at list_index(by_user, states, with_environment)
};

JobStore::JobStore(sqlite3* db) : db_(db) {}

JobStore::JobStore(JobStore&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), statements_(std::move(other.statements_)) {}

JobStore& JobStore::operator=(JobStore&& other) noexcept {
  std::swap(db_, other.db_);  // `other` closes what this held
  std::swap(statements_, other.statements_);
  return *this;
}

JobStore::~JobStore() {
  statements_.reset();  // finalized before the connection closes
  sqlite3_close_v2(db_);
}

Result<JobStore> JobStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  JobStore store(db);  // closes the handle on every path, even when opening failed
  if (rc != SQLITE_OK) {
    return fail("cannot open state database {}: {}", path,
                db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  }
  if (sqlite3_db_readonly(db, "main") == 1) return fail("state database {} is read-only", path);
  sqlite3_busy_timeout(db, sqlite::kBusyTimeoutMs);

  // The first statement reads the file's header: a file that is not a database fails here.
  auto mode = query_text(db, "PRAGMA journal_mode = WAL", "switching to write-ahead logging");
  if (!mode.ok()) return fail("cannot open state database {}: {}", path, sqlite3_errmsg(db));
  if (*mode != "wal") return fail("state database {}: cannot use write-ahead logging here", path);
  // NORMAL for updates: a commit is safe from a crash of the daemon at once and reaches the
  // disk by the next checkpoint; after a power loss every job is dead anyway and the attempt
  // records (synced by the supervisors) say how far each got. Submissions are synced (insert_all).
  TRY(exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous mode"));

  TRY(exec(db, "BEGIN IMMEDIATE", "starting a transaction"));
  auto schema = create_or_check_schema(db);
  if (!schema.ok()) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return std::move(schema).error();
  }
  TRY(exec(db, "COMMIT", "creating the schema"));

  // Prepared once for the connection's life.
  auto kept = [db](const std::string& sql) { return prepare(db, sql, /*persistent=*/true); };
  auto statements = std::make_unique<Statements>();
  std::string columns = column_names();
  TRY_ASSIGN(statements->insert,
             kept(fmt::format("INSERT INTO jobs ({}) VALUES ({})", columns, placeholders())));
  TRY_ASSIGN(statements->update,
             kept(fmt::format("UPDATE jobs SET ({}) = ({}) WHERE id = ?", columns, placeholders())));
  TRY_ASSIGN(statements->get, kept(fmt::format("SELECT id, {} FROM jobs WHERE id = ?", columns)));
  TRY_ASSIGN(statements->setting, kept("SELECT value FROM settings WHERE name = ?"));
  TRY_ASSIGN(statements->first_from, kept("SELECT id, submit_time FROM jobs WHERE id >= ? ORDER BY id LIMIT 1"));
  TRY_ASSIGN(statements->by_token,
             kept("SELECT MIN(id), COUNT(*) FROM jobs WHERE uid = ? AND submit_token = ? AND submit_token IS NOT NULL"));
  TRY_ASSIGN(statements->set_setting,
             kept("INSERT INTO settings (name, value) VALUES (?, ?) "
                         "ON CONFLICT (name) DO UPDATE SET value = excluded.value"));
  for (bool with_environment : {false, true}) {
    for (bool by_user : {false, true}) {
      for (StateMatch states : kStateMatches) {
        TRY_ASSIGN(statements->list[list_index(by_user, states, with_environment)],
                   kept(list_sql(by_user, states, with_environment)));
      }
    }
  }
  store.statements_ = std::move(statements);
  return store;
}

// Each write below but insert_all is a single statement, which SQLite commits as its own
// transaction before sqlite3_step returns.

Result<JobId> JobStore::insert(const Job& job) {
  TRY_ASSIGN(std::vector<JobId> ids, insert_all({job}));
  return ids.front();
}

Result<std::vector<JobId>> JobStore::insert_all(const std::vector<Job>& jobs) { return insert_rows(jobs, false); }

Result<std::vector<JobId>> JobStore::insert_array(const std::vector<Job>& tasks) { return insert_rows(tasks, true); }

Result<std::vector<JobId>> JobStore::insert_rows(const std::vector<Job>& jobs, bool one_array) {
  // One transaction, one sync of the log for all of them (the daemon's group commit): the
  // sync is what costs (milliseconds on a slow disk), not the rows.
  TRY(exec(db_, "PRAGMA synchronous = FULL", "setting synchronous mode"));
  TRY(exec(db_, "BEGIN IMMEDIATE", "starting a transaction"));
  std::vector<JobId> ids;
  Result<void> stored;
  for (const Job& given : jobs) {
    const Job* job = &given;
    Job task;  // a copy only for tasks, to name their array
    if (one_array) {
      task = given;
      task.array = ArrayTask{ids.empty() ? 0 : ids.front(), given.array ? given.array->index : 0,
                             given.array ? given.array->limit : 0};
      job = &task;
    }
    StatementUse statement(statements_->insert);
    Binder parameters(statement.get());
    stored = bind_job(parameters, *job);
    if (stored.ok()) stored = parameters.status(db_);
    if (stored.ok()) stored = step_to_end(db_, statement.get(), "storing a new job");
    if (!stored.ok()) break;
    ids.push_back(static_cast<JobId>(sqlite3_last_insert_rowid(db_)));
    // The first task's id names the array, its own row included.
    if (one_array && ids.size() == 1) {
      stored = exec(db_, fmt::format("UPDATE jobs SET array_id = {0} WHERE id = {0}", ids.front()), "storing an array");
      if (!stored.ok()) break;
    }
  }
  if (stored.ok()) stored = exec(db_, "COMMIT", "storing new jobs");
  if (!stored.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  TRY(exec(db_, "PRAGMA synchronous = NORMAL", "setting synchronous mode"));
  TRY(stored);
  return ids;
}

Result<void> JobStore::update(const Job& job) {
  StatementUse statement(statements_->update);
  Binder parameters(statement.get());
  TRY(bind_job(parameters, job));
  parameters.add(job.id);
  TRY(parameters.status(db_));
  TRY(step_to_end(db_, statement.get(), fmt::format("updating job {}", job.id)));
  if (sqlite3_changes(db_) == 0) return fail("no job {} in state database {}", job.id, database_name(db_));
  return {};
}

Result<std::optional<Job>> JobStore::get(JobId id) const {
  StatementUse statement(statements_->get);
  Binder parameters(statement.get());
  parameters.add(id);
  TRY(parameters.status(db_));
  int rc = sqlite3_step(statement.get());
  if (rc == SQLITE_DONE) return std::optional<Job>();
  if (rc != SQLITE_ROW) return database_error(db_, fmt::format("reading job {}", id));
  TRY_ASSIGN(Job job, read_job(db_, statement.get()));
  return std::optional<Job>(std::move(job));
}

Result<std::vector<Job>> JobStore::list(const JobFilter& filter) const {
  // Ids are SQLite row ids, which stop at INT64_MAX; a larger cursor would bind as negative.
  if (!std::in_range<sqlite3_int64>(filter.after_id)) return std::vector<Job>();
  std::vector<JobState> states;
  StateMatch match = StateMatch::Any;
  if (filter.state) {
    states = {*filter.state};
    match = StateMatch::One;
  } else if (!filter.include_finished) {
    states.assign(kUnfinishedStates.begin(), kUnfinishedStates.end());
    match = StateMatch::Unfinished;
  }
  StatementUse statement(statements_->list[list_index(filter.user.has_value(), match, filter.with_environment)]);
  Binder parameters(statement.get());
  for (JobState state : states) parameters.add(to_string(state));
  if (filter.user) parameters.add(*filter.user);
  parameters.add(filter.after_id);
  constexpr auto kMaxLimit = static_cast<size_t>(std::numeric_limits<sqlite3_int64>::max());
  parameters.add(filter.limit == 0 ? sqlite3_int64{-1}
                                   : static_cast<sqlite3_int64>(std::min(filter.limit, kMaxLimit)));
  TRY(parameters.status(db_));

  std::vector<Job> jobs;
  int rc = SQLITE_OK;
  while ((rc = sqlite3_step(statement.get())) == SQLITE_ROW) {
    TRY_ASSIGN(Job job, read_job(db_, statement.get()));
    jobs.push_back(std::move(job));
  }
  if (rc != SQLITE_DONE) return database_error(db_, "listing jobs");
  return jobs;
}

Result<std::vector<Job>> JobStore::unfinished() const {
  JobFilter filter;
  filter.with_environment = true;  // they are to run
  return list(filter);
}

Result<std::map<std::string, std::vector<double>>> JobStore::recent_run_times(size_t per_user) const {
  std::map<std::string, std::vector<double>> by_user;
  if (per_user == 0) return by_user;
  TRY_ASSIGN(Statement statement,
             prepare(db_, fmt::format("SELECT user, end_time - start_time FROM (SELECT user, start_time, end_time, "
                                      "ROW_NUMBER() OVER (PARTITION BY user ORDER BY end_time DESC, id DESC) AS newest "
                                      "FROM jobs WHERE state IN ('{}', '{}', '{}') AND start_time IS NOT NULL AND "
                                      "end_time IS NOT NULL) WHERE newest <= {} ORDER BY user, newest DESC",
                                      to_string(JobState::Done), to_string(JobState::Failed),
                                      to_string(JobState::Cancelled), per_user)));
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(statement.get())) == SQLITE_ROW) {
    by_user[sqlite::column_text(statement.get(), 0)].push_back(sqlite3_column_double(statement.get(), 1));
  }
  if (rc != SQLITE_DONE) return database_error(db_, "reading the recent jobs' run times");
  return by_user;
}

Result<std::optional<StoredSubmission>> JobStore::find_submission(uid_t uid, const std::string& token) const {
  StatementUse statement(statements_->by_token);
  Binder parameters(statement.get());
  parameters.add(uid);
  parameters.add(token);
  TRY(parameters.status(db_));
  if (sqlite3_step(statement.get()) != SQLITE_ROW) return database_error(db_, "looking for a submission by its token");
  unsigned count = static_cast<unsigned>(sqlite3_column_int64(statement.get(), 1));
  if (count == 0) return std::optional<StoredSubmission>();
  return std::optional(StoredSubmission{static_cast<JobId>(sqlite3_column_int64(statement.get(), 0)), count});
}

Result<JobId> JobStore::last_submitted_before(double unix_time) const {
  // The first job at or after an id, with its submission time; nullopt past the last job.
  auto first_from = [this](JobId id) -> Result<std::optional<std::pair<JobId, double>>> {
    StatementUse statement(statements_->first_from);
    Binder parameters(statement.get());
    parameters.add(id);
    TRY(parameters.status(db_));
    int rc = sqlite3_step(statement.get());
    if (rc == SQLITE_DONE) return std::optional<std::pair<JobId, double>>();
    if (rc != SQLITE_ROW) return database_error(db_, "looking for jobs by submission time");
    return std::optional(std::pair(static_cast<JobId>(sqlite3_column_int64(statement.get(), 0)),
                                   sqlite3_column_double(statement.get(), 1)));
  };
  // Invariant: every job below `low` was submitted before; none at or after `high` was.
  JobId low = 1;
  JobId high = static_cast<JobId>(std::numeric_limits<int64_t>::max());
  JobId last_before = 0;
  while (low < high) {
    JobId middle = low + (high - low) / 2;
    TRY_ASSIGN(auto found, first_from(middle));
    if (!found) {
      high = middle;
    } else if (found->second < unix_time) {
      last_before = std::max(last_before, found->first);
      low = found->first + 1;
    } else {
      high = middle;
    }
  }
  return last_before;
}

Result<std::optional<std::string>> JobStore::setting(const std::string& name) const {
  StatementUse statement(statements_->setting);
  Binder parameters(statement.get());
  parameters.add(name);
  TRY(parameters.status(db_));
  int rc = sqlite3_step(statement.get());
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return database_error(db_, fmt::format("reading setting '{}'", name));
  RowReader row(statement.get(), 0);
  TRY_ASSIGN(std::string value, row.text());
  return std::optional<std::string>(std::move(value));
}

Result<void> JobStore::keep_ids_above(JobId largest_used) {
  if (largest_used > static_cast<JobId>(std::numeric_limits<int64_t>::max())) {
    return fail("job id {} is beyond what the database can hold", largest_used);
  }
  // sqlite_sequence holds AUTOINCREMENT's high-water mark; it has no row before the first insert.
  return exec(db_,
              fmt::format("INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs', 0 WHERE NOT EXISTS "
                          "(SELECT 1 FROM sqlite_sequence WHERE name = 'jobs');"
                          "UPDATE sqlite_sequence SET seq = {0} WHERE name = 'jobs' AND seq < {0};",
                          largest_used),
              "keeping job ids above those already used");
}

Result<void> JobStore::set_setting(const std::string& name, const std::string& value) {
  StatementUse statement(statements_->set_setting);
  Binder parameters(statement.get());
  parameters.add(name);
  parameters.add(value);
  TRY(parameters.status(db_));
  return step_to_end(db_, statement.get(), fmt::format("storing setting '{}'", name));
}

}  // namespace gpupool
