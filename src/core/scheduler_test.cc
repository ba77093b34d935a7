#include "core/scheduler.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>

#include "sim/replay.h"

namespace gpupool {
namespace {

constexpr uint64_t kGpuMib = 80000;

// `count` GPUs of kGpuMib, all joined by an NVSwitch, unless `links` says otherwise.
Machine make_machine(unsigned count) {
  Machine machine;
  for (unsigned i = 0; i < count; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.memory_total_mib = kGpuMib;
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(count, std::vector<Link>(count, Link{12, true, PcieLevel::System}));
  return machine;
}

Scheduler make_scheduler(unsigned gpus, Policy policy, std::optional<double> quota = std::nullopt) {
  SchedulerConfig config;
  config.policy = policy;
  config.quota_gpus = quota;
  auto scheduler = Scheduler::create(make_machine(gpus), config);
  EXPECT_TRUE(scheduler.ok());
  return std::move(*scheduler);
}

JobRequest job(JobId id, unsigned gpus, std::optional<double> limit = std::nullopt,
               std::string user = "u") {
  return JobRequest{id, std::move(user), gpus, std::nullopt, 0, limit};
}

std::vector<JobId> ids(const std::vector<JobStart>& starts) {
  std::vector<JobId> out;
  for (const JobStart& start : starts) out.push_back(start.id);
  return out;
}

// Four GPUs: job 1 holds two until t=100 (its limit); job 2 wants all four; job 3 wants one.
std::vector<JobId> behind_a_big_job(Policy policy, std::optional<double> small_limit) {
  Scheduler s = make_scheduler(4, policy);
  EXPECT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  EXPECT_TRUE(s.submit(job(2, 4, 100), 1).ok());
  EXPECT_TRUE(s.submit(job(3, 1, small_limit), 2).ok());
  return ids(s.schedule(2));
}

TEST(SchedulerTest, StrictFifoLetsTheHeadBlockEveryone) {
  EXPECT_TRUE(behind_a_big_job(Policy::Fifo, 10).empty());
}

TEST(SchedulerTest, GreedyBackfillStartsWhateverFits) {
  EXPECT_EQ(behind_a_big_job(Policy::Backfill, std::nullopt), std::vector<JobId>{3});
}

TEST(SchedulerTest, GpupoolBackfillsOnlyJobsThatEndBeforeTheReservation) {
  EXPECT_EQ(behind_a_big_job(Policy::Gpupool, 50), std::vector<JobId>{3});
  EXPECT_TRUE(behind_a_big_job(Policy::Gpupool, 500).empty());
  EXPECT_TRUE(behind_a_big_job(Policy::Gpupool, std::nullopt).empty());
}

TEST(SchedulerTest, TheReservationNamesTheWaitingJobAndWhenItStarts) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  s.schedule(0);
  ASSERT_TRUE(s.submit(job(2, 4), 10).ok());
  EXPECT_TRUE(s.schedule(10).empty());
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 2u);
  EXPECT_EQ(s.reservation()->start_s, 100);
  EXPECT_EQ(s.reservation()->gpus, (std::vector<unsigned>{0, 1, 2, 3}));
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_EQ(ids(s.schedule(60)), std::vector<JobId>{2});
}

TEST(SchedulerTest, JobsOffTheReservedGpusMayRunLonger) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 3, 100), 0).ok());
  s.schedule(0);
  ASSERT_TRUE(s.submit(job(2, 2), 1).ok());  // needs one of job 1's GPUs: reserved at t=100
  ASSERT_TRUE(s.submit(job(3, 1), 2).ok());  // no limit, but GPU 3 is left over
  std::vector<JobStart> starts = s.schedule(2);
  ASSERT_TRUE(s.reservation());
  ASSERT_EQ(ids(starts), std::vector<JobId>{3});
  const std::vector<unsigned>& reserved = s.reservation()->gpus;
  EXPECT_EQ(std::count(reserved.begin(), reserved.end(), starts[0].gpus[0]), 0);
}

TEST(SchedulerTest, PriorityThenFairShareThenArrival) {
  Scheduler s = make_scheduler(1, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 1, 10, "heavy"), 0).ok());
  s.schedule(0);
  ASSERT_TRUE(s.finish(1, 1000).ok());  // "heavy" has used a GPU for 1000 s
  ASSERT_TRUE(s.submit(job(2, 1, 10, "heavy"), 1000).ok());
  ASSERT_TRUE(s.submit(job(3, 1, 10, "light"), 1000).ok());
  JobRequest urgent = job(4, 1, 10, "heavy");
  urgent.priority = 5;
  ASSERT_TRUE(s.submit(urgent, 1000).ok());
  EXPECT_GT(s.fair_share_usage("heavy"), 900);
  std::vector<JobId> order;
  for (double t = 1000; s.queued() > 0; t += 10) {
    for (JobId id : ids(s.schedule(t))) {
      order.push_back(id);
      ASSERT_TRUE(s.finish(id, t + 10).ok());
    }
  }
  EXPECT_EQ(order, (std::vector<JobId>{4, 3, 2}));
}

TEST(SchedulerTest, SlicesArePackedSoWholeGpusStayFree) {
  for (Policy policy : {Policy::Gpupool, Policy::Backfill}) {
    Scheduler s = make_scheduler(2, policy);
    JobRequest first{1, "u", 1, 30000, 0, std::nullopt};
    JobRequest second{2, "u", 1, 30000, 0, std::nullopt};
    ASSERT_TRUE(s.submit(first, 0).ok());
    s.schedule(0);
    ASSERT_TRUE(s.submit(second, 1).ok());
    ASSERT_TRUE(s.submit(job(3, 1), 1).ok());
    std::vector<JobStart> starts = s.schedule(1);
    ASSERT_EQ(starts.size(), 2u) << to_string(policy);
    EXPECT_EQ(s.availability()[0].shared_mib + s.availability()[1].shared_mib, 60000u);
    EXPECT_TRUE(s.availability()[0].exclusive_held || s.availability()[1].exclusive_held);
  }
}

TEST(SchedulerTest, AQuotaHoldsJobsBackWithoutBlockingOthers) {
  Scheduler s = make_scheduler(4, Policy::Gpupool, 2.0);
  ASSERT_TRUE(s.submit(job(1, 2, 100, "a"), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 1, 100, "a"), 0).ok());
  ASSERT_TRUE(s.submit(job(3, 2, 100, "b"), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{1, 3}));
  EXPECT_EQ(s.held_gpus("a"), 2);
  ASSERT_TRUE(s.finish(1, 50).ok());
  EXPECT_EQ(ids(s.schedule(50)), std::vector<JobId>{2});
}

TEST(SchedulerTest, JobsThatCanNeverRunAreRefused) {
  Scheduler s = make_scheduler(2, Policy::Gpupool, 1.5);
  EXPECT_EQ(s.submit(job(1, 3), 0).error().message, "asks for 3 GPUs, the machine has 2");
  EXPECT_EQ(s.submit(job(2, 2), 0).error().message,
            "asks for 2.00 GPUs, above the quota of 1.50 per user");
  EXPECT_EQ(s.submit(JobRequest{3, "u", 1, 90000, 0, std::nullopt}, 0).error().message,
            "asks for 90000 MiB on 1 GPU, only 0 GPUs have that much memory");
  ASSERT_TRUE(s.submit(job(4, 1), 0).ok());
  EXPECT_EQ(s.submit(job(4, 1), 0).error().message, "job 4 is already submitted");
  EXPECT_EQ(s.finish(9, 0).error().message, "job 9 is not running");
  EXPECT_EQ(parse_policy("sjf").error().message,
            "unknown policy 'sjf': expected fifo, backfill or gpupool");
}

// A random workload on a random machine, replayed to the end.
struct Scenario {
  unsigned gpus = 1;
  std::vector<PcieLevel> levels;  // per GPU pair, above the diagonal
  Policy policy = Policy::Gpupool;
  std::optional<double> quota;
  std::vector<TraceJob> trace;
};

rc::Gen<Scenario> scenarios() {
  return rc::gen::exec([] {
    Scenario s;
    s.gpus = *rc::gen::inRange(1u, 9u);
    s.levels = *rc::gen::container<std::vector<PcieLevel>>(
        s.gpus * s.gpus,
        rc::gen::element(PcieLevel::SingleSwitch, PcieLevel::HostBridge, PcieLevel::System));
    s.policy = *rc::gen::element(Policy::Fifo, Policy::Backfill, Policy::Gpupool);
    if (*rc::gen::arbitrary<bool>()) s.quota = *rc::gen::inRange(1, 9);
    size_t count = *rc::gen::inRange<size_t>(1, 40);
    for (size_t i = 0; i < count; ++i) {
      TraceJob job;
      job.id = std::to_string(i);
      job.submit_s = *rc::gen::inRange(0, 200);
      // At least a second: a job of none starts and ends at one instant, which the check below
      // could not tell from one that overlaps.
      job.duration_s = *rc::gen::inRange(1, 300);
      job.gpus = *rc::gen::inRange(1u, s.gpus + 1);
      if (job.gpus == 1 && *rc::gen::arbitrary<bool>())
        job.gpu_mem_mib = *rc::gen::inRange(1000, 80001);
      job.user = *rc::gen::element<std::string>("a", "b", "c");
      job.priority = *rc::gen::inRange(0, 3);
      if (*rc::gen::arbitrary<bool>()) job.time_limit_s = *rc::gen::inRange(1, 400);
      if (s.quota && job.gpus > *s.quota) job.gpus = static_cast<unsigned>(*s.quota);
      s.trace.push_back(job);
    }
    return s;
  });
}

Machine scenario_machine(const Scenario& s) {
  Machine machine = make_machine(s.gpus);
  for (unsigned a = 0; a < s.gpus; ++a) {
    for (unsigned b = 0; b < s.gpus; ++b) {
      machine.links[a][b] = Link{0, false, s.levels[std::min(a, b) * s.gpus + std::max(a, b)]};
    }
  }
  return machine;
}

// Every job that fits the machine is eventually scheduled (the replay fails otherwise), and
// at each start no GPU is over-committed and no user is over quota.
RC_GTEST_PROP(SchedulerProperties, NoOvercommitNoQuotaBreachEveryJobRuns, ()) {
  Scenario s = *scenarios();
  SchedulerConfig config;
  config.policy = s.policy;
  config.quota_gpus = s.quota;
  auto result = sim::replay(scenario_machine(s), s.trace, config);
  RC_ASSERT(result.ok());
  const std::vector<sim::ScheduledJob>& schedule = result->schedule;
  for (size_t i = 0; i < schedule.size(); ++i) {
    double at = schedule[i].start_s;
    RC_ASSERT(at >= s.trace[i].submit_s);
    std::vector<bool> exclusive(s.gpus, false);
    std::vector<uint64_t> shared(s.gpus, 0);
    std::map<std::string, double> held;
    for (size_t j = 0; j < schedule.size(); ++j) {
      bool running = j == i || (schedule[j].start_s <= at && at < schedule[j].end_s);
      if (!running) continue;
      const TraceJob& job = s.trace[j];
      RC_ASSERT(schedule[j].gpus.size() == job.gpus);
      for (unsigned gpu : schedule[j].gpus) {
        if (job.gpu_mem_mib) {
          shared[gpu] += *job.gpu_mem_mib;
        } else {
          RC_ASSERT(!exclusive[gpu]);
          exclusive[gpu] = true;
        }
      }
      held[job.user] +=
          job.gpu_mem_mib ? static_cast<double>(*job.gpu_mem_mib) / kGpuMib : job.gpus;
    }
    for (unsigned gpu = 0; gpu < s.gpus; ++gpu) {
      RC_ASSERT(shared[gpu] <= kGpuMib);
      RC_ASSERT(!(exclusive[gpu] && shared[gpu] > 0));
    }
    for (const auto& [user, gpus] : held) RC_ASSERT(!s.quota || gpus <= *s.quota + 1e-9);
  }
}

}  // namespace
}  // namespace gpupool
