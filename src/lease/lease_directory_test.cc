#include "lease/lease_directory.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "os/accounts.h"

namespace gpupool {
namespace {

constexpr uint64_t kMemory = 1000;  // MiB of the test GPUs

class LeaseDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-lease-test-XXXXXX";
    root_ = mkdtemp(pattern);
    auto opened = LeaseDirectory::open(root_ + "/run");
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    dir_.emplace(std::move(*opened));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::optional<HeldLeases> take(const std::string& uuid, std::optional<uint64_t> slice, const std::string& job) {
    auto held = dir_->try_acquire({LeaseClaim{uuid, 0, kMemory, slice}}, LeaseHolder{getpid(), "tester", job, 100});
    EXPECT_TRUE(held.ok()) << held.error().message;
    return held.ok() ? std::move(*held) : std::nullopt;
  }

  std::string root_;
  std::optional<LeaseDirectory> dir_;
};

TEST_F(LeaseDirectoryTest, CreatesSharedStickyDirectories) {
  for (const char* sub : {"", "/locks", "/holders", "/queue"}) {
    struct stat st {};
    ASSERT_EQ(stat((root_ + "/run" + sub).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 01777u) << sub;
  }
}

TEST_F(LeaseDirectoryTest, KnowsWhenItWasDeletedAndIsMadeAgain) {
  auto held = take("GPU-a", std::nullopt, "one");
  ASSERT_TRUE(held);
  EXPECT_TRUE(dir_->in_place());
  std::filesystem::remove_all(root_ + "/run");
  EXPECT_FALSE(dir_->in_place());
  ASSERT_TRUE(dir_->remake().ok());
  EXPECT_TRUE(dir_->in_place());
  // The lease held in the deleted directory excludes nothing in the new one.
  EXPECT_TRUE(take("GPU-a", std::nullopt, "two"));
}

TEST_F(LeaseDirectoryTest, AnExclusiveLeaseIsHeldOnce) {
  auto first = take("GPU-a", std::nullopt, "one");
  ASSERT_TRUE(first);
  EXPECT_FALSE(take("GPU-a", std::nullopt, "two"));
  EXPECT_FALSE(take("GPU-a", 1, "slice"));
  EXPECT_TRUE(take("GPU-b", std::nullopt, "other gpu"));
  EXPECT_TRUE(dir_->hold("GPU-a", kMemory)->exclusive);
}

TEST_F(LeaseDirectoryTest, ReleasingFreesTheGpu) {
  auto first = take("GPU-a", std::nullopt, "one");
  ASSERT_TRUE(first);
  first->release();
  EXPECT_TRUE(take("GPU-a", std::nullopt, "two"));
}

TEST_F(LeaseDirectoryTest, SlicesNeverAddUpPastTheMemory) {
  auto a = take("GPU-a", 600, "a");
  ASSERT_TRUE(a);
  EXPECT_FALSE(take("GPU-a", 401, "too big"));
  auto b = take("GPU-a", 400, "b");
  ASSERT_TRUE(b);
  EXPECT_FALSE(take("GPU-a", 1, "full"));
  EXPECT_FALSE(take("GPU-a", std::nullopt, "exclusive"));
  GpuHold hold = *dir_->hold("GPU-a", kMemory);
  EXPECT_FALSE(hold.exclusive);
  EXPECT_EQ(hold.shared_mib, 1000u);
}

TEST_F(LeaseDirectoryTest, SlicesFillFragmentedRoom) {
  auto a = take("GPU-a", 300, "a");
  auto b = take("GPU-a", 300, "b");
  auto c = take("GPU-a", 300, "c");
  ASSERT_TRUE(a && b && c);
  b->release();  // a hole of 300 in the middle, 100 at the end
  auto d = take("GPU-a", 400, "d");
  ASSERT_TRUE(d);
  EXPECT_EQ(dir_->hold("GPU-a", kMemory)->shared_mib, 1000u);
  EXPECT_FALSE(take("GPU-a", 1, "full"));
}

TEST_F(LeaseDirectoryTest, SharedLeasesBlockExclusiveOnes) {
  auto slice = take("GPU-a", 10, "slice");
  ASSERT_TRUE(slice);
  EXPECT_FALSE(take("GPU-a", std::nullopt, "exclusive"));
}

TEST_F(LeaseDirectoryTest, AcquiresAllOrNothing) {
  auto b = take("GPU-b", std::nullopt, "b");
  ASSERT_TRUE(b);
  auto both = dir_->try_acquire({LeaseClaim{"GPU-a", 0, kMemory, std::nullopt}, LeaseClaim{"GPU-b", 1, kMemory, std::nullopt}},
                                LeaseHolder{getpid(), "tester", "both", 1});
  ASSERT_TRUE(both.ok());
  EXPECT_FALSE(*both);
  EXPECT_FALSE(dir_->hold("GPU-a", kMemory)->exclusive) << "GPU-a must not stay half-taken";
}

// A suspended job's leases: another process holds the descriptions, the daemon drops and retakes
// their locks through copies of its descriptors.
TEST_F(LeaseDirectoryTest, AHoldersLeasesAreLetGoAndTakenAgainOnItsOwnDescriptions) {
  std::vector<LeaseClaim> claims = {LeaseClaim{"GPU-a", 0, kMemory, std::nullopt},
                                    LeaseClaim{"GPU-b", 1, kMemory, uint64_t{300}}};
  LeaseHolder record{0, "tester", "7", 100};
  auto held = dir_->try_acquire(claims, record);
  ASSERT_TRUE(held.ok() && *held);
  pid_t holder = fork();
  if (holder == 0) {
    pause();  // holds the inherited descriptors until killed
    _exit(0);
  }
  (**held).hand_over();  // only the child holds them now
  ASSERT_FALSE(take("GPU-a", std::nullopt, "other"));
  ASSERT_TRUE(dir_->let_go(holder, claims).ok());
  EXPECT_FALSE(dir_->hold("GPU-a", kMemory)->exclusive);
  EXPECT_EQ(dir_->hold("GPU-b", kMemory)->shared_mib, 0u);
  {
    // Someone takes one of its GPUs meanwhile: nothing is taken, not even the other GPU.
    auto other = take("GPU-b", uint64_t{800}, "other");
    ASSERT_TRUE(other);
    auto again = dir_->take_again(holder, claims, record);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_FALSE(*again);
    EXPECT_FALSE(dir_->hold("GPU-a", kMemory)->exclusive);
  }
  auto again = dir_->take_again(holder, claims, record);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(*again);
  EXPECT_TRUE(dir_->hold("GPU-a", kMemory)->exclusive);
  EXPECT_EQ(dir_->hold("GPU-b", kMemory)->shared_mib, 300u);
  EXPECT_EQ(dir_->list()->size(), 2u);
  EXPECT_FALSE(take("GPU-a", std::nullopt, "other"));
  // The holder's end releases them, as with any lease.
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_TRUE(take("GPU-a", std::nullopt, "other"));
  auto gone = dir_->let_go(holder, claims);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.error().message.find(fmt::format("process {}", holder)), std::string::npos) << gone.error().message;
}

TEST_F(LeaseDirectoryTest, ListsHoldersAndSkipsStaleRecords) {
  auto a = take("GPU-a", std::nullopt, "train");
  auto s = take("GPU-b", 250, "notebook");
  ASSERT_TRUE(a && s);
  auto records = dir_->list();
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].holder.job, "train");
  EXPECT_FALSE((*records)[0].slice_mib);
  EXPECT_EQ((*records)[1].slice_mib, 250u);
  // A record left behind by a holder that died (its lock is gone) is not a lease.
  std::ofstream(root_ + "/run/holders/GPU-c.0.99999")
      << R"({"uuid":"GPU-c","index":2,"pid":99999,"user":"x","job":"dead","since":1,"slice_mib":null,"ranges":[[0,0]]})";
  std::ofstream(root_ + "/run/holders/garbage") << "not json";
  EXPECT_EQ(dir_->list()->size(), 2u);
  a->release();
  s->release();
  EXPECT_TRUE(dir_->list()->empty());
}

TEST_F(LeaseDirectoryTest, OnlyRootNamesTheHoldersUser) {
  // take() names "tester": root (gpupoold, for its jobs' owners) may; anyone else is who they are.
  auto held = take("GPU-a", std::nullopt, "train");
  ASSERT_TRUE(held);
  auto records = dir_->list();
  ASSERT_TRUE(records.ok() && records->size() == 1u);
  EXPECT_EQ((*records)[0].holder.user, getuid() == 0 ? "tester" : user_name(getuid()));
}

TEST_F(LeaseDirectoryTest, RefusesADirectoryAnotherUserCouldEmpty) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to create a directory owned by someone else";
  std::string foreign = root_ + "/foreign";
  ASSERT_EQ(mkdir(foreign.c_str(), 01777), 0);
  ASSERT_EQ(chown(foreign.c_str(), 12345, 12345), 0);
  // Root may use it (it owns everything anyway); the check is about ownership by a third party.
  auto opened = LeaseDirectory::open(foreign);
  EXPECT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find(" (uid 12345), not root, who could remove other users' leases: not using it. "
                                        "Install the gpupool package"),
            std::string::npos)
      << opened.error().message;
}

TEST_F(LeaseDirectoryTest, RejectsUuidsThatAreNotFileNames) {
  auto held = dir_->try_acquire({LeaseClaim{"../etc/passwd", 0, kMemory, std::nullopt}}, LeaseHolder{});
  EXPECT_FALSE(held.ok());
}

// Planted files: anyone may create entries in the runtime directory (docs/leases.md, "Files
// planted by others").

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class PlantedFilesTest : public LeaseDirectoryTest {
 protected:
  // A file outside the runtime directory, as only its owner may write it.
  std::string make_target() {
    std::string target = root_ + "/target";
    std::ofstream(target) << "secret";
    chmod(target.c_str(), 0600);
    return target;
  }
  void expect_untouched(const std::string& target) {
    struct stat st {};
    ASSERT_EQ(stat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(file_text(target), "secret");
  }
  // Root replaces what was planted and leases; anyone else refuses, naming the lock file.
  void expect_replaced_or_refused(const std::string& what) {
    std::string lock = root_ + "/run/locks/GPU-a.lock";
    auto held = dir_->try_acquire({LeaseClaim{"GPU-a", 0, kMemory, std::nullopt}}, LeaseHolder{getpid(), "", "j", 1});
    if (getuid() != 0) {
      ASSERT_FALSE(held.ok());
      EXPECT_NE(held.error().message.find(lock + " is " + what), std::string::npos) << held.error().message;
      return;
    }
    ASSERT_TRUE(held.ok()) << held.error().message;
    EXPECT_TRUE(*held);
    struct stat st {};
    ASSERT_EQ(lstat(lock.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_EQ(st.st_nlink, 1u);
    EXPECT_EQ(st.st_mode & 07777, 0666u);
  }
};

TEST_F(PlantedFilesTest, ALinkInPlaceOfALockFileIsNeverFollowed) {
  std::string target = make_target();
  ASSERT_EQ(symlink(target.c_str(), (root_ + "/run/locks/GPU-a.lock").c_str()), 0);
  expect_replaced_or_refused("a symbolic link");
  expect_untouched(target);
}

TEST_F(PlantedFilesTest, AHardLinkInPlaceOfALockFileIsNeverMadeWritable) {
  std::string target = make_target();
  std::string lock = root_ + "/run/locks/GPU-a.lock";
  ASSERT_EQ(link(target.c_str(), lock.c_str()), 0);
  expect_replaced_or_refused("a file with 2 names");
  if (getuid() != 0) unlink(lock.c_str());  // refused, it is still there: its planter removes it
  expect_untouched(target);
}

TEST_F(PlantedFilesTest, AFifoInPlaceOfALockFileDoesNotHang) {
  ASSERT_EQ(mkfifo((root_ + "/run/locks/GPU-a.lock").c_str(), 0666), 0);
  expect_replaced_or_refused("not a regular file");
}

TEST_F(PlantedFilesTest, RootTakesOverLockFilesOthersCreated) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to create a file owned by someone else";
  std::string lock = root_ + "/run/locks/GPU-a.lock";
  std::ofstream(lock).close();
  ASSERT_EQ(chown(lock.c_str(), 12345, 12345), 0);
  ASSERT_EQ(chmod(lock.c_str(), 0600), 0);
  ASSERT_TRUE(take("GPU-a", std::nullopt, "j"));
  struct stat st {};
  ASSERT_EQ(stat(lock.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u) << "its creator could remove it and so lease the GPU twice";
  EXPECT_EQ(st.st_mode & 07777, 0666u);
}

TEST_F(PlantedFilesTest, RecordsAreNotWrittenThroughPlantedFiles) {
  std::string target = make_target();
  // The name a record's temporary file had when it was predictable.
  std::string planted = fmt::format("{}/run/holders/GPU-a.0.{}.tmp", root_, getpid());
  ASSERT_EQ(symlink(target.c_str(), planted.c_str()), 0);
  auto held = take("GPU-a", std::nullopt, "j");
  ASSERT_TRUE(held);
  expect_untouched(target);
  ASSERT_EQ(dir_->list()->size(), 1u);
}

TEST_F(PlantedFilesTest, ListingReadsOnlySmallRegularRecords) {
  auto held = take("GPU-a", std::nullopt, "train");
  ASSERT_TRUE(held);
  // A valid record outside, linked in: followed, it would show a lease that says what its planter likes.
  std::string outside = root_ + "/forged";
  std::ofstream(outside)
      << R"({"uuid":"GPU-a","index":0,"pid":1,"user":"root","job":"forged","since":999,"slice_mib":null,"ranges":[[0,0]]})";
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/run/holders/GPU-a.0.1").c_str()), 0);
  ASSERT_EQ(mkfifo((root_ + "/run/holders/GPU-a.0.2").c_str(), 0666), 0);  // would block a plain open
  ASSERT_EQ(symlink("/dev/zero", (root_ + "/run/holders/GPU-a.0.3").c_str()), 0);  // would never end
  auto records = dir_->list();
  ASSERT_TRUE(records.ok()) << records.error().message;
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].holder.job, "train");
}

TEST_F(PlantedFilesTest, ARecordNamesItsOwnerUnlessRootWroteIt) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to create a file owned by someone else";
  auto held = take("GPU-a", std::nullopt, "train");
  ASSERT_TRUE(held);
  std::string forged = root_ + "/run/holders/GPU-a.0.1";
  std::ofstream(forged)
      << R"({"uuid":"GPU-a","index":0,"pid":1,"user":"root","job":"forged","since":999,"slice_mib":null,"ranges":[[0,0]]})";
  ASSERT_EQ(chown(forged.c_str(), 12345, 12345), 0);
  auto records = dir_->list();
  ASSERT_TRUE(records.ok() && records->size() == 1u);
  EXPECT_EQ((*records)[0].holder.job, "train");
}

TEST_F(PlantedFilesTest, RecordsOfUnknownGpusCreateNoLockFiles) {
  std::ofstream(root_ + "/run/holders/GPU-z.0.1")
      << R"({"uuid":"GPU-z","index":0,"pid":1,"user":"x","job":"x","since":1,"slice_mib":null,"ranges":[[0,0]]})";
  EXPECT_TRUE(dir_->list()->empty());
  struct stat st {};
  EXPECT_NE(lstat((root_ + "/run/locks/GPU-z.lock").c_str(), &st), 0);
}

TEST_F(PlantedFilesTest, RefusesADirectoryUnderOneOthersMayRename) {
  std::string open_dir = root_ + "/open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0777), 0);
  auto opened = LeaseDirectory::open(open_dir + "/run");
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find(open_dir + " (mode 777) may be written by others"), std::string::npos)
      << opened.error().message;
  // Sticky, like /tmp: only an entry's owner may rename it.
  ASSERT_EQ(chmod(open_dir.c_str(), 01777), 0);
  auto sticky = LeaseDirectory::open(open_dir + "/run");
  EXPECT_TRUE(sticky.ok()) << sticky.error().message;
}

TEST_F(PlantedFilesTest, RefusesADirectoryReachedThroughALinkOthersOwn) {
  if (getuid() != 0) GTEST_SKIP() << "needs root to create a link owned by someone else";
  // Its owner could point it elsewhere at any time, whatever the directory it names now.
  std::string link_path = root_ + "/link";
  ASSERT_EQ(symlink(root_.c_str(), link_path.c_str()), 0);
  ASSERT_EQ(lchown(link_path.c_str(), 12345, 12345), 0);
  auto opened = LeaseDirectory::open(link_path + "/run");
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find("belongs to uid 12345"), std::string::npos) << opened.error().message;
}

}  // namespace
}  // namespace gpupool
