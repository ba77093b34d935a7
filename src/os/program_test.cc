#include "os/program.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool {
namespace {

TEST(ProgramTest, ArgumentsArriveAsTheyAreWithoutAShell) {
  std::vector<std::string> nasty = {"two words", "it's", "$HOME", "`id`", "a\nb", "-n", "*", ""};
  std::vector<std::string> argv = {"printf", "[%s]"};
  argv.insert(argv.end(), nasty.begin(), nasty.end());
  Result<ProgramOutcome> outcome = run_program(argv);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->exit_code, 0);
  EXPECT_EQ(outcome->out, "[two words][it's][$HOME][`id`][a\nb][-n][*][]");
  EXPECT_EQ(outcome->err, "");
}

TEST(ProgramTest, InputIsFedAndBothOutputsAndTheStatusComeBack) {
  ProgramOptions options;
  options.input = "line one\nline two\n";
  Result<ProgramOutcome> outcome =
      run_program({"sh", "-c", "cat; echo oops >&2; exit 3"}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->exit_code, 3);
  EXPECT_EQ(outcome->out, "line one\nline two\n");
  EXPECT_EQ(outcome->err, "oops\n");
}

TEST(ProgramTest, LargeInputAndOutputDoNotDeadlock) {
  ProgramOptions options;
  options.input = std::string(1 << 20, 'x');
  Result<ProgramOutcome> outcome = run_program({"sh", "-c", "cat; head -c 300000 /dev/zero >&2"}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->out.size(), size_t{1} << 20);
  EXPECT_EQ(outcome->err.size(), 300000u);
}

TEST(ProgramTest, AProgramThatReadsNoInputDoesNotKillUs) {
  ProgramOptions options;
  options.input = std::string(1 << 20, 'x');
  Result<ProgramOutcome> outcome = run_program({"true"}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->exit_code, 0);
}

TEST(ProgramTest, EnvironmentIsOursWithTheAdditions) {
  ProgramOptions options;
  options.environment = {"GPUPOOL_PROGRAM_TEST=a b"};
  Result<ProgramOutcome> outcome = run_program({"sh", "-c", "echo \"$GPUPOOL_PROGRAM_TEST:$PATH\""}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->out, std::string("a b:") + getenv("PATH") + "\n");
}

TEST(ProgramTest, UnsetVariablesAreNotPassedOn) {
  // HOME, not PATH: the shell that reads the variable needs PATH to be found.
  ASSERT_NE(getenv("HOME"), nullptr);
  ProgramOptions options;
  options.unset = {"HOME", "GPUPOOL_PROGRAM_TEST_NEVER_SET"};
  Result<ProgramOutcome> outcome = run_program({"sh", "-c", "echo \"${HOME-unset}\""}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->out, "unset\n");
}

TEST(ProgramTest, ASignalIsReportedAsAShellWould) {
  Result<ProgramOutcome> outcome = run_program({"sh", "-c", "kill -TERM $$"});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->exit_code, 128 + 15);
}

TEST(ProgramTest, AMissingProgramIsOneClearLine) {
  ProgramOptions options;
  options.not_found_hint = "is Slurm's client installed?";
  Result<ProgramOutcome> outcome = run_program({"gpupool-no-such-program"}, options);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "gpupool-no-such-program: not found on PATH; is Slurm's client installed?");
  EXPECT_FALSE(run_program({}).ok());
  // A path is not looked up on PATH, and the message does not say it was.
  outcome = run_program({"/nonexistent/gpupool-no-such-program"});
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "/nonexistent/gpupool-no-such-program: not found");
}

TEST(ProgramTest, AProgramPastItsTimeoutIsKilledAndAnError) {
  ProgramOptions options;
  options.timeout = std::chrono::milliseconds(200);
  Result<ProgramOutcome> outcome = run_program({"sleep", "30"}, options);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "sleep did not finish within 0.2 s and was killed");
  outcome = run_program({"true"}, options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  EXPECT_EQ(outcome->exit_code, 0);
}

TEST(ProgramTest, TheTimeoutHoldsForAProgramThatClosedItsOutputAndForWhatItStarted) {
  ProgramOptions options;
  options.timeout = std::chrono::milliseconds(300);
  const auto began = std::chrono::steady_clock::now();
  // Its output closed at once; it and the sleep it left behind run on.
  Result<ProgramOutcome> outcome =
      run_program({"sh", "-c", "exec >/dev/null 2>&1; sleep 30 & echo $! > /dev/null; sleep 30"}, options);
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.error().message, "sh did not finish within 0.3 s and was killed");
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(10));
}

TEST(ProgramTest, AProgramGetsOnlyItsStandardDescriptors) {
  Result<ProgramOutcome> outcome = run_program({"sh", "-c", "ls /proc/self/fd | wc -l"});
  ASSERT_TRUE(outcome.ok()) << outcome.error().message;
  // 0, 1, 2 and the directory ls reads: nothing of ours.
  EXPECT_EQ(outcome->out, "4\n");
}

TEST(ProgramTest, FindsAProgramOnPath) {
  std::optional<std::string> sh = find_program("sh");
  ASSERT_TRUE(sh);
  EXPECT_TRUE(sh->ends_with("/sh")) << *sh;
  EXPECT_EQ(find_program("gpupool-no-such-program"), std::nullopt);
}

}  // namespace
}  // namespace gpupool
