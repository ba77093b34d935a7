#include "monitor/usage_accounting.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

namespace gpupool {
namespace {

using Readings = std::vector<std::optional<unsigned>>;

// A sample with only each GPU's utilisation, and the jobs' own figures where given.
SampleReadings cards(const Readings& utilization, const OwnUtilization& own = {}) {
  SampleReadings sample;
  for (std::optional<unsigned> busy : utilization) sample.gpus.push_back(GpuTick{.utilization = busy});
  sample.own_utilization = own;
  return sample;
}

RunningJob job_on(JobId id, const std::string& user, std::vector<unsigned> gpus, double share = 1) {
  RunningJob job;
  job.id = id;
  job.user = user;
  job.name = "job" + std::to_string(id);
  job.gpus = std::move(gpus);
  job.share = share;
  return job;
}

TEST(UsageAccountingTally, StartsEmptyWithNoMeanUtilization) {
  UsageTally tally;
  EXPECT_TRUE(tally.empty());
  EXPECT_EQ(tally.mean_utilization(), std::nullopt);
}

TEST(UsageAccountingTally, MeanIsWeightedByGpuSeconds) {
  UsageTally tally;
  tally.add(10, {.utilization = 100u});
  tally.add(30, {.utilization = 20u});
  EXPECT_FALSE(tally.empty());
  EXPECT_DOUBLE_EQ(tally.gpu_seconds, 40);
  EXPECT_DOUBLE_EQ(tally.measured_gpu_seconds, 40);
  EXPECT_DOUBLE_EQ(tally.busy_gpu_seconds, 10 + 6);
  ASSERT_TRUE(tally.mean_utilization());
  EXPECT_DOUBLE_EQ(*tally.mean_utilization(), 40);
}

TEST(UsageAccountingTally, TimeWithoutAReadingCountsButIsNotMeasured) {
  UsageTally tally;
  tally.add(5, {});
  EXPECT_DOUBLE_EQ(tally.gpu_seconds, 5);
  EXPECT_DOUBLE_EQ(tally.measured_gpu_seconds, 0);
  EXPECT_EQ(tally.mean_utilization(), std::nullopt);  // held, but never measured
  tally.add(5, {.utilization = 50u});
  EXPECT_DOUBLE_EQ(tally.gpu_seconds, 10);
  ASSERT_TRUE(tally.mean_utilization());
  EXPECT_DOUBLE_EQ(*tally.mean_utilization(), 50);  // the unmeasured half does not dilute it
}

TEST(UsageAccountingTally, ReadingsAboveAHundredAreClamped) {
  UsageTally tally;
  tally.add(2, {.utilization = 250u});
  EXPECT_DOUBLE_EQ(tally.busy_gpu_seconds, 2);
  EXPECT_DOUBLE_EQ(*tally.mean_utilization(), 100);
}

TEST(UsageAccountingTally, MeanNeverExceedsAHundred) {
  UsageTally tally;  // as a store could hand back after rounding
  tally.measured_gpu_seconds = 3;
  tally.busy_gpu_seconds = 3.0000001;
  tally.gpu_seconds = 3;
  EXPECT_DOUBLE_EQ(*tally.mean_utilization(), 100);
}

TEST(UsageAccountingTally, AddsUp) {
  UsageTally a, b;
  a.add(10, {.utilization = 10u});
  b.add(20, {});
  b.add(4, {.utilization = 100u});
  a += b;
  EXPECT_DOUBLE_EQ(a.gpu_seconds, 34);
  EXPECT_DOUBLE_EQ(a.measured_gpu_seconds, 14);
  EXPECT_DOUBLE_EQ(a.busy_gpu_seconds, 5);
}

RC_GTEST_PROP(UsageAccountingTally, MeanStaysWithinZeroAndAHundred, ()) {
  // -1: no reading; readings above 100 happen (NVML rounding, broken drivers).
  const auto readings = *rc::gen::container<std::vector<std::pair<unsigned, int>>>(
      rc::gen::pair(rc::gen::inRange(0u, 3600u), rc::gen::inRange(-1, 1000)));
  UsageTally tally;
  double measured = 0;
  for (const auto& [seconds, reading] : readings) {
    tally.add(seconds, {.utilization = reading < 0 ? std::nullopt : std::optional<unsigned>(static_cast<unsigned>(reading))});
    if (reading >= 0) measured += seconds;
  }
  RC_ASSERT(tally.busy_gpu_seconds <= tally.measured_gpu_seconds + 1e-9);
  RC_ASSERT(tally.measured_gpu_seconds <= tally.gpu_seconds);
  if (measured == 0) {
    RC_ASSERT(!tally.mean_utilization());
  } else {
    RC_ASSERT(*tally.mean_utilization() >= 0.0);
    RC_ASSERT(*tally.mean_utilization() <= 100.0);
  }
}

TEST(UsageAccountingShare, WholeGpuIsOne) { EXPECT_DOUBLE_EQ(gpu_share(std::nullopt, 81920), 1); }

TEST(UsageAccountingShare, SliceIsItsPartOfTheMemory) {
  EXPECT_DOUBLE_EQ(gpu_share(20480, 81920), 0.25);
  EXPECT_DOUBLE_EQ(gpu_share(81920, 81920), 1);
}

TEST(UsageAccountingShare, UnknownOrZeroMemoryCountsTheWholeGpu) {
  EXPECT_DOUBLE_EQ(gpu_share(20480, std::nullopt), 1);
  EXPECT_DOUBLE_EQ(gpu_share(20480, 0), 1);
}

TEST(UsageAccountingShare, SliceLargerThanTheGpuIsCappedAtOne) { EXPECT_DOUBLE_EQ(gpu_share(100000, 81920), 1); }

TEST(UsageAccounting, RecordsGpuSecondsTimesShareOverSeveralTicks) {
  Accounting accounting(1800);
  std::vector<RunningJob> running = {job_on(1, "ana", {0, 1}), job_on(2, "bob", {2}, 0.25)};
  Readings utilization = {100u, 50u, 80u};
  accounting.record(1000, 1, running, cards(utilization));
  accounting.record(1002, 2, running, cards(utilization));
  accounting.record(1003, 1, running, cards(utilization));

  const Accounting::JobAccount* ana = accounting.job(1);
  ASSERT_NE(ana, nullptr);
  EXPECT_EQ(ana->user, "ana");
  EXPECT_EQ(ana->name, "job1");
  EXPECT_DOUBLE_EQ(ana->first_time, 1000);
  EXPECT_DOUBLE_EQ(ana->last_time, 1003);
  EXPECT_DOUBLE_EQ(ana->total.gpu_seconds, 2 * 4);  // two GPUs for 4 s
  EXPECT_DOUBLE_EQ(*ana->total.mean_utilization(), 75);

  const Accounting::JobAccount* bob = accounting.job(2);
  ASSERT_NE(bob, nullptr);
  EXPECT_DOUBLE_EQ(bob->total.gpu_seconds, 0.25 * 4);
  EXPECT_DOUBLE_EQ(bob->total.busy_gpu_seconds, 0.25 * 4 * 0.8);
  EXPECT_DOUBLE_EQ(*bob->total.mean_utilization(), 80);

  EXPECT_EQ(accounting.job(3), nullptr);
  EXPECT_EQ(accounting.jobs().size(), 2u);
}

GpuProcess process_using(uint32_t pid, std::optional<unsigned> sm_utilization) {
  GpuProcess process;
  process.pid = pid;
  process.sm_utilization = sm_utilization;
  return process;
}

TEST(UsageAccountingOwn, SlicesSharingAGpuEachGetTheirProcessesFigure) {
  std::vector<RunningJob> running = {job_on(1, "ana", {0}, 0.25), job_on(2, "bob", {0}, 0.25), job_on(3, "cy", {1})};
  std::vector<std::vector<GpuProcess>> processes = {
      {process_using(100, 70), process_using(101, 50), process_using(200, 0)}, {process_using(300, 90)}};
  std::map<JobId, std::set<uint32_t>> pids = {{1, {100, 101}}, {2, {200}}};
  OwnUtilization own = own_utilization(processes, running, pids);
  EXPECT_EQ(own, (OwnUtilization{{1, {{0, 100}}}, {2, {{0, 0}}}})) << "summed, at most 100; job 3 is not a slice";

  // A slice with no process on its GPU uses none of it.
  pids[2] = {};
  EXPECT_EQ(own_utilization(processes, running, pids).at(2), (std::map<unsigned, unsigned>{{0, 0}}));
  // Where NVML cannot say for every process there, the GPU's own reading stands.
  processes[0].push_back(process_using(400, std::nullopt));
  EXPECT_TRUE(own_utilization(processes, running, pids).empty());
  // So it does where it lists no process at all, and under MPS (the server runs the kernels).
  processes[0] = {};
  EXPECT_TRUE(own_utilization(processes, running, pids).empty());
  processes[0] = {process_using(100, 0), process_using(200, 0)};
  processes[0][0].mps_client = true;
  EXPECT_TRUE(own_utilization(processes, running, pids).empty());
}

TEST(UsageAccountingOwn, AnIdleSliceBesideABusyOneIsFlagged) {
  Accounting accounting(10);
  std::vector<RunningJob> running = {job_on(1, "ana", {0}, 0.25), job_on(2, "bob", {0}, 0.25)};
  Readings card = {95u};
  OwnUtilization own = {{1, {{0, 95}}}, {2, {{0, 0}}}};
  for (double t = 1000; t <= 1020; t += 1) accounting.record(t, 1, running, cards(card, own));
  EXPECT_FALSE(accounting.idle(1, 1020));
  EXPECT_TRUE(accounting.idle(2, 1020));
  EXPECT_DOUBLE_EQ(*accounting.job(1)->total.mean_utilization(), 95);
  EXPECT_DOUBLE_EQ(*accounting.job(2)->total.mean_utilization(), 0);
}

TEST(UsageAccounting, GpuWithoutAReadingCountsTimeButNotUtilization) {
  Accounting accounting(1800);
  // GPU 1 has no reading; GPU 5 is beyond the readings handed in.
  accounting.record(10, 1, {job_on(1, "ana", {0, 1, 5})}, cards({40u, std::nullopt}));
  const auto* account = accounting.job(1);
  ASSERT_NE(account, nullptr);
  EXPECT_DOUBLE_EQ(account->total.gpu_seconds, 3);
  EXPECT_DOUBLE_EQ(account->total.measured_gpu_seconds, 1);
  EXPECT_DOUBLE_EQ(*account->total.mean_utilization(), 40);
}

TEST(UsageAccounting, SumsPerUser) {
  Accounting accounting(1800);
  accounting.record(1, 10, {job_on(1, "ana", {0}), job_on(2, "ana", {1, 2}), job_on(3, "bob", {3}, 0.5)},
                    cards(Readings(4, 0u)));
  const auto& users = accounting.user_usage();
  ASSERT_EQ(users.size(), 2u);
  EXPECT_DOUBLE_EQ(users.at("ana").gpu_seconds, 30);
  EXPECT_DOUBLE_EQ(users.at("bob").gpu_seconds, 5);
}

TEST(UsageAccounting, UnsavedIsWhatCameSinceItWasLastTaken) {
  Accounting accounting(1800);
  std::vector<RunningJob> running = {job_on(1, "ana", {0}), job_on(2, "bob", {1})};
  accounting.record(1, 1, running, cards({10u, 20u}));
  accounting.record(2, 1, running, cards({10u, 20u}));

  auto unsaved = accounting.take_unsaved();
  ASSERT_EQ(unsaved.size(), 2u);
  EXPECT_DOUBLE_EQ(unsaved.at(1).unsaved.gpu_seconds, 2);
  EXPECT_EQ(unsaved.at(1).user, "ana");
  EXPECT_DOUBLE_EQ(unsaved.at(2).unsaved.busy_gpu_seconds, 0.4);
  EXPECT_TRUE(accounting.job(1)->unsaved.empty());
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.gpu_seconds, 2);  // the total stays

  // Nothing new: nothing to take. Then only the job that ran since.
  EXPECT_TRUE(accounting.take_unsaved().empty());
  accounting.record(3, 1, {running[1]}, cards({10u, 20u}));
  unsaved = accounting.take_unsaved();
  ASSERT_EQ(unsaved.size(), 1u);
  EXPECT_DOUBLE_EQ(unsaved.at(2).unsaved.gpu_seconds, 1);
  EXPECT_DOUBLE_EQ(unsaved.at(2).total.gpu_seconds, 3);
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.gpu_seconds, 2);
}

TEST(UsageAccounting, SeededJobContinuesFromTheStore) {
  Accounting accounting(1800);
  UsageTally stored;
  stored.add(100, {.utilization = 50u});
  accounting.seed_job(7, "ana", stored, 500);
  UsageTally ana_before, bob_before;
  ana_before.gpu_seconds = 1000;
  bob_before.gpu_seconds = 42;
  accounting.seed_user("ana", ana_before);
  accounting.seed_user("bob", bob_before);

  const auto* seeded = accounting.job(7);
  ASSERT_NE(seeded, nullptr);
  EXPECT_DOUBLE_EQ(seeded->first_time, 500);
  EXPECT_TRUE(seeded->unsaved.empty());  // already stored
  EXPECT_TRUE(accounting.take_unsaved().empty());

  accounting.record(600, 10, {job_on(7, "ana", {0})}, cards({100u}));
  const auto* account = accounting.job(7);
  EXPECT_DOUBLE_EQ(account->first_time, 500);  // not moved to the first tick of this daemon
  EXPECT_DOUBLE_EQ(account->last_time, 600);
  EXPECT_DOUBLE_EQ(account->total.gpu_seconds, 110);
  EXPECT_DOUBLE_EQ(account->unsaved.gpu_seconds, 10);
  EXPECT_DOUBLE_EQ(*account->total.mean_utilization(), (50.0 + 10) / 110 * 100);
  EXPECT_DOUBLE_EQ(accounting.user_usage().at("ana").gpu_seconds, 1010);
  EXPECT_DOUBLE_EQ(accounting.user_usage().at("bob").gpu_seconds, 42);
}

TEST(UsageAccounting, ForgetDropsTheJobButNotTheUsersTotal) {
  Accounting accounting(1800);
  accounting.record(1, 5, {job_on(1, "ana", {0})}, cards({0u}));
  accounting.take_unsaved();
  accounting.forget(1);
  EXPECT_EQ(accounting.job(1), nullptr);
  EXPECT_TRUE(accounting.jobs().empty());
  EXPECT_DOUBLE_EQ(accounting.user_usage().at("ana").gpu_seconds, 5);
  accounting.forget(99);  // unknown: nothing happens
}

TEST(UsageAccountingStartEnd, AJobEndingBeforeAnySampleStillCounts) {
  Accounting accounting(1800);
  RunningJob job = job_on(4, "ana", {0, 1}, 0.5);
  accounting.started(job, 100, 100.2);  // the loop saw it 0.2 s after its start
  accounting.ended(4, 100.7);
  const auto* account = accounting.job(4);
  ASSERT_NE(account, nullptr);
  EXPECT_DOUBLE_EQ(account->first_time, 100);
  EXPECT_DOUBLE_EQ(account->last_time, 100.7);
  EXPECT_NEAR(account->total.gpu_seconds, 2 * 0.5 * 0.7, 1e-9);
  EXPECT_EQ(account->total.mean_utilization(), std::nullopt);  // held, never measured
  EXPECT_NEAR(accounting.user_usage().at("ana").gpu_seconds, 0.7, 1e-9);
  auto unsaved = accounting.take_unsaved();
  ASSERT_EQ(unsaved.count(4), 1u);
  EXPECT_NEAR(unsaved.at(4).unsaved.gpu_seconds, 0.7, 1e-9);
}

TEST(UsageAccountingStartEnd, TicksCountOnlyTheTimeSinceTheStartAndTheTailCountsAtTheEnd) {
  Accounting accounting(1800);
  RunningJob job = job_on(5, "bob", {0});
  accounting.started(job, 10.4, 10.4);
  accounting.record(11, 1, {job}, cards({100u}));  // covers 10.4 to 11, not 10 to 11
  accounting.record(12, 1, {job}, cards({0u}));
  accounting.ended(5, 12.25);
  const auto* account = accounting.job(5);
  EXPECT_NEAR(account->total.gpu_seconds, 1.85, 1e-9);
  EXPECT_NEAR(account->total.measured_gpu_seconds, 1.6, 1e-9);
  EXPECT_NEAR(*account->total.mean_utilization(), 0.6 / 1.6 * 100, 1e-9);
}

TEST(UsageAccountingStartEnd, AnAdoptedJobCountsTheTimeSinceTheEarlierDaemonStopped) {
  Accounting accounting(1800);
  UsageTally stored;
  stored.add(100, {.utilization = 50u});
  accounting.seed_job(7, "ana", stored, 500);
  accounting.started(job_on(7, "ana", {0, 1}), 600, 610);  // stored until 600, seen again at 610
  const auto* account = accounting.job(7);
  EXPECT_DOUBLE_EQ(account->first_time, 500);
  EXPECT_DOUBLE_EQ(account->total.gpu_seconds, 100 + 2 * 10);
  EXPECT_DOUBLE_EQ(account->unsaved.gpu_seconds, 2 * 10);
  EXPECT_DOUBLE_EQ(*account->total.mean_utilization(), 50);  // the gap is not measured
}

TEST(UsageAccountingStartEnd, EndingAnUnknownJobOrAtItsLastTickAddsNothing) {
  Accounting accounting(1800);
  accounting.ended(9, 100);
  EXPECT_EQ(accounting.job(9), nullptr);
  RunningJob job = job_on(1, "ana", {0});
  accounting.started(job, 50, 50);
  accounting.record(51, 1, {job}, cards({10u}));
  accounting.ended(1, 51);
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.gpu_seconds, 1);
  // Once ended, neither a late tick nor a second end adds time.
  accounting.record(52, 1, {job}, cards({10u}));
  accounting.ended(1, 53);
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.gpu_seconds, 1);
  EXPECT_DOUBLE_EQ(accounting.job(1)->last_time, 51);
}

TEST(UsageAccountingIdle, IdleSinceTheFirstTickWithEveryGpuIdle) {
  Accounting accounting(60);
  std::vector<RunningJob> running = {job_on(1, "ana", {0, 1})};
  accounting.record(100, 1, running, cards({0u, 30u}));
  EXPECT_EQ(accounting.job(1)->idle_since, std::nullopt);  // one GPU busy
  accounting.record(101, 1, running, cards({1u, 0u}));    // 1 % counts as idle
  EXPECT_EQ(accounting.job(1)->idle_since, 101);
  accounting.record(102, 1, running, cards({0u, 0u}));
  EXPECT_EQ(accounting.job(1)->idle_since, 101);  // kept, not moved
}

TEST(UsageAccountingIdle, ABusyTickResetsIt) {
  Accounting accounting(60);
  std::vector<RunningJob> running = {job_on(1, "ana", {0})};
  accounting.record(100, 1, running, cards({0u}));
  accounting.record(150, 50, running, cards({2u}));  // just above "about 0 %"
  EXPECT_EQ(accounting.job(1)->idle_since, std::nullopt);
  accounting.record(151, 1, running, cards({0u}));
  EXPECT_EQ(accounting.job(1)->idle_since, 151);
  EXPECT_FALSE(accounting.idle(1, 200));
  EXPECT_TRUE(accounting.idle(1, 211));
}

TEST(UsageAccountingIdle, AGpuWithoutAReadingIsNeverIdle) {
  Accounting accounting(0);
  accounting.record(100, 1, {job_on(1, "ana", {0, 1})}, cards({0u, std::nullopt}));
  EXPECT_EQ(accounting.job(1)->idle_since, std::nullopt);
  EXPECT_FALSE(accounting.idle(1, 1000));
  accounting.record(100, 1, {job_on(2, "bob", {3})}, cards({0u}));  // beyond the readings
  EXPECT_FALSE(accounting.idle(2, 1000));
}

TEST(UsageAccountingIdle, AJobWithoutGpusIsNeverIdle) {
  Accounting accounting(0);
  accounting.record(100, 1, {job_on(1, "ana", {})}, cards({0u}));
  EXPECT_FALSE(accounting.idle(1, 1000));
}

TEST(UsageAccountingIdle, FlaggedOnlyAfterIdleFlagAfter) {
  Accounting accounting(1800);
  EXPECT_DOUBLE_EQ(accounting.idle_flag_after_s(), 1800);
  std::vector<RunningJob> running = {job_on(1, "ana", {0})};
  for (double now = 1000; now <= 2800; now += 1) accounting.record(now, 1, running, cards({0u}));
  EXPECT_FALSE(accounting.idle(1, 1000 + 1799));
  EXPECT_TRUE(accounting.idle(1, 1000 + 1800));
  EXPECT_FALSE(accounting.idle(2, 5000));  // unknown job
}

TEST(UsageAccountingEfficiency, AWholeGpuJobTakesItsGpusActivityEnergyAndMemory) {
  Accounting accounting(1800);
  SampleReadings sample;
  sample.gpus = {GpuTick{.utilization = 100u, .sm_active = 0.5, .energy_j = 7000, .memory_used_mib = 40000},
                 GpuTick{.utilization = 100u, .sm_active = 0.25, .energy_j = 3000, .memory_used_mib = 1000}};
  accounting.record(10, 10, {job_on(1, "ana", {0, 1})}, sample);
  sample.gpus[0].memory_used_mib = 30000;  // the peak stays
  accounting.record(20, 10, {job_on(1, "ana", {0, 1})}, sample);

  const UsageTally& total = accounting.job(1)->total;
  EXPECT_DOUBLE_EQ(total.gpu_seconds, 40);
  EXPECT_DOUBLE_EQ(total.sm_measured_gpu_seconds, 40);
  EXPECT_DOUBLE_EQ(total.sm_active_gpu_seconds, 2 * (5 + 2.5));
  EXPECT_DOUBLE_EQ(*total.sm_efficiency(), 15.0 / 40);
  EXPECT_DOUBLE_EQ(total.energy_j, 2 * 10000);
  EXPECT_EQ(total.peak_memory_mib, 40000u);

  GpuEfficiency efficiency = efficiency_of(total);
  EXPECT_DOUBLE_EQ(*efficiency.sm_active_gpu_hours, 15.0 / 3600);
  EXPECT_DOUBLE_EQ(*efficiency.energy_kwh, 20000 / 3.6e6);
  EXPECT_EQ(efficiency.peak_memory_mib, 40000u);
  EXPECT_DOUBLE_EQ(accounting.user_usage().at("ana").energy_j, 20000);
}

TEST(UsageAccountingEfficiency, WithoutGpmOrEnergyCounterTheFiguresAreUnknownNotZero) {
  Accounting accounting(1800);
  accounting.record(10, 10, {job_on(1, "ana", {0})}, cards({100u}));
  GpuEfficiency efficiency = efficiency_of(accounting.job(1)->total);
  EXPECT_EQ(efficiency.sm_active_gpu_hours, std::nullopt);
  EXPECT_EQ(efficiency.sm_efficiency, std::nullopt);
  EXPECT_EQ(efficiency.energy_kwh, std::nullopt);
  EXPECT_EQ(efficiency.peak_memory_mib, std::nullopt);
}

TEST(UsageAccountingEfficiency, SlicesShareTheCardsActivityByTheirOwnUtilization) {
  Accounting accounting(1800);
  std::vector<RunningJob> running = {job_on(1, "ana", {0}, 0.5), job_on(2, "bob", {0}, 0.25)};
  SampleReadings sample;
  sample.gpus = {GpuTick{.utilization = 100u, .sm_active = 0.8, .process_utilization = 80u, .energy_j = 1000,
                         .memory_used_mib = 50000}};
  sample.own_utilization = {{1, {{0, 60}}}, {2, {{0, 20}}}};
  sample.own_memory = {{1, {{0, 30000}}}, {2, {{0, 500}}}};
  accounting.record(10, 10, running, sample);

  const UsageTally& ana = accounting.job(1)->total;
  const UsageTally& bob = accounting.job(2)->total;
  EXPECT_DOUBLE_EQ(ana.sm_active_gpu_seconds, 8 * 0.75) << "60 of the 80 % the processes ran";
  EXPECT_DOUBLE_EQ(bob.sm_active_gpu_seconds, 8 * 0.25);
  EXPECT_DOUBLE_EQ(ana.sm_measured_gpu_seconds, 5);
  EXPECT_DOUBLE_EQ(*ana.sm_efficiency(), 6.0 / 5) << "more of the card's compute than its memory share";
  EXPECT_DOUBLE_EQ(ana.energy_j, 500) << "energy by share";
  EXPECT_DOUBLE_EQ(bob.energy_j, 250);
  EXPECT_EQ(ana.peak_memory_mib, 30000u) << "its processes', not the card's";
  EXPECT_EQ(bob.peak_memory_mib, 500u);

  // A job without a figure of its own there gets no part of the card's activity; the others keep theirs.
  sample.own_utilization.erase(2);
  sample.own_memory.clear();
  Accounting unshared(1800);
  unshared.record(10, 10, running, sample);
  EXPECT_EQ(unshared.job(2)->total.sm_efficiency(), std::nullopt);
  EXPECT_DOUBLE_EQ(unshared.job(1)->total.sm_active_gpu_seconds, 6);
  EXPECT_EQ(unshared.job(1)->total.peak_memory_mib, std::nullopt) << "the card's memory is not one slice's";
  // Processes that ran nothing: no activity for anyone.
  sample.own_utilization = {{1, {{0, 0}}}, {2, {{0, 0}}}};
  sample.gpus[0].process_utilization = 0;
  Accounting quiet(1800);
  quiet.record(10, 10, running, sample);
  EXPECT_DOUBLE_EQ(*quiet.job(1)->total.sm_efficiency(), 0);
}

TEST(UsageAccountingEfficiency, AnOutsideProcesssActivityIsNotALoneSlicesOwn) {
  Accounting accounting(1800);
  SampleReadings sample;
  sample.gpus = {GpuTick{.sm_active = 0.9, .process_utilization = 90u}};
  sample.own_utilization = {{1, {{0, 0}}}};  // its process idles; another, not a job's, runs
  accounting.record(10, 10, {job_on(1, "ana", {0}, 0.25)}, sample);
  EXPECT_DOUBLE_EQ(*accounting.job(1)->total.sm_efficiency(), 0);
  // A slice alone without a figure of its own (MPS): the card's activity is not told apart.
  Accounting unknown(1800);
  unknown.record(10, 10, {job_on(1, "ana", {0}, 0.25)}, SampleReadings{{GpuTick{.sm_active = 0.9}}, {}, {}});
  EXPECT_EQ(unknown.job(1)->total.sm_efficiency(), std::nullopt);
}

TEST(UsageAccountingEfficiency, AMigJobTakesItsGpuInstancesActivity) {
  Accounting accounting(1800);
  RunningJob job = job_on(1, "ana", {0}, 0.25);
  job.mig_uuid = "MIG-a";
  SampleReadings sample;
  sample.gpus = {GpuTick{.sm_active = 0.1, .mig_sm_active = {{"MIG-a", 0.9}, {"MIG-b", 0.0}}}};
  accounting.record(10, 10, {job, job_on(2, "bob", {0}, 0.25)}, sample);
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.sm_active_gpu_seconds, 0.9 * 10 * 0.25);
  EXPECT_DOUBLE_EQ(*accounting.job(1)->total.sm_efficiency(), 0.9);
  EXPECT_EQ(accounting.job(1)->total.peak_memory_mib, std::nullopt);
}

TEST(UsageAccountingEfficiency, AJobStartedWithinTheTickGetsItsPartOfTheEnergy) {
  Accounting accounting(1800);
  RunningJob job = job_on(1, "ana", {0});
  accounting.started(job, 16, 16);
  SampleReadings sample;
  sample.gpus = {GpuTick{.energy_j = 1000}};
  accounting.record(20, 10, {job}, sample);  // held 4 of the tick's 10 s
  EXPECT_DOUBLE_EQ(accounting.job(1)->total.energy_j, 400);
}

TEST(UsageAccountingEfficiency, OwnMemorySumsTheJobsProcessesOnEachGpu) {
  std::vector<RunningJob> running = {job_on(1, "ana", {0, 1}, 0.25), job_on(2, "bob", {0})};
  auto process = [](uint32_t pid, uint64_t mib) {
    GpuProcess p;
    p.pid = pid;
    p.used_memory_mib = mib;
    return p;
  };
  std::vector<std::vector<GpuProcess>> processes = {{process(100, 1000), process(101, 24), process(200, 5)}, {}};
  OwnMemory own = own_memory(processes, running, {{1, {100, 101}}});
  EXPECT_EQ(own, (OwnMemory{{1, {{0, 1024}}}})) << "none of its processes on GPU 1; job 2 is not watched";
  processes[0][1].used_memory_mib.reset();
  EXPECT_TRUE(own_memory(processes, running, {{1, {100, 101}}}).empty()) << "a process without a figure: unknown";
}

TEST(UsageAccountingEfficiency, TalliesAddUpAndKeepTheLargerPeak) {
  UsageTally a, b;
  a.add(10, {.sm_active_seconds = 5.0, .energy_j = 100.0, .memory_mib = 10u});
  b.add(10, {.memory_mib = 30u});
  b.add(10, {.sm_active_seconds = 1.0});
  a += b;
  EXPECT_DOUBLE_EQ(a.gpu_seconds, 30);
  EXPECT_DOUBLE_EQ(a.sm_measured_gpu_seconds, 20);
  EXPECT_DOUBLE_EQ(a.sm_active_gpu_seconds, 6);
  EXPECT_DOUBLE_EQ(a.energy_measured_gpu_seconds, 10);
  EXPECT_EQ(a.peak_memory_mib, 30u);
}

}  // namespace
}  // namespace gpupool
