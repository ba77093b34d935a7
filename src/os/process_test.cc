#include "os/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <limits>

#include <gtest/gtest.h>

#include "os/fd.h"

namespace gpupool {
namespace {

TEST(Process, KnowsWhoWeAre) {
  EXPECT_EQ(real_user_id(), getuid());
  EXPECT_EQ(effective_user_id(), geteuid());
  EXPECT_EQ(real_group_id(), getgid());
  EXPECT_EQ(own_pid(), getpid());
  EXPECT_EQ(own_parent_pid(), getppid());
  EXPECT_FALSE(host_name().empty());
}

TEST(Process, KnowsWhetherAProcessExists) {
  EXPECT_TRUE(process_exists(own_pid()));
  EXPECT_TRUE(process_exists(1));  // another user's (root's) counts too
  EXPECT_FALSE(process_exists(std::numeric_limits<pid_t>::max()));  // above any pid_max
}

TEST(Process, ReadsTheUmaskWithoutChangingIt) {
  mode_t before = set_umask(027);
  EXPECT_EQ(current_umask(), 027u);
  EXPECT_EQ(current_umask(), 027u);
  EXPECT_EQ(set_umask(before), 027u);
}

TEST(Process, SetsTheUmask) {
  mode_t before = umask(022);
  set_umask(077);
  EXPECT_EQ(current_umask(), 077u);
  umask(before);
}

TEST(Process, NamesItself) {
  char before[16] = {};
  prctl(PR_GET_NAME, before, 0, 0, 0);
  set_process_name("gpupool-test-name-too-long");
  char now[16] = {};
  prctl(PR_GET_NAME, now, 0, 0, 0);
  EXPECT_STREQ(now, "gpupool-test-na");  // the kernel's 15 bytes
  set_process_name(before);
}

// A child that leads a new session and process group, then signalled as a group.
TEST(Process, StartsASessionAndSignalsItsProcessGroup) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    start_new_session();
    char ready = getsid(0) == getpid() && getpgid(0) == getpid() ? 'y' : 'n';
    (void)!write(pipe->second.get(), &ready, 1);
    pause();
    _exit(0);
  }
  char ready = 0;
  ASSERT_EQ(read(pipe->first.get(), &ready, 1), 1);
  EXPECT_EQ(ready, 'y');
  ASSERT_TRUE(signal_process_group(child, SIGKILL).ok());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(signal_process_group(child, 0).ok());  // gone: no such group
}

TEST(Process, APidfdTurnsReadableWhenTheProcessEnds) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  auto watched = open_process_fd(child);
  ASSERT_TRUE(watched.ok()) << watched.error().message;
  EXPECT_FALSE((*wait_until_ready({watched->get()}, std::chrono::milliseconds(0)))[0]);
  ASSERT_TRUE(send_signal(child, SIGKILL).ok());
  EXPECT_TRUE((*wait_until_ready({watched->get()}, std::nullopt))[0]);
  waitpid(child, nullptr, 0);
  EXPECT_FALSE(send_signal(child, 0).ok());  // reaped: no such process
  EXPECT_FALSE(open_process_fd(child).ok());
}

TEST(Process, FindsAnotherProcesssDescriptorAndSharesItsOpenFileDescription) {
  char path[] = "/tmp/gpupool-process-test-XXXXXX";
  int file = mkstemp(path);
  ASSERT_GE(file, 0);
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  close(file);  // the child's copy is the only one
  auto open = open_descriptors_of(child);
  ASSERT_TRUE(open.ok()) << open.error().message;
  auto it = std::find_if(open->begin(), open->end(), [&](const OpenDescriptor& d) { return d.target == path; });
  ASSERT_NE(it, open->end());
  auto copy = copy_descriptor_of(child, it->fd);
  ASSERT_TRUE(copy.ok()) << copy.error().message;
  // One description: the offset moved through the copy is the child's too.
  ASSERT_EQ(lseek(copy->get(), 42, SEEK_SET), 42);
  auto again = copy_descriptor_of(child, it->fd);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(lseek(again->get(), 0, SEEK_CUR), 42);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  unlink(path);
  EXPECT_FALSE(open_descriptors_of(child).ok());
  EXPECT_FALSE(copy_descriptor_of(child, it->fd).ok());
}

TEST(Process, FindsTheHomeOfRoot) {
  EXPECT_EQ(home_directory_of(0).value_or("/root"), "/root");
}

}  // namespace
}  // namespace gpupool
