#include "jobs/sqlite_database.h"

#include <gtest/gtest.h>

namespace gpupool::sqlite {
namespace {

class SqliteDatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(sqlite3_open(":memory:", &db_), SQLITE_OK); }
  void TearDown() override { sqlite3_close_v2(db_); }
  sqlite3* db_ = nullptr;
};

TEST_F(SqliteDatabaseTest, ErrorsSayWhatWasBeingDoneAndSqlitesReason) {
  auto bad = prepare(db_, "SELECT FROM nowhere");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "state database : preparing a statement: near \"FROM\": syntax error");
  auto failed = exec(db_, "INSERT INTO missing VALUES (1)", "storing a row");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "state database : storing a row: no such table: missing");
}

TEST_F(SqliteDatabaseTest, StatementsRunAndNullTextReadsEmpty) {
  ASSERT_TRUE(exec(db_, "CREATE TABLE t (a TEXT); INSERT INTO t VALUES ('x'), (NULL)", "filling"));
  for (bool persistent : {false, true}) {
    auto select = prepare(db_, "SELECT a FROM t ORDER BY a IS NULL", persistent);
    ASSERT_TRUE(select);
    ASSERT_EQ(sqlite3_step(select->get()), SQLITE_ROW);
    EXPECT_EQ(column_text(select->get(), 0), "x");
    ASSERT_EQ(sqlite3_step(select->get()), SQLITE_ROW);
    EXPECT_EQ(column_text(select->get(), 0), "");
    EXPECT_EQ(sqlite3_step(select->get()), SQLITE_DONE);
  }
}

}  // namespace
}  // namespace gpupool::sqlite
