#include "os/container.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpupool {
namespace {

namespace fs = std::filesystem;

// A fake root with /proc/1, removed afterwards.
class ContainerDetectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("gpupool-container-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_ / "proc/1");
    fs::create_directories(root_ / "run");
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const std::string& relative, const std::string& text) {
    std::ofstream(root_ / relative, std::ios::binary) << text;
  }
  ContainerDetection detect() const { return detect_container(HostFiles(root_.string())); }

  fs::path root_;
};

TEST_F(ContainerDetectionTest, NothingMeansNotDetected) {
  write("proc/1/cgroup", "0::/init.scope\n");
  write("proc/1/environ", std::string("HOME=/\0TERM=linux\0", 19));
  const ContainerDetection detection = detect();
  EXPECT_FALSE(detection.detected);
  EXPECT_EQ(detection.how, std::nullopt);
}

TEST_F(ContainerDetectionTest, DockerEnvFile) {
  write(".dockerenv", "");
  EXPECT_EQ(detect().how, "/.dockerenv exists (Docker)");
}

TEST_F(ContainerDetectionTest, PodmanContainerEnvFile) {
  write("run/.containerenv", "");
  EXPECT_EQ(detect().how, "/run/.containerenv exists (Podman)");
}

TEST_F(ContainerDetectionTest, ContainerVariableOfInit) {
  write("proc/1/environ", std::string("PATH=/bin\0container=lxc\0", 25));
  EXPECT_EQ(detect().how, "container=lxc in the environment of PID 1");
}

TEST_F(ContainerDetectionTest, CgroupOfInit) {
  write("proc/1/cgroup", "12:pids:/kubepods/besteffort/pod1/abc\n");
  const ContainerDetection detection = detect();
  EXPECT_TRUE(detection.detected);
  EXPECT_EQ(detection.how, "/proc/1/cgroup mentions kubepods");
}

TEST_F(ContainerDetectionTest, ProcessEnvironmentIsParsed) {
  write("proc/1/environ", std::string("A=1\0B=x=y\0EMPTY=\0junk\0", 23));
  const auto env = HostFiles(root_.string()).process_environment(1);
  ASSERT_TRUE(env);
  EXPECT_EQ(*env, (std::map<std::string, std::string>{{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}}));
  EXPECT_EQ(HostFiles(root_.string()).process_environment(2), std::nullopt);
}

}  // namespace
}  // namespace gpupool
