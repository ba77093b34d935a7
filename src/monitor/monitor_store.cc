#include "monitor/monitor_store.h"

#include <sqlite3.h>

#include <utility>

#include <fmt/format.h>

#include "jobs/sqlite_database.h"

namespace gpupool {
namespace {

using sqlite::column_text;
using sqlite::database_error;
using sqlite::exec;
using sqlite::prepare;
using sqlite::Statement;

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS job_usage ("
    " job_id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL,"
    " gpu_seconds REAL NOT NULL, measured_gpu_seconds REAL NOT NULL, busy_gpu_seconds REAL NOT NULL,"
    " first_time REAL NOT NULL, last_time REAL NOT NULL);"
    "CREATE INDEX IF NOT EXISTS job_usage_by_time ON job_usage (last_time);";

// What later versions measure, added to a table an earlier one created (sqlite::add_missing_columns).
const std::vector<sqlite::AddedColumn> kAddedColumns = {
    {"sm_measured_gpu_seconds", "REAL NOT NULL DEFAULT 0"},
    {"sm_active_gpu_seconds", "REAL NOT NULL DEFAULT 0"},
    {"energy_measured_gpu_seconds", "REAL NOT NULL DEFAULT 0"},
    {"energy_j", "REAL NOT NULL DEFAULT 0"},
    {"peak_memory_mib", "INTEGER"},  // NULL: never attributed
};

constexpr const char* kColumns =
    "job_id, user, name, gpu_seconds, measured_gpu_seconds, busy_gpu_seconds, first_time, last_time, "
    "sm_measured_gpu_seconds, sm_active_gpu_seconds, energy_measured_gpu_seconds, energy_j, peak_memory_mib";

}  // namespace

Result<UsageStore> UsageStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  auto opened = sqlite::open_side_table(path, kSchema, "the job_usage table", db);
  UsageStore store(db);  // closes it on every way out
  TRY(opened);
  TRY(sqlite::add_missing_columns(db, "job_usage", kAddedColumns));
  return store;
}

UsageStore::UsageStore(UsageStore&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

UsageStore& UsageStore::operator=(UsageStore&& other) noexcept {
  std::swap(db_, other.db_);
  return *this;
}

UsageStore::~UsageStore() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Result<void> UsageStore::add(const std::vector<StoredUsage>& additions) {
  if (additions.empty()) return {};
  TRY_ASSIGN(Statement upsert,
             prepare(db_, fmt::format("INSERT INTO job_usage ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                                      "ON CONFLICT (job_id) DO UPDATE SET "
                                      "gpu_seconds = gpu_seconds + excluded.gpu_seconds, "
                                      "measured_gpu_seconds = measured_gpu_seconds + excluded.measured_gpu_seconds, "
                                      "busy_gpu_seconds = busy_gpu_seconds + excluded.busy_gpu_seconds, "
                                      "sm_measured_gpu_seconds = sm_measured_gpu_seconds + excluded.sm_measured_gpu_seconds, "
                                      "sm_active_gpu_seconds = sm_active_gpu_seconds + excluded.sm_active_gpu_seconds, "
                                      "energy_measured_gpu_seconds = "
                                      "energy_measured_gpu_seconds + excluded.energy_measured_gpu_seconds, "
                                      "energy_j = energy_j + excluded.energy_j, "
                                      // max() of a NULL is NULL: the known one of the two then.
                                      "peak_memory_mib = coalesce(max(peak_memory_mib, excluded.peak_memory_mib), "
                                      "peak_memory_mib, excluded.peak_memory_mib), "
                                      "name = excluded.name, last_time = excluded.last_time",
                                      kColumns)));
  TRY(exec(db_, "BEGIN IMMEDIATE", "starting to store accounting"));
  for (const StoredUsage& row : additions) {
    sqlite3_stmt* s = upsert.get();
    sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(row.id));
    sqlite3_bind_text(s, 2, row.user.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 3, row.name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(s, 4, row.usage.gpu_seconds);
    sqlite3_bind_double(s, 5, row.usage.measured_gpu_seconds);
    sqlite3_bind_double(s, 6, row.usage.busy_gpu_seconds);
    sqlite3_bind_double(s, 7, row.first_time);
    sqlite3_bind_double(s, 8, row.last_time);
    sqlite3_bind_double(s, 9, row.usage.sm_measured_gpu_seconds);
    sqlite3_bind_double(s, 10, row.usage.sm_active_gpu_seconds);
    sqlite3_bind_double(s, 11, row.usage.energy_measured_gpu_seconds);
    sqlite3_bind_double(s, 12, row.usage.energy_j);
    if (row.usage.peak_memory_mib) {
      sqlite3_bind_int64(s, 13, static_cast<sqlite3_int64>(*row.usage.peak_memory_mib));
    } else {
      sqlite3_bind_null(s, 13);
    }
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) {
      Error error = database_error(db_, fmt::format("storing the accounting of job {}", row.id));
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return error;
    }
  }
  if (auto committed = exec(db_, "COMMIT", "committing accounting"); !committed) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return committed;
  }
  return {};
}

Result<std::vector<StoredUsage>> UsageStore::query(const std::string& where,
                                                   std::variant<JobId, double> parameter) const {
  TRY_ASSIGN(Statement select,
             prepare(db_, fmt::format("SELECT {} FROM job_usage WHERE {} ORDER BY job_id", kColumns, where)));
  // Job numbers bind as integers: as doubles, numbers above 2^53 would match a neighbour's row.
  if (const JobId* id = std::get_if<JobId>(&parameter)) {
    sqlite3_bind_int64(select.get(), 1, static_cast<sqlite3_int64>(*id));
  } else {
    sqlite3_bind_double(select.get(), 1, std::get<double>(parameter));
  }
  std::vector<StoredUsage> rows;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(select.get())) == SQLITE_ROW) {
    sqlite3_stmt* s = select.get();
    StoredUsage row;
    row.id = static_cast<JobId>(sqlite3_column_int64(s, 0));
    row.user = column_text(s, 1);
    row.name = column_text(s, 2);
    row.usage.gpu_seconds = sqlite3_column_double(s, 3);
    row.usage.measured_gpu_seconds = sqlite3_column_double(s, 4);
    row.usage.busy_gpu_seconds = sqlite3_column_double(s, 5);
    row.first_time = sqlite3_column_double(s, 6);
    row.last_time = sqlite3_column_double(s, 7);
    row.usage.sm_measured_gpu_seconds = sqlite3_column_double(s, 8);
    row.usage.sm_active_gpu_seconds = sqlite3_column_double(s, 9);
    row.usage.energy_measured_gpu_seconds = sqlite3_column_double(s, 10);
    row.usage.energy_j = sqlite3_column_double(s, 11);
    if (sqlite3_column_type(s, 12) != SQLITE_NULL) {
      row.usage.peak_memory_mib = static_cast<uint64_t>(sqlite3_column_int64(s, 12));
    }
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return database_error(db_, "reading accounting");
  return rows;
}

Result<std::optional<StoredUsage>> UsageStore::job(JobId id) const {
  TRY_ASSIGN(auto rows, query("job_id = ?", id));
  if (rows.empty()) return std::optional<StoredUsage>();
  return std::optional<StoredUsage>(std::move(rows.front()));
}

Result<std::vector<StoredUsage>> UsageStore::since(double since) const { return query("last_time >= ?", since); }

Result<std::map<std::string, UsageTally>> UsageStore::user_totals() const {
  TRY_ASSIGN(std::vector<StoredUsage> rows, since(0));
  std::map<std::string, UsageTally> totals;
  for (const StoredUsage& row : rows) totals[row.user] += row.usage;
  return totals;
}

}  // namespace gpupool
