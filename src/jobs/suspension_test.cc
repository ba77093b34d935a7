#include "jobs/suspension.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpupool {
namespace {

using Kind = SuspensionMove::Kind;
using State = ProcessCheckpointState;

CheckpointPidOutcome done(pid_t pid, State state) { return {pid, "ok", state, 0.5}; }
CheckpointPidOutcome refused(pid_t pid, State state, std::string error = "CUDA_ERROR_NOT_SUPPORTED") {
  return {pid, std::move(error), state, 0.01};
}

void expect_call(const SuspensionMove& move, CheckpointStep step, std::vector<pid_t> pids) {
  EXPECT_EQ(move.kind, Kind::Call) << move.why;
  EXPECT_EQ(move.call, step);
  EXPECT_EQ(move.pids, pids);
}

TEST(SuspensionSteps, LocksThenCheckpointsEveryProcessThenRestoresAndUnlocksThem) {
  auto steps = SuspensionSteps::suspend({10, 11});
  expect_call(steps.first_call(), CheckpointStep::Lock, {10, 11});
  expect_call(steps.on_outcome({{done(10, State::Locked), done(11, State::Locked)}}), CheckpointStep::Checkpoint,
              {10, 11});
  EXPECT_EQ(steps.phase(), SuspensionPhase::Checkpointing);
  EXPECT_EQ(steps.on_outcome({{done(10, State::Checkpointed), done(11, State::Checkpointed)}}).kind, Kind::Suspended);
  EXPECT_EQ(steps.phase(), SuspensionPhase::Checkpointed);
  EXPECT_FALSE(steps.resume().ok());  // not before its GPUs are let go
  ASSERT_TRUE(steps.freed().ok());
  EXPECT_EQ(steps.phase(), SuspensionPhase::Suspended);
  auto restore = steps.resume();
  ASSERT_TRUE(restore.ok());
  expect_call(*restore, CheckpointStep::Restore, {10, 11});
  expect_call(steps.on_outcome({{done(10, State::Locked), done(11, State::Locked)}}), CheckpointStep::Unlock, {10, 11});
  EXPECT_EQ(steps.on_outcome({{done(10, State::Running), done(11, State::Running)}}).kind, Kind::Resumed);
}

TEST(SuspensionSteps, ALockRefusedUnlocksWhatWasLockedAndTheJobRunsOn) {
  auto steps = SuspensionSteps::suspend({10, 11, 12});
  // The driver stops at 11, which it did not lock; 12 was never reached.
  auto move = steps.on_outcome({{done(10, State::Locked), refused(11, State::Running)}});
  expect_call(move, CheckpointStep::Unlock, {10});
  EXPECT_EQ(steps.phase(), SuspensionPhase::Undoing);
  auto undone = steps.on_outcome({{done(10, State::Running)}});
  EXPECT_EQ(undone.kind, Kind::Undone);
  EXPECT_EQ(undone.why, "lock failed: pid 11: CUDA_ERROR_NOT_SUPPORTED");
}

TEST(SuspensionSteps, ALockRefusedOnTheFirstProcessNeedsNoUndoing) {
  auto steps = SuspensionSteps::suspend({10, 11});
  // A state the driver could not say is taken to be what it was.
  auto move = steps.on_outcome({{refused(10, State::Unknown, "CUDA_ERROR_INVALID_VALUE")}});
  EXPECT_EQ(move.kind, Kind::Undone);
  EXPECT_EQ(move.why, "lock failed: pid 10: CUDA_ERROR_INVALID_VALUE");
}

TEST(SuspensionSteps, ACheckpointRefusedRestoresTheCheckpointedThenUnlocksEveryone) {
  auto steps = SuspensionSteps::suspend({10, 11});
  steps.on_outcome({{done(10, State::Locked), done(11, State::Locked)}});
  auto move = steps.on_outcome({{done(10, State::Checkpointed), refused(11, State::Locked)}});
  expect_call(move, CheckpointStep::Restore, {10});
  expect_call(steps.on_outcome({{done(10, State::Locked)}}), CheckpointStep::Unlock, {10, 11});
  auto undone = steps.on_outcome({{done(10, State::Running), done(11, State::Running)}});
  EXPECT_EQ(undone.kind, Kind::Undone);
  EXPECT_EQ(undone.why, "checkpoint failed: pid 11: CUDA_ERROR_NOT_SUPPORTED");
}

TEST(SuspensionSteps, AnUndoThatFailsLeavesTheJobToBeEnded) {
  auto steps = SuspensionSteps::suspend({10});
  steps.on_outcome({{done(10, State::Locked)}});
  steps.on_outcome({{refused(10, State::Locked)}});
  auto broken = steps.on_outcome({{refused(10, State::Locked, "CUDA_ERROR_UNKNOWN")}});
  EXPECT_EQ(broken.kind, Kind::Broken);
  EXPECT_EQ(broken.why, "checkpoint failed: pid 10: CUDA_ERROR_NOT_SUPPORTED, and undoing it failed: pid 10: "
                        "CUDA_ERROR_UNKNOWN");
}

TEST(SuspensionSteps, AProcessTheDriverReportsFailedIsNotLetRunOn) {
  auto steps = SuspensionSteps::suspend({10});
  steps.on_outcome({{done(10, State::Locked)}});
  auto broken = steps.on_outcome({{refused(10, State::Failed)}});
  EXPECT_EQ(broken.kind, Kind::Broken);
  EXPECT_EQ(broken.why, "checkpoint failed: pid 10: CUDA_ERROR_NOT_SUPPORTED, and pid 10 is left failed");
}

TEST(SuspensionSteps, AHelperThatCouldNotCallTheDriverUndoesWhatItKnows) {
  auto steps = SuspensionSteps::suspend({10});
  auto move = steps.on_outcome({{}, "the CUDA driver has no checkpoint API"});
  EXPECT_EQ(move.kind, Kind::Undone);
  EXPECT_EQ(move.why, "lock failed: the CUDA driver has no checkpoint API");
}

TEST(SuspensionSteps, GpusNotFreedUndoTheCheckpoint) {
  auto steps = SuspensionSteps::suspend({10});
  steps.on_outcome({{done(10, State::Locked)}});
  steps.on_outcome({{done(10, State::Checkpointed)}});
  auto move = steps.not_freed("pid 10 still holds 812 MiB of GPU 0");
  ASSERT_TRUE(move.ok());
  expect_call(*move, CheckpointStep::Restore, {10});
  steps.on_outcome({{done(10, State::Locked)}});
  auto undone = steps.on_outcome({{done(10, State::Running)}});
  EXPECT_EQ(undone.kind, Kind::Undone);
  EXPECT_EQ(undone.why, "pid 10 still holds 812 MiB of GPU 0");
  EXPECT_FALSE(steps.freed().ok());
}

TEST(SuspensionSteps, ARestoreOrUnlockRefusedWhileResumingLeavesTheJobToBeEnded) {
  for (CheckpointStep failing : {CheckpointStep::Restore, CheckpointStep::Unlock}) {
    SCOPED_TRACE(to_string(failing));
    auto steps = SuspensionSteps::suspended({10});
    ASSERT_TRUE(steps.resume().ok());
    if (failing == CheckpointStep::Unlock) steps.on_outcome({{done(10, State::Locked)}});
    auto broken = steps.on_outcome({{refused(10, State::Checkpointed, "CUDA_ERROR_OUT_OF_MEMORY")}});
    EXPECT_EQ(broken.kind, Kind::Broken);
    EXPECT_EQ(broken.why, fmt::format("{} failed: pid 10: CUDA_ERROR_OUT_OF_MEMORY", to_string(failing)));
  }
}

// A daemon that stopped during a suspend: the driver says where each process got to, and the
// suspend goes on from there, each call only on those not yet past it.
TEST(SuspensionSteps, ASuspendTakenUpAfterARestartGoesOnFromWhereTheDriverLeftIt) {
  auto steps = SuspensionSteps::taken_up({10, 11, 12}, false);
  EXPECT_EQ(steps.phase(), SuspensionPhase::Reading);
  expect_call(steps.first_call(), CheckpointStep::State, {10, 11, 12});
  expect_call(
      steps.on_outcome({{done(10, State::Checkpointed), done(11, State::Locked), done(12, State::Running)}}),
      CheckpointStep::Lock, {12});
  expect_call(steps.on_outcome({{done(12, State::Locked)}}), CheckpointStep::Checkpoint, {11, 12});
  EXPECT_EQ(steps.on_outcome({{done(11, State::Checkpointed), done(12, State::Checkpointed)}}).kind, Kind::Suspended);
  EXPECT_EQ(steps.phase(), SuspensionPhase::Checkpointed);
  ASSERT_TRUE(steps.freed().ok());

  auto checkpointed = SuspensionSteps::taken_up({10}, false);
  EXPECT_EQ(checkpointed.on_outcome({{done(10, State::Checkpointed)}}).kind, Kind::Suspended);
  auto none_locked = SuspensionSteps::taken_up({10, 11}, false);
  expect_call(none_locked.on_outcome({{done(10, State::Running), done(11, State::Running)}}), CheckpointStep::Lock,
              {10, 11});
}

TEST(SuspensionSteps, AResumeTakenUpAfterARestartRestoresAndUnlocksOnlyThoseNotYetRunning) {
  auto steps = SuspensionSteps::taken_up({10, 11, 12}, true);
  expect_call(steps.first_call(), CheckpointStep::State, {10, 11, 12});
  expect_call(
      steps.on_outcome({{done(10, State::Running), done(11, State::Locked), done(12, State::Checkpointed)}}),
      CheckpointStep::Restore, {12});
  EXPECT_EQ(steps.phase(), SuspensionPhase::Restoring);
  expect_call(steps.on_outcome({{done(12, State::Locked)}}), CheckpointStep::Unlock, {11, 12});
  EXPECT_EQ(steps.on_outcome({{done(11, State::Running), done(12, State::Running)}}).kind, Kind::Resumed);

  auto resumed = SuspensionSteps::taken_up({10, 11}, true);
  EXPECT_EQ(resumed.on_outcome({{done(10, State::Running), done(11, State::Running)}}).kind, Kind::Resumed);
}

TEST(SuspensionSteps, ATakenUpSuspensionWhoseStateCannotBeReadOrIsFailedLeavesTheJobToBeEnded) {
  auto unreadable = SuspensionSteps::taken_up({10, 11}, false);
  auto broken = unreadable.on_outcome({{done(10, State::Locked), refused(11, State::Unknown, "CUDA_ERROR_NOT_FOUND")}});
  EXPECT_EQ(broken.kind, Kind::Broken);
  EXPECT_EQ(broken.why, "the daemon stopped during its suspend, and its state cannot be read: pid 11: CUDA_ERROR_NOT_FOUND");
  auto failed = SuspensionSteps::taken_up({10, 11}, true);
  broken = failed.on_outcome({{done(10, State::Checkpointed), done(11, State::Failed)}});
  EXPECT_EQ(broken.kind, Kind::Broken);
  EXPECT_EQ(broken.why, "the daemon stopped during its resume, and pid 11 is left failed");
  auto no_answer = SuspensionSteps::taken_up({10}, true);
  CheckpointOutcome timed_out;
  timed_out.error = "gpupool-cuda-checkpoint did not finish within 600 s";
  EXPECT_EQ(no_answer.on_outcome(timed_out).why,
            "the daemon stopped during its resume, and its state cannot be read: gpupool-cuda-checkpoint did not "
            "finish within 600 s");
}

TEST(SuspensionSteps, AStepThatWentWellLeavesTheStateItLeadsToWhereTheDriverCouldNotSay) {
  auto steps = SuspensionSteps::suspend({10});
  expect_call(steps.on_outcome({{done(10, State::Unknown)}}), CheckpointStep::Checkpoint, {10});
  EXPECT_EQ(steps.on_outcome({{done(10, State::Unknown)}}).kind, Kind::Suspended);
  ASSERT_TRUE(steps.freed().ok());
  ASSERT_TRUE(steps.resume().ok());
  expect_call(steps.on_outcome({{done(10, State::Unknown)}}), CheckpointStep::Unlock, {10});
  EXPECT_EQ(steps.on_outcome({{done(10, State::Unknown)}}).kind, Kind::Resumed);
}

TEST(SuspensionSteps, AnOutcomeCountsOnlyWhenEveryProcessWasDone) {
  CheckpointOutcome partial{{done(10, State::Locked)}};
  EXPECT_FALSE(partial.ok(2));
  EXPECT_TRUE(partial.ok(1));
  EXPECT_DOUBLE_EQ(partial.seconds(), 0.5);
  EXPECT_EQ(parse_process_checkpoint_state("checkpointed"), State::Checkpointed);
  EXPECT_EQ(parse_process_checkpoint_state("restoring"), State::Restoring);
  EXPECT_EQ(parse_process_checkpoint_state("sideways"), State::Unknown);
  EXPECT_STREQ(to_string(CheckpointStep::State), "state");  // the helper's words
  EXPECT_STREQ(to_string(CheckpointStep::Checkpoint), "checkpoint");
}

}  // namespace
}  // namespace gpupool
