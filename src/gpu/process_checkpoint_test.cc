#include "gpu/process_checkpoint.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "os/environment.h"
#include "os/process.h"

namespace gpupool {
namespace {

using std::chrono::milliseconds;

TEST(ProcessCheckpoint, OnlyALockPassesItsTimeout) {
  CheckpointProgram program{.library = "/x/libcuda.so.1"};
  EXPECT_EQ(
      checkpoint_helper_arguments(program, CheckpointStep::Lock, {12, 34}, milliseconds(1500)),
      (std::vector<std::string>{"--library", "/x/libcuda.so.1", "--lock-timeout-ms", "1500", "lock", "12", "34"}));
  EXPECT_EQ(checkpoint_helper_arguments(program, CheckpointStep::Lock, {12}, milliseconds(0)),
            (std::vector<std::string>{"--library", "/x/libcuda.so.1", "lock", "12"}));
  EXPECT_EQ(checkpoint_helper_arguments(program, CheckpointStep::Checkpoint, {12}, milliseconds(1500)),
            (std::vector<std::string>{"--library", "/x/libcuda.so.1", "checkpoint", "12"}));
  program.lock_directory = "/var/lib/gpupool/checkpoints";
  EXPECT_EQ(checkpoint_helper_arguments(program, CheckpointStep::State, {12}, milliseconds(1500)),
            (std::vector<std::string>{"--library", "/x/libcuda.so.1", "--lock-dir", "/var/lib/gpupool/checkpoints",
                                      "state", "12"}));
}

TEST(ProcessCheckpoint, EachLineIsOneProcessInOrder) {
  Result<CheckpointOutcome> outcome = parse_checkpoint_output("123 ok locked 0.412\n124 ok locked 0.001\n", {123, 124});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  ASSERT_EQ(outcome->pids.size(), 2u);
  EXPECT_EQ(outcome->pids[0].pid, 123);
  EXPECT_EQ(outcome->pids[0].result, "ok");
  EXPECT_EQ(outcome->pids[0].state, ProcessCheckpointState::Locked);
  EXPECT_DOUBLE_EQ(outcome->pids[0].seconds, 0.412);
  EXPECT_EQ(outcome->pids[1].pid, 124);
  EXPECT_TRUE(outcome->ok(2));
  EXPECT_EQ(outcome->failure(), "");
}

TEST(ProcessCheckpoint, AFailureNamesItsProcessAndErrorAndKeepsItsState) {
  Result<CheckpointOutcome> outcome =
      parse_checkpoint_output("123 ok checkpointed 2.5\n124 CUDA_ERROR_NOT_SUPPORTED locked 0.003\n", {123, 124, 125});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_FALSE(outcome->ok(2));
  ASSERT_EQ(outcome->pids.size(), 2u);
  EXPECT_EQ(outcome->pids[1].state, ProcessCheckpointState::Locked);
  EXPECT_EQ(outcome->failure(), "pid 124: CUDA_ERROR_NOT_SUPPORTED");
}

TEST(ProcessCheckpoint, OutputThatDoesNotReadIsAnError) {
  const std::vector<pid_t> pids = {123, 124};
  for (const char* output : {"123 ok locked\n", "123 ok locked soon\n", "abc ok locked 0.1\n", "123  locked 0.1\n",
                             "123 ok locked 0.1 extra\n"}) {
    Result<CheckpointOutcome> outcome = parse_checkpoint_output(output, pids);
    ASSERT_FALSE(outcome.ok()) << output;
    EXPECT_NE(outcome.error().message.find("not 'PID RESULT STATE SECONDS'"), std::string::npos) << output;
  }
  // Out of order, not asked about, or one more than asked.
  EXPECT_FALSE(parse_checkpoint_output("124 ok locked 0.1\n", pids).ok());
  EXPECT_FALSE(parse_checkpoint_output("999 ok locked 0.1\n", pids).ok());
  EXPECT_FALSE(parse_checkpoint_output("123 ok locked 0.1\n124 ok locked 0.1\n124 ok locked 0.1\n", pids).ok());
  // The helper stops at the first failure: a line after it is a helper gone wrong.
  Result<CheckpointOutcome> after =
      parse_checkpoint_output("123 CUDA_ERROR_UNKNOWN failed 0.1\n124 ok locked 0.1\n", pids);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.error().message, "gpupool-cuda-checkpoint went on after pid 123 failed");
}

TEST(ProcessCheckpoint, TheExitStatusMustAgreeWithTheLines) {
  const std::vector<pid_t> pids = {123, 124};
  auto answer = [&](int exit_code, std::string out, std::string err = "") {
    return checkpoint_answer(ProgramOutcome{.exit_code = exit_code, .out = std::move(out), .err = std::move(err)},
                             pids);
  };
  EXPECT_TRUE(answer(0, "123 ok locked 0.1\n124 ok locked 0.1\n").ok());
  Result<CheckpointOutcome> refused = answer(1, "123 ok locked 0.1\n124 CUDA_ERROR_ILLEGAL_STATE locked 0.0\n");
  ASSERT_TRUE(refused.ok()) << refused.error().message;
  EXPECT_EQ(refused->failure(), "pid 124: CUDA_ERROR_ILLEGAL_STATE");

  Result<CheckpointOutcome> short_of_one = answer(0, "123 ok locked 0.1\n");
  ASSERT_FALSE(short_of_one.ok());
  EXPECT_EQ(short_of_one.error().message, "gpupool-cuda-checkpoint exited 0 after answering for 1 of 2 processes");
  EXPECT_FALSE(answer(0, "123 ok locked 0.1\n124 CUDA_ERROR_ILLEGAL_STATE locked 0.0\n").ok());
  EXPECT_FALSE(answer(1, "123 ok locked 0.1\n").ok());
  EXPECT_FALSE(answer(1, "").ok());
}

TEST(ProcessCheckpoint, NoDriverOrNoCheckpointApiIsAnErrorWithTheHelpersLine) {
  const std::vector<pid_t> pids = {123};
  std::string line =
      "gpupool-cuda-checkpoint: libcuda.so.1 has no cuCheckpointProcessLock: the CUDA checkpoint API needs driver "
      "550 or newer";
  Result<CheckpointOutcome> old_driver =
      checkpoint_answer(ProgramOutcome{.exit_code = 3, .out = "", .err = line + "\n"}, pids);
  ASSERT_FALSE(old_driver.ok());
  EXPECT_EQ(old_driver.error().message, line + " (exit 3)");
  Result<CheckpointOutcome> killed = checkpoint_answer(ProgramOutcome{.exit_code = 137, .out = "", .err = ""}, pids);
  ASSERT_FALSE(killed.ok());
  EXPECT_EQ(killed.error().message, "gpupool-cuda-checkpoint ended with exit 137 and said nothing");
}

// The built helper on the simulated libcuda.so.1 (sim/fake_cuda.cc), which tracks this test's own
// process in a state directory of its own.
class ProcessCheckpointHelper : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpupool-checkpoint-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    directory_ = pattern;
    set_environment_variable("GPUPOOL_SIM_CUDA_STATE", directory_);
  }
  void TearDown() override {
    unset_environment_variable("GPUPOOL_SIM_CUDA_STATE");
    std::filesystem::remove_all(directory_);
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(directory_ + "/" + name) << text; }

  Result<CheckpointOutcome> step(CheckpointStep step, milliseconds timeout = milliseconds(20'000)) {
    return run_checkpoint_step(program_, step, {own_pid()}, milliseconds(0), timeout);
  }
  std::string state() {
    Result<CheckpointOutcome> states = step(CheckpointStep::State);
    if (!states.ok()) return states.error().message;
    return to_string(states->pids.at(0).state);
  }

  CheckpointProgram program_{.library = GPUPOOL_TEST_SIM_LIBDIR "/libcuda.so.1"};
  std::string directory_;
};

TEST_F(ProcessCheckpointHelper, SuspendsAndResumesInTheDriversOrder) {
  EXPECT_EQ(state(), "running");
  for (auto [next, after] : {std::pair{CheckpointStep::Lock, "locked"},
                             {CheckpointStep::Checkpoint, "checkpointed"},
                             {CheckpointStep::Restore, "locked"},
                             {CheckpointStep::Unlock, "running"}}) {
    Result<CheckpointOutcome> outcome = step(next);
    ASSERT_TRUE(outcome.ok()) << outcome.error().message;
    EXPECT_TRUE(outcome->ok(1)) << outcome->failure();
    EXPECT_STREQ(to_string(outcome->pids.at(0).state), after);
    EXPECT_EQ(state(), after);
  }
}

TEST_F(ProcessCheckpointHelper, ARefusedStepIsAnOutcome) {
  Result<CheckpointOutcome> outcome = step(CheckpointStep::Checkpoint);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->failure(), fmt::format("pid {}: CUDA_ERROR_ILLEGAL_STATE", own_pid()));
  write("fail-lock", "801\n");
  outcome = step(CheckpointStep::Lock);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->failure(), fmt::format("pid {}: CUDA_ERROR_NOT_SUPPORTED", own_pid()));
  EXPECT_EQ(outcome->pids.at(0).state, ProcessCheckpointState::Running);
}

TEST_F(ProcessCheckpointHelper, AHangingDriverIsKilledAtTheTimeLimit) {
  write("fail-lock", "hang");
  Result<CheckpointOutcome> outcome = step(CheckpointStep::Lock, milliseconds(300));
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.error().message.find("did not finish within 0.3 s"), std::string::npos) << outcome.error().message;
  std::filesystem::remove(directory_ + "/fail-lock");
  EXPECT_EQ(state(), "running");
}

TEST_F(ProcessCheckpointHelper, NoStateDirectoryIsNoDevice) {
  unset_environment_variable("GPUPOOL_SIM_CUDA_STATE");
  Result<CheckpointOutcome> outcome = step(CheckpointStep::Lock);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "gpupool-cuda-checkpoint: cuInit failed: CUDA_ERROR_NO_DEVICE (exit 4)");
}

}  // namespace
}  // namespace gpupool
