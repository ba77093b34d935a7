#include "os/forked_child.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "os/fd.h"
#include "os/files.h"

namespace gpupool {
namespace {

// Runs `steps` in a forked child and returns its exit status (what the steps return).
int in_child(int (*steps)()) {
  auto pid = fork_process();
  if (!pid.ok()) return -1;
  if (*pid == 0) _exit(steps());
  int status = 0;
  waitpid(*pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ForkedChild, LeadsItsOwnProcessGroup) {
  EXPECT_EQ(in_child([] {
              make_group_leader(0);
              return getpgid(0) == getpid() ? 0 : 1;
            }),
            0);
}

TEST(ForkedChild, ChangesDirectoryOrSaysWhyNot) {
  EXPECT_EQ(in_child([] {
              if (change_directory("/nonexistent-gpupool-test") != ENOENT) return 1;
              if (change_directory("/") != 0) return 2;
              char here[8] = {};
              return getcwd(here, sizeof here) != nullptr && std::string(here) == "/" ? 0 : 3;
            }),
            0);
}

TEST(ForkedChild, RedirectsTheStandardStreamsItIsGiven) {
  auto pipe = make_pipe();
  ASSERT_TRUE(pipe.ok()) << pipe.error().message;
  static int write_end = -1;
  write_end = pipe->second.get();
  EXPECT_EQ(in_child([] {
              if (redirect_standard_streams(-1, write_end, -1) != 0) return 1;
              return write(STDOUT_FILENO, "out", 3) == 3 ? 0 : 2;
            }),
            0);
  pipe->second.reset();
  auto got = read_to_end(pipe->first.get());
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, "out");
  EXPECT_EQ(redirect_standard_streams(-1, 1000, -1), EBADF);  // and in this process nothing moved
}

TEST(ForkedChild, ExecsTheFirstCandidateThereAndRunnable) {
  std::string no_such = "/nonexistent-gpupool-test/true";
  char* argv[] = {no_such.data(), nullptr};
  char* envp[] = {nullptr};
  EXPECT_EQ(exec_first_found({no_such}, argv, envp), ENOENT);
  EXPECT_EQ(exec_first_found({"/dev/null", no_such}, argv, envp), EACCES);  // there, not runnable
  EXPECT_EQ(in_child([] {
              char sh[] = "sh", dash_c[] = "-c", exit_5[] = "exit 5";
              char* sh_argv[] = {sh, dash_c, exit_5, nullptr};
              char* no_environment[] = {nullptr};
              return 100 + exec_first_found({"/nonexistent-gpupool-test/sh", "/bin/sh"}, sh_argv, no_environment);
            }),
            5);
}

TEST(ForkedChild, BecomesTheUserWithItsGroupsOnlyAsRoot) {
  if (geteuid() != 0) {
    EXPECT_EQ(become_user(getuid(), getgid(), {getgid()}), EPERM);  // no setgroups without root
    return;
  }
  EXPECT_EQ(in_child([] {
              if (become_user(65534, 65534, {65534}) != 0) return 1;
              gid_t groups[4] = {};
              int count = getgroups(4, groups);
              return getuid() == 65534 && geteuid() == 65534 && getgid() == 65534 && count == 1 &&
                             groups[0] == 65534
                         ? 0
                         : 2;
            }),
            0);
}

TEST(ForkedChild, ForksIntoACgroupOrSaysTheKernelCannot) {
  // Not into a real cgroup (that needs root and a delegated hierarchy): a descriptor that is no
  // cgroup is refused, naming the group, unless the kernel has no clone3 at all.
  auto null = open_file("/dev/null", O_RDONLY);
  ASSERT_TRUE(null.ok()) << null.error().message;
  auto forked = fork_into_cgroup(null->get(), "/dev/null");
  if (forked.ok() && forked->value_or(-1) == 0) _exit(0);  // never: but no second test runner
  if (forked.ok()) {
    EXPECT_FALSE(forked->has_value());
  } else {
    EXPECT_NE(forked.error().message.find("cannot fork into /dev/null"), std::string::npos);
  }
}

}  // namespace
}  // namespace gpupool
