#include "os/child_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "os/fd.h"
#include "os/files.h"

namespace gpupool {
namespace {

TEST(ChildProcess, TellsAnExitWithoutReapingThenReaps) {
  auto go = make_pipe();
  ASSERT_TRUE(go.ok()) << go.error().message;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    go->second.reset();
    char byte = 0;
    (void)!read(go->first.get(), &byte, 1);
    _exit(3);
  }
  EXPECT_FALSE(child_has_exited(child, false));
  go->second.reset();
  EXPECT_TRUE(child_has_exited(child, true));
  EXPECT_TRUE(child_has_exited(child, false));  // still there to ask: not reaped
  EXPECT_EQ(kill(child, 0), 0);
  int status = reap_child(child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3);
  EXPECT_FALSE(child_has_exited(child, false));  // reaped: no such child
  EXPECT_EQ(reap_child(child), 0);
}

TEST(ChildProcess, AChildPastItsTimeLimitGetsSigtermThenSigkill) {
  using namespace std::chrono_literals;
  ChildSpec spec;
  // It says when it ignores SIGTERM, and the clock starts then: under load a SIGTERM before the
  // trap would end it at once.
  std::string ready = ::testing::TempDir() + "gpupool-child-limit-ready-" + std::to_string(getpid());
  std::filesystem::remove(ready);
  spec.argv = {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; sleep 30"};
  spec.environment = environment_with({});
  auto child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  for (int i = 0; i < 6000 && !std::filesystem::exists(ready); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(std::filesystem::exists(ready));
  std::filesystem::remove(ready);
  auto started = std::chrono::steady_clock::now();
  ChildEnd end = wait_forwarding_signals(*child, RunTimeLimit{300ms, 200ms});
  EXPECT_TRUE(end.timed_out);
  EXPECT_EQ(end.exit_code, 128 + SIGKILL);  // it ignored SIGTERM
  EXPECT_GE(std::chrono::steady_clock::now() - started, 500ms);

  spec.argv = {"/bin/sh", "-c", "exit 3"};
  child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  end = wait_forwarding_signals(*child, RunTimeLimit{30s, 1s});
  EXPECT_FALSE(end.timed_out);
  EXPECT_EQ(end.exit_code, 3);
}

// gpupoold's word that the job is suspended, then resumed (here from the child, to its parent):
// the time between does not count against the limit. Blocked from before the child starts, as
// `gpupool run` blocks them before its lease is granted.
TEST(ChildProcess, TheTimeLimitsClockStandsStillWhileTheJobIsSuspended) {
  using namespace std::chrono_literals;
  sigset_t clock_signals, previous;
  sigemptyset(&clock_signals);
  sigaddset(&clock_signals, suspended_signal());
  sigaddset(&clock_signals, resumed_signal());
  pthread_sigmask(SIG_BLOCK, &clock_signals, &previous);
  ChildSpec spec;
  spec.argv = {"/bin/sh", "-c",
               "kill -" + std::to_string(suspended_signal()) + " $PPID; sleep 3; kill -" +
                   std::to_string(resumed_signal()) + " $PPID; sleep 0.2"};
  spec.environment = environment_with({});
  auto child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  auto started = std::chrono::steady_clock::now();
  ChildEnd end = wait_forwarding_signals(*child, RunTimeLimit{2s, 1s});
  EXPECT_FALSE(end.timed_out);
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 3s);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

TEST(ChildProcess, AWatchThatSaysStopEndsTheChildOnce) {
  using namespace std::chrono_literals;
  ChildSpec spec;
  // It says when it ignores SIGTERM: before that a SIGTERM would end it at once.
  std::string ready = ::testing::TempDir() + "gpupool-child-ready-" + std::to_string(getpid());
  std::filesystem::remove(ready);
  spec.argv = {"/bin/sh", "-c", "trap '' TERM; touch " + ready + "; sleep 30"};
  spec.environment = environment_with({});
  auto child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  int checks_when_ready = 0;
  // Stops at the third check once it is ready; never asked again after that, while the grace runs out.
  ChildEnd end = wait_forwarding_signals(*child, RunTimeLimit{30s, 1s}, ChildWatch{10ms, 100ms, [&] {
                                           if (std::filesystem::exists(ready)) ++checks_when_ready;
                                           return checks_when_ready == 3;
                                         }});
  EXPECT_TRUE(end.stopped);
  EXPECT_FALSE(end.timed_out);
  EXPECT_EQ(end.exit_code, 128 + SIGKILL);  // it ignored SIGTERM
  EXPECT_EQ(checks_when_ready, 3);
  std::filesystem::remove(ready);

  // Past its time limit the watch is asked no more: the child is ending anyway. The child notes
  // the SIGTERM in a file; a watch asked after it would see the file.
  std::string termed = ::testing::TempDir() + "gpupool-child-termed-" + std::to_string(getpid());
  std::filesystem::remove(termed);
  spec.argv = {"/bin/sh", "-c", "trap 'touch " + termed + "' TERM; while :; do sleep 0.05; done"};
  child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  bool asked_after_sigterm = false;
  end = wait_forwarding_signals(*child, RunTimeLimit{50ms, 500ms}, ChildWatch{10ms, 1s, [&] {
                                  asked_after_sigterm |= std::filesystem::exists(termed);
                                  return false;
                                }});
  EXPECT_TRUE(end.timed_out);
  EXPECT_FALSE(end.stopped);
  EXPECT_FALSE(asked_after_sigterm);
  std::filesystem::remove(termed);

  // A child that ends by itself is never stopped, however often it is checked.
  spec.argv = {"/bin/sh", "-c", "exit 4"};
  child = spawn_child(spec);
  ASSERT_TRUE(child.ok()) << child.error().message;
  end = wait_forwarding_signals(*child, std::nullopt, ChildWatch{1ms, 1s, [] { return false; }});
  EXPECT_FALSE(end.stopped);
  EXPECT_EQ(end.exit_code, 4);
}

TEST(ChildProcess, SpawnsAHelperReadingItsStdinWithSignalsBlocked) {
  auto input = make_pipe();
  ASSERT_TRUE(input.ok()) << input.error().message;
  auto& [read_end, write_end] = *input;
  // cat copies its stdin (to /dev/null) until we close the pipe.
  auto pid = spawn_helper({"/bin/cat"}, read_end.get(), {SIGTERM});
  ASSERT_TRUE(pid.ok()) << pid.error().message;
  read_end.reset();
  // posix_spawn returns once the exec is done: the mask is cat's own now, SIGTERM (bit 15) only.
  std::ifstream status("/proc/" + std::to_string(*pid) + "/status");
  std::string line, blocked;
  while (std::getline(status, line)) {
    if (line.rfind("SigBlk:", 0) == 0) blocked = line.substr(line.find_first_not_of(" \t", 7));
  }
  EXPECT_EQ(blocked, "0000000000004000");
  EXPECT_FALSE(child_has_exited(*pid, false));  // still reading
  ASSERT_TRUE(write_all(write_end.get(), "text\n").ok());
  write_end.reset();
  EXPECT_EQ(exit_code_from_status(reap_child(*pid)), 0);
}

TEST(ChildProcess, AHelperThatCannotStartIsAnError) {
  auto pid = spawn_helper({"/nonexistent-gpupool-test"}, STDIN_FILENO, {});
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.error().message, "cannot start /nonexistent-gpupool-test: No such file or directory");
}

}  // namespace
}  // namespace gpupool
