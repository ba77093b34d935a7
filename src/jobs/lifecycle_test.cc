#include "jobs/lifecycle.h"

#include <map>
#include <set>
#include <type_traits>
#include <variant>

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

// In lifecycle's namespace, not with a using-directive: in the unity build a directive would
// reach the test files after this one, where Event is gpupool's (jobs/event.h).
namespace gpupool::lifecycle {
namespace {

// The driver's side in miniature: the store keeps the states of jobs that have ended.
class LifecycleTest : public ::testing::Test {
 protected:
  std::vector<Effect> handle(const Event& event) {
    auto effects = jobs.handle(event);
    EXPECT_TRUE(effects.ok()) << effects.error().message;
    if (!effects.ok()) return {};
    for (const Effect& effect : *effects) {
      if (auto* finished = std::get_if<Finished>(&effect)) stored[finished->id] = finished->state;
    }
    return *effects;
  }
  std::string refusal(const Event& event) {
    auto effects = jobs.handle(event);
    return effects.ok() ? "" : effects.error().message;
  }
  // Submits a batch job and grants it GPU 0: it is running its first attempt.
  void start(JobId id, unsigned retries = 0) {
    handle(Submitted{id, JobKind::Batch, retries, {}, std::nullopt});
    handle(Granted{id, {0}});
  }
  JobState state(JobId id) {
    if (const TrackedJob* job = jobs.find(id)) return job->state;
    return stored.at(id);
  }

  std::map<JobId, JobState> stored;
  JobLifecycle jobs{[this](JobId id) -> std::optional<JobState> {
    auto it = stored.find(id);
    return it == stored.end() ? std::nullopt : std::optional(it->second);
  }};
};

template <class T>
const T* only(const std::vector<Effect>& effects) {
  return effects.size() == 1 ? std::get_if<T>(&effects[0]) : nullptr;
}

TEST_F(LifecycleTest, ASubmittedJobIsQueuedForGpusAndStartsItsFirstAttemptOnThem) {
  ASSERT_NE(only<EnterQueue>(handle(Submitted{1, JobKind::Batch, 0, {}, std::nullopt})), nullptr);
  auto effects = handle(Granted{1, {2, 3}});
  const StartAttempt* started = only<StartAttempt>(effects);
  ASSERT_NE(started, nullptr);
  EXPECT_EQ(started->attempt, 1u);
  EXPECT_EQ(started->gpus, (std::vector<unsigned>{2, 3}));
  EXPECT_EQ(state(1), JobState::Running);
}

TEST_F(LifecycleTest, AnAttemptThatExitsZeroEndsTheJobDone) {
  start(1);
  auto finished_effects = handle(AttemptExited{1, 0, std::nullopt, "", false});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Done);
  EXPECT_EQ(jobs.find(1), nullptr);
}

TEST_F(LifecycleTest, AFailedAttemptRunsAgainWhileRetriesAllowThenFails) {
  start(1, 1);
  auto effects = handle(AttemptExited{1, 3, std::nullopt, "", false});
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(std::get<Record>(effects[0]).reason, "retry 1 of 1 after: exit code 3");  // stored
  EXPECT_TRUE(std::holds_alternative<EnterQueue>(effects[1]));
  EXPECT_EQ(only<StartAttempt>(handle(Granted{1, {0}}))->attempt, 2u);
  auto finished_effects = handle(AttemptExited{1, std::nullopt, 9, "", false});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Failed);
  EXPECT_EQ(finished->reason, "killed by signal 9");
}

TEST_F(LifecycleTest, AnInteractiveJobWhoseEndWasNotReportedRanAndIsDone) {
  handle(Submitted{1, JobKind::Interactive, 3, {}, std::nullopt});
  EXPECT_EQ(only<StartAttempt>(handle(Granted{1, {0}}))->attempt, 0u);  // not counted
  auto finished_effects = handle(AttemptExited{1, std::nullopt, std::nullopt, "unknown", false});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Done);
  EXPECT_EQ(finished->reason, "unknown");
}

TEST_F(LifecycleTest, ACancelOfAQueuedJobEndsItAndTakesItOutOfTheQueue) {
  handle(Submitted{1, JobKind::Batch, 0, {}, std::nullopt});
  auto effects = handle(Cancel{1, "alice"});
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<LeaveQueue>(effects[0]));
  EXPECT_EQ(std::get<Finished>(effects[1]).reason, "cancelled by alice");
  EXPECT_EQ(state(1), JobState::Cancelled);
}

TEST_F(LifecycleTest, ACancelOfARunningJobSignalsItAndWinsOverHowItEnds) {
  start(1, 5);
  auto signalled_effects = handle(Cancel{1, "bob"});
  const SignalAttempt* signalled = only<SignalAttempt>(signalled_effects);
  ASSERT_NE(signalled, nullptr);
  EXPECT_EQ(signalled->why, SignalWhy::Cancel);
  auto finished_effects = handle(AttemptExited{1, 0, std::nullopt, "cancelled", true});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Cancelled);
  EXPECT_EQ(finished->reason, "cancelled by bob");
}

TEST_F(LifecycleTest, ACancelDuringAnAttemptThatNeverRanEndsTheJobCancelled) {
  start(1, 2);
  handle(Cancel{1, "bob"});
  auto finished_effects = handle(AttemptNeverRan{1});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Cancelled);
}

TEST_F(LifecycleTest, AnAttemptThatNeverRanIsQueuedAgainUnderTheSameNumber) {
  start(1);
  auto effects = handle(AttemptNeverRan{1});
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_EQ(jobs.find(1)->attempts, 0u);
  EXPECT_EQ(only<StartAttempt>(handle(Granted{1, {0}}))->attempt, 1u);
}

TEST_F(LifecycleTest, AStartThatFailsBeforeAnyAttemptFailsTheJobWithoutARetry) {
  handle(Submitted{1, JobKind::Batch, 0, {}, std::nullopt});
  auto finished_effects = handle(StartFailed{1, "could not start: no supervisor"});
  const Finished* finished = only<Finished>(finished_effects);
  ASSERT_NE(finished, nullptr);
  EXPECT_EQ(finished->state, JobState::Failed);
  EXPECT_EQ(finished->reason, "could not start: no supervisor");
}

TEST_F(LifecycleTest, HoldAndRelease) {
  handle(Submitted{1, JobKind::Batch, 0, {}, std::string("carol")});
  EXPECT_EQ(state(1), JobState::Held);
  EXPECT_EQ(jobs.find(1)->reason, "held by carol");
  auto released = handle(Release{1});
  ASSERT_EQ(released.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<EnterQueue>(released[1]));
  auto held = handle(Hold{1, "dave"});
  ASSERT_EQ(held.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<LeaveQueue>(held[0]));
  EXPECT_EQ(refusal(Release{2}), "no job 2 is queued, held or running");
  EXPECT_TRUE(handle(Hold{1, "dave"}).empty()) << "holding a held job changes nothing";
  handle(Release{1});
  EXPECT_TRUE(handle(Release{1}).empty()) << "releasing a queued job changes nothing";
  EXPECT_EQ(state(1), JobState::Queued);
  handle(Granted{1, {0}});
  EXPECT_EQ(refusal(Hold{1, "dave"}), "job 1 is running: cancel it instead");
  EXPECT_EQ(refusal(Release{1}), "job 1 is running, not held");
}

TEST_F(LifecycleTest, ADependentWaitsForItsJobAndStartsWhenItIsDone) {
  start(1);
  EXPECT_TRUE(handle(Submitted{2, JobKind::Batch, 0, {1}, std::nullopt}).empty());
  EXPECT_EQ(jobs.find(2)->reason, "waiting for job 1");
  auto effects = handle(AttemptExited{1, 0, std::nullopt, "", false});
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<EnterQueue>(effects[1]));
  EXPECT_EQ(std::get<EnterQueue>(effects[1]).id, 2u);
}

TEST_F(LifecycleTest, ADependentFailsWhenItsJobDoesNotEndDoneAndSoDoTheirDependents) {
  start(1);
  handle(Submitted{2, JobKind::Batch, 0, {1}, std::nullopt});
  handle(Submitted{3, JobKind::Batch, 0, {2, 1}, std::nullopt});
  auto effects = handle(AttemptExited{1, 1, std::nullopt, "", false});
  ASSERT_EQ(effects.size(), 3u);
  EXPECT_EQ(std::get<Finished>(effects[1]).reason, "job 1, which it runs after, failed");
  EXPECT_EQ(std::get<Finished>(effects[2]).reason, "job 2, which it runs after, failed");
  EXPECT_EQ(only<Finished>(handle(Submitted{4, JobKind::Batch, 0, {9}, std::nullopt}))->reason,
            "job 9, which it runs after, cannot be found");
}

TEST_F(LifecycleTest, ADrainedQueueStartsNothingUntilResumed) {
  handle(Submitted{1, JobKind::Batch, 0, {}, std::nullopt});
  handle(Drain{});
  EXPECT_TRUE(jobs.drained());
  EXPECT_NE(refusal(Granted{1, {0}}), "");
  handle(Resume{});
  EXPECT_NE(only<StartAttempt>(handle(Granted{1, {0}})), nullptr);
}

TEST_F(LifecycleTest, ATimeLimitSignalsTheRunningAttempt) {
  start(1);
  EXPECT_EQ(only<SignalAttempt>(handle(TimeLimitReached{1}))->why, SignalWhy::TimeLimit);
  EXPECT_EQ(refusal(TimeLimitReached{1}), "job 1 has been told to end already");  // once
  // The end says why, whatever signal the program died of.
  auto ended = handle(AttemptExited{1, 143, 15, "", false});
  EXPECT_EQ(only<Finished>(ended)->reason, "time limit");
}

TEST_F(LifecycleTest, ASliceOverrunEndsTheJobFailedWithItsFiguresAndNoRetry) {
  handle(Submitted{1, JobKind::Batch, 2, {}, std::nullopt});
  handle(Granted{1, {0}});
  EXPECT_EQ(only<SignalAttempt>(handle(SliceOverrun{1, "used 31.2 GiB of its 20 GiB slice"}))->why,
            SignalWhy::SliceOverrun);
  EXPECT_EQ(refusal(SliceOverrun{1, "again"}), "job 1 has been told to end already");
  EXPECT_EQ(refusal(TimeLimitReached{1}), "job 1 has been told to end already");
  // Its supervisor reports the stop it was asked for as a cancel.
  auto effects = handle(AttemptExited{1, 143, 15, "cancelled", true});
  const Finished* ended = only<Finished>(effects);
  ASSERT_NE(ended, nullptr);
  EXPECT_EQ(ended->state, JobState::Failed);
  EXPECT_EQ(ended->reason, "used 31.2 GiB of its 20 GiB slice");
}

TEST_F(LifecycleTest, AdoptedJobsGoOnWhereThePreviousDaemonLeftThem) {
  EXPECT_TRUE(handle(Adopted{1, JobKind::Batch, 1, {}, JobState::Running, 1, ""}).empty());
  EXPECT_TRUE(handle(Adopted{2, JobKind::Batch, 0, {1}, JobState::Queued, 0, ""}).empty());
  EXPECT_EQ(jobs.find(2)->reason, "waiting for job 1");
  auto retried = handle(AttemptExited{1, 2, std::nullopt, "", false});
  ASSERT_EQ(retried.size(), 2u);
  EXPECT_EQ(std::get<Record>(retried[0]).reason, "retry 1 of 1 after: exit code 2");
  EXPECT_EQ(refusal(Adopted{3, JobKind::Batch, 0, {}, JobState::Done, 1, ""}), "job 3 has already ended (done)");
}

// Suspending, suspended, resumed: the job's processes live throughout, and no second attempt starts.
TEST_F(LifecycleTest, ASuspendedJobLetsItsGpusGoAndIsRestoredOnceGrantedThemAgain) {
  start(1);
  EXPECT_EQ(refusal(Suspend{1, "ana", {}}),
            "no process of job 1 holds GPU state yet: there is nothing to checkpoint, and once it started using its "
            "GPUs it would hold them unleased");
  auto locking = handle(Suspend{1, "ana", {40, 41}});
  ASSERT_EQ(locking.size(), 2u);
  EXPECT_EQ(std::get<Record>(locking[0]).reason, "being suspended by ana");
  EXPECT_EQ(std::get<CallCheckpoint>(locking[1]).step, CheckpointStep::Lock);
  EXPECT_EQ(refusal(Suspend{1, "ana", {40}}), "job 1 is being suspended or resumed already (locking)");
  auto pids = [](ProcessCheckpointState state) {
    return CheckpointOutcome{{{40, "ok", state, 0.1}, {41, "ok", state, 0.1}}};
  };
  EXPECT_EQ(std::get<CallCheckpoint>(handle(CheckpointDone{1, pids(ProcessCheckpointState::Locked)})[0]).step,
            CheckpointStep::Checkpoint);
  handle(CheckpointDone{1, pids(ProcessCheckpointState::Checkpointed)});
  EXPECT_EQ(state(1), JobState::Running);  // until a sample shows its GPUs free
  auto suspended = handle(GpusLetGo{1, std::nullopt});
  ASSERT_EQ(suspended.size(), 2u);
  EXPECT_EQ(std::get<Record>(suspended[0]).state, JobState::Suspended);
  EXPECT_EQ(std::get<Record>(suspended[0]).reason, "suspended by ana");
  EXPECT_TRUE(std::holds_alternative<Suspended>(suspended[1]));
  EXPECT_EQ(refusal(Hold{1, "ana"}), "job 1 is suspended: resume or cancel it instead");
  EXPECT_EQ(refusal(Granted{1, {0}}), "job 1 was not queued for GPUs");  // not before a resume
  auto queued = handle(ResumeJob{1});
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<EnterQueue>(queued[1]));
  auto restoring = handle(Granted{1, {0}});
  ASSERT_EQ(restoring.size(), 2u);
  EXPECT_EQ(std::get<CallCheckpoint>(restoring[1]).step, CheckpointStep::Restore);
  EXPECT_EQ(std::get<CallCheckpoint>(handle(CheckpointDone{1, pids(ProcessCheckpointState::Locked)})[0]).step,
            CheckpointStep::Unlock);
  auto resumed = handle(CheckpointDone{1, pids(ProcessCheckpointState::Running)});
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(std::get<Record>(resumed[0]).state, JobState::Running);
  EXPECT_TRUE(std::holds_alternative<Resumed>(resumed[1]));
  EXPECT_EQ(jobs.find(1)->attempts, 1u);  // the same attempt throughout
}

TEST_F(LifecycleTest, ASuspendThatFailsIsUndoneAndTheJobRunsOnWithWhy) {
  start(1);
  handle(Suspend{1, "ana", {40}});
  auto undone = handle(CheckpointDone{1, {{{40, "CUDA_ERROR_NOT_SUPPORTED", ProcessCheckpointState::Running, 0}}}});
  ASSERT_EQ(undone.size(), 2u);
  EXPECT_EQ(std::get<Record>(undone[0]).reason, "not suspended: lock failed: pid 40: CUDA_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(std::get<SuspendFailed>(undone[1]).why, "lock failed: pid 40: CUDA_ERROR_NOT_SUPPORTED");
  EXPECT_EQ(state(1), JobState::Running);
  handle(Suspend{1, "ana", {40}});  // and may be suspended again
}

TEST_F(LifecycleTest, AResumeThatFailsEndsTheJobFailedWithTheDriversError) {
  start(1);
  handle(Adopted{2, JobKind::Batch, 0, {}, JobState::Suspended, 1, "suspended by ana",
                 Suspension{{50}, "ana", 1.0, 100, true}});
  auto restoring = handle(Granted{2, {1}});
  ASSERT_EQ(restoring.size(), 2u);
  auto broken = handle(CheckpointDone{2, {{{50, "CUDA_ERROR_OUT_OF_MEMORY", ProcessCheckpointState::Checkpointed, 0}}}});
  ASSERT_EQ(broken.size(), 2u);
  EXPECT_EQ(std::get<SuspendFailed>(broken[0]).why, "restore failed: pid 50: CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(std::get<SignalAttempt>(broken[1]).why, SignalWhy::CheckpointFailed);
  auto ended = handle(AttemptExited{2, std::nullopt, 15, "", true});
  EXPECT_EQ(only<Finished>(ended)->state, JobState::Failed);
  EXPECT_EQ(only<Finished>(ended)->reason, "restore failed: pid 50: CUDA_ERROR_OUT_OF_MEMORY");
}

// The daemon before stopped during a suspend (the job still running) or during a resume (its
// restore begun): the driver is asked where it left the processes, and it goes on from there.
TEST_F(LifecycleTest, ASuspendOrResumeTheDaemonStoppedDuringIsTakenUpAgain) {
  auto reading = handle(Adopted{1, JobKind::Batch, 0, {}, JobState::Running, 1, "being suspended by ana",
                                Suspension{{40, 41}, "ana", 1.0, 100, true, false}});
  ASSERT_EQ(reading.size(), 2u);
  EXPECT_EQ(std::get<Record>(reading[0]).reason, "being suspended by ana");
  EXPECT_EQ(std::get<CallCheckpoint>(reading[1]).step, CheckpointStep::State);
  EXPECT_EQ(std::get<CallCheckpoint>(reading[1]).pids, (std::vector<pid_t>{40, 41}));
  auto checkpoint = handle(CheckpointDone{1, {{{40, "ok", ProcessCheckpointState::Checkpointed, 0},
                                               {41, "ok", ProcessCheckpointState::Locked, 0}}}});
  EXPECT_EQ(std::get<CallCheckpoint>(checkpoint[0]).pids, (std::vector<pid_t>{41}));
  handle(CheckpointDone{1, {{{41, "ok", ProcessCheckpointState::Checkpointed, 0}}}});
  auto suspended = handle(GpusLetGo{1, std::nullopt});
  EXPECT_EQ(std::get<Record>(suspended[0]).reason, "suspended by ana; resumes when its GPUs are free");
  EXPECT_TRUE(std::holds_alternative<EnterQueue>(suspended.back()));  // the resume it was to have

  auto resuming = handle(Adopted{2, JobKind::Batch, 0, {}, JobState::Suspended, 1, "resuming",
                                 Suspension{{50}, "ana", 1.0, 100, true, true}});
  ASSERT_EQ(resuming.size(), 2u);
  EXPECT_EQ(std::get<CallCheckpoint>(resuming[1]).step, CheckpointStep::State);
  EXPECT_EQ(refusal(ResumeJob{2}), "job 2 is being resumed already");
  auto unlock = handle(CheckpointDone{2, {{{50, "ok", ProcessCheckpointState::Locked, 0}}}});
  EXPECT_EQ(std::get<CallCheckpoint>(unlock[0]).step, CheckpointStep::Unlock);
  auto resumed = handle(CheckpointDone{2, {{{50, "ok", ProcessCheckpointState::Running, 0}}}});
  EXPECT_EQ(std::get<Record>(resumed[0]).state, JobState::Running);
  EXPECT_TRUE(std::holds_alternative<Resumed>(resumed[1]));
  EXPECT_EQ(jobs.find(2)->attempts, 1u);

  // Stored running with its restoring suspension (resumed; the daemon stopped before the second
  // write): its processes are read, found running, and it runs on, not suspended again.
  auto resumed_unsaved = handle(Adopted{3, JobKind::Batch, 0, {}, JobState::Running, 1, "",
                                        Suspension{{60}, "ana", 1.0, 100, true, true}});
  EXPECT_EQ(std::get<CallCheckpoint>(resumed_unsaved[1]).step, CheckpointStep::State);
  auto runs_on = handle(CheckpointDone{3, {{{60, "ok", ProcessCheckpointState::Running, 0}}}});
  EXPECT_EQ(std::get<Record>(runs_on[0]).state, JobState::Running);
  EXPECT_TRUE(std::holds_alternative<Resumed>(runs_on[1]));
}

TEST_F(LifecycleTest, ACancelledSuspendedJobLeavesTheQueueAndItsProcessesAreEnded) {
  handle(Adopted{2, JobKind::Batch, 0, {}, JobState::Suspended, 1, "suspended by ana",
                 Suspension{{50}, "ana", 1.0, 100, true}});
  auto cancel = handle(Cancel{2, "ana"});
  ASSERT_EQ(cancel.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<LeaveQueue>(cancel[0]));
  EXPECT_EQ(std::get<SignalAttempt>(cancel[1]).why, SignalWhy::Cancel);
  EXPECT_EQ(only<Finished>(handle(AttemptExited{2, std::nullopt, 15, "", true}))->state, JobState::Cancelled);
}

TEST_F(LifecycleTest, OnlyARunningJobMayBeSuspendedBatchOrInteractive) {
  handle(Submitted{1, JobKind::Batch, 0, {}, std::nullopt});
  EXPECT_EQ(refusal(Suspend{1, "ana", {40}}), "job 1 is queued, not running");
  // An interactive job's client holds its leases as a supervisor does: it is suspended alike.
  handle(Submitted{2, JobKind::Interactive, 0, {}, std::nullopt});
  handle(Granted{2, {0}});
  EXPECT_EQ(std::get<CallCheckpoint>(handle(Suspend{2, "ana", {40}})[1]).step, CheckpointStep::Lock);
  start(3);
  handle(Cancel{3, "ana"});
  EXPECT_EQ(refusal(Suspend{3, "ana", {40}}), "job 3 is being ended");
}

// Random events, valid or not, for a few jobs: whatever happens, a job ends once, never runs two
// attempts at once, never more than 1 + its retries, never starts again once cancelled, and
// nothing starts while the queue is drained.
RC_GTEST_PROP(LifecycleProperties, InvariantsHoldForAnyEvents, ()) {
  std::map<JobId, JobState> stored;
  JobLifecycle jobs([&](JobId id) -> std::optional<JobState> {
    auto it = stored.find(id);
    return it == stored.end() ? std::nullopt : std::optional(it->second);
  });
  constexpr JobId kJobs = 5;
  std::map<JobId, unsigned> retries;
  std::set<JobId> running, cancelled, finished;
  size_t steps = *rc::gen::inRange<size_t>(1, 80);
  for (size_t step = 0; step < steps; ++step) {
    JobId id = *rc::gen::inRange<JobId>(1, kJobs + 1);
    Event event;
    switch (*rc::gen::inRange(0, 16)) {
      case 0: {
        unsigned allowed = *rc::gen::inRange(0u, 3u);
        std::vector<JobId> after;
        if (id > 1 && *rc::gen::arbitrary<bool>()) after.push_back(*rc::gen::inRange<JobId>(1, id));
        std::optional<std::string> held;
        if (*rc::gen::inRange(0, 4) == 0) held = "someone";
        event = Submitted{id, *rc::gen::element(JobKind::Batch, JobKind::Interactive), allowed, after, held};
        break;
      }
      case 1:
      case 2: event = Granted{id, {0}}; break;
      case 3: {
        std::optional<int> code;
        if (*rc::gen::arbitrary<bool>()) code = *rc::gen::inRange(0, 3);
        event = AttemptExited{id, code, std::nullopt, "", *rc::gen::inRange(0, 5) == 0};
        break;
      }
      case 4: event = AttemptNeverRan{id}; break;
      case 5: event = Cancel{id, "someone"}; break;
      case 6: event = Hold{id, "someone"}; break;
      case 7: event = Release{id}; break;
      case 8: event = *rc::gen::arbitrary<bool>() ? Event(Drain{}) : Event(Resume{}); break;
      case 9: event = StartFailed{id, "could not start"}; break;
      case 10: event = SliceOverrun{id, "used 2 GiB of its 1 GiB slice"}; break;
      case 12: event = Suspend{id, "someone", {100 + static_cast<pid_t>(id)}}; break;
      case 13: {
        // The call on the job's one process went well or not, leaving it in any state.
        pid_t pid = 100 + static_cast<pid_t>(id);
        auto state = *rc::gen::element(ProcessCheckpointState::Running, ProcessCheckpointState::Locked,
                                       ProcessCheckpointState::Checkpointed, ProcessCheckpointState::Failed);
        event = CheckpointDone{id, {{{pid, *rc::gen::element<std::string>("ok", "CUDA_ERROR_UNKNOWN"), state, 0.1}}}};
        break;
      }
      case 14: {
        std::optional<std::string> problem;
        if (*rc::gen::arbitrary<bool>()) problem = "still listed";
        event = GpusLetGo{id, problem};
        break;
      }
      case 15: event = ResumeJob{id}; break;
      default: event = TimeLimitReached{id}; break;
    }
    if (finished.count(id) > 0 && std::holds_alternative<Submitted>(event)) continue;  // ids are not reused
    bool was_drained = jobs.drained();
    auto effects = jobs.handle(event);
    if (!effects.ok()) continue;
    if (auto* submitted = std::get_if<Submitted>(&event)) retries[submitted->id] = submitted->retries;
    if (auto* cancel = std::get_if<Cancel>(&event)) cancelled.insert(cancel->id);
    for (const Effect& effect : *effects) {
      std::visit(
          [&](const auto& e) {
            using T = std::decay_t<decltype(e)>;
            RC_ASSERT(finished.count(e.id) == 0u);  // nothing happens to a job after its end
            if constexpr (std::is_same_v<T, StartAttempt>) {
              RC_ASSERT(!was_drained);
              RC_ASSERT(running.count(e.id) == 0u);
              RC_ASSERT(cancelled.count(e.id) == 0u);
              RC_ASSERT(e.attempt <= retries[e.id] + 1);
              running.insert(e.id);
            } else if constexpr (std::is_same_v<T, Finished>) {
              finished.insert(e.id);
              running.erase(e.id);
              stored[e.id] = e.state;
              if (cancelled.count(e.id) > 0) RC_ASSERT(e.state == JobState::Cancelled);
            } else if constexpr (std::is_same_v<T, Record> || std::is_same_v<T, EnterQueue>) {
              if (const TrackedJob* job = jobs.find(e.id); job && job->state == JobState::Queued) {
                running.erase(e.id);
              }
            }
          },
          effect);
    }
    for (const auto& [job_id, job] : jobs.jobs()) {
      RC_ASSERT(!job.in_queue || job.state == JobState::Queued || job.state == JobState::Suspended);
      // A suspended job's attempt lives on (never a second one); it holds no GPU but to resume.
      RC_ASSERT((job.state == JobState::Running || job.state == JobState::Suspended) == (running.count(job_id) > 0));
      if (job.state == JobState::Suspended) {
        RC_ASSERT(job.suspension.has_value());
        RC_ASSERT(job.suspension->phase() == SuspensionPhase::Suspended ||
                  job.suspension->phase() == SuspensionPhase::Restoring ||
                  job.suspension->phase() == SuspensionPhase::Unlocking);
        RC_ASSERT(!job.in_queue || job.suspension->phase() == SuspensionPhase::Suspended);
      }
      if (job.kind == JobKind::Batch) RC_ASSERT(job.attempts <= job.retries + 1);
    }
  }
}

}  // namespace
}  // namespace gpupool::lifecycle
