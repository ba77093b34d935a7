#include "daemon/event_hook.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace gpupool {
namespace {

Event failed_job_event() {
  Event event;
  event.seq = 42;
  event.time = 1764945300.5;
  event.kind = EventKind::JobFailed;
  event.job = 12;
  event.user = "alice";
  event.name = "train; rm -rf /";  // users' text: it travels as a value, never as shell syntax
  event.gpus = {0, 1};
  event.detail = "exit code 3 after 5m";
  return event;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class EventHookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-event-hook-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST(HookEnvironmentTest, SaysTheEventInVariables) {
  std::vector<std::string> environment = hook_environment(failed_job_event());
  EXPECT_EQ(environment, (std::vector<std::string>{
                             "GPUPOOL_EVENT=job_failed",
                             "GPUPOOL_EVENT_SEQ=42",
                             "GPUPOOL_EVENT_TIME=1764945300.500",
                             "GPUPOOL_EVENT_MESSAGE=job 12 (alice, train; rm -rf /) failed on GPU 0-1: exit code 3 after 5m",
                             "GPUPOOL_EVENT_JOB=12",
                             "GPUPOOL_EVENT_USER=alice",
                             "GPUPOOL_EVENT_NAME=train; rm -rf /",
                             "GPUPOOL_EVENT_GPUS=0,1",
                             "GPUPOOL_EVENT_DETAIL=exit code 3 after 5m",
                         }));
  Event quarantined;
  quarantined.kind = EventKind::GpuQuarantined;
  quarantined.gpus = {2};
  quarantined.jobs = {12, 14};
  quarantined.users = {"alice", "bob"};
  std::vector<std::string> gpu = hook_environment(quarantined);
  EXPECT_NE(std::ranges::find(gpu, "GPUPOOL_EVENT_JOBS=12 14"), gpu.end());
  EXPECT_NE(std::ranges::find(gpu, "GPUPOOL_EVENT_USERS=alice bob"), gpu.end());
  EXPECT_TRUE(std::ranges::none_of(gpu, [](const std::string& v) { return v.starts_with("GPUPOOL_EVENT_JOB="); }));
}

TEST_F(EventHookTest, RunsTheCommandWithTheEventOnItsInputForTheKindsItAsksFor) {
  const std::string out = dir_ + "/out";
  {
    EventsConfig config;
    config.on_event = {"/bin/sh", "-c", "cat >> '" + out + "'; echo \"$GPUPOOL_EVENT_NAME\" >> '" + out + "'"};
    config.on_event_kinds = {EventKind::JobFailed};
    EventHook hook(config);
    Event started = failed_job_event();
    started.kind = EventKind::JobStarted;
    hook.offer(started);
    hook.offer(failed_job_event());
  }  // stopping runs what is queued
  std::istringstream lines(file_text(out));
  std::string json_line;
  std::string name_line;
  ASSERT_TRUE(std::getline(lines, json_line));
  ASSERT_TRUE(std::getline(lines, name_line));
  auto event = nlohmann::json::parse(json_line);
  EXPECT_EQ(event["kind"], "job_failed");
  EXPECT_EQ(event["seq"], 42);
  EXPECT_EQ(name_line, "train; rm -rf /");
  std::string rest;
  EXPECT_FALSE(std::getline(lines, rest)) << "job_started is not among the kinds asked for: " << rest;
}

TEST_F(EventHookTest, AHookPastItsTimeIsKilledAndItsFailureSaid) {
  EventsConfig config;
  config.on_event = {"/bin/sh", "-c", "echo cannot reach the mail server >&2; exit 4"};
  testing::internal::CaptureStderr();
  {
    EventHook hook(config);
    hook.offer(failed_job_event());
  }
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "gpupoold: on_event for event 42 (job_failed) exited 4: cannot reach the mail server"),
            std::string::npos);

  config.on_event = {"sleep", "30"};
  config.on_event_timeout_s = 0.2;
  auto began = std::chrono::steady_clock::now();
  testing::internal::CaptureStderr();
  {
    EventHook hook(config);
    hook.offer(failed_job_event());
  }
  std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("gpupoold: on_event for event 42 (job_failed): "), std::string::npos) << said;
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(20)) << "the hook was not killed";
}

}  // namespace
}  // namespace gpupool
