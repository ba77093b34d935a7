#include "os/child_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>

#include "base/stoppable_deadline.h"
#include "base/text.h"
#include "os/environment.h"

extern char** environ;

namespace gpupool {
namespace {

constexpr int kForwardedSignals[] = {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT};

constexpr int kMpolBind = 2;  // MPOL_BIND from <linux/mempolicy.h>

[[noreturn]] void exec_child(const ChildSpec& spec, char** argv, char** envp) {
  if (spec.own_process_group) setpgid(0, 0);
  if (spec.own_session) setsid();
  if (spec.stdin_fd >= 0) dup2(spec.stdin_fd, STDIN_FILENO);
  if (spec.stdout_fd >= 0) dup2(spec.stdout_fd, STDOUT_FILENO);
  if (spec.stderr_fd >= 0) dup2(spec.stderr_fd, STDERR_FILENO);
  if (!spec.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (unsigned cpu : spec.cpus) {
      if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    }
    sched_setaffinity(0, sizeof set, &set);
  }
  if (spec.memory_node && *spec.memory_node >= 0 && *spec.memory_node < 64) {
    unsigned long mask = 1UL << *spec.memory_node;
    // Best effort: kernels without NUMA refuse, and the job still runs.
    syscall(SYS_set_mempolicy, kMpolBind, &mask, sizeof(mask) * CHAR_BIT);
  }
  // Unblock what the waiting parent blocks, so the job starts as if run by the shell.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  environ = envp;
  execvp(argv[0], argv);
  int error = errno;
  std::string message = std::string("gpupool: cannot run ") + argv[0] + ": " + std::strerror(error) + "\n";
  (void)!write(STDERR_FILENO, message.data(), message.size());
  _exit(error == ENOENT ? 127 : 126);
}

}  // namespace

Result<pid_t> spawn_child(const ChildSpec& spec) {
  if (spec.argv.empty()) return fail("no command to run");
  std::vector<std::string> args = spec.argv;
  std::vector<std::string> env = spec.environment;
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return fail("cannot start {}: {}", spec.argv[0], std::strerror(errno));
  if (pid == 0) exec_child(spec, argv.data(), envp.data());
  if (spec.own_process_group) setpgid(pid, pid);  // also here, so no race with signalling the group
  return pid;
}

std::optional<int> exit_code_if_ended(pid_t child) {
  int status = 0;
  if (waitpid(child, &status, WNOHANG) != child) return std::nullopt;
  return exit_code_from_status(status);
}

bool child_has_exited(pid_t child, bool wait) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT | (wait ? 0 : WNOHANG)) == 0 &&
         info.si_pid == child;
}

int reap_child(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

Result<pid_t> spawn_helper(const std::vector<std::string>& argv, int stdin_fd, std::initializer_list<int> blocked) {
  if (argv.empty()) return fail("no command to run");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, stdin_fd, STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t all, blocked_set;
  sigfillset(&all);
  sigemptyset(&blocked_set);
  for (int signal : blocked) sigaddset(&blocked_set, signal);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &blocked_set);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<std::string> args = argv;
  std::vector<char*> pointers;
  for (auto& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  pid_t pid = -1;
  int error = posix_spawn(&pid, args[0].c_str(), &actions, &attributes, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) return fail("cannot start {}: {}", argv[0], std::strerror(error));
  return pid;
}

int exit_code_from_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int suspended_signal() { return SIGRTMIN + 1; }
int resumed_signal() { return SIGRTMIN + 2; }

ChildEnd wait_forwarding_signals(pid_t child, std::optional<RunTimeLimit> time_limit, std::optional<ChildWatch> watch) {
  using Clock = std::chrono::steady_clock;
  // Signals are taken synchronously (sigtimedwait), so none can slip between checks.
  sigset_t wanted, previous;
  sigemptyset(&wanted);
  sigaddset(&wanted, SIGCHLD);
  for (int signal : kForwardedSignals) sigaddset(&wanted, signal);
  sigaddset(&wanted, suspended_signal());
  sigaddset(&wanted, resumed_signal());
  sigprocmask(SIG_BLOCK, &wanted, &previous);
  // The next thing the clock does to the child: SIGTERM at the limit (a clock that stands still
  // while the job is suspended), then SIGKILL.
  StoppableDeadline next_step;
  int next_signal = SIGTERM;
  if (time_limit) next_step.set(Clock::now() + time_limit->limit);
  std::optional<Clock::time_point> next_check;
  if (watch && watch->stop) next_check = Clock::now() + watch->period;
  // Once the child is told to end, the watch has nothing more to decide.
  auto terminate = [&](Clock::time_point now, std::chrono::milliseconds grace) {
    kill(child, SIGTERM);
    next_signal = SIGKILL;
    next_step.set(now + grace);
    next_check.reset();
  };
  ChildEnd end;
  int status = 0;
  for (;;) {
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      status = 1 << 8;
      break;
    }
    siginfo_t info{};
    int signal = 0;
    std::optional<Clock::time_point> wake = next_step.at();
    if (next_check && (!wake || *next_check < *wake)) wake = next_check;
    if (wake) {
      auto left = std::max(Clock::duration::zero(), *wake - Clock::now());
      auto seconds = std::chrono::duration_cast<std::chrono::seconds>(left);
      timespec timeout{static_cast<time_t>(seconds.count()),
                       static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(left - seconds).count())};
      signal = sigtimedwait(&wanted, &info, &timeout);
      if (signal < 0 && errno == EAGAIN) {
        auto now = Clock::now();
        if (next_step.at() && now >= *next_step.at()) {
          if (next_signal == SIGTERM) {
            end.timed_out = true;
            terminate(now, time_limit->grace);
          } else {
            kill(child, SIGKILL);
            next_step.clear();
          }
        }
        if (next_check && now >= *next_check) {
          next_check = now + watch->period;
          if (watch->stop()) {
            end.stopped = true;
            terminate(now, watch->grace);
          }
        }
        continue;
      }
    } else {
      signal = sigwaitinfo(&wanted, &info);
    }
    // The limit's clock only: not the grace period once the child is being ended.
    if (signal == suspended_signal() || signal == resumed_signal()) {
      if (next_signal != SIGTERM) continue;
      if (signal == suspended_signal()) next_step.stop(Clock::now());
      if (signal == resumed_signal()) next_step.start(Clock::now());
      continue;
    }
    // A signal the kernel sent for the terminal has reached the child's process group already.
    if (signal > 0 && signal != SIGCHLD && info.si_code != SI_KERNEL) kill(child, signal);
  }
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  end.exit_code = exit_code_from_status(status);
  return end;
}

std::vector<std::string> environment_with(const std::vector<std::string>& overrides) {
  return with_overrides(own_environment_entries(), overrides);
}

}  // namespace gpupool
