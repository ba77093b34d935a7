#include "os/forked_child.h"

#include <grp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace gpupool {

Result<pid_t> fork_process() {
  pid_t pid = fork();
  if (pid < 0) return fail("cannot fork: {}", std::strerror(errno));
  return pid;
}

Result<std::optional<pid_t>> fork_into_cgroup(int group_fd, const std::string& group) {
  // Our own declaration of the kernel's ABI, as the C library has no wrapper.
  struct CloneArgs {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
        cgroup;
  };
  constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;
  CloneArgs args{};
  args.flags = kCloneIntoCgroup;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(group_fd);
  auto pid = static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
  if (pid >= 0) return std::optional<pid_t>(pid);
  // A kernel before 5.7: no clone3 (ENOSYS), or not the flag (EINVAL) or the field (E2BIG).
  if (errno == ENOSYS || errno == EINVAL || errno == E2BIG) return std::optional<pid_t>();
  return fail("cannot fork into {}: {}", group, std::strerror(errno));
}

void make_group_leader(pid_t pid) { setpgid(pid, pid); }

int become_user(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0) return errno;
  uid_t ruid = 0, euid = 0, suid = 0;
  gid_t rgid = 0, egid = 0, sgid = 0;
  if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0 || ruid != uid || euid != uid ||
      suid != uid || rgid != gid || egid != gid || sgid != gid) {
    return EPERM;
  }
  return 0;
}

int change_directory(const char* path) { return chdir(path) == 0 ? 0 : errno; }

int redirect_standard_streams(int stdin_fd, int stdout_fd, int stderr_fd) {
  const int wanted[] = {stdin_fd, stdout_fd, stderr_fd};
  for (int stream = 0; stream < 3; ++stream) {
    if (wanted[stream] >= 0 && dup2(wanted[stream], stream) < 0) return errno;
  }
  return 0;
}

int exec_first_found(const std::vector<std::string>& candidates, char* const argv[], char* const envp[]) {
  // As execvp: a candidate we may not run is remembered, a missing one skipped.
  int error = ENOENT;
  for (const auto& candidate : candidates) {
    execve(candidate.c_str(), argv, envp);
    if (errno == EACCES) {
      error = EACCES;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      return errno;
    }
  }
  return error;
}

}  // namespace gpupool
