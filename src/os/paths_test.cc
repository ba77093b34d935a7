#include "os/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Sets the variables the rules read for one test and puts them back after.
class PathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name, value->c_str(), 1); else unsetenv(name);
    }
  }
  static constexpr const char* kVariables[] = {"GPUPOOL_RUNTIME_DIR", "GPUPOOL_STATE_DIR", "SLURM_JOB_ID",
                                               "XDG_STATE_HOME", "HOME"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(PathsTest, TheVariablesComeFirstWhenNotEmpty) {
  setenv("GPUPOOL_RUNTIME_DIR", "/somewhere/run", 1);
  setenv("GPUPOOL_STATE_DIR", "/somewhere/state", 1);
  setenv("SLURM_JOB_ID", "42", 1);
  EXPECT_EQ(default_runtime_dir(), "/somewhere/run");
  EXPECT_EQ(default_daemon_state_dir(), "/somewhere/state");
  setenv("GPUPOOL_RUNTIME_DIR", "", 1);
  setenv("GPUPOOL_STATE_DIR", "", 1);
  EXPECT_EQ(default_runtime_dir(), "/tmp/gpupool-42/run");
  EXPECT_EQ(default_daemon_state_dir(), "/tmp/gpupool-42/state");
}

TEST_F(PathsTest, ASlurmJobHasItsOwnDirectoryOnlyWithAUsableId) {
  EXPECT_EQ(slurm_job_directory(), std::nullopt);
  setenv("SLURM_JOB_ID", "", 1);  // set but empty: no job
  EXPECT_EQ(slurm_job_directory(), std::nullopt);
  setenv("SLURM_JOB_ID", "../x", 1);
  EXPECT_EQ(slurm_job_directory(), std::nullopt);
  setenv("SLURM_JOB_ID", "1234", 1);
  EXPECT_EQ(slurm_job_directory(), "/tmp/gpupool-1234");
}

TEST_F(PathsTest, OutsideSlurmTheRuntimeDirectoryIsRunOrTmp) {
  std::string expected = std::filesystem::is_directory("/run/gpupool") ? "/run/gpupool" : "/tmp/gpupool";
  EXPECT_EQ(default_runtime_dir(), expected);
}

TEST_F(PathsTest, TheUserStateDirectoryFollowsTheXdgRule) {
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(user_state_dir(), "/home/someone/.local/state/gpupool");
  setenv("XDG_STATE_HOME", "relative/state", 1);  // not absolute: ignored, as the rule says
  EXPECT_EQ(user_state_dir(), "/home/someone/.local/state/gpupool");
  setenv("XDG_STATE_HOME", "/xdg/state", 1);
  EXPECT_EQ(user_state_dir(), "/xdg/state/gpupool");
  if (geteuid() != 0) {
    EXPECT_EQ(default_daemon_state_dir(), "/xdg/state/gpupool");
  }
}

TEST_F(PathsTest, PreparesTheJobDirectoryPrivateToItsUser) {
  std::string job = "gpupool-paths-test-" + std::to_string(getpid());
  setenv("SLURM_JOB_ID", job.c_str(), 1);
  std::string dir = "/tmp/gpupool-" + job;
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(prepare_slurm_job_directory().ok());
  EXPECT_EQ(std::filesystem::status(dir).permissions(), std::filesystem::perms::owner_all);
  EXPECT_TRUE(prepare_slurm_job_directory().ok());  // there already, and ours
  std::filesystem::permissions(dir, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  auto refused = prepare_slurm_job_directory();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("needs it private"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpupool
