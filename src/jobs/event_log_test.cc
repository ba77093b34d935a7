#include "jobs/event_log.h"

#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "jobs/job_store.h"

namespace gpupool {
namespace {

Event job_event_at(EventKind kind, JobId job, const std::string& user, double time) {
  Event event;
  event.kind = kind;
  event.job = job;
  event.user = user;
  event.name = "job" + std::to_string(job);
  event.gpus = {1, 3};
  event.time = time;
  event.detail = "exit code 0";
  return event;
}

std::vector<uint64_t> seqs_of(const EventPage& page) {
  std::vector<uint64_t> seqs;
  for (const Event& event : page.events) seqs.push_back(event.seq);
  return seqs;
}

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-event-log-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/gpupool.db";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  EventLog open_log() {
    auto log = EventLog::open(path_);
    EXPECT_TRUE(log.ok()) << log.error().message;
    return std::move(*log);
  }
  std::string dir_;
  std::string path_;
};

TEST_F(EventLogTest, EventsComeBackWhole) {
  EventLog log = open_log();
  Event quarantined;
  quarantined.kind = EventKind::GpuQuarantined;
  quarantined.time = 100.5;
  quarantined.gpus = {2};
  quarantined.detail = "XID 79 (the GPU fell off the bus)";
  quarantined.jobs = {7, 9};
  quarantined.users = {"alice", "bob"};
  auto stored = log.append(quarantined);
  ASSERT_TRUE(stored.ok()) << stored.error().message;
  EXPECT_EQ(stored->seq, 1u);
  auto page = log.read({});
  ASSERT_TRUE(page.ok()) << page.error().message;
  ASSERT_EQ(page->events.size(), 1u);
  const Event& read = page->events.front();
  EXPECT_EQ(read.seq, 1u);
  EXPECT_EQ(read.kind, EventKind::GpuQuarantined);
  EXPECT_DOUBLE_EQ(read.time, 100.5);
  EXPECT_EQ(read.gpus, std::vector<unsigned>{2});
  EXPECT_EQ(read.detail, quarantined.detail);
  EXPECT_EQ(read.jobs, (std::vector<JobId>{7, 9}));
  EXPECT_EQ(read.users, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_FALSE(page->more);
}

TEST_F(EventLogTest, PagesGoOnAfterTheLastSeenAndTheLatestComeInOrder) {
  EventLog log = open_log();
  for (JobId id = 1; id <= 5; ++id) ASSERT_TRUE(log.append(job_event_at(EventKind::JobStarted, id, "alice", 10.0 * static_cast<double>(id))).ok());
  auto first = log.read({.limit = 2});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(seqs_of(*first), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(first->more);
  auto next = log.read({.after = 2, .limit = 2});
  EXPECT_EQ(seqs_of(*next), (std::vector<uint64_t>{3, 4}));
  auto latest = log.read({.limit = 2, .latest = true});
  EXPECT_EQ(seqs_of(*latest), (std::vector<uint64_t>{4, 5}));
  EXPECT_TRUE(latest->more);
  auto since = log.read({.since = 30});
  EXPECT_EQ(seqs_of(*since), (std::vector<uint64_t>{3, 4, 5}));
  EXPECT_EQ(log.last_seq(), 5u);
}

TEST_F(EventLogTest, FiltersSkipWhatTheyDoNotMatchAcrossAPage) {
  EventLog log = open_log();
  for (JobId id = 1; id <= 6; ++id) {
    ASSERT_TRUE(log.append(job_event_at(id % 2 ? EventKind::JobFailed : EventKind::JobEnded, id, id % 3 ? "alice" : "bob", static_cast<double>(id))).ok());
  }
  auto failed = log.read({.filter = {.kinds = {EventKind::JobFailed}}, .limit = 2});
  EXPECT_EQ(seqs_of(*failed), (std::vector<uint64_t>{1, 3}));
  EXPECT_TRUE(failed->more);
  auto bobs = log.read({.filter = {.user = "bob"}});
  EXPECT_EQ(seqs_of(*bobs), (std::vector<uint64_t>{3, 6}));
  auto job4 = log.read({.filter = {.job = 4}});
  EXPECT_EQ(seqs_of(*job4), (std::vector<uint64_t>{4}));
}

TEST_F(EventLogTest, NumbersOutliveTrimmingAndReopening) {
  {
    EventLog log = open_log();
    for (JobId id = 1; id <= 10; ++id) ASSERT_TRUE(log.append(job_event_at(EventKind::JobEnded, id, "alice", static_cast<double>(id))).ok());
    auto old = log.trim(/*older_than=*/3, /*keep_at_most=*/100);
    ASSERT_TRUE(old.ok());
    EXPECT_EQ(*old, 2u);  // times 1 and 2
    auto many = log.trim(0, 5);
    ASSERT_TRUE(many.ok());
    EXPECT_EQ(*many, 3u);  // 3, 4, 5: the newest five stay
    EXPECT_EQ(seqs_of(*log.read({})), (std::vector<uint64_t>{6, 7, 8, 9, 10}));
    ASSERT_TRUE(log.trim(1e9, 100).ok());  // every one
    EXPECT_TRUE(log.read({})->events.empty());
  }
  EventLog reopened = open_log();
  EXPECT_EQ(reopened.last_seq(), 10u);
  auto next = reopened.append(job_event_at(EventKind::JobStarted, 11, "alice", 11));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->seq, 11u) << "a number given before is never given again";
}

TEST_F(EventLogTest, SharesTheJobsDatabaseWithoutTouchingItsSchema) {
  auto jobs = JobStore::open(path_);
  ASSERT_TRUE(jobs.ok()) << jobs.error().message;
  EventLog log = open_log();
  ASSERT_TRUE(log.append(job_event_at(EventKind::JobStarted, 1, "alice", 1)).ok());
  auto again = JobStore::open(path_);
  EXPECT_TRUE(again.ok()) << again.error().message;
}

}  // namespace
}  // namespace gpupool
