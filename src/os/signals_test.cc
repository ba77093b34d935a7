#include "os/signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Restores the test binary's mask and SIGUSR1's action whatever a test did to them.
class SignalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pthread_sigmask(SIG_SETMASK, nullptr, &mask_);
    sigaction(SIGUSR1, nullptr, &action_);
  }
  void TearDown() override {
    while (take_pending_signal(SIGUSR1)) {
    }
    pthread_sigmask(SIG_SETMASK, &mask_, nullptr);
    sigaction(SIGUSR1, &action_, nullptr);
  }
  sigset_t mask_{};
  struct sigaction action_ {};
};

bool blocked(int signal) {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, signal) == 1;
}

TEST_F(SignalsTest, ABlockedSignalWaitsOnItsDescriptor) {
  block_signals({SIGUSR1});
  auto fd = signal_descriptor({SIGUSR1});
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_EQ(read_signal(fd->get()), std::nullopt);  // none pending: no waiting either
  raise(SIGUSR1);
  EXPECT_EQ(read_signal(fd->get()), SIGUSR1);
  EXPECT_EQ(read_signal(fd->get()), std::nullopt);  // taken
}

TEST_F(SignalsTest, TakesAPendingSignalWithoutWaiting) {
  block_signals({SIGUSR1});
  EXPECT_FALSE(take_pending_signal(SIGUSR1));
  raise(SIGUSR1);
  EXPECT_TRUE(take_pending_signal(SIGUSR1));
  EXPECT_FALSE(take_pending_signal(SIGUSR1));
}

std::atomic<int> caught{0};

TEST_F(SignalsTest, CallsTheHandler) {
  set_signal_handler({SIGUSR1}, [](int signal) { caught = signal; });
  raise(SIGUSR1);
  EXPECT_EQ(caught, SIGUSR1);
}

TEST_F(SignalsTest, BlocksEverySignalForItsLifeAndInItsThreads) {
  ASSERT_FALSE(blocked(SIGUSR1));
  bool blocked_in_thread = false;
  {
    AllSignalsBlocked all;
    EXPECT_TRUE(blocked(SIGUSR1));
    EXPECT_TRUE(blocked(SIGTERM));
    std::thread([&] { blocked_in_thread = blocked(SIGCHLD); }).join();
  }
  EXPECT_TRUE(blocked_in_thread);
  EXPECT_FALSE(blocked(SIGUSR1));
}

void (*action_of(int signal))(int) {
  struct sigaction now {};
  sigaction(signal, nullptr, &now);
  return now.sa_handler;
}

TEST_F(SignalsTest, IgnoresSignals) {
  ignore_signals({SIGUSR1});
  EXPECT_EQ(action_of(SIGUSR1), SIG_IGN);
  raise(SIGUSR1);  // and lives
}

// In a child, as the supervisor does it: the test binary's own actions stay as they are.
TEST_F(SignalsTest, PutsEveryActionAndTheMaskBackToTheDefaults) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ignore_signals({SIGUSR1});
    set_signal_handler({SIGUSR2}, [](int) {});
    block_signals({SIGTERM});
    reset_signal_dispositions();
    unblock_all_signals();
    _exit(action_of(SIGUSR1) == SIG_DFL && action_of(SIGUSR2) == SIG_DFL && !blocked(SIGTERM) ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace gpupool
