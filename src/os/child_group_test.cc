#include "os/child_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace gpupool {
namespace {

using namespace std::chrono_literals;

// Runs shell snippets as a group, with their output captured in temporary files.
class ChildGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = std::tmpfile();
    err_ = std::tmpfile();
    options_.stdout_fd = fileno(out_);
    options_.stderr_fd = fileno(err_);
  }
  void TearDown() override {
    std::fclose(out_);
    std::fclose(err_);
  }

  GroupOutcome run(const std::vector<std::string>& scripts) {
    std::vector<GroupChild> children;
    for (size_t i = 0; i < scripts.size(); ++i) {
      GroupChild child{{}, "[" + std::to_string(i) + "] "};
      child.spec.argv = {"/bin/sh", "-c", scripts[i]};
      child.spec.environment = environment_with({});
      children.push_back(std::move(child));
    }
    auto started = std::chrono::steady_clock::now();
    Result<GroupOutcome> outcome = run_child_group(std::move(children), options_);
    elapsed_ = std::chrono::steady_clock::now() - started;
    EXPECT_TRUE(outcome.ok());
    return outcome.ok() ? *outcome : GroupOutcome{};
  }

  static std::string contents(std::FILE* file) {
    std::rewind(file);
    std::string text;
    for (int c; (c = std::fgetc(file)) != EOF;) text += static_cast<char>(c);
    return text;
  }

  std::FILE* out_ = nullptr;
  std::FILE* err_ = nullptr;
  GroupOptions options_;
  std::chrono::steady_clock::duration elapsed_{};
};

TEST_F(ChildGroupTest, AllSucceedingIsSuccess) {
  GroupOutcome outcome = run({"true", "exit 0"});
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_FALSE(outcome.failed_child);
  EXPECT_FALSE(outcome.signal);
  EXPECT_EQ(outcome.stopped, 0u);
}

TEST_F(ChildGroupTest, PrefixesEveryLineAndKeepsTheStreamsApart) {
  run({"printf 'a\\nb\\n'; printf 'oops' >&2"});
  EXPECT_EQ(contents(out_), "[0] a\n[0] b\n");
  EXPECT_EQ(contents(err_), "[0] oops\n");  // the partial last line, completed at the end
}

TEST_F(ChildGroupTest, LinesOfDifferentChildrenAreNeverMixed) {
  run({"i=0; while [ $i -lt 200 ]; do echo aaaaaaaaaaaaaaaa; i=$((i+1)); done",
       "i=0; while [ $i -lt 200 ]; do echo bbbbbbbbbbbbbbbb; i=$((i+1)); done"});
  std::string text = contents(out_);
  size_t lines = 0;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1, ++lines) {
    std::string line = text.substr(start, end - start);
    EXPECT_TRUE(line == "[0] aaaaaaaaaaaaaaaa" || line == "[1] bbbbbbbbbbbbbbbb") << line;
  }
  EXPECT_EQ(lines, 400u);
}

TEST_F(ChildGroupTest, AFailureStopsTheOthersAndNamesTheChild) {
  GroupOutcome outcome = run({"sleep 30", "exit 3", "sleep 30"});
  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_EQ(outcome.failed_child, 1u);
  EXPECT_FALSE(outcome.failed_signal);
  EXPECT_EQ(outcome.stopped, 2u);
  EXPECT_LT(elapsed_, 5s);
}

TEST_F(ChildGroupTest, AKilledChildCountsAsFailed) {
  GroupOutcome outcome = run({"kill -KILL $$", "sleep 30"});
  EXPECT_EQ(outcome.exit_code, 128 + SIGKILL);
  EXPECT_EQ(outcome.failed_child, 0u);
  EXPECT_EQ(outcome.failed_signal, SIGKILL);
}

// Gone, or a zombie left for init to collect.
bool process_ended(pid_t pid) {
  std::FILE* stat = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (stat == nullptr) return true;
  char state = '?';
  int scanned = std::fscanf(stat, "%*d (%*[^)]) %c", &state);
  std::fclose(stat);
  return scanned == 1 && (state == 'Z' || state == 'X');
}

TEST_F(ChildGroupTest, WhatAChildStartedIsStoppedWithIt) {
  GroupOutcome outcome = run({"sleep 0.2; exit 1", "sleep 30 & echo $!; wait"});
  EXPECT_EQ(outcome.exit_code, 1);
  std::string out = contents(out_);
  ASSERT_EQ(out.rfind("[1] ", 0), 0u) << out;
  pid_t grandchild = std::stoi(out.substr(4));
  auto deadline = std::chrono::steady_clock::now() + 3s;
  while (!process_ended(grandchild) && std::chrono::steady_clock::now() < deadline) usleep(10000);
  EXPECT_TRUE(process_ended(grandchild));
}

TEST_F(ChildGroupTest, ChildrenIgnoringSigtermAreKilledAfterTheGrace) {
  options_.grace = 200ms;
  // The failure comes once the other shell has had the time to ignore SIGTERM.
  GroupOutcome outcome = run({"sleep 0.3; exit 2", "trap '' TERM; sleep 30"});
  EXPECT_EQ(outcome.exit_code, 2);
  EXPECT_GE(elapsed_, 500ms);
  EXPECT_LT(elapsed_, 5s);
}

TEST_F(ChildGroupTest, TheTimeLimitStopsEveryChild) {
  options_.time_limit = 300ms;
  options_.grace = 200ms;
  GroupOutcome outcome = run({"sleep 30", "trap '' TERM; sleep 30"});
  EXPECT_TRUE(outcome.timed_out);
  EXPECT_EQ(outcome.exit_code, 124);
  EXPECT_FALSE(outcome.failed_child);
  EXPECT_EQ(outcome.stopped, 2u);
  EXPECT_GE(elapsed_, 500ms);  // the limit, then the grace for the one ignoring SIGTERM
  EXPECT_LT(elapsed_, 10s);
}

TEST_F(ChildGroupTest, AGroupDoneWithinItsTimeLimitIsNotTimedOut) {
  options_.time_limit = 30s;
  GroupOutcome outcome = run({"true", "exit 0"});
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_EQ(outcome.exit_code, 0);
}

// gpupoold's word that the job is suspended, then resumed (here from a child, our parent's
// signal): the time between does not count against the limit.
TEST_F(ChildGroupTest, TheTimeLimitsClockStandsStillWhileTheJobIsSuspended) {
  options_.time_limit = 2s;
  GroupOutcome outcome = run({"kill -" + std::to_string(suspended_signal()) + " $PPID; sleep 3; kill -" +
                                  std::to_string(resumed_signal()) + " $PPID; sleep 0.2",
                              "sleep 3.5"});
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_GE(elapsed_, 3s);
}

TEST_F(ChildGroupTest, AStopSignalToUsStopsEveryChild) {
  // The first child signals the test process, which is its parent.
  GroupOutcome outcome = run({"kill -TERM $PPID; sleep 30", "sleep 30"});
  EXPECT_EQ(outcome.signal, SIGTERM);
  EXPECT_EQ(outcome.exit_code, 128 + SIGTERM);
  EXPECT_FALSE(outcome.failed_child);
  EXPECT_EQ(outcome.stopped, 2u);
  EXPECT_LT(elapsed_, 5s);
}

TEST_F(ChildGroupTest, TellsThePidsOnceAllHaveStarted) {
  std::vector<pid_t> pids;
  options_.on_started = [&](const std::vector<pid_t>& started) { pids = started; };
  run({"true", "true"});
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_GT(pids[0], 0);
  EXPECT_NE(pids[0], pids[1]);
}

}  // namespace
}  // namespace gpupool
