// A child forked to become another program, which sets itself up step by step before it execs:
// the fork itself (optionally straight into a cgroup), then the child's steps. Each step runs
// between fork() and exec and is async-signal-safe: it allocates nothing, since the child of a
// threaded parent may find the allocator's lock held forever. So the steps return an errno value
// (0: done), not a Result, whose message would need memory.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpupool {

// fork(): 0 in the child, the child's pid in the parent.
Result<pid_t> fork_process();

// fork() that starts the child in the cgroup v2 directory `group_fd` (clone3 with
// CLONE_INTO_CGROUP, Linux 5.7), so the parent never moves between cgroups (the kernel makes a
// process that moves itself wait for an RCU grace period). nullopt, with nothing forked, where the
// kernel is older; `group` names the directory in an error.
Result<std::optional<pid_t>> fork_into_cgroup(int group_fd, const std::string& group);

// Makes `pid` (0: the caller) the leader of a new process group with its own id. Called by both
// the parent and the child after a fork, so the group exists before either signals it.
void make_group_leader(pid_t pid);

// Takes on the identity of `uid`: its supplementary groups, then its gid, then the uid (after
// which no more may change), and checks that the real, effective and saved ids all took (EPERM
// when one did not). The caller must be root.
int become_user(uid_t uid, gid_t gid, const std::vector<gid_t>& groups);

int change_directory(const char* path);

// Makes each descriptor given the standard stream of that number (-1: left as it is).
int redirect_standard_streams(int stdin_fd, int stdout_fd, int stderr_fd);

// As execvp, over the paths `candidates` where it would look for the command (in order): returns
// only when none could run, with why: EACCES when one was there but not runnable, ENOENT when
// none was there, or the first other error, which ends the search.
int exec_first_found(const std::vector<std::string>& candidates, char* const argv[], char* const envp[]);

}  // namespace gpupool
