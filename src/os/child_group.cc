#include "os/child_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "base/stoppable_deadline.h"

namespace gpupool {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kTimedOutExitCode = 124;  // as timeout(1)
constexpr int kFinalReads = 64;  // at most 4 MiB of output left in a pipe when the job ends

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to write to any more: the output is lost, the job goes on
    done += static_cast<size_t>(n);
  }
}

// One output stream of one child: a pipe, and the start of a line not yet complete.
struct Stream {
  int fd = -1;
  int destination = -1;
  const std::string* prefix = nullptr;
  std::string partial;

  // Writes out every complete line read so far (all of it at the end of the stream).
  void relay(bool at_end) {
    std::string lines;
    size_t start = 0;
    for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos;
         start = newline + 1) {
      lines += *prefix;
      lines.append(partial, start, newline + 1 - start);
    }
    partial.erase(0, start);
    if (at_end && !partial.empty()) {
      lines += *prefix + partial + "\n";
      partial.clear();
    }
    write_all(destination, lines);
  }

  // Reads up to `max_reads` buffers of what is there now; false at the end of the stream.
  bool read_available(int max_reads) {
    char buffer[65536];
    bool open = true;
    for (int reads = 0; open && reads < max_reads; ++reads) {
      ssize_t n = read(fd, buffer, sizeof buffer);
      if (n > 0) {
        partial.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        open = n < 0 && errno == EAGAIN;
        break;
      }
    }
    relay(!open);
    return open;
  }

  void close_fd() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

struct Member {
  pid_t pid = -1;
  std::string prefix;
  bool exited = false;
};

class Supervisor {
 public:
  explicit Supervisor(const GroupOptions& options) : options_(options) {
    sigemptyset(&signals_);
    // Ignoring SIGCHLD would reap the children behind our back.
    std::signal(SIGCHLD, SIG_DFL);
    sigaddset(&signals_, SIGCHLD);
    for (int signal : kStopSignals) {
      // A signal ignored on purpose (nohup) must not stop the job either.
      struct sigaction current {};
      sigaction(signal, nullptr, &current);
      if (current.sa_handler != SIG_IGN) sigaddset(&signals_, signal);
    }
    sigaddset(&signals_, suspended_signal());
    sigaddset(&signals_, resumed_signal());
    // Blocked before the first child starts, so that no signal is missed; taken from a signalfd.
    sigprocmask(SIG_BLOCK, &signals_, &previous_mask_);
  }

  ~Supervisor() {
    for (auto& stream : streams_) stream.close_fd();
    if (signal_fd_ >= 0) close(signal_fd_);
    sigprocmask(SIG_SETMASK, &previous_mask_, nullptr);
  }

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  Result<void> start(std::vector<GroupChild>& children) {
    signal_fd_ = signalfd(-1, &signals_, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signal_fd_ < 0) return fail("cannot watch signals: {}", std::strerror(errno));
    members_.reserve(children.size());  // the streams point at their prefixes: no reallocation
    streams_.reserve(2 * children.size());
    for (auto& child : children) {
      Result<void> started = start_one(child);
      if (!started.ok()) {
        kill_all(SIGKILL);
        while (any_running()) reap(0);
        return started;
      }
    }
    return {};
  }

  std::vector<pid_t> pids() const {
    std::vector<pid_t> result;
    for (const auto& member : members_) result.push_back(member.pid);
    return result;
  }

  GroupOutcome supervise() {
    if (options_.time_limit) time_deadline_.set(Clock::now() + *options_.time_limit);
    while (any_running()) {
      std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
      std::vector<Stream*> polled;
      for (auto& stream : streams_) {
        if (stream.fd < 0) continue;
        fds.push_back({stream.fd, POLLIN, 0});
        polled.push_back(&stream);
      }
      if (poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR) break;
      for (size_t i = 0; i < polled.size(); ++i) {
        // One buffer per turn, so that a chatty child cannot hold up signals and the others.
        if (fds[i + 1].revents != 0 && !polled[i]->read_available(1)) polled[i]->close_fd();
      }
      if (fds[0].revents != 0) take_signals();
      reap(WNOHANG);
      if (!stopping_ && time_deadline_.at() && Clock::now() >= *time_deadline_.at()) {
        outcome_.timed_out = true;
        outcome_.exit_code = kTimedOutExitCode;
        begin_stop();
      }
      if (stopping_ && !killed_ && Clock::now() >= kill_deadline_) kill_all(SIGKILL);
    }
    // What the children wrote before exiting is in the pipes; whatever they left behind that
    // still holds a pipe open must not keep us waiting.
    for (auto& stream : streams_) {
      if (stream.fd >= 0) stream.read_available(kFinalReads);
      stream.relay(true);
      stream.close_fd();
    }
    return outcome_;
  }

 private:
  Result<void> start_one(GroupChild& child) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return fail("cannot create a pipe: {}", std::strerror(errno));
    if (pipe2(err, O_CLOEXEC) != 0) {
      int error = errno;
      close(out[0]);
      close(out[1]);
      return fail("cannot create a pipe: {}", std::strerror(error));
    }
    child.spec.stdout_fd = out[1];
    child.spec.stderr_fd = err[1];
    child.spec.own_process_group = true;
    Result<pid_t> pid = spawn_child(child.spec);
    close(out[1]);
    close(err[1]);
    members_.push_back({pid.ok() ? *pid : -1, std::move(child.prefix), !pid.ok()});
    const std::string* prefix = &members_.back().prefix;
    for (auto [fd, destination] :
         {std::pair{out[0], options_.stdout_fd}, {err[0], options_.stderr_fd}}) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      streams_.push_back({fd, destination, prefix, {}});
    }
    if (!pid.ok()) return pid.error();
    return {};
  }

  bool any_running() const {
    for (const auto& member : members_) {
      if (!member.exited) return true;
    }
    return false;
  }

  // A SIGCHLD that another thread of this process takes (one that does not block it) never
  // reaches the signalfd: the children are also asked after every wake-up, at least this often.
  static constexpr int64_t kReapEveryMs = 200;

  int poll_timeout_ms() const {
    std::optional<Clock::time_point> next;
    if (stopping_ && !killed_) next = kill_deadline_;
    if (!stopping_ && time_deadline_.at()) next = time_deadline_.at();
    if (!next) return static_cast<int>(kReapEveryMs);
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now());
    return static_cast<int>(std::clamp<int64_t>(left.count(), 0, kReapEveryMs));
  }

  void take_signals() {
    signalfd_siginfo info{};
    while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      int signal = static_cast<int>(info.ssi_signo);
      if (signal == SIGCHLD) {
        reap(WNOHANG);
      } else if (signal == suspended_signal()) {
        // The time limit's clock stands still while the job is suspended.
        if (!stopping_) time_deadline_.stop(Clock::now());
      } else if (signal == resumed_signal()) {
        if (!stopping_) time_deadline_.start(Clock::now());
      } else if (!stopping_) {
        outcome_.signal = signal;
        outcome_.exit_code = 128 + signal;
        begin_stop();
      } else {
        kill_all(SIGKILL);  // asked again while stopping: no more grace
      }
    }
  }

  // Collects the children that have exited (SIGCHLDs coalesce, so every one is asked).
  void reap(int flags) {
    for (size_t i = 0; i < members_.size(); ++i) {
      Member& member = members_[i];
      int status = 0;
      if (member.exited || waitpid(member.pid, &status, flags) != member.pid) continue;
      member.exited = true;
      int code = exit_code_from_status(status);
      if (code != 0 && !stopping_) {
        outcome_.failed_child = i;
        outcome_.exit_code = code;
        if (WIFSIGNALED(status)) outcome_.failed_signal = WTERMSIG(status);
        begin_stop();
      }
    }
  }

  void begin_stop() {
    stopping_ = true;
    for (const auto& member : members_) outcome_.stopped += member.exited ? 0 : 1;
    kill_all(SIGTERM);
    kill_deadline_ = Clock::now() + options_.grace;
  }

  // Signals the whole process group of every child still running (what it started too).
  void kill_all(int signal) {
    for (const auto& member : members_) {
      if (!member.exited) kill(-member.pid, signal);
    }
    if (signal == SIGKILL) killed_ = true;
  }

  const GroupOptions& options_;
  sigset_t signals_{};
  sigset_t previous_mask_{};
  int signal_fd_ = -1;
  std::vector<Member> members_;
  std::vector<Stream> streams_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_deadline_{};
  StoppableDeadline time_deadline_;  // its clock stands still while the job is suspended
  GroupOutcome outcome_;
};

}  // namespace

Result<GroupOutcome> run_child_group(std::vector<GroupChild> children,
                                     const GroupOptions& options) {
  Supervisor supervisor(options);
  TRY(supervisor.start(children));
  if (options.on_started) options.on_started(supervisor.pids());
  return supervisor.supervise();
}

}  // namespace gpupool
