#include "monitor/monitor_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "jobs/job_store.h"

namespace gpupool {
namespace {

StoredUsage usage(JobId id, const std::string& user, double gpu_seconds, double first, double last,
                  std::optional<unsigned> utilization = 50) {
  StoredUsage row;
  row.id = id;
  row.user = user;
  row.name = "job" + std::to_string(id);
  row.usage.add(gpu_seconds, {.utilization = utilization});
  row.first_time = first;
  row.last_time = last;
  return row;
}

std::vector<JobId> ids_of(const std::vector<StoredUsage>& rows) {
  std::vector<JobId> ids;
  for (const StoredUsage& row : rows) ids.push_back(row.id);
  return ids;
}

class MonitorStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-monitor-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/gpupool.db";
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // (Re)opens the store at path_; call through ASSERT_NO_FATAL_FAILURE.
  void open_store() {
    store_.reset();
    auto store = UsageStore::open(path_);
    ASSERT_TRUE(store.ok()) << store.error().message;
    store_.emplace(std::move(*store));
  }

  void add(const std::vector<StoredUsage>& rows) {
    auto added = store_->add(rows);
    ASSERT_TRUE(added.ok()) << added.error().message;
  }

  std::optional<StoredUsage> job(JobId id) {
    auto row = store_->job(id);
    EXPECT_TRUE(row.ok()) << row.error().message;
    return row.ok() ? *row : std::nullopt;
  }

  std::vector<StoredUsage> since(double time) {
    auto rows = store_->since(time);
    EXPECT_TRUE(rows.ok()) << rows.error().message;
    return rows.ok() ? *rows : std::vector<StoredUsage>{};
  }

  std::string dir_;
  std::string path_;
  std::optional<UsageStore> store_;
};

TEST_F(MonitorStoreTest, UnknownJobHasNoRow) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_EQ(job(1), std::nullopt);
  EXPECT_TRUE(since(0).empty());
  auto totals = store_->user_totals();
  ASSERT_TRUE(totals.ok());
  EXPECT_TRUE(totals->empty());
}

TEST_F(MonitorStoreTest, AddingNothingIsFine) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(add({}));
  EXPECT_TRUE(since(0).empty());
}

TEST_F(MonitorStoreTest, AddsAccumulateInOneRow) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(add({usage(1, "ana", 60, 1000, 1060, 100)}));
  StoredUsage second = usage(1, "ana", 30, 1060, 1090, std::nullopt);
  second.name = "renamed";
  ASSERT_NO_FATAL_FAILURE(add({second}));

  std::optional<StoredUsage> row = job(1);
  ASSERT_TRUE(row);
  EXPECT_EQ(row->id, 1u);
  EXPECT_EQ(row->user, "ana");
  EXPECT_EQ(row->name, "renamed");
  EXPECT_DOUBLE_EQ(row->usage.gpu_seconds, 90);
  EXPECT_DOUBLE_EQ(row->usage.measured_gpu_seconds, 60);
  EXPECT_DOUBLE_EQ(row->usage.busy_gpu_seconds, 60);
  EXPECT_DOUBLE_EQ(*row->usage.mean_utilization(), 100);
  EXPECT_DOUBLE_EQ(row->first_time, 1000);  // the first addition's
  EXPECT_DOUBLE_EQ(row->last_time, 1090);   // the latest
  EXPECT_EQ(since(0).size(), 1u);
}

TEST_F(MonitorStoreTest, SeveralJobsInOneAdd) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(add({usage(3, "bob", 10, 1, 2), usage(1, "ana", 20, 1, 2), usage(2, "ana", 5, 1, 2)}));
  std::vector<StoredUsage> rows = since(0);
  EXPECT_EQ(ids_of(rows), (std::vector<JobId>{1, 2, 3}));  // id order
  EXPECT_DOUBLE_EQ(rows[0].usage.gpu_seconds, 20);
  EXPECT_EQ(rows[2].user, "bob");
}

TEST_F(MonitorStoreTest, SinceCutsOffByTheLatestTick) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(
      add({usage(1, "ana", 10, 100, 200), usage(2, "bob", 10, 150, 300), usage(3, "ana", 10, 290, 400)}));
  EXPECT_EQ(ids_of(since(0)), (std::vector<JobId>{1, 2, 3}));
  EXPECT_EQ(ids_of(since(200)), (std::vector<JobId>{1, 2, 3}));  // at the cut-off counts
  EXPECT_EQ(ids_of(since(200.5)), (std::vector<JobId>{2, 3}));
  EXPECT_EQ(ids_of(since(350)), (std::vector<JobId>{3}));
  EXPECT_TRUE(since(401).empty());
  // A job still running is found by the time of its latest addition.
  ASSERT_NO_FATAL_FAILURE(add({usage(1, "ana", 10, 200, 500)}));
  EXPECT_EQ(ids_of(since(450)), (std::vector<JobId>{1}));
}

TEST_F(MonitorStoreTest, UserTotalsSumEveryJob) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(
      add({usage(1, "ana", 10, 1, 2), usage(2, "bob", 7.5, 1, 2), usage(3, "ana", 2.5, 1, 2)}));
  ASSERT_NO_FATAL_FAILURE(add({usage(1, "ana", 1, 2, 3)}));
  auto totals = store_->user_totals();
  ASSERT_TRUE(totals.ok()) << totals.error().message;
  ASSERT_EQ(totals->size(), 2u);
  EXPECT_DOUBLE_EQ(totals->at("ana").gpu_seconds, 13.5);
  EXPECT_DOUBLE_EQ(totals->at("bob").gpu_seconds, 7.5);
}

TEST_F(MonitorStoreTest, EfficiencyAddsUpAndKeepsTheLargerPeak) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  StoredUsage first = usage(1, "ana", 10, 100, 110);
  first.usage.add(0, {.sm_active_seconds = 4.0, .energy_j = 900.0, .memory_mib = 2048u});
  StoredUsage unmeasured = usage(1, "ana", 10, 100, 120);  // no peak: the stored one stays
  StoredUsage second = usage(1, "ana", 10, 100, 130);
  second.usage.add(0, {.sm_active_seconds = 1.0, .energy_j = 100.0, .memory_mib = 1024u});
  ASSERT_NO_FATAL_FAILURE(add({first}));
  ASSERT_NO_FATAL_FAILURE(add({unmeasured}));
  ASSERT_NO_FATAL_FAILURE(add({second}));
  auto row = job(1);
  ASSERT_TRUE(row);
  EXPECT_DOUBLE_EQ(row->usage.sm_active_gpu_seconds, 5);
  EXPECT_DOUBLE_EQ(row->usage.energy_j, 1000);
  EXPECT_EQ(row->usage.peak_memory_mib, 2048u);

  // A job whose memory was never attributed keeps no peak.
  ASSERT_NO_FATAL_FAILURE(add({usage(2, "bob", 10, 100, 110)}));
  EXPECT_EQ(job(2)->usage.peak_memory_mib, std::nullopt);
}

TEST_F(MonitorStoreTest, AnOlderTableGetsTheNewColumnsAndKeepsItsRows) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE job_usage (job_id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL,"
                           " gpu_seconds REAL NOT NULL, measured_gpu_seconds REAL NOT NULL, busy_gpu_seconds REAL NOT "
                           "NULL, first_time REAL NOT NULL, last_time REAL NOT NULL);"
                           "INSERT INTO job_usage VALUES (4, 'ana', 'old', 36, 36, 18, 1, 2);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto old = job(4);
  ASSERT_TRUE(old);
  EXPECT_DOUBLE_EQ(old->usage.gpu_seconds, 36);
  EXPECT_DOUBLE_EQ(old->usage.sm_measured_gpu_seconds, 0);
  EXPECT_EQ(old->usage.peak_memory_mib, std::nullopt);
  StoredUsage more = usage(4, "ana", 4, 1, 3);
  more.usage.add(0, {.energy_j = 50.0, .memory_mib = 10u});
  ASSERT_NO_FATAL_FAILURE(add({more}));
  EXPECT_DOUBLE_EQ(job(4)->usage.energy_j, 50);
  EXPECT_EQ(job(4)->usage.peak_memory_mib, 10u);
  ASSERT_NO_FATAL_FAILURE(open_store());  // again: nothing left to add
  EXPECT_DOUBLE_EQ(job(4)->usage.gpu_seconds, 40);
}

TEST_F(MonitorStoreTest, ReopeningKeepsTheRows) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_NO_FATAL_FAILURE(add({usage(9, "ana", 42, 1, 2)}));
  ASSERT_NO_FATAL_FAILURE(open_store());
  std::optional<StoredUsage> row = job(9);
  ASSERT_TRUE(row);
  EXPECT_DOUBLE_EQ(row->usage.gpu_seconds, 42);
  ASSERT_NO_FATAL_FAILURE(add({usage(9, "ana", 8, 2, 3)}));
  EXPECT_DOUBLE_EQ(job(9)->usage.gpu_seconds, 50);
}

TEST_F(MonitorStoreTest, SharesTheFileWithTheJobStore) {
  auto jobs = JobStore::open(path_);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  Job job;
  job.spec.argv = {"true"};
  job.owner.user = "ana";
  auto id = jobs->insert(job);
  ASSERT_TRUE(id.ok()) << id.error().message;

  ASSERT_NO_FATAL_FAILURE(open_store());  // beside the open JobStore
  ASSERT_NO_FATAL_FAILURE(add({usage(*id, "ana", 30, 1, 2)}));
  auto again = jobs->insert(job);  // the job store still writes
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_DOUBLE_EQ(this->job(*id)->usage.gpu_seconds, 30);

  // Both reopen the shared file: the jobs schema check accepts the extra table.
  jobs = JobStore::open(path_);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  auto stored = jobs->get(*again);
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_TRUE(stored->has_value());
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_DOUBLE_EQ(this->job(*id)->usage.gpu_seconds, 30);
}

TEST_F(MonitorStoreTest, ReportsADirectoryThatIsMissing) {
  auto store = UsageStore::open(dir_ + "/missing/gpupool.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("missing/gpupool.db"), std::string::npos) << store.error().message;
}

}  // namespace
}  // namespace gpupool
