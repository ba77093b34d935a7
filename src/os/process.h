// This process and others: who we are, signals to a process, a descriptor that watches one, the
// umask and the host's name.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "os/fd.h"

namespace gpupool {

uid_t real_user_id();
uid_t effective_user_id();
gid_t real_group_id();
pid_t own_pid();
pid_t own_parent_pid();

// The home directory the user database gives a uid; nullopt when it names none.
std::optional<std::string> home_directory_of(uid_t uid);

Result<void> send_signal(pid_t pid, int signal);
// Whether a process (or a zombie not yet reaped) has this id, whoever's it is.
bool process_exists(pid_t pid);
// To every process of the group `group` (killpg).
Result<void> signal_process_group(pid_t group, int signal);

// Leaves the caller's session and process group for a new session it leads (setsid): what is
// sent to the old ones (a terminal's hang-up, a signal to the group) no longer reaches it.
void start_new_session();

// The name `ps`, `pkill` and `killall` see (PR_SET_NAME; the kernel keeps the first 15 bytes).
void set_process_name(const char* name);

// A pidfd: readable once the process has ended, whether or not it is our child, and never
// confused with a later process that gets the same pid.
Result<Fd> open_process_fd(pid_t pid);

// Another process's open descriptors and what each names (the links in /proc/PID/fd): "/path",
// "socket:[123]", ... An error when they cannot be read (no such process, not permitted).
struct OpenDescriptor {
  int fd = -1;
  std::string target;
};
Result<std::vector<OpenDescriptor>> open_descriptors_of(pid_t pid);
// A copy of another process's descriptor, sharing its open file description (pidfd_getfd):
// locks taken or dropped through it are that process's too. Needs the right to ptrace it.
Result<Fd> copy_descriptor_of(pid_t pid, int fd);

// The file mode creation mask, left as it is.
mode_t current_umask();
// Sets the file mode creation mask; returns the one it replaces. Async-signal-safe, for a
// forked child before it execs too.
mode_t set_umask(mode_t mask);

// This machine's name; "" when it has none.
std::string host_name();

}  // namespace gpupool
