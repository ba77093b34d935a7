#include "jobs/sqlite_database.h"

#include <set>

#include <fmt/format.h>

namespace gpupool::sqlite {

std::string database_name(sqlite3* db) {
  const char* name = sqlite3_db_filename(db, "main");
  return name != nullptr ? name : "";
}

Error database_error(sqlite3* db, std::string_view doing) {
  // Said first, in words an administrator acts on: the database is not what is wrong.
  if (sqlite3_errcode(db) == SQLITE_FULL) {
    return fail("the state filesystem is full: state database {}: {}: {}", database_name(db), doing,
                sqlite3_errmsg(db));
  }
  return fail("state database {}: {}: {}", database_name(db), doing, sqlite3_errmsg(db));
}

Result<Statement> prepare(sqlite3* db, const std::string& sql, bool persistent) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.c_str(), -1, persistent ? SQLITE_PREPARE_PERSISTENT : 0, &raw, nullptr);
  Statement statement(raw);
  if (rc != SQLITE_OK) return database_error(db, "preparing a statement");
  return statement;
}

Result<void> exec(sqlite3* db, const std::string& sql, std::string_view doing) {
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) return database_error(db, doing);
  return {};
}

Result<void> open_side_table(const std::string& path, const std::string& schema, std::string_view what, sqlite3*& db) {
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) return fail("cannot open {}: {}", path, db != nullptr ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  // Losing the last moments of such a table to a power cut is acceptable; a sync per write is not needed.
  TRY(exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous mode"));
  return exec(db, schema, fmt::format("creating {}", what));
}

Result<void> add_missing_columns(sqlite3* db, const std::string& table, const std::vector<AddedColumn>& columns) {
  TRY_ASSIGN(Statement info, prepare(db, fmt::format("PRAGMA table_info({})", table)));
  std::set<std::string> present;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(info.get())) == SQLITE_ROW) present.insert(column_text(info.get(), 1));
  if (rc != SQLITE_DONE) return database_error(db, fmt::format("reading the columns of {}", table));
  for (const AddedColumn& column : columns) {
    if (present.contains(column.name)) continue;
    TRY(exec(db, fmt::format("ALTER TABLE {} ADD COLUMN {} {}", table, column.name, column.definition),
             fmt::format("adding column {} to {}", column.name, table)));
  }
  return {};
}

std::string column_text(sqlite3_stmt* statement, int column) {
  const unsigned char* text = sqlite3_column_text(statement, column);
  return text != nullptr ? reinterpret_cast<const char*>(text) : "";
}

}  // namespace gpupool::sqlite
