#include "daemon/supervisor.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <iterator>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "os/child_process.h"
#include "os/fd.h"
#include "os/files.h"

namespace gpupool {
namespace {

using nlohmann::json;

double unix_time() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

// One line in one write() to a file opened O_APPEND, so a reader sees whole lines, and at worst
// a torn last one when the writer dies mid-write.
Result<void> append_event(int record_fd, const json& event) {
  // Reasons may quote paths that are not UTF-8; they are for people, so replacing is fine.
  std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (::write(record_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    return fail("cannot write the attempt record: {}", std::strerror(errno));
  }
  return {};
}

// Puts every signal back to its default action: ignored signals stay ignored across exec, and
// neither the supervisor nor the job should inherit the daemon's choices.
void reset_signal_dispositions() {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signal = 1; signal < NSIG; ++signal) {
    if (signal != SIGKILL && signal != SIGSTOP) sigaction(signal, &default_action, nullptr);
  }
}

void unblock_all_signals() {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// What the supervisor takes through its signalfd: a cancel, and its job's end. Blocked from before
// the supervisor's exec, so a cancel sent as soon as its pid is known is never lost.
sigset_t supervisor_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  return signals;
}

// The most descriptors one attempt carries: its record and one lease per GPU (the kernel's
// limit for one message is 253).
constexpr size_t kMaxHandedDescriptors = 253;

std::string attempt_text(const SupervisedAttempt& a) {
  json time_limit = a.time_limit_s ? json(*a.time_limit_s) : json(nullptr);
  json isolation = nullptr;
  if (a.isolation) {
    isolation = {{"mechanism", to_string(a.isolation->mechanism)},
                 {"group", a.isolation->group},
                 {"denied_minors", a.isolation->denied_minors},
                 {"required", a.isolation->required}};
  }
  return json{{"id", a.id},
              {"attempt", a.attempt},
              {"uid", a.uid},
              {"gid", a.gid},
              {"groups", a.groups},
              {"argv", a.argv},
              {"environment", a.environment},
              {"cwd", a.cwd},
              {"umask", a.umask},
              {"stdout_path", a.stdout_path},
              {"stderr_path", a.stderr_path},
              {"time_limit_s", time_limit},
              {"kill_grace_s", a.kill_grace_s},
              {"record_path", a.record_path},
              {"isolation", isolation}}
      .dump();
}

Result<SupervisedAttempt> parse_attempt(const std::string& text) {
  try {
    json j = json::parse(text);
    SupervisedAttempt a;
    a.id = j.at("id").get<JobId>();
    a.attempt = j.at("attempt").get<unsigned>();
    a.uid = j.at("uid").get<uid_t>();
    a.gid = j.at("gid").get<gid_t>();
    a.groups = j.at("groups").get<std::vector<gid_t>>();
    a.argv = j.at("argv").get<std::vector<std::string>>();
    a.environment = j.at("environment").get<std::vector<std::string>>();
    a.cwd = j.at("cwd").get<std::string>();
    a.umask = j.at("umask").get<mode_t>();
    a.stdout_path = j.at("stdout_path").get<std::string>();
    a.stderr_path = j.at("stderr_path").get<std::string>();
    if (!j.at("time_limit_s").is_null()) a.time_limit_s = j.at("time_limit_s").get<double>();
    a.kill_grace_s = j.at("kill_grace_s").get<double>();
    a.record_path = j.at("record_path").get<std::string>();
    if (const json& isolation = j.at("isolation"); !isolation.is_null()) {
      auto mechanism = parse_isolation_mechanism(isolation.at("mechanism").get<std::string>());
      if (!mechanism) return fail("the attempt names an unknown isolation mechanism");
      a.isolation = AttemptIsolation{*mechanism, isolation.at("group").get<std::string>(),
                                     isolation.at("denied_minors").get<std::vector<unsigned>>(),
                                     isolation.at("required").get<bool>()};
    }
    if (a.argv.empty()) return fail("the attempt has no command");
    return a;
  } catch (const json::exception& e) {
    return fail("the attempt handed to the supervisor is malformed: {}", e.what());
  }
}

// What the job's child tells the supervisor through a close-on-exec pipe: ready to exec (waiting
// for the go), or which step failed. Nothing at all (end of file) once exec has succeeded.
enum class ChildStep : int { Ready, Identity, Directory, Output, Exec };
struct ChildReport {
  ChildStep step = ChildStep::Ready;
  int error = 0;
};

constexpr int kNotFoundExit = 127;   // as a shell reports a command it cannot find
constexpr int kCannotRunExit = 126;  // found but not runnable; also a failed setup

// Everything the job's child needs, prepared before the fork so the child only makes system calls.
struct JobLaunch {
  std::vector<std::string> args, env, candidates;
  std::vector<char*> argv, envp;
  std::vector<gid_t> groups;
  uid_t uid = 0;
  gid_t gid = 0;
  bool change_identity = false;  // running as root: become the job's owner
  mode_t umask = 022;
  std::string cwd;
  int stdout_fd = -1, stderr_fd = -1;
  int report_fd = -1, go_fd = -1;
  std::vector<int> close_first;  // the supervisor's own descriptors, above all the record's
};

// Where execvp would look for `command`, in order, given the job's environment.
std::vector<std::string> command_candidates(const std::string& command, const std::vector<std::string>& env) {
  if (command.find('/') != std::string::npos) return {command};
  std::string path = "/bin:/usr/bin";  // the C library's default when PATH is unset
  for (const auto& entry : env) {
    if (entry.rfind("PATH=", 0) == 0) path = entry.substr(5);
  }
  std::vector<std::string> candidates;
  size_t start = 0;
  for (;;) {
    size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    candidates.push_back(dir.empty() ? command : dir + "/" + command);  // empty: the working directory
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return candidates;
}

// fork() that starts the child in the cgroup v2 directory `group_fd` (clone3 with
// CLONE_INTO_CGROUP, Linux 5.7): the caller stays where it is. Our own declarations of the
// kernel's ABI, as the C library has no wrapper.
pid_t fork_into_cgroup(int group_fd) {
  struct CloneArgs {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size,
        cgroup;
  };
  constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;
  CloneArgs args{};
  args.flags = kCloneIntoCgroup;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(group_fd);
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
}

[[noreturn]] void report_and_exit(int report_fd, ChildStep step, int error) {
  ChildReport report{step, error};
  (void)!::write(report_fd, &report, sizeof report);
  _exit(step == ChildStep::Exec && error == ENOENT ? kNotFoundExit : kCannotRunExit);
}

// The job's child, forked by the supervisor. Becomes the job: its own process group, its owner's
// identity, umask, directory and logs; then waits for the go (sent once "started" is on disk).
[[noreturn]] void exec_job(const JobLaunch& launch) {
  // Closing our copy of the record now (not only at exec) lets the lock go with the supervisor
  // even while we are still setting up.
  for (int fd : launch.close_first) ::close(fd);
  reset_signal_dispositions();
  unblock_all_signals();
  setpgid(0, 0);
  if (launch.change_identity) {
    if (setgroups(launch.groups.size(), launch.groups.data()) != 0 || setgid(launch.gid) != 0 ||
        setuid(launch.uid) != 0) {
      report_and_exit(launch.report_fd, ChildStep::Identity, errno);
    }
    uid_t ruid = 0, euid = 0, suid = 0;
    gid_t rgid = 0, egid = 0, sgid = 0;
    if (getresuid(&ruid, &euid, &suid) != 0 || getresgid(&rgid, &egid, &sgid) != 0 || ruid != launch.uid ||
        euid != launch.uid || suid != launch.uid || rgid != launch.gid || egid != launch.gid ||
        sgid != launch.gid) {
      report_and_exit(launch.report_fd, ChildStep::Identity, EPERM);
    }
  }
  umask(launch.umask);
  if (chdir(launch.cwd.c_str()) != 0) report_and_exit(launch.report_fd, ChildStep::Directory, errno);
  if (dup2(launch.stdout_fd, STDOUT_FILENO) < 0 || dup2(launch.stderr_fd, STDERR_FILENO) < 0) {
    report_and_exit(launch.report_fd, ChildStep::Output, errno);
  }
  ChildReport ready;
  if (::write(launch.report_fd, &ready, sizeof ready) != static_cast<ssize_t>(sizeof ready)) {
    _exit(kCannotRunExit);
  }
  char go = 0;
  ssize_t got = 0;
  do {
    got = ::read(launch.go_fd, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) _exit(kCannotRunExit);  // the supervisor is gone, or decided against starting
  // As execvp: a candidate we may not run is remembered, a missing one skipped.
  int error = ENOENT;
  for (const auto& candidate : launch.candidates) {
    execve(candidate.c_str(), launch.argv.data(), launch.envp.data());
    if (errno == EACCES) {
      error = EACCES;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      error = errno;
      break;
    }
  }
  report_and_exit(launch.report_fd, ChildStep::Exec, error);
}

std::string could_not_start(const SupervisedAttempt& attempt, const ChildReport& report) {
  const char* reason = std::strerror(report.error);
  switch (report.step) {
    case ChildStep::Identity:
      return fmt::format("could not start: cannot become uid {} gid {}: {}", attempt.uid, attempt.gid,
                         reason);
    case ChildStep::Directory:
      return fmt::format("could not start: cannot enter {}: {}", attempt.cwd, reason);
    case ChildStep::Output:
      return fmt::format("could not start: cannot redirect the output: {}", reason);
    case ChildStep::Exec:
      if (report.error == ENOENT) {
        return fmt::format("could not start: command not found: {}", attempt.argv[0]);
      }
      return fmt::format("could not start: cannot run {}: {}", attempt.argv[0], reason);
    case ChildStep::Ready:
      break;
  }
  return "could not start";
}

Result<Fd> open_log(const std::string& path, uid_t uid, gid_t gid) {
  if (path.empty()) {
    Fd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    if (!null.valid()) return fail("cannot open /dev/null: {}", std::strerror(errno));
    return null;
  }
  // Opened here, where we may still be root, and handed to the job's owner: the log directory is
  // not writable by users, so nobody can plant a link where the log goes.
  Fd log(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!log.valid()) return fail("cannot open {}: {}", path, std::strerror(errno));
  if (fchown(log.get(), uid, gid) != 0) {
    return fail("cannot hand {} to uid {}: {}", path, uid, std::strerror(errno));
  }
  return log;
}

// One attempt, from the job's fork to its recorded end.
class AttemptSupervisor {
 public:
  AttemptSupervisor(SupervisedAttempt attempt, int record_fd)
      : attempt_(std::move(attempt)), record_fd_(record_fd) {}

  // Returns the supervisor's exit status: 0 once the outcome is recorded.
  int run() {
    auto started = start_job();
    if (started) supervise();
    return started ? record_exit() : record_exit("could not start: " + started.error().message);
  }

 private:
  Result<void> start_job() {
    bool as_root = geteuid() == 0;
    if (!as_root && (attempt_.uid != getuid() || attempt_.gid != getgid())) {
      return fail("the supervisor runs as uid {} gid {}, not root, so it cannot run a job as uid {} gid {}",
                  getuid(), getgid(), attempt_.uid, attempt_.gid);
    }
    sigset_t handled = supervisor_signals();
    signal_fd_.reset(signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
    timer_fd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!signal_fd_.valid() || !timer_fd_.valid()) {
      return fail("cannot wait for signals: {}", std::strerror(errno));
    }
    TRY_ASSIGN(Fd out, open_log(attempt_.stdout_path, attempt_.uid, attempt_.gid));
    TRY_ASSIGN(Fd err, open_log(attempt_.stderr_path, attempt_.uid, attempt_.gid));
    TRY_ASSIGN(auto report_pipe, make_pipe());
    TRY_ASSIGN(auto go_pipe, make_pipe());
    if (attempt_.isolation) TRY(prepare_own_group(err.get()));

    JobLaunch launch;
    launch.args = attempt_.argv;
    launch.env = attempt_.environment;
    for (auto& arg : launch.args) launch.argv.push_back(arg.data());
    launch.argv.push_back(nullptr);
    for (auto& entry : launch.env) launch.envp.push_back(entry.data());
    launch.envp.push_back(nullptr);
    launch.candidates = command_candidates(attempt_.argv[0], attempt_.environment);
    launch.groups = attempt_.groups;
    launch.uid = attempt_.uid;
    launch.gid = attempt_.gid;
    launch.change_identity = as_root;
    launch.umask = attempt_.umask;
    launch.cwd = attempt_.cwd;
    launch.stdout_fd = out.get();
    launch.stderr_fd = err.get();
    launch.report_fd = report_pipe.second.get();
    launch.go_fd = go_pipe.first.get();
    launch.close_first = {record_fd_, go_pipe.second.get(), report_pipe.first.get(), signal_fd_.get(),
                          timer_fd_.get()};

    TRY_ASSIGN(pid_t pid, fork_job(err.get()));
    if (pid == 0) exec_job(launch);
    setpgid(pid, pid);  // also here, so the group exists before we might signal it
    job_ = pid;
    report_fd_ = std::move(report_pipe.first);
    go_fd_ = std::move(go_pipe.second);
    return {};
  }

  // The attempt's cgroup, for the job and all it starts. Under cgroup v2 the job is forked
  // straight into it (fork_job); otherwise the supervisor joins it before the fork. A process
  // that moves itself between cgroups waits for an RCU grace period, which was 15 to 20 ms of
  // every job's start on an H200 machine. Without the group the job starts only where isolation
  // is not required, with a line in its error log.
  Result<void> prepare_own_group(int stderr_fd) {
    const AttemptIsolation& isolation = *attempt_.isolation;
    auto files = system_cgroup_files();
    auto ready = create_attempt_group(*files, isolation.mechanism, isolation.group, isolation.denied_minors);
    if (ready && isolation.mechanism == IsolationMechanism::CgroupV2) {
      group_fd_.reset(::open(isolation.group.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (group_fd_.valid()) return {};
      ready = fail("cannot open {}: {}", isolation.group, std::strerror(errno));
    } else if (ready) {
      return join_own_group(*files, stderr_fd);
    }
    (void)files->remove_directory(isolation.group);
    return without_group(ready, stderr_fd);
  }

  // The supervisor moves into the group (cgroup v1, or v2 before Linux 5.7), so that the job it
  // forks next starts there.
  Result<void> join_own_group(CgroupFiles& files, int stderr_fd) {
    auto joined = join_group(files, attempt_.isolation->group);
    if (!joined) (void)files.remove_directory(attempt_.isolation->group);
    return without_group(joined, stderr_fd);
  }

  Result<void> without_group(const Result<void>& why, int stderr_fd) {
    if (why) return {};
    if (attempt_.isolation->required) return fail("cannot isolate its devices: {}", why.error().message);
    std::string warning = fmt::format("gpupool: job {} runs without device isolation: {}\n", attempt_.id,
                                      why.error().message);
    (void)!::write(stderr_fd, warning.data(), warning.size());
    return {};
  }

  Result<pid_t> fork_job(int stderr_fd) {
    if (group_fd_.valid()) {
      pid_t pid = fork_into_cgroup(group_fd_.get());
      if (pid >= 0) return pid;
      // A kernel before 5.7 (ENOSYS, or EINVAL for the flag): into the group the old way.
      if (errno != ENOSYS && errno != EINVAL && errno != E2BIG) {
        return fail("cannot fork into {}: {}", attempt_.isolation->group, std::strerror(errno));
      }
      TRY(join_own_group(*system_cgroup_files(), stderr_fd));
    }
    pid_t pid = fork();
    if (pid < 0) return fail("cannot fork: {}", std::strerror(errno));
    return pid;
  }

  // Until the job's leader has exited and been reaped.
  void supervise() {
    while (!leader_status_) {
      pollfd waits[] = {
          {signal_fd_.get(), POLLIN, 0}, {timer_fd_.get(), POLLIN, 0}, {report_fd_.get(), POLLIN, 0}};
      if (poll(waits, std::size(waits), -1) < 0) {
        if (errno == EINTR) continue;
        stop_now();  // cannot wait any more: make sure the job does not outlive its supervision
        wait_for_leader(0);
        return;
      }
      // Signals first: a cancel that came while the child prepared must win over its "ready".
      if (waits[0].revents != 0) on_signals();
      if (waits[1].revents != 0) on_timer();
      if (waits[2].revents != 0) on_report();
    }
  }

  void on_signals() {
    signalfd_siginfo info{};
    while (::read(signal_fd_.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGTERM) stop("cancelled");
    }
    wait_for_leader(WNOHANG);
  }

  void on_timer() {
    uint64_t expirations = 0;
    ssize_t got = ::read(timer_fd_.get(), &expirations, sizeof expirations);
    if (got != static_cast<ssize_t>(sizeof expirations)) return;  // not expired after all
    if (!stop_reason_) {
      stop("time limit");
    } else {
      stop_now();
    }
  }

  void on_report() {
    ChildReport report;
    ssize_t got = 0;
    do {
      got = ::read(report_fd_.get(), &report, sizeof report);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(sizeof report)) {  // exec succeeded, or the child died
      report_fd_.reset();
      return;
    }
    if (report.step == ChildStep::Ready) {
      on_ready();
    } else {
      failure_ = could_not_start(attempt_, report);
      failed_before_exec_ = report.step != ChildStep::Exec;
    }
  }

  // The child is set up and waits for the go: "started" goes to disk first, so a daemon that
  // finds no "started" knows the job never ran.
  void on_ready() {
    // Cancelled meanwhile, or dead: the child was signalled and never gets the go.
    if (stop_reason_ || leader_status_) return;
    json started = {{"event", "started"}, {"job_pid", job_}, {"pgid", job_}, {"time", unix_time()}};
    if (auto written = append_event(record_fd_, started); !written) {
      failure_ = "could not start: " + written.error().message;
      failed_before_exec_ = true;
      stop_now();
      return;
    }
    char go = 1;
    (void)!::write(go_fd_.get(), &go, 1);
    go_fd_.reset();
    if (attempt_.time_limit_s) arm_timer(*attempt_.time_limit_s);
  }

  // SIGTERM to the job's group, SIGKILL after the grace period.
  void stop(const char* reason) {
    if (stop_reason_) return;
    stop_reason_ = reason;
    if (attempt_.kill_grace_s <= 0) {
      stop_now();
      return;
    }
    killpg(job_, SIGTERM);
    arm_timer(attempt_.kill_grace_s);
  }

  void stop_now() { killpg(job_, SIGKILL); }

  void arm_timer(double seconds) {
    double whole = std::floor(std::max(seconds, 0.0));
    itimerspec when{};
    when.it_value.tv_sec = static_cast<time_t>(whole);
    when.it_value.tv_nsec = static_cast<long>((std::max(seconds, 0.0) - whole) * 1e9);
    if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;  // 0 disarms
    timerfd_settime(timer_fd_.get(), 0, &when, nullptr);
  }

  void wait_for_leader(int options) {
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(job_), &info, WEXITED | WNOWAIT | options) != 0 ||
        info.si_pid != job_) {
      return;
    }
    // The leader has exited, but what it left running in its group would go on holding the GPUs
    // (through the inherited lease descriptors) with nobody to stop it, and outside the time
    // limit: kill it now, while the unreaped leader keeps the group's id from being reused.
    killpg(job_, SIGKILL);
    int status = 0;
    while (waitpid(job_, &status, 0) < 0 && errno == EINTR) {
    }
    leader_status_ = status;
  }

  // Records how the attempt ended; without a leader status, the job never ran.
  int record_exit(std::string reason = {}) {
    // Reports written before the leader exited are still in the pipe (an exec failure).
    while (report_fd_.valid()) on_report();
    if (reason.empty()) reason = failure_ ? *failure_ : stop_reason_.value_or("");
    json exit_code = nullptr, signal = nullptr;
    if (leader_status_ && !(failure_ && failed_before_exec_)) {
      exit_code = exit_code_from_status(*leader_status_);
      if (WIFSIGNALED(*leader_status_)) signal = WTERMSIG(*leader_status_);
    }
    json exited = {{"event", "exited"}, {"exit_code", exit_code}, {"signal", signal},
                   {"reason", reason}, {"time", unix_time()}};
    return append_event(record_fd_, exited) ? 0 : 1;
  }

  SupervisedAttempt attempt_;
  int record_fd_;
  Fd signal_fd_, timer_fd_, report_fd_, go_fd_;
  Fd group_fd_;  // the attempt's cgroup v2 directory, which the job is forked into
  pid_t job_ = -1;  // also its process group
  std::optional<int> leader_status_;
  std::optional<std::string> stop_reason_;
  std::optional<std::string> failure_;  // "could not start: ..."
  bool failed_before_exec_ = false;
};

}  // namespace

Result<StandbySupervisor> StandbySupervisor::spawn(const std::string& supervisor_program) {
  // The attempt comes through a socket rather than a pipe: it carries descriptors, and sending on
  // it cannot raise SIGPIPE here when the supervisor dies early.
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    return fail("cannot create a socket pair: {}", std::strerror(errno));
  }
  Fd ours(sockets[0]), theirs(sockets[1]);
  if (theirs.get() <= STDERR_FILENO) {  // a daemon started with closed standard descriptors
    theirs.reset(fcntl(theirs.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1));
    if (!theirs.valid()) return fail("cannot move a descriptor: {}", std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  // Signals: every disposition back to its default, and the supervisor's own blocked from the
  // first instant, so a cancel sent as soon as it has an attempt is never lost.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t all = {}, blocked = supervisor_signals();
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setsigmask(&attributes, &blocked);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::string program = supervisor_program;
  std::string mode = "supervise";
  char* argv[] = {program.data(), mode.data(), nullptr};
  // posix_spawn shares our memory until the exec instead of copying the page tables: no
  // copy-on-write faults in the daemon afterwards.
  pid_t pid = -1;
  int error = posix_spawn(&pid, program.c_str(), &actions, &attributes, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) return fail("cannot start {}: {}", supervisor_program, std::strerror(error));
  return StandbySupervisor(pid, ours.release());
}

StandbySupervisor::StandbySupervisor(StandbySupervisor&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), socket_(std::exchange(other.socket_, -1)) {}

StandbySupervisor& StandbySupervisor::operator=(StandbySupervisor&& other) noexcept {
  if (this != &other) {
    end();
    pid_ = std::exchange(other.pid_, -1);
    socket_ = std::exchange(other.socket_, -1);
  }
  return *this;
}

StandbySupervisor::~StandbySupervisor() { end(); }

void StandbySupervisor::end() {
  if (socket_ < 0) return;
  ::close(socket_);  // it reads the end of the stream and exits at once
  socket_ = -1;
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Result<void> StandbySupervisor::hand(const SupervisedAttempt& attempt, const std::vector<int>& lease_descriptors) {
  if (socket_ < 0) return fail("this supervisor has been handed an attempt already");
  if (attempt.argv.empty()) return fail("job {} has no command to run", attempt.id);
  if (lease_descriptors.size() + 1 > kMaxHandedDescriptors) {
    return fail("job {} holds {} leases, more than one message can carry", attempt.id, lease_descriptors.size());
  }
  std::string text;
  try {
    text = attempt_text(attempt);
  } catch (const nlohmann::json::exception&) {
    return fail("job {}: its command, environment or paths are not valid UTF-8", attempt.id);
  }
  Fd record(::open(attempt.record_path.c_str(),
                           O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!record.valid()) return fail("cannot create {}: {}", attempt.record_path, std::strerror(errno));
  // Whatever goes wrong from here on, the record goes too, so the attempt can be started again,
  // and so does the supervisor, which may have part of the attempt.
  auto give_up = [&](const std::string& why) -> Error {
    kill(pid_, SIGKILL);
    end();
    unlink(attempt.record_path.c_str());
    return fail("cannot hand job {} to its supervisor: {}", attempt.id, why);
  };
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file, however long it grows
  if (fcntl(record.get(), F_OFD_SETLK, &lock) != 0) {
    return give_up(fmt::format("cannot lock {}: {}", attempt.record_path, std::strerror(errno)));
  }
  // Before the supervisor has its attempt, so this line always comes first.
  json supervising = {{"event", "supervising"}, {"supervisor_pid", pid_}, {"time", unix_time()}};
  if (auto written = append_event(record.get(), supervising); !written) {
    return give_up(written.error().message);
  }
  // The descriptors ride on the first byte: the record first, then the leases.
  std::vector<int> handed = {record.get()};
  handed.insert(handed.end(), lease_descriptors.begin(), lease_descriptors.end());
  std::vector<char> control(CMSG_SPACE(sizeof(int) * handed.size()));
  iovec first{text.data(), 1};
  msghdr message{};
  message.msg_iov = &first;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* rights = CMSG_FIRSTHDR(&message);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(sizeof(int) * handed.size());
  std::memcpy(CMSG_DATA(rights), handed.data(), sizeof(int) * handed.size());
  ssize_t n = 0;
  do {
    n = sendmsg(socket_, &message, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return give_up(fmt::format("cannot send it the attempt: {}", std::strerror(errno)));
  for (size_t sent = 1; sent < text.size();) {
    n = send(socket_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return give_up(fmt::format("cannot send it the attempt: {}", std::strerror(errno)));
    sent += static_cast<size_t>(n);
  }
  // The end of the stream ends the attempt's text. Our copy of the record goes; the lock stays,
  // held by the supervisor's copy of the same open file.
  ::close(socket_);
  socket_ = -1;
  return {};
}

namespace {

// The first byte of the attempt and the descriptors that come with it: the record, then the
// leases. Received close-on-exec; the caller decides what the job inherits.
Result<std::pair<std::string, std::vector<int>>> receive_handed_descriptors(int socket) {
  char first = 0;
  iovec data{&first, 1};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxHandedDescriptors));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  ssize_t n = 0;
  do {
    n = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return fail("no attempt came");
  std::vector<int> descriptors;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    std::vector<int> received(count);
    std::memcpy(received.data(), CMSG_DATA(c), count * sizeof(int));
    descriptors.insert(descriptors.end(), received.begin(), received.end());
  }
  if (descriptors.empty() || (message.msg_flags & MSG_CTRUNC) != 0) {
    return fail("the attempt came without its record");
  }
  return std::make_pair(std::string(1, first), std::move(descriptors));
}

}  // namespace

int supervise_main() {
  // Out of the daemon's session and process group: what is sent to those never reaches us.
  setsid();
  // Its own process name, so `pkill gpupoold` or `killall gpupoold` aimed at the daemon
  // leaves the jobs' supervisors alone.
  prctl(PR_SET_NAME, "gpupool-superv", 0, 0, 0);
  sigset_t handled = supervisor_signals();
  sigprocmask(SIG_BLOCK, &handled, nullptr);
  reset_signal_dispositions();
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);

  // No attempt to run (the daemon died, or ended this standby, before handing one over): record
  // nothing, so the record says the job never started and the daemon queues it again.
  auto handed = receive_handed_descriptors(STDIN_FILENO);
  if (!handed) return 3;
  auto& [text, descriptors] = *handed;
  // The job must never get the record (it could forge its outcome); it inherits the leases.
  int record_fd = descriptors.front();
  for (size_t i = 1; i < descriptors.size(); ++i) {
    if (fcntl(descriptors[i], F_SETFD, 0) != 0) return 2;
  }
  auto rest = read_to_end(STDIN_FILENO);
  auto attempt = rest ? parse_attempt(text + *rest) : Result<SupervisedAttempt>(fail("cannot read the attempt"));
  if (!attempt) return 3;
  // The job's stdin is /dev/null; the daemon's socket goes.
  int null = ::open("/dev/null", O_RDONLY);
  if (null < 0 || dup2(null, STDIN_FILENO) < 0) return 2;
  ::close(null);
  return AttemptSupervisor(std::move(*attempt), record_fd).run();
}

Result<void> cancel_supervised(pid_t supervisor_pid) {
  if (supervisor_pid <= 0) return fail("no supervisor to cancel (pid {})", supervisor_pid);
  if (kill(supervisor_pid, SIGTERM) != 0) {
    return fail("cannot signal the supervisor (pid {}): {}", supervisor_pid, std::strerror(errno));
  }
  return {};
}

}  // namespace gpupool
