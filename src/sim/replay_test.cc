#include "sim/replay.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sim/fixture.h"

namespace gpupool::sim {
namespace {

Machine two_gpus() {
  Machine machine;
  for (unsigned i = 0; i < 2; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.memory_total_mib = 1000;
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(2, std::vector<Link>(2, Link{4, true, PcieLevel::System}));
  return machine;
}

TraceJob trace_job(std::string id, double submit, double duration, unsigned gpus,
                   std::optional<uint64_t> mem = std::nullopt, std::string user = "u") {
  TraceJob job;
  job.id = std::move(id);
  job.submit_s = submit;
  job.duration_s = duration;
  job.gpus = gpus;
  job.gpu_mem_mib = mem;
  job.user = std::move(user);
  return job;
}

SchedulerConfig policy(Policy p) {
  SchedulerConfig config;
  config.policy = p;
  return config;
}

TEST(ReplayTest, ReplaysInVirtualTimeAndSummarizes) {
  std::vector<TraceJob> trace = {trace_job("a", 0, 100, 2, std::nullopt, "alice"),
                                 trace_job("b", 10, 50, 1, 500, "bob"),
                                 trace_job("c", 10, 20, 1, std::nullopt, "bob")};
  auto result = replay(two_gpus(), trace, policy(Policy::Fifo));
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(schedule_csv(trace, result->schedule),
            "id,start_s,end_s,gpus,suspended\na,0,100,0;1,\nb,100,150,0,\nc,100,120,1,\n");
  const ReplaySummary& s = result->summary;
  EXPECT_EQ(s.jobs, 3u);
  EXPECT_EQ(s.makespan_s, 150);
  // GPU-seconds 200 + 25 + 20 over 2 GPUs = 122.5; the latest submit + duration is 60.
  EXPECT_DOUBLE_EQ(s.lower_bound_s, 122.5);
  EXPECT_DOUBLE_EQ(s.utilization, 245.0 / 300);
  EXPECT_DOUBLE_EQ(s.mean_wait_s, 60);
  EXPECT_EQ(s.p95_wait_s, 90);
  EXPECT_EQ(s.max_wait_s, 90);
  ASSERT_EQ(s.users.size(), 2u);
  EXPECT_EQ(s.users[1].user, "bob");
  EXPECT_EQ(s.users[1].jobs, 2u);
  EXPECT_DOUBLE_EQ(s.users[1].mean_wait_s, 90);
  // Completions 100, 140 and 110 s.
  EXPECT_DOUBLE_EQ(s.mean_completion_s, 350.0 / 3);
  EXPECT_EQ(s.p99_completion_s, 140);
  // While bob waited (10 to 100 s) alice held both GPUs: nothing was unallocated, and of an
  // equal split of one GPU each alice held twice hers and bob none: Jain's index 2² / (2 x 4).
  EXPECT_EQ(s.unallocated_while_waiting, 0);
  EXPECT_DOUBLE_EQ(s.jain_index, 0.5);
  // Alone with every duration doubled (two users), alice's job ends at 200 s: 100 s here is
  // half of that. Bob's two jobs would run side by side from 10 s, ending after 100 and 40 s
  // (mean 70), against 140 and 110 here (mean 125).
  EXPECT_DOUBLE_EQ(s.users[0].finish_time_fairness, 0.5);
  EXPECT_DOUBLE_EQ(s.users[1].finish_time_fairness, 125.0 / 70);
  EXPECT_DOUBLE_EQ(s.max_finish_time_fairness, 125.0 / 70);
  nlohmann::json encoded = summary_json(s);
  for (const char* field :
       {"jobs", "makespan_s", "lower_bound_s", "utilization", "mean_wait_s", "p95_wait_s",
        "max_wait_s", "mean_completion_s", "p99_completion_s", "unallocated_while_waiting",
        "jain_index", "max_finish_time_fairness", "users"}) {
    EXPECT_TRUE(encoded.contains(field)) << field;
  }
}

TEST(ReplayTest, GpusLeftIdleWhileAJobWaitsCountAsUnallocated) {
  // FIFO: the 2-GPU job b waits for a (10 to 100 s) with one GPU idle, and c waits behind b
  // until 110 s with both GPUs held: 90 of the 200 GPU-seconds contended were unallocated.
  std::vector<TraceJob> trace = {trace_job("a", 0, 100, 1), trace_job("b", 10, 10, 2),
                                 trace_job("c", 20, 5, 1)};
  auto result = replay(two_gpus(), trace, policy(Policy::Fifo));
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result->schedule[2].start_s, 110);
  EXPECT_DOUBLE_EQ(result->summary.unallocated_while_waiting, 0.45);
  // One user: shares are equal by definition, and alone is the same as here.
  EXPECT_EQ(result->summary.jain_index, 1);
  EXPECT_EQ(result->summary.max_finish_time_fairness, 1);
}

TEST(ReplayTest, AJobEndsAtItsTimeLimit) {
  TraceJob job = trace_job("a", 0, 100, 1);
  job.time_limit_s = 30;
  auto result = replay(two_gpus(), {job}, policy(Policy::Gpupool));
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->schedule[0].end_s, 30);
  EXPECT_EQ(result->summary.ended_at_time_limit, 1u);
}

// Two GPUs: "long" holds one until 100 (limit 200), "wide" wants both, "loan" has no limit.
std::vector<TraceJob> a_job_on_loan() {
  std::vector<TraceJob> trace = {trace_job("long", 0, 100, 1), trace_job("wide", 1, 50, 2),
                                 trace_job("loan", 2, 500, 1)};
  trace[0].time_limit_s = 200;
  trace[1].time_limit_s = 200;
  return trace;
}

TEST(ReplayTest, AJobOnLoanIsSuspendedForTheReservationAndResumesOnItsGpu) {
  SchedulerConfig config = policy(Policy::Gpupool);
  config.backfill_by_suspending = true;
  auto result = replay(two_gpus(), a_job_on_loan(), config);
  ASSERT_TRUE(result.ok()) << result.error().message;
  const auto& loan = result->schedule[2];
  SuspensionTime took = suspension_time(1000);  // a whole GPU of two_gpus()
  double released = 100 + took.checkpoint_s;
  EXPECT_EQ(loan.start_s, 2);
  ASSERT_EQ(loan.suspensions.size(), 1u);
  EXPECT_DOUBLE_EQ(loan.suspensions[0].released_s, released);
  EXPECT_DOUBLE_EQ(result->schedule[1].start_s, released);  // the checkpoint held its GPU
  EXPECT_DOUBLE_EQ(loan.suspensions[0].restarted_s, released + 50);
  EXPECT_EQ(loan.gpus, std::vector<unsigned>{1});
  // It ran 98 s before the lock, and the rest after its restore.
  EXPECT_DOUBLE_EQ(loan.end_s, released + 50 + took.restore_s + 402);
  EXPECT_EQ(result->summary.suspensions, 1u);
  EXPECT_DOUBLE_EQ(result->summary.max_suspended_s, 50);
  EXPECT_DOUBLE_EQ(result->summary.max_wait_s, released - 1);  // wide's; loan's 50 s suspended count too
  EXPECT_NE(schedule_csv(a_job_on_loan(), result->schedule).find(fmt::format("loan,2,{},1,{}-{}\n", loan.end_s, released, released + 50)),
            std::string::npos);
  // Without it, the job waits for the wide one to end.
  auto waiting = replay(two_gpus(), a_job_on_loan(), policy(Policy::Gpupool));
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(waiting->schedule[2].start_s, 150);
  EXPECT_EQ(waiting->summary.suspensions, 0u);
}

// The scheduler never sees durations: changing the duration of the job that runs last
// changes no decision.
TEST(ReplayTest, DecisionsDoNotDependOnDurations) {
  for (Policy p : {Policy::Fifo, Policy::Backfill, Policy::Gpupool}) {
    std::vector<TraceJob> trace = {trace_job("a", 0, 40, 2), trace_job("b", 1, 30, 1),
                                   trace_job("c", 2, 10, 1), trace_job("d", 3, 5, 2)};
    auto first = replay(two_gpus(), trace, policy(p));
    trace[3].duration_s = 5000;
    auto second = replay(two_gpus(), trace, policy(p));
    ASSERT_TRUE(first.ok() && second.ok());
    for (size_t i = 0; i < trace.size(); ++i) {
      EXPECT_EQ(first->schedule[i].start_s, second->schedule[i].start_s) << to_string(p);
      EXPECT_EQ(first->schedule[i].gpus, second->schedule[i].gpus) << to_string(p);
    }
  }
}

TEST(ReplayTest, AJobThatCanNeverRunStopsTheReplay) {
  auto result = replay(two_gpus(), {trace_job("big", 0, 1, 2, 2000)}, policy(Policy::Gpupool));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().message,
            "trace job 'big': asks for 2000 MiB on 2 GPUs, only 0 GPUs have that much memory");
}

TEST(ReplayTest, ShippedTracesReplayOnHgxH200) {
  auto fixture = load_fixture(std::string(GPUPOOL_TEST_FIXTURE_DIR) + "/hgx-h200.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  auto text = read_text_file(std::string(GPUPOOL_TEST_DATA_DIR) + "/traces/h200-overload-1.csv");
  ASSERT_TRUE(text.ok()) << text.error().message;
  auto trace = parse_trace(*text);
  ASSERT_TRUE(trace.ok()) << trace.error().message;
  auto result = replay(machine_from_fixture(*fixture), *trace, policy(Policy::Gpupool));
  ASSERT_TRUE(result.ok()) << result.error().message;
  EXPECT_EQ(result->summary.jobs, trace->size());
  EXPECT_GE(result->summary.makespan_s, result->summary.lower_bound_s);
  EXPECT_LE(result->summary.utilization, 1.0 + 1e-9);
}

}  // namespace
}  // namespace gpupool::sim
