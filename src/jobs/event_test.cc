#include "jobs/event.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

Job finished_job(JobState state, std::string reason, std::optional<int> exit_code) {
  Job job;
  job.id = 12;
  job.owner.user = "alice";
  job.spec.name = "train";
  job.gpus = {0, 1};
  job.state = state;
  job.reason = std::move(reason);
  job.exit_code = exit_code;
  job.start_time = 1000;
  job.end_time = 1000 + 65 * 60;
  return job;
}

TEST(EventTest, KindsReadBackByTheirNames) {
  for (EventKind kind : kAllEventKinds) {
    auto parsed = parse_event_kind(to_string(kind));
    ASSERT_TRUE(parsed.ok()) << to_string(kind);
    EXPECT_EQ(*parsed, kind);
  }
  auto unknown = parse_event_kind("job_exploded");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("unknown event 'job_exploded' (one of job_started, "), std::string::npos)
      << unknown.error().message;
}

TEST(EventTest, ListsOfKindsDropRepeatsAndRefuseEmptyOnes) {
  auto kinds = parse_event_kinds("job_failed,gpu_quarantined,job_failed");
  ASSERT_TRUE(kinds.ok());
  EXPECT_EQ(*kinds, (std::vector<EventKind>{EventKind::JobFailed, EventKind::GpuQuarantined}));
  EXPECT_FALSE(parse_event_kinds("").ok());
  EXPECT_FALSE(parse_event_kinds("job_failed,").ok());
}

TEST(EventTest, AJobsEndIsEndedFailedOrCancelledAsItsStateSays) {
  Event ended = job_finished_event(finished_job(JobState::Done, "", 0), 5000);
  EXPECT_EQ(ended.kind, EventKind::JobEnded);
  EXPECT_EQ(describe_event(ended), "job 12 (alice, train) ended on GPU 0-1: after 1h05m");
  Event failed = job_finished_event(finished_job(JobState::Failed, "exit code 3", 3), 5000);
  EXPECT_EQ(failed.kind, EventKind::JobFailed);
  EXPECT_EQ(describe_event(failed), "job 12 (alice, train) failed on GPU 0-1: exit code 3 after 1h05m");
  Event cancelled = job_finished_event(finished_job(JobState::Cancelled, "cancelled by bob", std::nullopt), 5000);
  EXPECT_EQ(cancelled.kind, EventKind::JobCancelled);
  EXPECT_EQ(describe_event(cancelled), "job 12 (alice, train) was cancelled on GPU 0-1: cancelled by bob after 1h05m");
}

TEST(EventTest, AJobThatNeverStartedSaysOnlyWhy) {
  Job job = finished_job(JobState::Failed, "job 3 it runs after failed", std::nullopt);
  job.start_time.reset();
  job.gpus.clear();
  EXPECT_EQ(describe_event(job_finished_event(job, 5000)), "job 12 (alice, train) failed: job 3 it runs after failed");
}

TEST(EventTest, AStartSaysItsAttemptFromTheSecondOn) {
  Job job = finished_job(JobState::Running, "", std::nullopt);
  job.attempts = 1;
  EXPECT_EQ(describe_event(job_started_event(job, 1000)), "job 12 (alice, train) started on GPU 0-1");
  job.attempts = 2;
  EXPECT_EQ(describe_event(job_started_event(job, 1000)), "job 12 (alice, train) started on GPU 0-1: attempt 2");
}

TEST(EventTest, AGpuEventNamesTheJobsRunningThere) {
  Event event;
  event.kind = EventKind::GpuQuarantined;
  event.gpus = {2};
  event.detail = "XID 79 (the GPU fell off the bus)";
  event.jobs = {12, 14};
  event.users = {"alice", "bob"};
  EXPECT_EQ(describe_event(event),
            "GPU 2 quarantined: XID 79 (the GPU fell off the bus); running there: job 12 (alice), job 14 (bob)");
  EXPECT_TRUE(concerns(event, "bob"));
  EXPECT_FALSE(concerns(event, "carol"));
  EXPECT_TRUE(matches(EventFilter{.job = 14}, event));
  EXPECT_FALSE(matches(EventFilter{.job = 13}, event));
}

TEST(EventTest, WithheldDetailsLeaveWhoAndWhat) {
  Event event = job_finished_event(finished_job(JobState::Failed, "exit code 3", 3), 5000);
  withhold_details(event);
  EXPECT_EQ(describe_event(event), "job 12 (alice) failed on GPU 0-1");
  EXPECT_TRUE(event.name.empty());
  EXPECT_TRUE(event.detail.empty());
}

TEST(EventTest, UsersTextIsCutAtACharacterToItsLimit) {
  Event event = job_finished_event(finished_job(JobState::Failed, std::string(5000, 'x'), 1), 5000);
  // 257 bytes; the cut at 253 would fall inside the first é (2 bytes), so it comes before it.
  event.name = std::string(kMaxEventNameBytes - 4, 'n') + "\u00e9\u00e9z";
  keep_within_limits(event);
  EXPECT_EQ(event.name, std::string(kMaxEventNameBytes - 4, 'n') + "...");
  EXPECT_EQ(event.detail.size(), kMaxEventDetailBytes);
  EXPECT_TRUE(event.detail.ends_with("..."));
  Event small = job_finished_event(finished_job(JobState::Done, "", 0), 5000);
  Event kept = small;
  keep_within_limits(kept);
  EXPECT_EQ(kept.name, small.name);
  EXPECT_EQ(kept.detail, small.detail);
}

TEST(EventTest, FiltersTakeJobUserAndKindsTogether) {
  Event event = job_finished_event(finished_job(JobState::Done, "", 0), 5000);
  EXPECT_TRUE(matches(EventFilter{}, event));
  EXPECT_TRUE(matches(EventFilter{.job = 12, .user = "alice", .kinds = {EventKind::JobEnded}}, event));
  EXPECT_FALSE(matches(EventFilter{.user = "bob"}, event));
  EXPECT_FALSE(matches(EventFilter{.kinds = {EventKind::JobFailed, EventKind::JobIdle}}, event));
  Event drained;
  drained.kind = EventKind::QueueDrained;
  drained.user = "root";
  EXPECT_FALSE(matches(EventFilter{.user = "root"}, drained)) << "an administrator's act concerns no job owner";
}

}  // namespace
}  // namespace gpupool
