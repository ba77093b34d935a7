#include "os/process.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "os/fd.h"

namespace gpupool {
namespace {

TEST(Process, KnowsWhoWeAre) {
  EXPECT_EQ(real_user_id(), getuid());
  EXPECT_EQ(effective_user_id(), geteuid());
  EXPECT_EQ(own_pid(), getpid());
  EXPECT_EQ(own_parent_pid(), getppid());
  EXPECT_FALSE(host_name().empty());
}

TEST(Process, ReadsTheUmaskWithoutChangingIt) {
  mode_t before = set_umask(027);
  EXPECT_EQ(current_umask(), 027u);
  EXPECT_EQ(current_umask(), 027u);
  EXPECT_EQ(set_umask(before), 027u);
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

TEST(Process, FindsTheHomeOfRoot) {
  EXPECT_EQ(home_directory_of(0).value_or("/root"), "/root");
}

}  // namespace
}  // namespace gpupool
