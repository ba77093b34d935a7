#include "os/file_lock.h"

#include <fcntl.h>

#include <string>

#include <gtest/gtest.h>

#include "os/files.h"

namespace gpupool {
namespace {

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto file = create_unique_file(::testing::TempDir() + "/gpupool-lock-", ".tmp");
    ASSERT_TRUE(file.ok()) << file.error().message;
    path_ = file->path;
  }
  void TearDown() override { (void)remove_file(path_); }
  // A second open file description: OFD locks and flock conflict only between descriptions.
  Fd open_again() { return std::move(*open_file(path_, O_RDWR)); }
  std::string path_;
};

TEST_F(FileLockTest, RangeLocksConflictOnlyWhereTheyOverlap) {
  Fd holder = open_again();
  Fd other = open_again();
  ASSERT_TRUE(try_lock_range(holder.get(), ByteRange{10, 5}));
  EXPECT_FALSE(try_lock_range(other.get(), ByteRange{12, 1}));
  EXPECT_TRUE(try_lock_range(other.get(), ByteRange{15, 5}));
  auto found = find_range_lock(other.get(), ByteRange{0, kToEndOfFile});
  ASSERT_TRUE(found.ok() && found->has_value());
  EXPECT_EQ((*found)->start, 10);
  EXPECT_EQ((*found)->length, 5);
  EXPECT_EQ((*found)->end(), 15);
  // Our own locks are no conflict to ourselves.
  EXPECT_FALSE(find_range_lock(holder.get(), ByteRange{0, 10})->has_value());
  // Nor is a descriptor that is not a file's: that is an error.
  auto not_a_file = find_range_lock(-1, ByteRange{0, 10});
  ASSERT_FALSE(not_a_file.ok());
  EXPECT_EQ(not_a_file.error().message, "cannot test the locks of descriptor -1: Bad file descriptor");
}

TEST_F(FileLockTest, ClosingTheDescriptionReleasesItsRanges) {
  Fd other = open_again();
  {
    Fd holder = open_again();
    ASSERT_TRUE(try_lock_range(holder.get(), ByteRange{0, kToEndOfFile}));
    EXPECT_FALSE(try_lock_range(other.get(), ByteRange{1000, 1}));
  }
  EXPECT_TRUE(try_lock_range(other.get(), ByteRange{1000, 1}));
}

TEST_F(FileLockTest, AFileIsRemovedOnlyWhenNobodyLocksIt) {
  {
    Fd holder = open_again();
    ASSERT_TRUE(try_lock_range(holder.get(), ByteRange{}));
    EXPECT_FALSE(*remove_unless_locked(path_));
    EXPECT_TRUE(open_file(path_, O_RDONLY).ok());  // kept
  }
  EXPECT_TRUE(*remove_unless_locked(path_));
  EXPECT_FALSE(open_file(path_, O_RDONLY).ok());
  EXPECT_TRUE(*remove_unless_locked(path_));  // already gone
}

TEST_F(FileLockTest, WholeFileLocksShareOrExclude) {
  Fd first = open_again();
  Fd second = open_again();
  ASSERT_TRUE(lock_file(first.get(), LockMode::shared).ok());
  EXPECT_TRUE(try_lock_file(second.get(), LockMode::shared));
  Fd third = open_again();
  EXPECT_FALSE(try_lock_file(third.get(), LockMode::exclusive));
  first.reset();
  second.reset();
  EXPECT_TRUE(try_lock_file(third.get(), LockMode::exclusive));
}

}  // namespace
}  // namespace gpupool
