#include "jobs/job_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpupool {
namespace {

Job full_job() {
  Job job;
  job.spec.name = "train \u00e9t\u00e9 \U0001F680";
  job.spec.argv = {"python3", "-c", "print('a\\nb')\nprint(\"\u4e2d\u6587\")", ""};
  job.spec.environment = {"PATH=/usr/bin", "MULTI=line one\nline two", "UNICODE=\u00fc\u00f1\u00ee",
                          "EMPTY="};
  job.spec.cwd = "/home/ana/proj ect";
  job.spec.umask = 077;
  job.spec.gpus.count = 4;
  job.spec.gpus.slice_mib = std::numeric_limits<uint64_t>::max();  // every bit survives the signed column
  job.spec.priority = -3;
  job.spec.after = {7, 12};
  job.spec.retries = 2;
  job.spec.time_limit_s = 3600.25;
  job.spec.kind = JobKind::Interactive;
  job.owner = JobOwner{1001, 1002, {27, 44, 1002}, "ana"};
  job.state = JobState::Failed;
  job.reason = "exited with status 3\nsecond line";
  job.attempts = 3;
  job.submit_time = 1733150000.123456;
  job.start_time = 1733150010.5;
  job.end_time = 1733150020.75;
  job.queued_at = 1733150015.25;
  job.gpus = {0, 3, 5, 7};
  job.gpu_uuids = {"GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"};
  job.exit_code = 137;
  job.signal = 9;
  job.pid = 4242;
  job.pid_start_ticks = 123456789012;
  job.stdout_path = "/var/lib/gpupool/logs/1.out";
  job.stderr_path = "/var/lib/gpupool/logs/1.err";
  job.array = ArrayTask{77, 5, 2};
  return job;
}

Job job_of(const std::string& user, JobState state) {
  Job job;
  job.spec.argv = {"true"};
  job.owner.user = user;
  job.state = state;
  return job;
}

void expect_same_job(const Job& a, const Job& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.spec.name, b.spec.name);
  EXPECT_EQ(a.spec.argv, b.spec.argv);
  EXPECT_EQ(a.spec.environment, b.spec.environment);
  EXPECT_EQ(a.spec.cwd, b.spec.cwd);
  EXPECT_EQ(a.spec.umask, b.spec.umask);
  EXPECT_EQ(a.spec.gpus.count, b.spec.gpus.count);
  EXPECT_EQ(a.spec.gpus.slice_mib, b.spec.gpus.slice_mib);
  EXPECT_EQ(a.spec.gpus.sm_percent, b.spec.gpus.sm_percent);
  EXPECT_EQ(a.spec.gpus.mig, b.spec.gpus.mig);
  EXPECT_EQ(a.spec.priority, b.spec.priority);
  EXPECT_EQ(a.spec.after, b.spec.after);
  EXPECT_EQ(a.spec.retries, b.spec.retries);
  EXPECT_EQ(a.spec.time_limit_s, b.spec.time_limit_s);
  EXPECT_EQ(a.spec.kind, b.spec.kind);
  EXPECT_EQ(a.owner.uid, b.owner.uid);
  EXPECT_EQ(a.owner.gid, b.owner.gid);
  EXPECT_EQ(a.owner.groups, b.owner.groups);
  EXPECT_EQ(a.owner.user, b.owner.user);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.submit_time, b.submit_time);
  EXPECT_EQ(a.start_time, b.start_time);
  EXPECT_EQ(a.end_time, b.end_time);
  EXPECT_EQ(a.queued_at, b.queued_at);
  EXPECT_EQ(a.gpus, b.gpus);
  EXPECT_EQ(a.gpu_uuids, b.gpu_uuids);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.signal, b.signal);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.pid_start_ticks, b.pid_start_ticks);
  EXPECT_EQ(a.stdout_path, b.stdout_path);
  EXPECT_EQ(a.stderr_path, b.stderr_path);
  EXPECT_EQ(a.array, b.array);
  EXPECT_EQ(a.submit_token, b.submit_token);
  EXPECT_EQ(a.started_under_mps, b.started_under_mps);
  EXPECT_EQ(a.started_on_loan, b.started_on_loan);
  EXPECT_EQ(a.suspended_s, b.suspended_s);
}

constexpr bool kFinishedToo = true;
constexpr bool kUnfinishedOnly = false;

JobFilter filter(bool include_finished, std::optional<std::string> user = std::nullopt,
                 std::optional<JobState> state = std::nullopt, size_t limit = 0, JobId after_id = 0) {
  return JobFilter{include_finished, std::move(user), state, limit, after_id};
}

std::vector<JobId> ids_of(const std::vector<Job>& jobs) {
  std::vector<JobId> ids;
  for (const Job& job : jobs) ids.push_back(job.id);
  return ids;
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-job-store-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/state.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // (Re)opens the store at path_; call through ASSERT_NO_FATAL_FAILURE.
  void open_store() {
    store_.reset();
    auto store = JobStore::open(path_);
    ASSERT_TRUE(store.ok()) << store.error().message;
    store_.emplace(std::move(*store));
  }

  void insert_two_users_jobs();

  JobId insert(const Job& job) {
    auto id = store_->insert(job);
    EXPECT_TRUE(id.ok()) << id.error().message;
    return id.ok() ? *id : 0;
  }

  std::vector<JobId> listed(const JobFilter& filter) {
    auto jobs = store_->list(filter);
    EXPECT_TRUE(jobs.ok()) << jobs.error().message;
    return jobs.ok() ? ids_of(*jobs) : std::vector<JobId>{};
  }

  // Runs SQL through a connection of its own, as an administrator's `sqlite3` would.
  void raw_sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    char* message = nullptr;
    int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
    EXPECT_EQ(rc, SQLITE_OK) << (message != nullptr ? message : "");
    sqlite3_free(message);
    sqlite3_close(db);
  }

  std::string dir_;
  std::string path_;
  std::optional<JobStore> store_;
};

TEST_F(JobStoreTest, RoundTripsEveryField) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job full = full_job();
  full.id = 999;  // ignored: the store numbers jobs
  Job bare = job_of("bob", JobState::Queued);
  bare.spec.argv.clear();  // every list empty, every optional absent
  JobId full_id = insert(full);
  JobId bare_id = insert(bare);
  full.id = full_id;
  bare.id = bare_id;
  EXPECT_NE(full_id, 999u);

  for (const Job* job : {&full, &bare}) {
    auto stored = store_->get(job->id);
    ASSERT_TRUE(stored.ok()) << stored.error().message;
    ASSERT_TRUE(stored->has_value());
    expect_same_job(**stored, *job);
  }
  EXPECT_FALSE(bare.spec.gpus.slice_mib || bare.spec.time_limit_s || bare.start_time || bare.end_time ||
               bare.exit_code || bare.signal || bare.pid || bare.pid_start_ticks || bare.queued_at);

  auto missing = store_->get(12345);
  ASSERT_TRUE(missing.ok()) << missing.error().message;
  EXPECT_FALSE(missing->has_value());
}

TEST_F(JobStoreTest, UpdateReplacesEveryField) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job job = job_of("ana", JobState::Queued);
  job.id = insert(job);
  Job changed = full_job();
  changed.id = job.id;
  ASSERT_TRUE(store_->update(changed).ok());
  expect_same_job(**store_->get(job.id), changed);

  job.exit_code.reset();  // and back: fields become absent again
  ASSERT_TRUE(store_->update(job).ok());
  expect_same_job(**store_->get(job.id), job);
}

TEST_F(JobStoreTest, UpdatingAnUnknownJobIsAnError) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job job = job_of("ana", JobState::Queued);
  job.id = 41;
  auto updated = store_->update(job);
  ASSERT_FALSE(updated.ok());
  EXPECT_NE(updated.error().message.find("no job 41"), std::string::npos) << updated.error().message;
  EXPECT_FALSE(store_->get(41)->has_value());  // and nothing was created
}

TEST_F(JobStoreTest, InvalidUtf8IsAnErrorNotACrash) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job job = job_of("ana", JobState::Queued);
  job.spec.argv = {"\xff\xfe"};
  auto id = store_->insert(job);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.error().message, "the job's command is not valid UTF-8");
}

TEST_F(JobStoreTest, IdsIncreaseAndAreNeverReused) {
  {
    ASSERT_NO_FATAL_FAILURE(open_store());
    EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 1u);
    EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 2u);
    EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 3u);
  }
  raw_sql("DELETE FROM jobs WHERE id = 3");
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 4u);
}

TEST_F(JobStoreTest, RecentRunTimesAreEachUsersNewestEndedJobsOldestFirst) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto ran = [&](const std::string& user, JobState state, double start, double end) {
    Job job = job_of(user, state);
    job.start_time = start;
    job.end_time = end;
    insert(job);
  };
  ran("ana", JobState::Done, 100, 110);     // the oldest of ana's four: left out with 3 per user
  ran("ana", JobState::Failed, 200, 230);
  ran("bob", JobState::Done, 0, 1000);
  ran("ana", JobState::Cancelled, 300, 350);
  ran("ana", JobState::Done, 50, 450);      // started first, ended last: the newest
  Job never_ran = job_of("ana", JobState::Cancelled);
  never_ran.end_time = 500;
  insert(never_ran);
  insert(job_of("ana", JobState::Running));
  auto recent = store_->recent_run_times(3);
  ASSERT_TRUE(recent.ok()) << recent.error().message;
  EXPECT_EQ(*recent, (std::map<std::string, std::vector<double>>{{"ana", {30, 50, 400}}, {"bob", {1000}}}));
  EXPECT_TRUE(store_->recent_run_times(0)->empty());
}

TEST_F(JobStoreTest, IdsStayAboveTheLargestUsedOutsideTheDatabase) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  ASSERT_TRUE(store_->keep_ids_above(41).ok());  // a fresh database beside records of job 41
  EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 42u);
  ASSERT_TRUE(store_->keep_ids_above(10).ok());  // lower than what it has: no change
  EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 43u);
  ASSERT_TRUE(store_->keep_ids_above(99).ok());
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 100u);
  EXPECT_FALSE(store_->keep_ids_above(std::numeric_limits<JobId>::max()).ok());
}

TEST_F(JobStoreTest, ListsUnfinishedJobsByDefault) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  for (JobState state : {JobState::Queued, JobState::Done, JobState::Held, JobState::Failed,
                         JobState::Running, JobState::Cancelled}) {
    insert(job_of("ana", state));
  }
  EXPECT_EQ(listed({}), (std::vector<JobId>{1, 3, 5}));
  EXPECT_EQ(ids_of(*store_->unfinished()), (std::vector<JobId>{1, 3, 5}));
  EXPECT_EQ(listed(filter(kFinishedToo)), (std::vector<JobId>{1, 2, 3, 4, 5, 6}));
}

TEST_F(JobStoreTest, FindsWhereTheJobsSubmittedSinceATimeBegin) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_EQ(*store_->last_submitted_before(100), 0u);  // no job at all
  for (double submitted : {10.0, 20.0, 30.0, 40.0}) {
    Job job = job_of("ana", JobState::Done);
    job.submit_time = submitted;
    insert(job);
  }
  EXPECT_EQ(*store_->last_submitted_before(5), 0u);
  EXPECT_EQ(*store_->last_submitted_before(20), 1u);  // job 2 was submitted at 20: since, not before
  EXPECT_EQ(*store_->last_submitted_before(25), 2u);
  EXPECT_EQ(*store_->last_submitted_before(1e9), 4u);
  ASSERT_TRUE(store_->keep_ids_above(1000).ok());  // a gap in the ids
  Job late = job_of("ana", JobState::Queued);
  late.submit_time = 50;
  EXPECT_EQ(insert(late), 1001u);
  EXPECT_EQ(*store_->last_submitted_before(45), 4u);
  EXPECT_EQ(*store_->last_submitted_before(55), 1001u);
  EXPECT_EQ(listed(filter(kFinishedToo, std::nullopt, std::nullopt, 0, *store_->last_submitted_before(35))),
            (std::vector<JobId>{4, 1001}));
}

// Jobs 1 to 5: ana queued, bob running, ana done, bob done, ana running.
void JobStoreTest::insert_two_users_jobs() {
  insert(job_of("ana", JobState::Queued));   // 1
  insert(job_of("bob", JobState::Running));  // 2
  insert(job_of("ana", JobState::Done));     // 3
  insert(job_of("bob", JobState::Done));     // 4
  insert(job_of("ana", JobState::Running));  // 5
}

TEST_F(JobStoreTest, FiltersByUserAndState) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  insert_two_users_jobs();

  EXPECT_EQ(listed(filter(kUnfinishedOnly, "ana")), (std::vector<JobId>{1, 5}));
  EXPECT_EQ(listed(filter(kFinishedToo, "ana")), (std::vector<JobId>{1, 3, 5}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, "nobody")), std::vector<JobId>{});
  EXPECT_EQ(listed(filter(kUnfinishedOnly, {}, JobState::Running)), (std::vector<JobId>{2, 5}));
  // A state overrides include_finished either way.
  EXPECT_EQ(listed(filter(kUnfinishedOnly, {}, JobState::Done)), (std::vector<JobId>{3, 4}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, JobState::Queued)), (std::vector<JobId>{1}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, "bob", JobState::Done)), (std::vector<JobId>{4}));
}

TEST_F(JobStoreTest, PagesFollowTheCursorInIdOrder) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  for (int i = 0; i < 10; ++i) insert(job_of(i % 2 == 0 ? "ana" : "bob", JobState::Done));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 3)), (std::vector<JobId>{1, 2, 3}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 3, 3)), (std::vector<JobId>{4, 5, 6}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 3, 9)), (std::vector<JobId>{10}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 3, 10)), std::vector<JobId>{});
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 0, 7)), (std::vector<JobId>{8, 9, 10}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 100)).size(), 10u);
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, std::numeric_limits<size_t>::max())).size(), 10u);
  // Past the largest id SQLite can give: nothing, not everything.
  EXPECT_EQ(listed(filter(kFinishedToo, {}, {}, 3, std::numeric_limits<JobId>::max())),
            std::vector<JobId>{});

  // Paging through the whole history gives each job once.
  std::vector<JobId> all;
  for (JobId after = 0;;) {
    std::vector<JobId> page = listed(filter(kFinishedToo, {}, {}, 4, after));
    if (page.empty()) break;
    all.insert(all.end(), page.begin(), page.end());
    after = page.back();
  }
  EXPECT_EQ(all, (std::vector<JobId>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST_F(JobStoreTest, FiltersApplyToEachPage) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  insert_two_users_jobs();  // 1 to 5
  insert(job_of("ana", JobState::Done));     // 6
  insert(job_of("ana", JobState::Held));     // 7

  EXPECT_EQ(listed(filter(kFinishedToo, "ana", {}, 2)), (std::vector<JobId>{1, 3}));
  EXPECT_EQ(listed(filter(kFinishedToo, "ana", {}, 2, 3)), (std::vector<JobId>{5, 6}));
  EXPECT_EQ(listed(filter(kFinishedToo, "ana", {}, 2, 6)), (std::vector<JobId>{7}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, {}, {}, 2, 1)), (std::vector<JobId>{2, 5}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, {}, {}, 2, 5)), (std::vector<JobId>{7}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, "ana", {}, 1, 1)), (std::vector<JobId>{5}));
  EXPECT_EQ(listed(filter(kFinishedToo, {}, JobState::Done, 1, 3)), (std::vector<JobId>{4}));
  EXPECT_EQ(listed(filter(kFinishedToo, "ana", JobState::Done, 5, 3)), (std::vector<JobId>{6}));
}

TEST_F(JobStoreTest, ListingsLeaveTheEnvironmentUnread) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job job = full_job();
  job.state = JobState::Queued;
  job.id = insert(job);
  auto listed_jobs = store_->list(filter(kFinishedToo));
  ASSERT_TRUE(listed_jobs.ok()) << listed_jobs.error().message;
  ASSERT_EQ(listed_jobs->size(), 1u);
  EXPECT_TRUE(listed_jobs->front().spec.environment.empty());
  EXPECT_EQ(listed_jobs->front().spec.argv, job.spec.argv);  // the rest is all there
  EXPECT_EQ(listed_jobs->front().stderr_path, job.stderr_path);
  // The daemon's reload of its queue gets everything.
  expect_same_job(store_->unfinished()->at(0), job);

  // Not read at all: an environment that cannot be decoded does not stop a listing.
  raw_sql("UPDATE jobs SET environment = 'not JSON'");
  EXPECT_EQ(listed(filter(kFinishedToo)), (std::vector<JobId>{job.id}));
  EXPECT_EQ(listed(filter(kUnfinishedOnly, "ana", JobState::Queued, 10)), (std::vector<JobId>{job.id}));
  EXPECT_FALSE(store_->unfinished().ok());
  EXPECT_FALSE(store_->get(job.id).ok());
}

TEST_F(JobStoreTest, SettingsAreStoredAndReplaced) {
  {
    ASSERT_NO_FATAL_FAILURE(open_store());
    EXPECT_EQ(*store_->setting("drained"), std::nullopt);
    ASSERT_TRUE(store_->set_setting("drained", "1").ok());
    ASSERT_TRUE(store_->set_setting("drained", "0").ok());
    ASSERT_TRUE(store_->set_setting("note", "").ok());
    EXPECT_EQ(*store_->setting("drained"), "0");
  }
  ASSERT_NO_FATAL_FAILURE(open_store());
  EXPECT_EQ(*store_->setting("drained"), "0");
  EXPECT_EQ(*store_->setting("note"), "");
}

TEST_F(JobStoreTest, AMovedStoreKeepsWorking) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  JobStore moved = std::move(*store_);
  store_.reset();  // a moved-from store is safe to destroy
  ASSERT_TRUE(moved.insert(job_of("ana", JobState::Queued)).ok());
  ASSERT_NO_FATAL_FAILURE(open_store());  // a second connection to the same file
  *store_ = std::move(moved);
  EXPECT_EQ(listed({}), std::vector<JobId>{1});
}

TEST_F(JobStoreTest, WhatWasStoredSurvivesAKill) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = JobStore::open(path_);
    if (!store.ok() || !store->insert(full_job()).ok() || !store->set_setting("drained", "1").ok()) _exit(1);
    kill(getpid(), SIGKILL);  // no destructor, no checkpoint: the log is left as it is
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child failed: status " << status;
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));

  ASSERT_NO_FATAL_FAILURE(open_store());
  Job expected = full_job();
  expected.id = 1;
  expect_same_job(**store_->get(1), expected);
  EXPECT_EQ(*store_->setting("drained"), "1");
  EXPECT_EQ(insert(job_of("ana", JobState::Queued)), 2u);
}

TEST_F(JobStoreTest, UsesWriteAheadLogging) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  insert(job_of("ana", JobState::Queued));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &statement, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)), "wal");
  sqlite3_finalize(statement);
  sqlite3_close(db);
  EXPECT_TRUE(std::filesystem::exists(path_ + "-wal"));
}

TEST_F(JobStoreTest, RefusesAnotherSchemaVersion) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  store_.reset();
  raw_sql("UPDATE meta SET value = '10' WHERE name = 'schema_version'");
  auto store = JobStore::open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().message, "state database " + path_ + " has schema 10; this gpupoold reads 9");
}

TEST_F(JobStoreTest, StoresAnArrayInOneStepNamedAfterItsFirstTask) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  insert(job_of("ana", JobState::Done));
  std::vector<Job> tasks(3, job_of("ana", JobState::Queued));
  for (unsigned i = 0; i < tasks.size(); ++i) tasks[i].array = ArrayTask{0, 10 + i, 2};
  auto ids = store_->insert_array(tasks);
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  ASSERT_EQ(ids->size(), 3u);
  for (unsigned i = 0; i < 3; ++i) {
    auto stored = store_->get((*ids)[i]);
    ASSERT_TRUE(stored.ok() && *stored);
    EXPECT_EQ((*stored)->array, (ArrayTask{ids->front(), 10 + i, 2}));
  }
  // All or none: a task that cannot be stored leaves no task of its array behind.
  std::vector<Job> broken(2, job_of("ana", JobState::Queued));
  broken[1].spec.argv = {std::string(1, static_cast<char>(0xff))};  // not UTF-8: cannot be stored
  EXPECT_FALSE(store_->insert_array(broken).ok());
  EXPECT_EQ(listed(filter(kFinishedToo)).size(), 4u);
}

// What each schema added, undone newest first: `downgrade_to(N)` makes a store of schema N.
std::string downgrade_to(int version) {
  std::string sql = "ALTER TABLE jobs DROP COLUMN queued_at;";
  if (version <= 7) sql += "ALTER TABLE jobs DROP COLUMN started_on_loan;";
  if (version <= 6) sql += "ALTER TABLE jobs DROP COLUMN started_under_mps; ALTER TABLE jobs DROP COLUMN suspended_s;";
  if (version <= 5) sql += "ALTER TABLE jobs DROP COLUMN suspension;";
  if (version <= 4) sql += "ALTER TABLE jobs DROP COLUMN mig_profile; ALTER TABLE jobs DROP COLUMN mig_min_mib;";
  if (version <= 3) sql += "ALTER TABLE jobs DROP COLUMN sm_percent;";
  if (version <= 2) sql += "DROP INDEX jobs_by_token; ALTER TABLE jobs DROP COLUMN submit_token;";
  if (version <= 1) {
    sql += "ALTER TABLE jobs DROP COLUMN array_id; ALTER TABLE jobs DROP COLUMN array_index;"
           "ALTER TABLE jobs DROP COLUMN array_limit;";
  }
  return sql + fmt::format("UPDATE meta SET value = '{}' WHERE name = 'schema_version'", version);
}

TEST_F(JobStoreTest, TakesUpASchema1DatabaseAsJobsOfNoArray) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job before = job_of("ana", JobState::Queued);
  before.id = insert(before);
  store_.reset();
  raw_sql(downgrade_to(1));
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto stored = store_->get(before.id);
  ASSERT_TRUE(stored.ok() && *stored) << (stored.ok() ? "" : stored.error().message);
  expect_same_job(**stored, before);
  Job task = job_of("ana", JobState::Queued);
  task.array = ArrayTask{0, 4, 0};
  auto ids = store_->insert_array({task});
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  EXPECT_EQ((*store_->get(ids->front()))->array, (ArrayTask{ids->front(), 4, 0}));
}

TEST_F(JobStoreTest, KeepsASuspendedJobsCheckpointAmongTheUnfinished) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job suspended = job_of("ana", JobState::Suspended);
  suspended.suspension = Suspension{{4242, 4250}, "ana", 1700000000.5, 9316, true, true, true};
  suspended.id = insert(suspended);
  insert(job_of("ana", JobState::Done));
  auto unfinished = store_->unfinished();
  ASSERT_TRUE(unfinished.ok()) << unfinished.error().message;
  ASSERT_EQ(unfinished->size(), 1u);
  EXPECT_EQ(unfinished->front().state, JobState::Suspended);
  EXPECT_EQ(unfinished->front().suspension, suspended.suspension);
  // A row of a version before, which had no "restoring" nor "gave_way", reads as neither.
  store_.reset();
  raw_sql(fmt::format("UPDATE jobs SET suspension = '{{\"pids\": [4242], \"by\": \"ana\", \"since\": 1.5, "
                      "\"host_mib\": 1, \"resume\": false}}' WHERE id = {}",
                      suspended.id));
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto older = store_->get(suspended.id);
  ASSERT_TRUE(older.ok()) << older.error().message;
  EXPECT_EQ((*older)->suspension, (Suspension{{4242}, "ana", 1.5, 1, false, false, false}));
  // A checkpoint that is not one is the column's error, named, rather than a job without it.
  store_.reset();
  raw_sql(fmt::format("UPDATE jobs SET suspension = '{{\"pids\": [-1]}}' WHERE id = {}", suspended.id));
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto broken = store_->get(suspended.id);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("column 'suspension' is not a suspension"), std::string::npos)
      << broken.error().message;
}

TEST_F(JobStoreTest, FindsASubmissionByItsUsersToken) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job single = job_of("ana", JobState::Queued);
  single.submit_token = "a1";
  JobId id = insert(single);
  std::vector<Job> tasks(3, job_of("ana", JobState::Queued));
  for (unsigned i = 0; i < tasks.size(); ++i) {
    tasks[i].array = ArrayTask{0, i, 0};
    tasks[i].submit_token = "b2";
  }
  auto ids = store_->insert_array(tasks);
  ASSERT_TRUE(ids.ok());
  insert(job_of("ana", JobState::Queued));  // no token
  auto found = store_->find_submission(single.owner.uid, "a1");
  ASSERT_TRUE(found.ok() && *found);
  EXPECT_EQ(((*found)->first_id), id);
  EXPECT_EQ(((*found)->count), 1u);
  auto array = store_->find_submission(single.owner.uid, "b2");
  ASSERT_TRUE(array.ok() && *array);
  EXPECT_EQ(((*array)->first_id), ids->front());
  EXPECT_EQ(((*array)->count), 3u);
  EXPECT_EQ((*store_->get(id))->submit_token, std::optional<std::string>("a1"));
  // Another user's token of the same text is theirs, and an unknown one finds nothing.
  EXPECT_FALSE(*store_->find_submission(single.owner.uid + 1, "a1"));
  EXPECT_FALSE(*store_->find_submission(single.owner.uid, "c3"));
}

TEST_F(JobStoreTest, TakesUpAnOlderSchemaWithItsJobsAsTheyWere) {
  for (int version : {2, 3, 4, 5, 6, 7, 8}) {
    SCOPED_TRACE(version);
    ASSERT_NO_FATAL_FAILURE(open_store());
    Job before = job_of("ana", JobState::Queued);
    before.id = insert(before);
    store_.reset();
    raw_sql(downgrade_to(version));
    ASSERT_NO_FATAL_FAILURE(open_store());
    auto stored = store_->get(before.id);
    ASSERT_TRUE(stored.ok() && *stored) << (stored.ok() ? "" : stored.error().message);
    expect_same_job(**stored, before);
    store_.reset();
  }
}

TEST_F(JobStoreTest, TakesUpASchema8DatabaseAsJobsQueuedAtTheirSubmission) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job requeued = job_of("ana", JobState::Queued);
  requeued.queued_at = 1733150015.25;
  requeued.id = insert(requeued);
  store_.reset();
  raw_sql(downgrade_to(8));
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job stored = **store_->get(requeued.id);
  EXPECT_EQ(stored.queued_at, std::nullopt);
  stored.queued_at = 1733150099.5;
  ASSERT_TRUE(store_->update(stored).ok());
  EXPECT_EQ((*store_->get(requeued.id))->queued_at, std::optional(1733150099.5));
}

TEST_F(JobStoreTest, MigratedStoresKeepWhatTheNewerSchemasAdd) {
  ASSERT_NO_FATAL_FAILURE(open_store());
  store_.reset();
  raw_sql(downgrade_to(2));
  ASSERT_NO_FATAL_FAILURE(open_store());
  Job tokened = job_of("ana", JobState::Queued);
  tokened.submit_token = "t";
  insert(tokened);
  EXPECT_TRUE(*store_->find_submission(tokened.owner.uid, "t"));
  Job shared = job_of("ana", JobState::Queued);
  shared.spec.gpus.slice_mib = 20480;
  shared.spec.gpus.sm_percent = 25;
  JobId id = insert(shared);
  EXPECT_EQ((*store_->get(id))->spec.gpus.sm_percent, std::optional<unsigned>(25));
  for (MigRequest mig : {MigRequest{"1g.18gb", 0}, MigRequest{"", 20480}}) {
    Job device = job_of("ana", JobState::Running);
    device.spec.gpus.mig = mig;
    device.gpus = {0};
    device.gpu_uuids = {"MIG-4c8d0b8e-0000-5000-8000-000000000001"};
    device.id = insert(device);
    expect_same_job(**store_->get(device.id), device);
  }
  for (auto [under_mps, on_loan] : {std::pair{true, false}, std::pair{false, true}}) {
    Job slice = shared;
    slice.state = JobState::Running;
    slice.started_under_mps = under_mps;
    slice.suspended_s = 61.5;
    slice.started_on_loan = on_loan;
    slice.id = insert(slice);
    EXPECT_EQ((*store_->get(slice.id))->started_under_mps, std::optional<bool>(under_mps));
    EXPECT_EQ((*store_->get(slice.id))->suspended_s, 61.5);
    EXPECT_EQ((*store_->get(slice.id))->started_on_loan, on_loan);
  }
  EXPECT_EQ((*store_->get(id))->started_under_mps, std::nullopt);
}

TEST_F(JobStoreTest, RefusesADatabaseThatIsNotOurs) {
  raw_sql("CREATE TABLE photos (id INTEGER PRIMARY KEY)");
  auto store = JobStore::open(path_);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("not gpupoold's state"), std::string::npos) << store.error().message;
}

TEST_F(JobStoreTest, RefusesAFileThatIsNotADatabase) {
  for (size_t size : {10, 100, 8192}) {
    std::ofstream(path_, std::ios::trunc) << std::string(size, 'x');
    auto store = JobStore::open(path_);
    ASSERT_FALSE(store.ok()) << size;
    EXPECT_EQ(store.error().message, "cannot open state database " + path_ + ": file is not a database")
        << size;
  }
}

TEST_F(JobStoreTest, ReportsAMissingDirectory) {
  auto store = JobStore::open(dir_ + "/missing/state.db");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().message.find("cannot open state database"), std::string::npos)
      << store.error().message;
}

TEST_F(JobStoreTest, AnUndecodableRowIsAnErrorNamingTheJob) {
  {
    ASSERT_NO_FATAL_FAILURE(open_store());
    for (int i = 0; i < 3; ++i) insert(job_of("ana", JobState::Queued));
  }
  raw_sql("UPDATE jobs SET argv = '[\"ok\", 3' WHERE id = 2; UPDATE jobs SET state = 'lost' WHERE id = 3");
  ASSERT_NO_FATAL_FAILURE(open_store());
  auto second = store_->get(2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().message,
            "state database " + path_ + ": job 2 cannot be read: column 'argv' is not a JSON array");
  auto third = store_->get(3);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.error().message.find("job 3 cannot be read: column 'state' unknown job state 'lost'"),
            std::string::npos)
      << third.error().message;
  auto all = store_->list(filter(kFinishedToo));
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.error().message.find("job 2"), std::string::npos) << all.error().message;  // the first bad one
  EXPECT_TRUE(store_->get(1).ok());

  raw_sql("UPDATE jobs SET argv = '[\"a\"]', uid = 'x', state = 'queued' WHERE id = 2");
  auto wrong_type = store_->get(2);
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.error().message.find("column 'uid' is not a whole number"), std::string::npos)
      << wrong_type.error().message;
  raw_sql("UPDATE jobs SET uid = -1, gpus = '[1, -2]' WHERE id = 2");
  EXPECT_NE(store_->get(2).error().message.find("column 'uid' -1 is out of range"), std::string::npos);
  raw_sql("UPDATE jobs SET uid = 1 WHERE id = 2");
  EXPECT_NE(store_->get(2).error().message.find("column 'gpus' holds something other"), std::string::npos);
}

// Not a test: what a long history costs. Run with --gtest_also_run_disabled_tests
// --gtest_filter='*Measure*'. Each insert waits for an fsync, so the 100,000 jobs go to a
// tmpfs (what SQLite itself costs) and 300 more to /tmp (what the disk adds).
TEST_F(JobStoreTest, DISABLED_MeasureAHundredThousandJobs) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point start) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  };
  auto time_inserts = [&](int count) {
    Job job = full_job();
    auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      job.owner.user = "user" + std::to_string(i % 20);
      job.state = i % 1000 == 0 ? JobState::Queued : JobState::Done;
      insert(job);
    }
    return ms_since(start) / count;
  };
  ASSERT_NO_FATAL_FAILURE(open_store());
  std::printf("insert on /tmp's disk: %.2f ms each\n", time_inserts(300));

  std::filesystem::path shm_dir = "/dev/shm" / std::filesystem::path(dir_).filename();
  std::filesystem::create_directory(shm_dir);
  path_ = shm_dir / "state.db";
  ASSERT_NO_FATAL_FAILURE(open_store());
  constexpr int kJobs = 100000;
  double insert_ms = time_inserts(kJobs);
  auto megabytes = [](const std::string& path) {
    return static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  };
  std::printf("insert %d jobs on tmpfs: %.1f s (%.3f ms each); file %.1f MB, log %.1f MB\n", kJobs,
              insert_ms * kJobs / 1000, insert_ms, megabytes(path_), megabytes(path_ + "-wal"));
  auto time_list = [&](const char* what, const JobFilter& jobs) {
    auto start = Clock::now();
    size_t count = 0;
    for (int i = 0; i < 20; ++i) count = store_->list(jobs)->size();
    std::printf("%s: %zu jobs, %.3f ms\n", what, count, ms_since(start) / 20);
  };
  time_list("50 after job 90000", filter(kFinishedToo, {}, {}, 50, 90000));
  time_list("50 of one user after job 90000", filter(kFinishedToo, "user3", {}, 50, 90000));
  time_list("50 done after job 90000", filter(kUnfinishedOnly, {}, JobState::Done, 50, 90000));
  time_list("a page of 1000", filter(kFinishedToo, {}, {}, 1000, 50000));
  time_list("unfinished", filter(kUnfinishedOnly));
  time_list("unfinished of one user", filter(kUnfinishedOnly, "user0"));
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("max RSS of the test process: %.1f MB\n", static_cast<double>(usage.ru_maxrss) / 1024);
  store_.reset();
  std::filesystem::remove_all(shm_dir);
}

}  // namespace
}  // namespace gpupool
