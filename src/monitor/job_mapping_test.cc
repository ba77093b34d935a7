#include "monitor/job_mapping.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

RunningJob job_on(JobId id, std::vector<unsigned> gpus, std::optional<unsigned> gpu_instance = std::nullopt) {
  RunningJob job;
  job.id = id;
  job.gpus = std::move(gpus);
  job.mig_gpu_instance = gpu_instance;
  return job;
}

TEST(JobMappingFiles, EveryGpuHasAFileListingItsJobs) {
  auto files = job_mapping_files({job_on(12, {0, 1}), job_on(13, {1}), job_on(14, {2}, 3)}, 4);
  EXPECT_EQ(files, (std::map<std::string, std::string>{
                       {"0", "12\n"}, {"1", "12\n13\n"}, {"2", ""}, {"2.3", "14\n"}, {"3", ""}}))
      << "slices share a GPU's file; a MIG job has its GPU instance's";
  EXPECT_EQ(job_mapping_files({}, 2), (std::map<std::string, std::string>{{"0", ""}, {"1", ""}}));
}

class JobMappingDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-job-mapping-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/map";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string text_of(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string root_, dir_;
};

TEST_F(JobMappingDirectoryTest, WritesTheFilesAndRemovesTheMigOnesNoLongerNeeded) {
  JobMappingDirectory directory(dir_);
  ASSERT_TRUE(directory.update(job_mapping_files({job_on(7, {0}), job_on(8, {1}, 2)}, 2)).ok());
  EXPECT_EQ(text_of("0"), "7\n");
  EXPECT_EQ(text_of("1"), "");
  EXPECT_EQ(text_of("1.2"), "8\n");

  ASSERT_TRUE(directory.update(job_mapping_files({job_on(9, {1})}, 2)).ok());
  EXPECT_EQ(text_of("0"), "");
  EXPECT_EQ(text_of("1"), "9\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/1.2"));
  // Only the files: no temporary one beside them (dcgm-exporter would read it) or in their directory.
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/.gpupool-tmp"));
}

TEST_F(JobMappingDirectoryTest, AFreshDaemonClearsWhatAnEarlierOneLeftForEndedMigJobs) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/0.5") << "41\n";
  std::ofstream(dir_ + "/0") << "41\n";
  std::ofstream(dir_ + "/README") << "not ours\n";
  std::filesystem::create_directories(dir_ + "/.gpupool-tmp");
  std::ofstream(dir_ + "/.gpupool-tmp/0.Ab12Cd.tmp") << "41\n";  // written, never renamed
  JobMappingDirectory directory(dir_);
  ASSERT_TRUE(directory.update(job_mapping_files({}, 1)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/0.5"));
  EXPECT_EQ(text_of("0"), "");
  EXPECT_EQ(text_of("README"), "not ours\n");
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/.gpupool-tmp"));
}

TEST_F(JobMappingDirectoryTest, AFileSomeoneRemovedIsWrittenAgainOnlyWhenItChanges) {
  JobMappingDirectory directory(dir_);
  ASSERT_TRUE(directory.update(job_mapping_files({job_on(3, {0}, 1)}, 1)).ok());
  std::filesystem::remove(dir_ + "/0.1");
  ASSERT_TRUE(directory.update(job_mapping_files({}, 1)).ok()) << "its removal is already done";
}

TEST_F(JobMappingDirectoryTest, SaysWhyItCannotWrite) {
  std::ofstream(root_ + "/file") << "x";
  JobMappingDirectory directory(root_ + "/file/map");
  auto updated = directory.update(job_mapping_files({}, 1));
  ASSERT_FALSE(updated.ok());
  EXPECT_NE(updated.error().message.find(root_ + "/file"), std::string::npos) << updated.error().message;
}

}  // namespace
}  // namespace gpupool
