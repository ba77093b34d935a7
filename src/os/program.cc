#include "os/program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <optional>
#include <thread>

#include "base/text.h"
#include "os/child_process.h"
#include "os/environment.h"

extern char** environ;

namespace gpupool {
namespace {

// Both ends of a pipe, closed when it goes.
struct Pipe {
  int read = -1;
  int write = -1;
  Pipe() = default;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    close_read();
    close_write();
  }
  void close_read() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

Result<void> open_pipe(Pipe& pipe) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail("cannot create a pipe: {}", std::strerror(errno));
  pipe.read = fds[0];
  pipe.write = fds[1];
  return {};
}

// The spawn's attributes and file actions, destroyed when it goes.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
};

// Reads what is there; false at the end of the stream.
bool read_some(int fd, std::string& into) {
  char buffer[65536];
  ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  into.append(buffer, static_cast<size_t>(n));
  return n > 0;
}

// Feeds the input and collects both outputs until the program closes them; false when the
// deadline came first.
bool exchange(Pipe& in, Pipe& out, Pipe& err, const std::string& input, ProgramOutcome& outcome,
              std::optional<std::chrono::steady_clock::time_point> deadline) {
  size_t written = 0;
  if (input.empty()) in.close_write();
  if (in.write >= 0) fcntl(in.write, F_SETFL, fcntl(in.write, F_GETFL) | O_NONBLOCK);
  while (out.read >= 0 || err.read >= 0) {
    pollfd fds[3] = {{in.write, POLLOUT, 0}, {out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
    int wait_ms = -1;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 60'000));
    }
    if (poll(fds, 3, wait_ms) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (in.write >= 0 && fds[0].revents != 0) {
      ssize_t n = ::write(in.write, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<size_t>(n);
      // A program that stops reading early (EPIPE) simply does not get the rest.
      if (written == input.size() || (n < 0 && errno != EINTR && errno != EAGAIN)) in.close_write();
    }
    if (out.read >= 0 && fds[1].revents != 0 && !read_some(out.read, outcome.out)) out.close_read();
    if (err.read >= 0 && fds[2].revents != 0 && !read_some(err.read, outcome.err)) err.close_read();
  }
  in.close_write();
  return true;
}

// Whether the program has exited by the deadline (at once when there is none: the caller waits).
// It may have closed its output long before it exits.
bool exited_by(pid_t pid, std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!deadline) return true;
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) return true;
    if (std::chrono::steady_clock::now() >= *deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

Result<ProgramOutcome> run_program(const std::vector<std::string>& argv, const ProgramOptions& options) {
  if (argv.empty()) return fail("no program to run");
  Pipe in, out, err;
  TRY(open_pipe(in));
  TRY(open_pipe(out));
  TRY(open_pipe(err));
  SpawnSetup setup;
  posix_spawn_file_actions_adddup2(&setup.actions, in.read, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, out.write, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, err.write, STDERR_FILENO);
  // Nothing else of ours: a caller on a thread of its own (the daemon's hook) must not hand its
  // sockets and locks to a program that may outlive it.
  posix_spawn_file_actions_addclosefrom_np(&setup.actions, STDERR_FILENO + 1);

  // SIGPIPE is blocked here while we write its input (a program that exits without reading it
  // must not kill us); the program itself starts with our usual mask and SIGPIPE's default.
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  posix_spawnattr_setsigmask(&setup.attributes, &previous);
  posix_spawnattr_setsigdefault(&setup.attributes, &pipe_signal);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  // A program with a time limit leads a process group of its own, so that what it started
  // goes with it when the limit kills it.
  if (options.timeout) flags |= POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setpgroup(&setup.attributes, 0);
  posix_spawnattr_setflags(&setup.attributes, flags);

  std::vector<std::string> args = argv;
  std::vector<std::string> env = environment_with(options.environment);
  std::erase_if(env, [&](const std::string& entry) {
    return std::ranges::find(options.unset, entry.substr(0, entry.find('='))) != options.unset.end();
  });
  std::vector<char*> arg_pointers, env_pointers;
  for (auto& a : args) arg_pointers.push_back(a.data());
  arg_pointers.push_back(nullptr);
  for (auto& e : env) env_pointers.push_back(e.data());
  env_pointers.push_back(nullptr);

  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, args[0].c_str(), &setup.actions, &setup.attributes, arg_pointers.data(),
                             env_pointers.data());
  in.close_read();
  out.close_write();
  err.close_write();
  ProgramOutcome outcome;
  bool in_time = true;
  if (spawned == 0) {
    auto deadline = options.timeout ? std::optional(std::chrono::steady_clock::now() + *options.timeout)
                                    : std::nullopt;
    in_time = exchange(in, out, err, options.input, outcome, deadline) && exited_by(pid, deadline);
    if (!in_time) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);  // also when it left its group
    }
  }
  // Take back a SIGPIPE our writing raised, so it does not strike once unblocked.
  timespec now = {0, 0};
  while (sigtimedwait(&pipe_signal, nullptr, &now) == SIGPIPE) {
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (spawned == ENOENT) {
    std::string hint = options.not_found_hint.empty() ? "" : "; " + options.not_found_hint;
    return fail("{}: not found{}{}", argv[0], argv[0].find('/') == std::string::npos ? " on PATH" : "", hint);
  }
  if (spawned != 0) return fail("cannot run {}: {}", argv[0], std::strerror(spawned));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return fail("cannot wait for {}: {}", argv[0], std::strerror(errno));
  }
  if (!in_time) {
    return fail("{} did not finish within {:g} s and was killed", argv[0],
                std::chrono::duration<double>(*options.timeout).count());
  }
  outcome.exit_code = exit_code_from_status(status);
  return outcome;
}

std::optional<std::string> find_program(const std::string& name) {
  std::optional<std::string> path = environment_variable("PATH");
  for (const std::string& directory : split(path.value_or("/usr/local/bin:/usr/bin:/bin"), ':')) {
    std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    struct stat status {};
    if (::stat(candidate.c_str(), &status) == 0 && S_ISREG(status.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

}  // namespace gpupool
