#include "os/process.h"

#include <dirent.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gpupool {

uid_t real_user_id() { return getuid(); }
uid_t effective_user_id() { return geteuid(); }
gid_t real_group_id() { return getgid(); }
pid_t own_pid() { return getpid(); }
pid_t own_parent_pid() { return getppid(); }

std::optional<std::string> home_directory_of(uid_t uid) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
  passwd entry{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || found == nullptr ||
      found->pw_dir == nullptr) {
    return std::nullopt;
  }
  return std::string(found->pw_dir);
}

Result<void> send_signal(pid_t pid, int signal) {
  if (kill(pid, signal) != 0) return fail("cannot signal process {}: {}", pid, std::strerror(errno));
  return {};
}

bool process_exists(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

Result<void> signal_process_group(pid_t group, int signal) {
  if (killpg(group, signal) != 0) return fail("cannot signal process group {}: {}", group, std::strerror(errno));
  return {};
}

void start_new_session() { setsid(); }

void set_process_name(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

Result<Fd> open_process_fd(pid_t pid) {
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return fail("cannot watch process {}: {}", pid, std::strerror(errno));
  return Fd(fd);
}

Result<std::vector<OpenDescriptor>> open_descriptors_of(pid_t pid) {
  std::string directory = "/proc/" + std::to_string(pid) + "/fd";
  DIR* listing = opendir(directory.c_str());
  if (listing == nullptr) return fail("cannot list the descriptors of process {}: {}", pid, std::strerror(errno));
  std::vector<OpenDescriptor> found;
  while (const dirent* entry = readdir(listing)) {
    if (entry->d_name[0] == '.') continue;
    char target[PATH_MAX];
    std::string link = directory + "/" + entry->d_name;
    ssize_t length = readlink(link.c_str(), target, sizeof(target) - 1);
    if (length < 0) continue;  // closed meanwhile
    found.push_back({std::atoi(entry->d_name), std::string(target, static_cast<size_t>(length))});
  }
  closedir(listing);
  return found;
}

Result<Fd> copy_descriptor_of(pid_t pid, int fd) {
  TRY_ASSIGN(Fd process, open_process_fd(pid));
  int copy = static_cast<int>(syscall(SYS_pidfd_getfd, process.get(), fd, 0));
  if (copy < 0) return fail("cannot take a copy of descriptor {} of process {}: {}", fd, pid, std::strerror(errno));
  return Fd(copy);
}

mode_t current_umask() {
  // umask(2) can only be read by setting it: set and put back at once.
  mode_t mask = umask(0);
  umask(mask);
  return mask;
}

mode_t set_umask(mode_t mask) { return umask(mask); }

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace gpupool
