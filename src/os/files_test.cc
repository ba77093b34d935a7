#include "os/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-files-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(FilesTest, CreatesOnceAndOpensWhatExists) {
  std::string path = dir_ + "/file";
  auto missing = open_existing(path, O_RDONLY);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  auto created = create_file(path, O_WRONLY, 0640);
  ASSERT_TRUE(created.ok()) << created.error().message;
  ASSERT_TRUE(created->has_value());
  ASSERT_TRUE(write_all((*created)->get(), "hello").ok());
  auto again = create_file(path, O_WRONLY, 0640);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());  // there already
  auto opened = open_existing(path, O_RDONLY);
  ASSERT_TRUE(opened.ok() && opened->has_value());
  EXPECT_EQ(*read_at((*opened)->get(), 100, 1), "ello");
  EXPECT_EQ(*read_to_end((*opened)->get()), "hello");
  auto status = file_status((*opened)->get());
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->type, FileType::regular);
  EXPECT_EQ(status->size, 5u);
  EXPECT_EQ(status->links, 1u);
  EXPECT_EQ(status->owner, getuid());
}

TEST_F(FilesTest, ReadsAChunkAtATimeUntilTheEndOrTheFirstError) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message;
  ASSERT_TRUE(write_all(pipe->second.get(), "abc").ok());
  pipe->second.reset();
  std::string seen;
  ASSERT_TRUE(read_each_chunk(pipe->first.get(), [&seen](std::string_view chunk) -> Result<void> {
                seen.append(chunk);
                return {};
              }).ok());
  EXPECT_EQ(seen, "abc");

  auto again = make_pipe();
  ASSERT_TRUE(again.ok()) << again.error().message;
  ASSERT_TRUE(write_all(again->second.get(), "x").ok());
  auto stopped = read_each_chunk(again->first.get(), [](std::string_view) -> Result<void> { return fail("full"); });
  ASSERT_FALSE(stopped.ok());  // and no waiting for more: the writer is still open
  EXPECT_EQ(stopped.error().message, "full");
}

TEST_F(FilesTest, ErrorsNameThePathAndTheReason) {
  auto opened = open_file(dir_ + "/none", O_RDONLY);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message, "cannot open " + dir_ + "/none: No such file or directory");
}

TEST_F(FilesTest, TellsALinkFromItsTarget) {
  std::string target = dir_ + "/target";
  ASSERT_TRUE(make_directory(target, 0700).ok());
  ASSERT_EQ(symlink(target.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(link_status(dir_ + "/link")->type, FileType::symbolic_link);
  EXPECT_EQ(file_status(dir_ + "/link")->type, FileType::directory);
  EXPECT_EQ(*resolve_path(dir_ + "/link/."), *resolve_path(target));
  // Nothing by that name is no error; a path that cannot be looked through is one.
  EXPECT_EQ((*link_status_if_any(dir_ + "/link"))->type, FileType::symbolic_link);
  EXPECT_FALSE(link_status_if_any(dir_ + "/none")->has_value());
  ASSERT_TRUE(create_file(dir_ + "/plain", O_WRONLY, 0600).ok());
  auto not_a_directory = link_status_if_any(dir_ + "/plain/x");
  ASSERT_FALSE(not_a_directory.ok());
  EXPECT_NE(not_a_directory.error().message.find("Not a directory"), std::string::npos);
}

TEST_F(FilesTest, OpensOnlyARegularFileReachedWithoutALink) {
  std::string file = dir_ + "/log";
  ASSERT_TRUE(create_file(file, O_WRONLY, 0600).ok());
  ASSERT_EQ(symlink(file.c_str(), (dir_ + "/link").c_str()), 0);
  ASSERT_EQ(mkfifo((dir_ + "/fifo").c_str(), 0600), 0);
  auto opened = open_regular_file(file, O_RDONLY | O_NONBLOCK);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_TRUE(opened->has_value());
  auto missing = open_regular_file(dir_ + "/none", O_RDONLY);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  for (const char* planted : {"/link", "/fifo"}) {
    auto refused = open_regular_file(dir_ + planted, O_RDONLY | O_NONBLOCK);
    ASSERT_FALSE(refused.ok()) << planted;
    EXPECT_EQ(refused.error().message, dir_ + planted + " is not a regular file: not reading it");
  }
}

TEST_F(FilesTest, MakesDirectoriesAndSaysWhetherItDid) {
  EXPECT_EQ(*make_directory(dir_ + "/a", 0700), true);
  EXPECT_EQ(*make_directory(dir_ + "/a", 0700), false);
  ASSERT_TRUE(make_directories(dir_ + "/b/c/d", 0700).ok());
  EXPECT_EQ(file_status(dir_ + "/b/c/d")->type, FileType::directory);
  ASSERT_TRUE(change_mode(dir_ + "/a", 01777).ok());
  EXPECT_EQ(file_status(dir_ + "/a")->permissions, 01777u);
}

TEST_F(FilesTest, EnsuresADirectoryOfOurOwnWithItsMode) {
  std::string own = dir_ + "/own";
  ASSERT_TRUE(ensure_own_directory(own, 0700).ok());
  EXPECT_EQ(file_status(own)->permissions, 0700u);
  ASSERT_TRUE(change_mode(own, 0777).ok());
  ASSERT_TRUE(ensure_own_directory(own, 0755).ok());  // there already: the mode is set again
  EXPECT_EQ(file_status(own)->permissions, 0755u);
  ASSERT_EQ(symlink(own.c_str(), (dir_ + "/link").c_str()), 0);
  ASSERT_TRUE(create_file(dir_ + "/file", O_WRONLY, 0600).ok());
  for (const char* planted : {"/link", "/file"}) {
    auto refused = ensure_own_directory(dir_ + planted, 0700);
    ASSERT_FALSE(refused.ok()) << planted;
    EXPECT_EQ(refused.error().message, dir_ + planted + " is not a directory");
  }
  if (geteuid() == 0) {  // another user's directory
    ASSERT_EQ(chown(own.c_str(), 4242, 4242), 0);
    auto refused = ensure_own_directory(own, 0755);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().message, own + " belongs to uid 4242, not to this process's user");
  }
}

TEST_F(FilesTest, ListsRenamesAndRemoves) {
  auto unique = create_unique_file(dir_ + "/record.", ".tmp");
  ASSERT_TRUE(unique.ok()) << unique.error().message;
  EXPECT_TRUE(unique->path.starts_with(dir_ + "/record."));
  EXPECT_TRUE(unique->path.ends_with(".tmp"));
  EXPECT_EQ(file_status(unique->fd.get())->permissions, 0600u);
  ASSERT_TRUE(change_mode(unique->fd.get(), 0644).ok());
  ASSERT_TRUE(rename_file(unique->path, dir_ + "/record").ok());
  auto names = directory_entries(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"record"});
  ASSERT_TRUE(remove_file(dir_ + "/record").ok());
  EXPECT_FALSE(remove_file(dir_ + "/record").ok());
  EXPECT_TRUE(directory_entries(dir_)->empty());
  EXPECT_FALSE(directory_entries(dir_ + "/none").ok());
}

}  // namespace
}  // namespace gpupool
