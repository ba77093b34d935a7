#include "sched/scheduler.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "jobs/job_text.h"
#include "sched/mps.h"
#include "sched/scheduler_testing.h"

namespace gpupool {
namespace {

using namespace scheduler_testing;

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

// Four GPUs; `user` ran five 1-GPU jobs of `run_time` each (one at a time, from t=0), then the
// setting of behind_a_big_job: job 1 holds two GPUs until 100 s past `now`, job 2 wants all four,
// job 3, without a time limit, wants one.
std::vector<JobId> behind_a_big_job_after_history(double run_time, size_t history = 50,
                                                  std::string user = "u") {
  SchedulerConfig config;
  config.runtime_history = history;
  Scheduler s = *Scheduler::create(make_machine(4), config);
  double now = 0;
  for (JobId id = 10; id < 15; ++id, now += run_time) {
    EXPECT_TRUE(s.submit(job(id, 1, std::nullopt, user), now).ok());
    EXPECT_EQ(ids(s.schedule(now)), std::vector<JobId>{id});
    EXPECT_TRUE(s.finish(id, now + run_time).ok());
  }
  EXPECT_TRUE(s.submit(job(1, 2, 100), now).ok());
  EXPECT_EQ(ids(s.schedule(now)), std::vector<JobId>{1});
  EXPECT_TRUE(s.submit(job(2, 4, 100), now + 1).ok());
  EXPECT_TRUE(s.submit(job(3, 1), now + 2).ok());
  return ids(s.schedule(now + 2));
}

TEST(SchedulerTest, AJobWithoutALimitBackfillsWhenItsUsersRecentJobsEndInTime) {
  EXPECT_EQ(behind_a_big_job_after_history(30), std::vector<JobId>{3});  // 30 s < 98 s left
  EXPECT_TRUE(behind_a_big_job_after_history(300).empty());             // too long
  EXPECT_TRUE(behind_a_big_job_after_history(30, 0).empty());           // estimates off
  EXPECT_TRUE(behind_a_big_job_after_history(30, 50, "someone else").empty());  // not its user's
}

TEST(SchedulerTest, RunTimesFromBeforeARestartGiveTheEstimateAtOnce) {
  // The setting of behind_a_big_job_after_history, with u's record taken up instead of run.
  auto third_job_backfills = [](const std::map<std::string, std::vector<double>>& record) {
    SchedulerConfig config;
    config.runtime_history = 5;
    Scheduler s = *Scheduler::create(make_machine(4), config);
    s.import_run_times(record);
    EXPECT_TRUE(s.submit(job(1, 2, 100), 0).ok());
    EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
    EXPECT_TRUE(s.submit(job(2, 4, 100), 1).ok());
    EXPECT_TRUE(s.submit(job(3, 1), 2).ok());
    return ids(s.schedule(2)) == std::vector<JobId>{3};
  };
  EXPECT_TRUE(third_job_backfills({{"u", {30, 30, 30, 30, 30}}}));
  EXPECT_FALSE(third_job_backfills({{"u", {30, 30, 30, 30}}}));  // four: too few for an estimate
  EXPECT_FALSE(third_job_backfills({{"someone else", {30, 30, 30, 30, 30}}}));
  // Only the newest five count: the two long ones, oldest, drop out; a bad figure is left out.
  EXPECT_TRUE(third_job_backfills({{"u", {9000, 9000, 30, 30, 30, 30, -1, 30}}}));
  EXPECT_FALSE(third_job_backfills({{"u", {30, 30, 30, 30, 9000}}}));
}

TEST(SchedulerTest, TheEstimateIsAHighQuantileOfTheUsersLastRunTimes) {
  SchedulerConfig config;
  config.runtime_history = 5;
  config.runtime_estimate_quantile = 0.8;
  Scheduler s = *Scheduler::create(make_machine(4), config);
  // Run times 10, 20, 30, 40, 5000, then 50 minutes (the oldest, 10, drops out): the 80th
  // percentile of {20, 30, 40, 5000, 50} is 50, the fourth of five.
  constexpr double kMinute = 60;
  double now = 0;
  JobId id = 10;
  for (double minutes : {10.0, 20.0, 30.0, 40.0, 5000.0, 50.0}) {
    ASSERT_TRUE(s.submit(job(id, 4), now).ok());
    ASSERT_EQ(ids(s.schedule(now)), std::vector<JobId>{id});
    ASSERT_TRUE(s.finish(id++, now += minutes * kMinute).ok());
  }
  ASSERT_TRUE(s.submit(job(1, 2, 100 * kMinute), now).ok());
  ASSERT_EQ(ids(s.schedule(now)), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(job(2, 4, 100 * kMinute), now).ok());
  ASSERT_TRUE(s.submit(job(3, 1), now).ok());
  ASSERT_TRUE(s.submit(job(4, 1, 60 * kMinute), now).ok());
  EXPECT_EQ(ids(s.schedule(now)), (std::vector<JobId>{3, 4}));  // 50 and 60 minutes end in time
  // Job 3's hour joins the history ({30, 40, 5000, 50, 60}: 60 now), and a job that can no
  // longer end in time says what its user's jobs ran.
  now += 60 * kMinute;
  ASSERT_TRUE(s.submit(job(5, 1), now).ok());
  ASSERT_TRUE(s.finish(3, now).ok());
  ASSERT_TRUE(s.schedule(now).empty());
  EXPECT_EQ(s.waiting(5, now)->detail,
            "GPU 0-3 reserved for job 2 of u, expected to start in 40m; u's recent jobs ran up to 1h00m; with a "
            "time limit (--time) under 40m it could start now");
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

TEST(SchedulerTest, ASuspendedJobFreesItsGpusAndResumesOnThemAtItsOldPlace) {
  Scheduler s = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 1), 0).ok());
  auto first = s.schedule(0);
  ASSERT_EQ(ids(first), std::vector<JobId>{1});
  unsigned its_gpu = first[0].gpus[0];
  ASSERT_TRUE(s.suspend(1, 10).ok());
  EXPECT_FALSE(s.suspend(1, 10).ok());
  EXPECT_DOUBLE_EQ(s.held_gpus("u"), 0);
  // Its GPU goes to others meanwhile.
  ASSERT_TRUE(s.submit(job(2, 2), 20).ok());
  EXPECT_EQ(ids(s.schedule(20)), std::vector<JobId>{2});
  EXPECT_FALSE(s.submit(job(1, 1), 20).ok());  // known: suspended
  ASSERT_TRUE(s.resume(1).ok());
  EXPECT_FALSE(s.resume(1).ok());
  ASSERT_TRUE(s.submit(job(3, 1), 30).ok());
  EXPECT_TRUE(s.schedule(30).empty());
  ASSERT_TRUE(s.finish(2, 40).ok());
  // Its place comes before job 3's, and only its own GPU will do.
  auto resumed = s.schedule(40);
  ASSERT_EQ(ids(resumed), (std::vector<JobId>{1, 3}));
  EXPECT_EQ(resumed[0].gpus, std::vector<unsigned>{its_gpu});
}

// backfill_by_suspending, in the setting of behind_a_big_job: job 1 holds two of four GPUs
// until t=100, job 2 wants all four and holds the reservation.
Scheduler with_a_reservation_and_loans() {
  SchedulerConfig config;
  config.backfill_by_suspending = true;
  Scheduler s = *Scheduler::create(make_machine(4), config);
  EXPECT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  EXPECT_TRUE(s.submit(job(2, 4, 100), 1).ok());
  EXPECT_TRUE(s.schedule(1).empty());
  return s;
}

JobRequest suspendable(JobRequest request) {
  request.suspendable = true;
  return request;
}

TEST(SchedulerTest, ASuspendableJobWithoutALimitBackfillsOnLoanAndIsNamedWhenInTheWay) {
  Scheduler s = with_a_reservation_and_loans();
  ASSERT_TRUE(s.submit(suspendable(job(3, 1)), 2).ok());
  ASSERT_TRUE(s.submit(job(4, 1), 2).ok());                     // not suspendable: it waits
  ASSERT_TRUE(s.submit(suspendable(job(5, 1, 500)), 2).ok());  // a limit past the reservation: waits
  EXPECT_EQ(ids(s.schedule(2)), std::vector<JobId>{3});
  // Job 1 is still in the way: nothing to suspend yet.
  EXPECT_TRUE(s.jobs_in_the_way().empty());
  ASSERT_TRUE(s.submit(suspendable(job(6, 1)), 3).ok());
  EXPECT_EQ(ids(s.schedule(3)), std::vector<JobId>{6});
  // A job on loan is out of the way whenever the reservation needs its GPUs: the reservation
  // still starts when job 1 ends.
  ASSERT_TRUE(s.reservation().has_value());
  EXPECT_EQ(s.reservation()->start_s, 100);
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_TRUE(s.schedule(60).empty());  // two GPUs free, two on loan
  EXPECT_EQ(s.jobs_in_the_way(), (std::vector<JobId>{6, 3}));  // the most recent first
  // The reservation is due: its free GPUs are lent no more.
  ASSERT_TRUE(s.submit(suspendable(job(7, 1)), 60).ok());
  EXPECT_TRUE(s.schedule(60).empty());
  for (JobId id : {6, 3}) {
    ASSERT_TRUE(s.suspend(id, 61).ok());
    ASSERT_TRUE(s.resume(id).ok());
  }
  EXPECT_EQ(ids(s.schedule(61)), std::vector<JobId>{2});
  EXPECT_TRUE(s.jobs_in_the_way().empty());
}

JobRequest slice_of(JobRequest request, uint64_t mib) {
  request.gpus.slice_mib = mib;
  return request;
}

// backfill_by_suspending on one GPU: job 1 holds half of it until t=100, job 2 wants three
// quarters and holds the reservation.
Scheduler half_held_three_quarters_reserved() {
  SchedulerConfig config;
  config.backfill_by_suspending = true;
  Scheduler s = *Scheduler::create(make_machine(1), config);
  EXPECT_TRUE(s.submit(slice_of(job(1, 1, 100), kGpuMib / 2), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  EXPECT_TRUE(s.submit(slice_of(job(2, 1, 100), kGpuMib * 3 / 4), 1).ok());
  EXPECT_TRUE(s.schedule(1).empty());
  return s;
}

TEST(SchedulerTest, OnlyTheJobsOnLoanThatTheReservationNeedsAreInTheWay) {
  // Jobs 3 and 4 take a quarter each, on loan.
  Scheduler s = half_held_three_quarters_reserved();
  ASSERT_TRUE(s.submit(slice_of(suspendable(job(3, 1)), kGpuMib / 4), 2).ok());
  ASSERT_TRUE(s.submit(slice_of(suspendable(job(4, 1)), kGpuMib / 4), 2).ok());
  EXPECT_EQ(ids(s.schedule(2)), (std::vector<JobId>{3, 4}));
  ASSERT_TRUE(s.finish(1, 50).ok());
  EXPECT_TRUE(s.schedule(50).empty());
  // A quarter is missing: one of them is enough, the later (job 4: started with job 3, a later id).
  EXPECT_EQ(s.jobs_in_the_way(), std::vector<JobId>{4});
  ASSERT_TRUE(s.suspend(4, 51).ok());
  ASSERT_TRUE(s.resume(4).ok());
  EXPECT_EQ(ids(s.schedule(51)), std::vector<JobId>{2});
}

TEST(SchedulerTest, AJobSuspendedOnceDoesNotGoOnLoanAgain) {
  Scheduler s = with_a_reservation_and_loans();
  ASSERT_TRUE(s.submit(suspendable(job(3, 1)), 2).ok());
  ASSERT_EQ(ids(s.schedule(2)), std::vector<JobId>{3});
  ASSERT_TRUE(s.suspend(3, 3).ok());
  ASSERT_TRUE(s.resume(3).ok());
  // Its GPU is free and reserved: it would go on loan, had it not been suspended before.
  EXPECT_TRUE(s.schedule(4).empty());
  EXPECT_EQ(s.waiting(3, 4)->reason, WaitReason::Reservation);
}

TEST(SchedulerTest, AJobSuspendedForAReservationGoesRightAfterThatJob) {
  Scheduler s = with_a_reservation_and_loans();
  ASSERT_TRUE(s.submit(job(3, 1), 2).ok());  // not suspendable: it waits
  ASSERT_TRUE(s.submit(suspendable(job(4, 1)), 2).ok());
  EXPECT_EQ(ids(s.schedule(2)), std::vector<JobId>{4});
  ASSERT_TRUE(s.submit(job(5, 4, 100), 3).ok());  // would inherit the GPUs drained for job 2
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_TRUE(s.schedule(60).empty());
  ASSERT_EQ(s.jobs_in_the_way(), std::vector<JobId>{4});
  ASSERT_TRUE(s.give_way(4).ok());
  ASSERT_TRUE(s.suspend(4, 61).ok());
  ASSERT_TRUE(s.resume(4).ok());
  EXPECT_EQ(ids(s.schedule(61)), std::vector<JobId>{2});
  // Job 4 gave way to job 2 only: the reservation is its own now, not job 5's.
  ASSERT_TRUE(s.reservation().has_value());
  EXPECT_EQ(s.reservation()->id, 4u);
  ASSERT_TRUE(s.finish(2, 80).ok());
  // Ahead of job 3, which came before it.
  EXPECT_EQ(ids(s.schedule(80)), (std::vector<JobId>{4, 3}));
}

TEST(SchedulerTest, AJobThatGaveWayKeepsItsTurnAfterARestart) {
  // The end of AJobSuspendedForAReservationGoesRightAfterThatJob as a restarted daemon takes it
  // up: job 2 running on all four GPUs, jobs 3, 4 (suspended on GPU 0 for job 2) and 5 queued.
  auto order_after_job_2 = [](bool told_it_gave_way) {
    SchedulerConfig config;
    config.backfill_by_suspending = true;
    Scheduler s = *Scheduler::create(make_machine(4), config);
    EXPECT_TRUE(s.adopt(job(2, 4, 100), {0, 1, 2, 3}, 61).ok());
    EXPECT_TRUE(s.submit(job(3, 1), 70, 2).ok());
    JobRequest resumed = job(4, 1);
    resumed.gpus.allowed = {0};
    EXPECT_TRUE(s.submit(resumed, 70, 2).ok());
    EXPECT_TRUE(s.submit(job(5, 4, 100), 70, 3).ok());
    if (told_it_gave_way) {
      EXPECT_TRUE(s.gave_way(4).ok());
    }
    EXPECT_TRUE(s.finish(2, 80).ok());
    return ids(s.schedule(80));
  };
  EXPECT_EQ(order_after_job_2(true), (std::vector<JobId>{4, 3}));
  // Without the mark, job 3 would come first and take GPU 0, which job 4 must resume on.
  EXPECT_EQ(order_after_job_2(false), std::vector<JobId>{3});
  // Only a queued job can have given way.
  Scheduler s = with_a_reservation_and_loans();
  EXPECT_FALSE(s.gave_way(1).ok());  // running
  EXPECT_FALSE(s.gave_way(9).ok());  // unknown
}

TEST(SchedulerTest, TheFewestJobsOnLoanGiveWayTheLargestFirst) {
  // On loan, job 3 takes a quarter, then jobs 4 and 5 an eighth each.
  Scheduler s = half_held_three_quarters_reserved();
  ASSERT_TRUE(s.submit(slice_of(suspendable(job(3, 1)), kGpuMib / 4), 2).ok());
  ASSERT_EQ(ids(s.schedule(2)), std::vector<JobId>{3});
  ASSERT_TRUE(s.submit(slice_of(suspendable(job(4, 1)), kGpuMib / 8), 3).ok());
  ASSERT_TRUE(s.submit(slice_of(suspendable(job(5, 1)), kGpuMib / 8), 4).ok());
  ASSERT_EQ(ids(s.schedule(4)), (std::vector<JobId>{4, 5}));
  ASSERT_TRUE(s.finish(1, 50).ok());
  EXPECT_TRUE(s.schedule(50).empty());
  EXPECT_EQ(s.jobs_in_the_way(), std::vector<JobId>{3});  // one job, not the two latest
}

TEST(SchedulerTest, AJobOnLoanThatCannotBeSuspendedRunsToItsEnd) {
  Scheduler s = with_a_reservation_and_loans();
  ASSERT_TRUE(s.submit(suspendable(job(3, 1)), 2).ok());
  ASSERT_EQ(ids(s.schedule(2)), std::vector<JobId>{3});
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_TRUE(s.schedule(60).empty());
  ASSERT_EQ(s.jobs_in_the_way(), std::vector<JobId>{3});
  s.end_loan(3);  // say the driver refused its checkpoint
  EXPECT_FALSE(s.give_way(3).ok());
  EXPECT_TRUE(s.jobs_in_the_way().empty());
  // The reservation expects it to run its course now (the default run time), and lends again.
  EXPECT_TRUE(s.schedule(61).empty());
  ASSERT_TRUE(s.reservation().has_value());
  EXPECT_EQ(s.reservation()->start_s, 2 + 3600);
  ASSERT_TRUE(s.submit(suspendable(job(4, 1)), 62).ok());
  EXPECT_EQ(ids(s.schedule(62)), std::vector<JobId>{4});
}

TEST(SchedulerTest, AJobOnLoanSuspendedForAnotherReasonKeepsItsPlace) {
  Scheduler s = with_a_reservation_and_loans();
  ASSERT_TRUE(s.submit(job(3, 1), 2).ok());
  ASSERT_TRUE(s.submit(suspendable(job(4, 1)), 2).ok());
  ASSERT_EQ(ids(s.schedule(2)), std::vector<JobId>{4});
  ASSERT_TRUE(s.suspend(4, 5).ok());  // by its owner, say: not for the reservation
  ASSERT_TRUE(s.resume(4).ok());
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_EQ(ids(s.schedule(60)), std::vector<JobId>{2});
  ASSERT_TRUE(s.finish(2, 80).ok());
  EXPECT_EQ(ids(s.schedule(80)), (std::vector<JobId>{3, 4}));  // in arrival order
}

TEST(SchedulerTest, WithoutBackfillBySuspendingNoJobGoesOnLoan) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  ASSERT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(job(2, 4, 100), 1).ok());
  ASSERT_TRUE(s.submit(suspendable(job(3, 1)), 2).ok());
  EXPECT_TRUE(s.schedule(2).empty());
  ASSERT_TRUE(s.finish(1, 60).ok());
  EXPECT_EQ(ids(s.schedule(60)), std::vector<JobId>{2});
  EXPECT_TRUE(s.jobs_in_the_way().empty());
}

TEST(SchedulerTest, ASuspendedJobIsForgottenWhenRemoved) {
  Scheduler s = make_scheduler(1, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 1), 0).ok());
  s.schedule(0);
  ASSERT_TRUE(s.suspend(1, 5).ok());
  ASSERT_TRUE(s.remove(1).ok());
  EXPECT_FALSE(s.resume(1).ok());
  ASSERT_TRUE(s.submit(job(2, 1), 6).ok());
  EXPECT_EQ(ids(s.schedule(6)), std::vector<JobId>{2});
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
    JobRequest first{1, "u", {1, 30000}, 0, std::nullopt};
    JobRequest second{2, "u", {1, 30000}, 0, std::nullopt};
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

TEST(SchedulerTest, AnArrayRunsAtMostItsLimitOfTasksAndOthersGoOn) {
  for (Policy policy : {Policy::Backfill, Policy::Gpupool}) {
    Scheduler s = make_scheduler(8, policy);
    for (JobId id = 10; id < 15; ++id) {
      JobRequest task = job(id, 1, 100);
      task.array = ArrayTask{10, static_cast<unsigned>(id - 10), 2};
      ASSERT_TRUE(s.submit(task, 0).ok());
    }
    ASSERT_TRUE(s.submit(job(20, 1, 100, "other"), 0).ok());
    EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{10, 11, 20}));
    EXPECT_EQ(s.waiting(12, 0)->reason, WaitReason::ArrayLimit);
    EXPECT_EQ(s.waiting(12, 0)->detail, "array limit: 2 of array 10 running");
    EXPECT_FALSE(s.expected_starts(0, 100).contains(12)) << "held back: no estimate";
    EXPECT_EQ(ids(s.schedule(1)), std::vector<JobId>{});
    ASSERT_TRUE(s.finish(10, 2).ok());
    EXPECT_EQ(ids(s.schedule(2)), std::vector<JobId>{12});
    // A task adopted after a restart counts towards its array's limit.
    ASSERT_TRUE(s.finish(11, 3).ok());
    JobRequest adopted = job(30, 1, 100);
    adopted.array = ArrayTask{10, 9, 2};
    unsigned free_gpu = 0;
    while (s.availability().at(free_gpu).exclusive_held) ++free_gpu;
    ASSERT_TRUE(s.adopt(adopted, {free_gpu}, 3).ok());
    EXPECT_EQ(ids(s.schedule(3)), std::vector<JobId>{});
  }
}

TEST(SchedulerTest, AQueuedJobSaysWhyItWaits) {
  Scheduler s = make_scheduler(4, Policy::Gpupool, 3.0);
  ASSERT_TRUE(s.submit(job(1, 2, 100, "a"), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 2, 100, "a"), 0).ok());  // would put a over its quota of 3
  ASSERT_TRUE(s.submit(job(3, 2, 100, "b"), 0).ok());
  ASSERT_TRUE(s.submit(job(4, 2, std::nullopt, "c"), 0).ok());  // no room: the next in line
  ASSERT_TRUE(s.submit(job(5, 2, std::nullopt, "d"), 0).ok());  // no room either
  EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{1, 3}));
  EXPECT_FALSE(s.waiting(1, 0));   // running
  EXPECT_FALSE(s.waiting(99, 0));  // unknown
  EXPECT_EQ(s.waiting(2, 0)->reason, WaitReason::QuotaLimit);
  EXPECT_EQ(s.waiting(2, 0)->detail, "over quota: a holds 2 of 3 GPUs");
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->start_s, 100);
  auto next = s.waiting(s.reservation()->id, 40);
  EXPECT_EQ(next->reason, WaitReason::Resources);
  EXPECT_EQ(next->detail.rfind("next in line: GPU ", 0), 0u);
  EXPECT_NE(next->detail.find("expected to start in 1m"), std::string::npos) << next->detail;
  JobId other = s.reservation()->id == 4 ? 5 : 4;
  EXPECT_EQ(s.waiting(other, 0)->reason, WaitReason::Resources);
  EXPECT_EQ(s.waiting(other, 0)->detail.rfind("waiting for 2 GPUs: 4 busy", 0), 0u) << s.waiting(other, 0)->detail;
  // Room, but GPUs kept for the job in line before it: a reservation on an idle machine. It
  // names the holder and says how the waiting job could use the GPUs meanwhile.
  ASSERT_TRUE(s.finish(1, 10).ok());
  ASSERT_TRUE(s.finish(3, 10).ok());
  auto kept_off = s.waiting(other, 10);
  EXPECT_EQ(kept_off->reason, WaitReason::Reservation);
  EXPECT_EQ(kept_off->detail, fmt::format("GPU {} reserved for job {} of {}, expected to start in 1m; with a time "
                                          "limit (--time) under 1m it could start now",
                                          gpu_list_text(s.reservation()->gpus), s.reservation()->id,
                                          other == 4 ? "d" : "c"));
}

TEST(SchedulerTest, ExpectedStartsPlanTheQueueInOrderAroundTheReservation) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 2, 50), 0).ok());
  ASSERT_EQ(s.schedule(0).size(), 2u);
  ASSERT_TRUE(s.submit(job(3, 4, 10), 1).ok());   // the whole machine, when both have ended
  ASSERT_TRUE(s.submit(job(4, 2, 30), 1).ok());   // on job 2's GPUs, done before job 3 starts
  ASSERT_TRUE(s.submit(job(5, 1), 1).ok());       // no limit: an hour, so only after job 3
  EXPECT_TRUE(s.schedule(1).empty());
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 3u);
  std::map<JobId, double> starts = s.expected_starts(1, 100);
  EXPECT_EQ(starts, (std::map<JobId, double>{{3, 100}, {4, 50}, {5, 110}}));
  // The plan agrees with the reservation, and only the first `limit` jobs in order are planned.
  EXPECT_EQ(starts.at(3), s.reservation()->start_s);
  EXPECT_EQ(s.expected_starts(1, 1), (std::map<JobId, double>{{3, 100}}));
  // Planning starts nothing.
  EXPECT_EQ(s.queued(), 3u);
  EXPECT_EQ(s.running(), 2u);
}

TEST(SchedulerTest, AJobOverItsQuotaHasNoExpectedStart) {
  Scheduler s = make_scheduler(4, Policy::Gpupool, 2.0);
  ASSERT_TRUE(s.submit(job(1, 2, 100, "a"), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 1, 100, "a"), 0).ok());
  ASSERT_EQ(s.schedule(0).size(), 1u);
  EXPECT_TRUE(s.expected_starts(0, 100).empty());
}

TEST(SchedulerTest, WithoutAReservationAJobThatFitsWaitsForPriority) {
  Scheduler s = make_scheduler(2, Policy::Fifo);
  ASSERT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 1), 0).ok());
  ASSERT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(job(3, 2), 1).ok());  // the head: it blocks everyone behind it (fifo)
  ASSERT_TRUE(s.finish(1, 2).ok());
  ASSERT_TRUE(s.submit(job(4, 1), 3).ok());
  EXPECT_EQ(ids(s.schedule(3)), std::vector<JobId>{2});
  EXPECT_EQ(s.waiting(3, 3)->reason, WaitReason::Resources);
  EXPECT_EQ(s.waiting(4, 3)->reason, WaitReason::Priority) << s.waiting(4, 3)->detail;
}

TEST(SchedulerTest, JobsThatCanNeverRunAreRefused) {
  Scheduler s = make_scheduler(2, Policy::Gpupool, 1.5);
  EXPECT_EQ(s.submit(job(1, 3), 0).error().message, "asks for 3 GPUs, the machine has 2");
  EXPECT_EQ(s.submit(job(2, 2), 0).error().message,
            "asks for 2.00 GPUs, above the quota of 1.50 per user");
  EXPECT_EQ(s.submit(JobRequest{3, "u", {1, 90000}, 0, std::nullopt}, 0).error().message,
            "asks for 90000 MiB on 1 GPU, only 0 GPUs have that much memory");
  ASSERT_TRUE(s.submit(job(4, 1), 0).ok());
  EXPECT_EQ(s.submit(job(4, 1), 0).error().message, "job 4 is already submitted");
  EXPECT_EQ(s.finish(9, 0).error().message, "job 9 is not running");
  EXPECT_EQ(parse_policy("sjf").error().message,
            "unknown policy 'sjf': expected fifo, backfill or gpupool");
}

// Four GPUs; "heavy" has used GPUs before, so fair share puts "light" first.
TEST(SchedulerTest, TheReservationStaysWithItsJobWhenFairShareWouldReorder) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 2, 100, "heavy"), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 2, 200, "other"), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{1, 2}));
  ASSERT_TRUE(s.submit(job(3, 4, 50, "heavy"), 1).ok());
  EXPECT_TRUE(s.schedule(1).empty());
  ASSERT_TRUE(s.submit(job(4, 1, std::nullopt, "light"), 2).ok());
  EXPECT_TRUE(s.schedule(2).empty());  // a full machine: the plan stands
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 3u);
  ASSERT_TRUE(s.finish(1, 100).ok());
  // Light's job comes first by fair share, but would take a GPU drained for job 3.
  EXPECT_TRUE(s.schedule(100).empty());
  EXPECT_EQ(s.reservation()->id, 3u);
  EXPECT_EQ(s.reservation()->start_s, 200);
  ASSERT_TRUE(s.finish(2, 150).ok());
  EXPECT_EQ(ids(s.schedule(150)), std::vector<JobId>{3});
}

TEST(SchedulerTest, DrainedGpusPassToTheNextWideJobThatWasWaiting) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 1, 100, "a"), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(job(2, 4, 100, "b"), 1).ok());
  ASSERT_TRUE(s.submit(job(3, 1, std::nullopt, "c"), 2).ok());  // narrow: never handed over to
  ASSERT_TRUE(s.submit(job(4, 4, 100, "c"), 3).ok());
  EXPECT_TRUE(s.schedule(3).empty());
  ASSERT_TRUE(s.finish(1, 50).ok());
  EXPECT_EQ(ids(s.schedule(50)), std::vector<JobId>{2});
  // Job 4 inherits the reservation, ahead of its own user's earlier job 3.
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 4u);
  EXPECT_EQ(s.reservation()->start_s, 150);
  ASSERT_TRUE(s.submit(job(5, 4, 100, "c"), 55).ok());  // arrived after the hand-over began
  ASSERT_TRUE(s.finish(2, 60).ok());
  EXPECT_EQ(ids(s.schedule(60)), std::vector<JobId>{4});
  // The chain ends with the jobs that were waiting when it began: job 3 goes before job 5.
  ASSERT_TRUE(s.finish(4, 70).ok());
  EXPECT_EQ(ids(s.schedule(70)), std::vector<JobId>{3});
}

TEST(SchedulerTest, AnOverdueJobGoesAheadOfFairShare) {
  for (double overdue_after : {100.0, 1000.0}) {
    SchedulerConfig config;
    config.overdue_after_s = overdue_after;
    auto created = Scheduler::create(make_machine(1), config);
    ASSERT_TRUE(created.ok());
    Scheduler& s = *created;
    ASSERT_TRUE(s.submit(job(1, 1, 1000, "heavy"), 0).ok());
    s.schedule(0);
    ASSERT_TRUE(s.submit(job(2, 1, 1000, "heavy"), 1).ok());
    ASSERT_TRUE(s.submit(job(3, 1, 1000, "light"), 150).ok());
    ASSERT_TRUE(s.finish(1, 200).ok());
    // Job 2 has waited 199 s, job 3 50 s: past 100 s, arrival order wins over fair share.
    EXPECT_EQ(ids(s.schedule(200)), std::vector<JobId>{overdue_after == 100 ? 2u : 3u});
  }
}

TEST(SchedulerTest, AJobTakenUpAfterARestartKeepsTheTimeItWaited) {
  for (bool keeps : {true, false}) {
    SchedulerConfig config;
    config.overdue_after_s = 100;
    auto created = Scheduler::create(make_machine(1), config);
    ASSERT_TRUE(created.ok());
    Scheduler& s = *created;
    ASSERT_TRUE(s.submit(job(1, 1, 1000, "heavy"), 150).ok());
    s.schedule(150);
    // Job 2 was queued at 1, before the restart at 150; job 3 after it.
    ASSERT_TRUE(s.submit(job(2, 1, 1000, "heavy"), 150, keeps ? std::optional(1.0) : std::nullopt).ok());
    ASSERT_TRUE(s.submit(job(3, 1, 1000, "light"), 160).ok());
    ASSERT_TRUE(s.finish(1, 200).ok());
    EXPECT_EQ(ids(s.schedule(200)), std::vector<JobId>{keeps ? 2u : 3u}) << "overdue since 101, or not at all";
  }
}

// Two NVSwitch islands of four GPUs, joined by PCIe across sockets.
Machine two_switch_islands() {
  Machine machine = make_machine(8);
  for (unsigned a = 0; a < 8; ++a) {
    for (unsigned b = 0; b < 8; ++b) {
      if (a / 4 != b / 4) machine.links[a][b] = Link{0, false, PcieLevel::System};
    }
  }
  return machine;
}

TEST(SchedulerTest, APassPlacesTheJobsItStartsWidestFirst) {
  auto created = Scheduler::create(two_switch_islands(), SchedulerConfig{});
  ASSERT_TRUE(created.ok());
  Scheduler& s = *created;
  ASSERT_TRUE(s.submit(job(1, 1), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 1), 0).ok());
  ASSERT_TRUE(s.submit(job(3, 4), 0).ok());
  std::vector<JobStart> starts = s.schedule(0);
  // In policy order; the 4-GPU job was placed first, on a whole island.
  ASSERT_EQ(ids(starts), (std::vector<JobId>{1, 2, 3}));
  EXPECT_EQ(starts[2].gpus, (std::vector<unsigned>{0, 1, 2, 3}));
  EXPECT_GE(starts[0].gpus[0], 4u);
  EXPECT_GE(starts[1].gpus[0], 4u);
  EXPECT_NE(starts[0].gpus, starts[1].gpus);
}

TEST(SchedulerTest, PerUserQuotasReplaceTheDefault) {
  SchedulerConfig config;
  config.quota_gpus = 1;
  config.user_quota_gpus = {{"big", 3}, {"small", 0.5}};
  auto created = Scheduler::create(make_machine(4), config);
  ASSERT_TRUE(created.ok());
  Scheduler& s = *created;
  EXPECT_EQ(s.submit(job(1, 4, 100, "big"), 0).error().message,
            "asks for 4.00 GPUs, above the quota of 3.00 for big");
  EXPECT_EQ(s.submit(job(2, 1, 100, "small"), 0).error().message,
            "asks for 1.00 GPUs, above the quota of 0.50 for small");
  EXPECT_EQ(s.submit(job(3, 2, 100, "other"), 0).error().message,
            "asks for 2.00 GPUs, above the quota of 1.00 per user");
  ASSERT_TRUE(s.submit(JobRequest{4, "small", {1, 40000}, 0, 100.0}, 0).ok());
  ASSERT_TRUE(s.submit(JobRequest{5, "small", {1, 40000}, 0, 100.0}, 0).ok());
  ASSERT_TRUE(s.submit(job(6, 2, 100, "big"), 0).ok());
  ASSERT_TRUE(s.submit(job(7, 1, 100, "big"), 0).ok());
  ASSERT_TRUE(s.submit(job(8, 1, 100, "big"), 0).ok());
  // big stops at 3 GPUs, small at half of one; the fourth GPU waits for big's next job.
  EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{4, 6, 7}));
  EXPECT_EQ(s.held_gpus("big"), 3);
  EXPECT_EQ(s.held_gpus("small"), 0.5);

  config.user_quota_gpus = {{"nobody", 0}};
  EXPECT_EQ(Scheduler::create(make_machine(4), config).error().message,
            "the quota of nobody must be positive");
}

TEST(SchedulerTest, RemoveTakesAQueuedJobOut) {
  Scheduler s = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 1, 100), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 2, 100), 0).ok());
  ASSERT_TRUE(s.submit(job(3, 1, 500), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 2u);
  ASSERT_TRUE(s.remove(2).ok());
  EXPECT_FALSE(s.reservation());
  EXPECT_EQ(s.queued(), 1u);
  EXPECT_EQ(s.remove(2).error().message, "job 2 is not queued");
  EXPECT_EQ(s.remove(1).error().message, "job 1 is not queued");  // running
  ASSERT_TRUE(s.finish(1, 10).ok());
  EXPECT_EQ(ids(s.schedule(10)), std::vector<JobId>{3});
  EXPECT_EQ(s.queued(), 0u);
  // A removed job may be submitted again, at the back of the queue.
  ASSERT_TRUE(s.submit(job(2, 1, 100), 10).ok());
  EXPECT_EQ(s.queued(), 1u);
}

TEST(SchedulerTest, RequeueGivesTheJobItsPlaceBack) {
  Scheduler s = make_scheduler(2, Policy::Gpupool);
  for (JobId id = 1; id <= 4; ++id) ASSERT_TRUE(s.submit(job(id, 1, 100), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), (std::vector<JobId>{1, 2}));
  ASSERT_TRUE(s.requeue(1, 1).ok());
  EXPECT_EQ(s.running(), 1u);
  EXPECT_EQ(s.queued(), 3u);
  EXPECT_EQ(s.held_gpus("u"), 1);
  EXPECT_EQ(s.requeue(1, 1).error().message, "job 1 is not running");
  // Its GPU is free again, and it goes before the jobs that arrived after it.
  EXPECT_EQ(ids(s.schedule(1)), std::vector<JobId>{1});
  ASSERT_TRUE(s.finish(2, 5).ok());
  EXPECT_EQ(ids(s.schedule(5)), std::vector<JobId>{3});
}

TEST(SchedulerTest, AdoptedJobsHoldTheirGpusAndShapeTheReservation) {
  SchedulerConfig config;
  config.user_quota_gpus = {{"a", 1}};
  auto created = Scheduler::create(make_machine(4), config);
  ASSERT_TRUE(created.ok());
  Scheduler& s = *created;
  ASSERT_TRUE(s.schedule(1000).empty());
  // Over the quota of 1: adopted anyway, and it counts towards fair share from its start.
  ASSERT_TRUE(s.adopt(job(1, 2, 1200, "a"), {2, 3}, 0).ok());
  EXPECT_EQ(s.running(), 1u);
  EXPECT_EQ(s.held_gpus("a"), 2);
  EXPECT_NEAR(s.fair_share_usage("a"), 2000, 20);  // 2 GPUs for 1000 s, barely decayed
  EXPECT_TRUE(s.availability()[2].exclusive_held && s.availability()[3].exclusive_held);
  ASSERT_TRUE(s.adopt(JobRequest{2, "b", {1, 30000}, 0, std::nullopt}, {1}, 900).ok());
  ASSERT_TRUE(s.adopt(JobRequest{3, "b", {1, 50000}, 0, std::nullopt}, {1}, 900).ok());

  EXPECT_EQ(s.adopt(job(1, 1), {0}, 0).error().message, "job 1 is already submitted");
  EXPECT_EQ(s.adopt(job(4, 2), {0}, 0).error().message, "job 4 asks for 2 GPUs but runs on 1");
  EXPECT_EQ(s.adopt(job(4, 1), {4}, 0).error().message, "job 4 runs on GPU 4, the machine has 4");
  EXPECT_EQ(s.adopt(job(4, 2), {0, 0}, 0).error().message, "job 4 lists GPU 0 twice");
  EXPECT_EQ(s.adopt(job(4, 2), {0, 3}, 0).error().message,
            "job 4 runs on GPU 3, which another job holds");
  EXPECT_EQ(s.adopt(job(4, 1), {1}, 0).error().message,
            "job 4 runs on GPU 1, which another job holds");
  EXPECT_EQ(s.adopt(JobRequest{4, "b", {1, 1000}, 0, std::nullopt}, {1}, 0).error().message,
            "job 4 takes 1000 MiB of GPU 1, which has 0 MiB left");
  EXPECT_EQ(s.running(), 3u);

  // A 4-GPU job waits for job 1's time limit, and a short job may run on GPU 0 meanwhile.
  ASSERT_TRUE(s.submit(job(5, 4, 100, "c"), 1000).ok());
  ASSERT_TRUE(s.submit(job(6, 1, 100, "d"), 1000).ok());
  EXPECT_EQ(ids(s.schedule(1000)), std::vector<JobId>{6});
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 5u);
  ASSERT_TRUE(s.finish(1, 1100).ok());
  ASSERT_TRUE(s.finish(2, 1100).ok());
  ASSERT_TRUE(s.finish(3, 1100).ok());
  ASSERT_TRUE(s.finish(6, 1100).ok());
  EXPECT_EQ(ids(s.schedule(1100)), std::vector<JobId>{5});
}

TEST(SchedulerTest, OutsideUseKeepsJobsOffAndOutlastsFinish) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  EXPECT_EQ(s.set_outside_use({}).error().message, "outside use lists 0 GPUs, the machine has 4");
  std::vector<GpuAvailability> outside(4);
  outside[0] = outside_process(70000);
  ASSERT_TRUE(s.set_outside_use(outside).ok());
  ASSERT_TRUE(s.submit(job(1, 4, 100), 0).ok());
  ASSERT_TRUE(s.submit(job(2, 3, 100), 0).ok());
  std::vector<JobStart> starts = s.schedule(0);
  ASSERT_EQ(ids(starts), std::vector<JobId>{2});
  EXPECT_EQ(starts[0].gpus, (std::vector<unsigned>{1, 2, 3}));
  // Busy for good as far as planning goes: no reservation for a job that needs GPU 0.
  EXPECT_FALSE(s.reservation());
  EXPECT_EQ(s.availability()[0].holders, "pid 812 bob python");

  // A slice fits beside the outside process's memory, but not beside an exclusive lease.
  ASSERT_TRUE(s.submit(JobRequest{3, "u", {1, 10000}, 0, 100.0}, 1).ok());
  ASSERT_TRUE(s.submit(JobRequest{4, "u", {1, 20000}, 0, 100.0}, 1).ok());
  starts = s.schedule(1);
  ASSERT_EQ(ids(starts), std::vector<JobId>{3});
  EXPECT_EQ(starts[0].gpus, std::vector<unsigned>{0});

  ASSERT_TRUE(s.finish(2, 50).ok());
  ASSERT_TRUE(s.finish(3, 50).ok());
  EXPECT_TRUE(s.availability()[0].external_busy);
  EXPECT_EQ(s.availability()[0].external_mib, 70000u);
  outside[0] = GpuAvailability{};
  outside[1].exclusive_held = true;
  outside[2].usable = false;
  ASSERT_TRUE(s.set_outside_use(outside).ok());
  starts = s.schedule(50);
  ASSERT_EQ(ids(starts), std::vector<JobId>{4});
  EXPECT_TRUE(starts[0].gpus[0] == 0 || starts[0].gpus[0] == 3);
  EXPECT_EQ(s.availability()[1].external_mib, kGpuMib);
  EXPECT_FALSE(s.availability()[2].usable);

  ASSERT_TRUE(s.set_outside_use(std::vector<GpuAvailability>(4)).ok());
  ASSERT_TRUE(s.finish(4, 60).ok());
  EXPECT_EQ(ids(s.schedule(60)), std::vector<JobId>{1});
}

JobRequest mps_slice(JobId id, std::string user, uint64_t mib) {
  JobRequest request{id, std::move(user), {1, mib}, 0, std::nullopt};
  request.mps = true;
  return request;
}

TEST(Scheduler, AnMpsGpuServesOneUsersSlicesAtATime) {
  for (Policy policy : {Policy::Gpupool, Policy::Backfill}) {
    Scheduler s = make_scheduler(1, policy);
    ASSERT_TRUE(s.submit(mps_slice(1, "alice", 20000), 0).ok());
    ASSERT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
    EXPECT_EQ(s.availability()[0].mps_user, "alice");

    // Bob's MPS slice would fit, but the GPU's server serves Alice; Alice's next one joins hers,
    // and a slice without MPS (a watched one) may share the GPU with either. (Under gpupool's
    // policy Bob's job, first in line, holds a reservation: the others pass it by their limits.)
    ASSERT_TRUE(s.submit(mps_slice(2, "bob", 20000), 1).ok());
    JobRequest alice_again = mps_slice(3, "alice", 20000);
    alice_again.time_limit_s = 100;
    ASSERT_TRUE(s.submit(alice_again, 1).ok());
    ASSERT_TRUE(s.submit(JobRequest{4, "carol", {1, 20000}, 0, 100.0}, 1).ok());
    std::vector<JobId> started = ids(s.schedule(1));
    std::sort(started.begin(), started.end());
    EXPECT_EQ(started, (std::vector<JobId>{3, 4})) << to_string(policy);
    ASSERT_TRUE(s.waiting(2, 1));
    EXPECT_EQ(s.waiting(2, 1)->reason, WaitReason::Resources);
    EXPECT_EQ(s.waiting(2, 1)->detail,
              "GPU 0's MPS server serves alice's slices: MPS serves one user at a time on a GPU")
        << "before the reservation it may hold: " << to_string(policy);

    // Once Alice's last MPS slice ends and a reading shows no client of hers left, the server is
    // Bob's: until then her processes may still be its clients.
    ASSERT_TRUE(s.finish(1, 10).ok());
    EXPECT_EQ(ids(s.schedule(10)), std::vector<JobId>{}) << to_string(policy);
    ASSERT_TRUE(s.finish(3, 11).ok());
    EXPECT_EQ(s.availability()[0].mps_user, "");
    EXPECT_EQ(s.availability()[0].mps_client_user, "alice");
    EXPECT_EQ(ids(s.schedule(11)), std::vector<JobId>{});
    ASSERT_TRUE(s.set_outside_use(std::vector<GpuAvailability>(1)).ok());
    EXPECT_EQ(ids(s.schedule(12)), std::vector<JobId>{2});
    EXPECT_EQ(s.availability()[0].mps_user, "bob");
    EXPECT_EQ(s.availability()[0].mps_slices, 1u);
  }
}

TEST(Scheduler, AJobKeptFromAnMpsGpuSaysWhy) {
  Scheduler s = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(s.submit(mps_slice(1, "alice", 20000), 0).ok());
  ASSERT_TRUE(s.submit(JobRequest{2, "carol", {1, std::nullopt}, 0, std::nullopt}, 0).ok());
  ASSERT_EQ(ids(s.schedule(0)), (std::vector<JobId>{1, 2}));
  // Bob's is second in line behind Dave's whole GPU, which holds the reservation.
  ASSERT_TRUE(s.submit(JobRequest{3, "dave", {1, std::nullopt}, 0, std::nullopt}, 1).ok());
  ASSERT_TRUE(s.submit(mps_slice(4, "bob", 20000), 1).ok());
  EXPECT_EQ(ids(s.schedule(1)), std::vector<JobId>{});
  ASSERT_TRUE(s.waiting(4, 1));
  unsigned alices = s.availability()[0].mps_user == "alice" ? 0 : 1;
  EXPECT_EQ(s.availability()[alices].mps_user, "alice");
  EXPECT_EQ(s.waiting(4, 1)->detail, mps_one_user_text(alices, "alice"));
}

TEST(Scheduler, MpsClientsThatOutlivedTheirJobKeepTheServersUser) {
  // Bob's MPS clients linger on the one GPU after his job ended: alice's MPS slice waits and says
  // why, bob's own goes beside his clients, and once they have ended alice's goes too.
  Scheduler s = make_scheduler(1, Policy::Gpupool);
  std::vector<GpuAvailability> outside(1);
  outside[0].mps_client_user = "bob";
  ASSERT_TRUE(s.set_outside_use(outside).ok());
  ASSERT_TRUE(s.submit(mps_slice(1, "alice", 20000), 0).ok());
  EXPECT_EQ(ids(s.schedule(0)), std::vector<JobId>{});
  ASSERT_TRUE(s.waiting(1, 0));
  EXPECT_EQ(s.waiting(1, 0)->detail, mps_other_clients_text(0, "bob"));
  ASSERT_TRUE(s.submit(mps_slice(2, "bob", 20000), 1).ok());
  EXPECT_EQ(ids(s.schedule(1)), std::vector<JobId>{2});
  ASSERT_TRUE(s.finish(2, 2).ok());
  outside[0].mps_client_user.clear();
  ASSERT_TRUE(s.set_outside_use(outside).ok());
  EXPECT_EQ(ids(s.schedule(3)), std::vector<JobId>{1});
}

TEST(Scheduler, AnotherUsersMpsSliceGoesToAnotherGpu) {
  Scheduler s = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(s.submit(mps_slice(1, "alice", 20000), 0).ok());
  auto first = s.schedule(0);
  ASSERT_EQ(ids(first), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(mps_slice(2, "bob", 20000), 1).ok());
  auto second = s.schedule(1);
  ASSERT_EQ(ids(second), std::vector<JobId>{2});
  EXPECT_NE(second[0].gpus, first[0].gpus) << "best fit would have packed it beside Alice's";
}

JobRequest kept_to(JobRequest request, std::vector<unsigned> allowed, std::vector<unsigned> excluded = {}) {
  request.gpus.allowed = std::move(allowed);
  request.gpus.excluded = std::move(excluded);
  return request;
}

TEST(SchedulerTest, AllowedAndExcludedGpusHoldForEveryPolicy) {
  for (Policy policy : {Policy::Fifo, Policy::Backfill, Policy::Gpupool}) {
    Scheduler s = make_scheduler(4, policy);
    ASSERT_TRUE(s.submit(kept_to(job(1, 1), {3}), 0).ok());
    ASSERT_TRUE(s.submit(kept_to(job(2, 2), {}, {0}), 0).ok());
    ASSERT_TRUE(s.submit(job(3, 1), 0).ok());
    std::map<JobId, std::vector<unsigned>> placed;
    for (JobStart& start : s.schedule(0)) {
      std::sort(start.gpus.begin(), start.gpus.end());
      placed[start.id] = start.gpus;
    }
    EXPECT_EQ(placed[1], std::vector<unsigned>{3}) << to_string(policy);
    EXPECT_EQ(placed[2], (std::vector<unsigned>{1, 2})) << to_string(policy);
    EXPECT_EQ(placed[3], std::vector<unsigned>{0}) << to_string(policy);
  }
}

TEST(SchedulerTest, AJobKeptToBusyGpusWaitsForThemAndReservesThem) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(kept_to(job(1, 1, 100), {3}), 0).ok());
  ASSERT_EQ(ids(s.schedule(0)), std::vector<JobId>{1});
  ASSERT_TRUE(s.submit(kept_to(job(2, 1), {3}), 1).ok());
  ASSERT_TRUE(s.submit(job(3, 1), 2).ok());  // no limit: it may run anywhere but GPU 3
  std::vector<JobStart> starts = s.schedule(2);
  ASSERT_EQ(ids(starts), std::vector<JobId>{3});
  EXPECT_NE(starts[0].gpus, std::vector<unsigned>{3});
  ASSERT_TRUE(s.reservation());
  EXPECT_EQ(s.reservation()->id, 2u);
  EXPECT_EQ(s.reservation()->gpus, std::vector<unsigned>{3});
  EXPECT_EQ(s.waiting(2, 2)->detail, "next in line: GPU 3 reserved for it, expected to start in 1m");
  // Kept to GPU 3 and not first in line: the wait names that GPU alone.
  ASSERT_TRUE(s.submit(kept_to(job(4, 1), {3}), 3).ok());
  EXPECT_TRUE(s.schedule(3).empty());
  EXPECT_EQ(s.waiting(4, 3)->detail, "waiting for 1 GPU: 1 busy (GPU 3: in use)");
  ASSERT_TRUE(s.finish(1, 50).ok());
  EXPECT_EQ(ids(s.schedule(50)), std::vector<JobId>{2});
}

TEST(SchedulerTest, BackfillKeepsToAJobsGpus) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  ASSERT_TRUE(s.submit(job(1, 2, 100), 0).ok());
  s.schedule(0);
  ASSERT_TRUE(s.submit(job(2, 4), 1).ok());  // reserves all four at t=100
  ASSERT_TRUE(s.submit(kept_to(job(3, 1, 500), {}, {0, 1}), 2).ok());  // too long for the gap
  ASSERT_TRUE(s.submit(kept_to(job(4, 1, 50), {}, {0, 1}), 3).ok());
  std::vector<JobStart> starts = s.schedule(3);
  ASSERT_EQ(ids(starts), std::vector<JobId>{4});
  EXPECT_TRUE(starts[0].gpus == std::vector<unsigned>{2} || starts[0].gpus == std::vector<unsigned>{3});
}

TEST(SchedulerTest, GpuSetsThatCanNeverServeTheJobAreRefused) {
  Scheduler s = make_scheduler(4, Policy::Gpupool);
  EXPECT_EQ(s.admissible(kept_to(job(1, 2), {1})).error().message, "asks for 2 GPUs but may use only 1 (GPU 1)");
  EXPECT_EQ(s.submit(kept_to(job(2, 1), {}, {0, 1, 2, 3}), 0).error().message,
            "asks for 1 GPU but may use only 0");
  EXPECT_EQ(s.admissible(kept_to(job(3, 1), {7})).error().message,
            "names GPU 7, which does not exist: the machine has GPUs 0 to 3");
  EXPECT_EQ(s.admissible(kept_to(job(4, 4), {0, 1, 2, 3}, {2})).error().message,
            "asks for 4 GPUs but may use only 3 (GPU 0,1,3)");
  EXPECT_TRUE(s.admissible(kept_to(job(5, 3), {0, 1, 2, 3}, {2})).ok());
  EXPECT_EQ(s.admissible(kept_to(JobRequest{6, "u", {1, 90000}, 0, std::nullopt}, {0})).error().message,
            "asks for 1 GPU with 90000 MiB but may use only 0");
  EXPECT_EQ(s.queued(), 0u);
}

TEST(SchedulerTest, AdmissibleRefusesWhatTheQuotaCanNeverAllow) {
  SchedulerConfig config;
  config.quota_gpus = 2;
  config.user_quota_gpus["big"] = 4;
  Scheduler s = *Scheduler::create(make_machine(8), config);
  EXPECT_EQ(s.admissible(job(1, 3, std::nullopt, "small")).error().message,
            "asks for 3.00 GPUs, above the quota of 2.00 per user");
  EXPECT_TRUE(s.admissible(job(2, 4, std::nullopt, "big")).ok());
  // A slice counts as its share of the largest GPU: three halves are 1.5 GPUs.
  EXPECT_TRUE(s.admissible(JobRequest{3, "small", {3, kGpuMib / 2}, 0, std::nullopt}).ok());
  EXPECT_EQ(s.admissible(JobRequest{4, "small", {5, kGpuMib / 2}, 0, std::nullopt}).error().message,
            "asks for 2.50 GPUs, above the quota of 2.00 per user");
}

// "heavy" ran one GPU from 0 to 1000.
Scheduler after_heavy_use() {
  Scheduler s = make_scheduler(1, Policy::Gpupool);
  EXPECT_TRUE(s.submit(job(1, 1, std::nullopt, "heavy"), 0).ok());
  s.schedule(0);
  EXPECT_TRUE(s.finish(1, 1000).ok());
  return s;
}

TEST(SchedulerTest, FairShareUsageDecaysOverTheTimeTheDaemonWasDown) {
  Scheduler before = after_heavy_use();
  FairShareUsage saved = before.export_fair_share(1000);
  EXPECT_EQ(saved.as_of_s, 1000);
  ASSERT_EQ(saved.usage.size(), 1u);
  EXPECT_NEAR(saved.usage["heavy"], before.fair_share_usage("heavy"), 1e-9);
  EXPECT_GT(saved.usage["heavy"], 990);

  Scheduler after = make_scheduler(1, Policy::Gpupool);
  ASSERT_TRUE(after.import_fair_share(saved, 1000 + 24 * 3600).ok());  // one half-life later
  EXPECT_NEAR(after.fair_share_usage("heavy"), saved.usage["heavy"] / 2, 1e-6);
  // The order still reflects it: "light" goes first although "heavy" came first.
  ASSERT_TRUE(after.submit(job(2, 1, 10, "heavy"), 1000 + 24 * 3600).ok());
  ASSERT_TRUE(after.submit(job(3, 1, 10, "light"), 1000 + 24 * 3600).ok());
  EXPECT_EQ(ids(after.schedule(1000 + 24 * 3600)), std::vector<JobId>{3});
}

TEST(SchedulerTest, AJobThatRanThroughARestartCountsOnce) {
  // Without a restart: "heavy" runs from 0, and is looked at at 800.
  Scheduler continuous = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(continuous.submit(job(1, 1, std::nullopt, "heavy"), 0).ok());
  continuous.schedule(0);
  double expected = continuous.export_fair_share(800).usage["heavy"];
  // With one: the usage saved at 500, the job adopted at 800.
  Scheduler before = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(before.submit(job(1, 1, std::nullopt, "heavy"), 0).ok());
  before.schedule(0);
  FairShareUsage saved = before.export_fair_share(500);
  Scheduler after = make_scheduler(2, Policy::Gpupool);
  ASSERT_TRUE(after.adopt(job(1, 1, std::nullopt, "heavy"), {0}, 0).ok());
  ASSERT_TRUE(after.import_fair_share(saved, 800).ok());
  EXPECT_NEAR(after.fair_share_usage("heavy"), expected, 1e-6);
  EXPECT_GT(expected, 790);
}

TEST(SchedulerTest, ImportedFairShareReplacesAndIsChecked) {
  Scheduler s = after_heavy_use();
  EXPECT_FALSE(s.import_fair_share(FairShareUsage{1000, {{"x", -1}}}, 1000).ok());
  EXPECT_FALSE(s.import_fair_share(FairShareUsage{std::numeric_limits<double>::quiet_NaN(), {}}, 1000).ok());
  ASSERT_TRUE(s.import_fair_share(FairShareUsage{1000, {{"light", 5}}}, 1000).ok());
  EXPECT_EQ(s.fair_share_usage("heavy"), 0);
  EXPECT_EQ(s.fair_share_usage("light"), 5);
}


namespace mig_scheduling {

// GPU 0 in MIG mode as seven 1g.10gb devices, GPU 1 whole.
Machine seven_device_machine() {
  Machine machine = make_machine(2);
  machine.gpus[0].mig_enabled = true;
  for (unsigned i = 0; i < 7; ++i) {
    machine.gpus[0].mig_devices.push_back(
        MigDevice{i, "MIG-" + std::to_string(i), i + 1, 0, 1, 1, 10240, 14, "1g.10gb"});
  }
  return machine;
}

JobRequest mig_job(JobId id, std::string user = "u") {
  JobRequest request = job(id, 1, std::nullopt, std::move(user));
  request.gpus.mig = MigRequest{"1g.10gb", 0};
  return request;
}

TEST(SchedulerMigTest, EachJobGetsADeviceOfItsOwnAndTheNextWaitsForOne) {
  for (Policy policy : {Policy::Fifo, Policy::Backfill, Policy::Gpupool}) {
    SchedulerConfig config;
    config.policy = policy;
    auto scheduler = Scheduler::create(seven_device_machine(), config);
    ASSERT_TRUE(scheduler.ok());
    for (JobId id = 1; id <= 8; ++id) ASSERT_TRUE(scheduler->submit(mig_job(id), 0).ok());
    ASSERT_TRUE(scheduler->submit(job(9, 1), 0).ok());
    std::vector<JobStart> starts = scheduler->schedule(0);
    std::set<std::string> devices;
    for (const JobStart& start : starts) {
      if (start.id == 9) {
        EXPECT_EQ(start.gpus, std::vector<unsigned>{1}) << to_string(policy);
        EXPECT_EQ(start.mig_uuid, "");
        continue;
      }
      EXPECT_EQ(start.gpus, std::vector<unsigned>{0});
      devices.insert(start.mig_uuid);
    }
    // FIFO stops at the eighth MIG job, before the whole-GPU job behind it.
    EXPECT_EQ(starts.size(), policy == Policy::Fifo ? 7u : 8u) << to_string(policy);
    EXPECT_EQ(devices.size(), 7u) << to_string(policy);
    auto waiting = scheduler->waiting(8, 0);
    ASSERT_TRUE(waiting);
    EXPECT_EQ(waiting->detail, "waiting for a 1g.10gb MIG device: 7 of 7 taken (GPU 0: 7)");
    JobId ended = starts[2].id;
    std::string freed = starts[2].mig_uuid;
    ASSERT_TRUE(scheduler->finish(ended, 10).ok());
    std::vector<JobStart> next = scheduler->schedule(10);
    ASSERT_FALSE(next.empty()) << to_string(policy) << " job " << ended;
    EXPECT_EQ(next[0].id, 8u);
    EXPECT_EQ(next[0].mig_uuid, freed) << to_string(policy);
  }
}

TEST(SchedulerMigTest, WholeGpuJobsNeverWaitForAGpuInMigMode) {
  auto scheduler = Scheduler::create(seven_device_machine(), SchedulerConfig{});
  ASSERT_TRUE(scheduler.ok());
  auto wide = scheduler->admissible(job(1, 2));
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().message.find("in MIG mode (GPU 0)"), std::string::npos) << wide.error().message;
  JobRequest unknown = mig_job(2);
  unknown.gpus.mig->profile = "3g.40gb";
  ASSERT_FALSE(scheduler->admissible(unknown).ok());
  EXPECT_TRUE(scheduler->admissible(mig_job(3)).ok());
  // A device counts as its memory's share of the largest GPU, for quotas and fair share.
  ASSERT_TRUE(scheduler->submit(mig_job(4, "ana"), 0).ok());
  ASSERT_EQ(scheduler->schedule(0).size(), 1u);
  EXPECT_DOUBLE_EQ(scheduler->held_gpus("ana"), 10240.0 / kGpuMib);
}

TEST(SchedulerMigTest, QueuedJobsAreExpectedOnDevicesOfTheirOwn) {
  auto scheduler = Scheduler::create(seven_device_machine(), SchedulerConfig{});
  ASSERT_TRUE(scheduler.ok());
  for (JobId id = 1; id <= 9; ++id) {
    JobRequest request = mig_job(id);
    request.time_limit_s = 100;
    ASSERT_TRUE(scheduler->submit(request, 0).ok());
  }
  ASSERT_EQ(scheduler->schedule(0).size(), 7u);
  // Two devices free up at 100: both waiting jobs start then, on one GPU, not one after the other.
  EXPECT_EQ(scheduler->expected_starts(0, 100), (std::map<JobId, double>{{8, 100}, {9, 100}}));
}

TEST(SchedulerMigTest, ARequestWeighsAsTheLargestDeviceItMayGet) {
  Machine machine = seven_device_machine();
  machine.gpus[1].mig_enabled = true;
  machine.gpus[1].mig_devices = {MigDevice{0, "MIG-big", 1, 0, 3, 3, 40960, 42, "3g.40gb"}};
  SchedulerConfig config;
  config.quota_gpus = 0.25;
  auto scheduler = Scheduler::create(machine, config);
  ASSERT_TRUE(scheduler.ok());
  JobRequest any = mig_job(1, "ana");
  any.gpus.mig = MigRequest{};
  // Any device may be the 40 GiB one, above the quota of a quarter of a GPU.
  EXPECT_FALSE(scheduler->admissible(any).ok());
  any.gpus.excluded = {1};
  EXPECT_TRUE(scheduler->admissible(any).ok());
  ASSERT_TRUE(scheduler->submit(any, 0).ok());
  ASSERT_EQ(scheduler->schedule(0).size(), 1u);
  EXPECT_DOUBLE_EQ(scheduler->held_gpus("ana"), 10240.0 / kGpuMib);
}

TEST(SchedulerMigTest, AdoptedAndOutsideDevicesAreNotGivenAgain) {
  auto scheduler = Scheduler::create(seven_device_machine(), SchedulerConfig{});
  ASSERT_TRUE(scheduler.ok());
  ASSERT_TRUE(scheduler->adopt(mig_job(1), {0}, 0, "MIG-0").ok());
  EXPECT_FALSE(scheduler->adopt(mig_job(2), {0}, 0, "MIG-0").ok());
  // A device MIG no longer has (reconfigured while the daemon was down): the job is taken up.
  EXPECT_TRUE(scheduler->adopt(mig_job(3), {0}, 0, "MIG-9").ok());
  EXPECT_TRUE(scheduler->finish(3, 1).ok());
  std::vector<GpuAvailability> outside(2);
  outside[0].mig_taken = {"MIG-1", "MIG-2", "MIG-3", "MIG-4", "MIG-5"};
  ASSERT_TRUE(scheduler->set_outside_use(outside).ok());
  for (JobId id = 10; id < 13; ++id) ASSERT_TRUE(scheduler->submit(mig_job(id), 0).ok());
  std::vector<JobStart> starts = scheduler->schedule(0);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].mig_uuid, "MIG-6");
}

}  // namespace mig_scheduling

}  // namespace
}  // namespace gpupool

namespace gpupool {
namespace {
using namespace scheduler_testing;

JobRequest slice_job(JobId id, uint64_t mib, std::vector<unsigned> allowed = {}) {
  return JobRequest{id, "u", {1, mib, std::move(allowed)}, 0, std::nullopt};
}

// GPU 0 has 50000 MiB left and GPU 1 70000, and most jobs ask for 40000: a 30000 MiB slice
// leaves 20000, too little for them, beside GPU 0's (best fit), and 40000 beside GPU 1's.
unsigned where_the_slice_goes(SlicePlacement placement) {
  SchedulerConfig config;
  config.slice_placement = placement;
  auto created = Scheduler::create(make_machine(2), config);
  EXPECT_TRUE(created.ok());
  Scheduler s = std::move(*created);
  EXPECT_TRUE(s.submit(slice_job(1, 30000, {0}), 0).ok());
  EXPECT_TRUE(s.submit(slice_job(2, 10000, {1}), 0).ok());
  EXPECT_EQ(s.schedule(0).size(), 2u);
  EXPECT_TRUE(s.submit(slice_job(3, 30000), 1).ok());
  for (JobId id = 4; id < 7; ++id) EXPECT_TRUE(s.submit(slice_job(id, 40000), 1).ok());
  for (const JobStart& start : s.schedule(1)) {
    if (start.id == 3) return start.gpus.at(0);
  }
  ADD_FAILURE() << "the slice did not start";
  return 99;
}

TEST(Scheduler, SlicesGoWhereTheyLeaveRoomForTheRecentRequests) {
  EXPECT_EQ(where_the_slice_goes(SlicePlacement::BestFit), 0u);
  EXPECT_EQ(where_the_slice_goes(SlicePlacement::Fragmentation), 1u);
}

TEST(Scheduler, ParsesSlicePlacements) {
  EXPECT_EQ(*parse_slice_placement("best-fit"), SlicePlacement::BestFit);
  EXPECT_EQ(*parse_slice_placement("fragmentation"), SlicePlacement::Fragmentation);
  EXPECT_EQ(parse_slice_placement("fgd").error().message,
            "unknown slice placement 'fgd': expected best-fit or fragmentation");
}

}  // namespace
}  // namespace gpupool
