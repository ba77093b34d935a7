// What the daemon's SQLite stores (job_store, monitor_store) share: statements that finalize
// themselves, errors that name the database and what was being done, and one lock timeout.
#pragma once

#include <sqlite3.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpupool::sqlite {

// How long a write waits for a lock held by another connection (`sqlite3` run by an admin, a
// backup, the other store) before it fails.
constexpr int kBusyTimeoutMs = 5000;

struct StatementFinalizer {
  void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};
using Statement = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

// The database's file.
std::string database_name(sqlite3* db);

// "state database PATH: DOING: SQLite's message".
Error database_error(sqlite3* db, std::string_view doing);

// `persistent`: kept for the connection's life, which SQLite then prepares for.
Result<Statement> prepare(sqlite3* db, const std::string& sql, bool persistent = false);

Result<void> exec(sqlite3* db, const std::string& sql, std::string_view doing);

// Opens a second connection to the jobs database for a table of its own (the accounting's, the
// events'), whose writes need no sync of their own, and creates its tables when missing (`what`
// names them in errors). `db` is set whenever SQLite made a connection, also on an error: the
// caller closes it.
Result<void> open_side_table(const std::string& path, const std::string& schema, std::string_view what, sqlite3*& db);

// A column a later version added to a side table: `definition` as ALTER TABLE ADD COLUMN takes it.
struct AddedColumn {
  std::string name;
  std::string definition;  // "REAL NOT NULL DEFAULT 0"
};
// Adds to `table` the columns it lacks: a table an earlier version created keeps its rows, and
// an earlier version reading it after an upgrade ignores the new columns.
Result<void> add_missing_columns(sqlite3* db, const std::string& table, const std::vector<AddedColumn>& columns);

// Column `column` of the current row as text; "" for NULL.
std::string column_text(sqlite3_stmt* statement, int column);

}  // namespace gpupool::sqlite
