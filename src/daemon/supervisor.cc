#include "daemon/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "os/child_process.h"
#include "os/clock.h"
#include "os/fd.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/forked_child.h"
#include "os/process.h"
#include "os/signals.h"
#include "os/timer.h"
#include "os/unix_socket.h"

namespace gpupool {
namespace {

using nlohmann::json;

// One line in one write() to a file opened O_APPEND, so a reader sees whole lines, and at worst
// a torn last one when the writer dies mid-write.
Result<void> append_event(int record_fd, const json& event) {
  // Reasons may quote paths that are not UTF-8; they are for people, so replacing is fine.
  std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (!write_in_one_call(record_fd, line.data(), line.size())) {
    return fail("cannot write the attempt record: {}", std::strerror(errno));
  }
  return {};
}

// The record's lines are a few hundred bytes; a reason quoting long paths may take more.
constexpr uint64_t kRecordRoom = 16 * 1024;

// What the supervisor takes through its signalfd: a cancel, its job's end, and the daemon's word
// that the job is suspended (the time limit's clock stops) or resumed (it runs on). Blocked from
// before the supervisor's exec, so a cancel sent as soon as its pid is known is never lost.
constexpr std::initializer_list<int> kSupervisorSignals = {SIGTERM, SIGCHLD, kStopTheClock, kStartTheClock};

// Device numbers as [major, minor] pairs.
json denied_pairs(const std::vector<DeviceNumber>& denied) {
  json pairs = json::array();
  for (const DeviceNumber& device : denied) pairs.push_back({device.major, device.minor});
  return pairs;
}

std::vector<DeviceNumber> denied_devices_from(const json& pairs) {
  std::vector<DeviceNumber> denied;
  for (const json& pair : pairs) denied.push_back({pair.at(0).get<unsigned>(), pair.at(1).get<unsigned>()});
  return denied;
}

std::string attempt_text(const SupervisedAttempt& a) {
  json time_limit = a.time_limit_s ? json(*a.time_limit_s) : json(nullptr);
  json isolation = nullptr;
  if (a.isolation) {
    isolation = {{"mechanism", to_string(a.isolation->mechanism)},
                 {"group", a.isolation->group},
                 {"denied", denied_pairs(a.isolation->denied)},
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
              {"max_output_bytes", a.output_limits.max_bytes ? json(*a.output_limits.max_bytes) : json(nullptr)},
              {"state_reserve_bytes", a.output_limits.reserve_bytes},
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
    if (!j.at("max_output_bytes").is_null()) a.output_limits.max_bytes = j.at("max_output_bytes").get<uint64_t>();
    a.output_limits.reserve_bytes = j.at("state_reserve_bytes").get<uint64_t>();
    if (!j.at("time_limit_s").is_null()) a.time_limit_s = j.at("time_limit_s").get<double>();
    a.kill_grace_s = j.at("kill_grace_s").get<double>();
    a.record_path = j.at("record_path").get<std::string>();
    if (const json& isolation = j.at("isolation"); !isolation.is_null()) {
      auto mechanism = parse_isolation_mechanism(isolation.at("mechanism").get<std::string>());
      if (!mechanism) return fail("the attempt names an unknown isolation mechanism");
      a.isolation = AttemptIsolation{*mechanism, isolation.at("group").get<std::string>(),
                                     denied_devices_from(isolation.at("denied")),
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

// Everything the job's child needs, prepared before the fork so the child only makes system calls
// (through the async-signal-safe steps of os/forked_child.h): it allocates nothing.
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

[[noreturn]] void report_and_exit(int report_fd, ChildStep step, int error) {
  ChildReport report{step, error};
  (void)write_in_one_call(report_fd, &report, sizeof report);
  _exit(step == ChildStep::Exec && error == ENOENT ? kNotFoundExit : kCannotRunExit);
}

// The job's child, forked by the supervisor. Becomes the job: its own process group, its owner's
// identity, umask, directory and logs; then waits for the go (sent once "started" is on disk).
[[noreturn]] void exec_job(const JobLaunch& launch) {
  // Closing our copy of the record now (not only at exec) lets the lock go with the supervisor
  // even while we are still setting up.
  close_descriptors(launch.close_first);
  // Neither the supervisor's signal choices nor its mask are the job's.
  reset_signal_dispositions();
  unblock_all_signals();
  make_group_leader(0);
  if (launch.change_identity) {
    if (int error = become_user(launch.uid, launch.gid, launch.groups); error != 0) {
      report_and_exit(launch.report_fd, ChildStep::Identity, error);
    }
  }
  set_umask(launch.umask);
  if (int error = change_directory(launch.cwd.c_str()); error != 0) {
    report_and_exit(launch.report_fd, ChildStep::Directory, error);
  }
  if (int error = redirect_standard_streams(-1, launch.stdout_fd, launch.stderr_fd); error != 0) {
    report_and_exit(launch.report_fd, ChildStep::Output, error);
  }
  ChildReport ready;
  if (!write_in_one_call(launch.report_fd, &ready, sizeof ready)) _exit(kCannotRunExit);
  char go = 0;
  // Nothing: the supervisor is gone, or decided against starting.
  if (!read_in_one_call(launch.go_fd, &go, 1)) _exit(kCannotRunExit);
  int error = exec_first_found(launch.candidates, launch.argv.data(), launch.envp.data());
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

// Opened here, where we may still be root, and handed to the job's owner: the log directory is
// not writable by users, so nobody can plant a link where the log goes. A new log is made here
// (O_EXCL) and then handed over; an existing one is used only as an earlier attempt's
// (check_job_log), never handed over again.
Result<Fd> open_log(const std::string& path, uid_t uid, gid_t gid) {
  if (path.empty()) return open_file("/dev/null", O_WRONLY);
  TRY_ASSIGN(auto created, create_file(path, O_WRONLY | O_APPEND | O_NOFOLLOW, 0600));
  if (created) {
    if (auto handed = change_owner(created->get(), uid, gid); !handed) {
      return fail("cannot hand {} to uid {}: {}", path, uid, handed.error().message);
    }
    return std::move(*created);
  }
  // O_NONBLOCK: a FIFO under the name must not block the open.
  TRY_ASSIGN(auto existing, open_existing(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK));
  if (!existing) return fail("{} went away while it was being opened", path);
  TRY_ASSIGN(FileStatus status, file_status(existing->get()));
  TRY(check_job_log(path, status, uid));
  return std::move(*existing);
}

}  // namespace

Result<void> check_job_log(const std::string& path, const FileStatus& status, uid_t owner) {
  if (status.type != FileType::regular || status.links != 1 || status.owner != owner) {
    return fail("{} is not this job's log ({}, owner uid {}, link count {}; its log is a regular file with one name, "
                "owned by uid {}): it is left as it is, an administrator should move it away",
                path, status.type == FileType::regular ? "a regular file" : "not a regular file", status.owner,
                status.links, owner);
  }
  return {};
}

namespace {

// One attempt, from the job's fork to its recorded end.
class AttemptSupervisor {
 public:
  AttemptSupervisor(SupervisedAttempt attempt, int record_fd)
      : attempt_(std::move(attempt)), record_fd_(record_fd) {}

  // Returns the supervisor's exit status: 0 once the outcome is recorded.
  int run() {
    auto started = start_job();
    if (started) {
      supervise();
      finish_output();
    }
    return started ? record_exit() : record_exit("could not start: " + started.error().message);
  }

 private:
  Result<void> start_job() {
    bool as_root = effective_user_id() == 0;
    if (!as_root && (attempt_.uid != real_user_id() || attempt_.gid != real_group_id())) {
      return fail("the supervisor runs as uid {} gid {}, not root, so it cannot run a job as uid {} gid {}",
                  real_user_id(), real_group_id(), attempt_.uid, attempt_.gid);
    }
    TRY_ASSIGN(signal_fd_, signal_descriptor(kSupervisorSignals));
    TRY_ASSIGN(timer_fd_, timer_descriptor());
    TRY_ASSIGN(Fd out, open_log(attempt_.stdout_path, attempt_.uid, attempt_.gid));
    TRY_ASSIGN(Fd err, open_log(attempt_.stderr_path, attempt_.uid, attempt_.gid));
    TRY_ASSIGN(auto out_pipe, make_pipe());
    TRY_ASSIGN(auto err_pipe, make_pipe());
    TRY_ASSIGN(FileStatus out_status, file_status(out.get()));
    TRY_ASSIGN(FileStatus err_status, file_status(err.get()));
    allowance_.emplace(attempt_.output_limits, out_status.size + err_status.size);
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
    launch.stdout_fd = out_pipe.second.get();
    launch.stderr_fd = err_pipe.second.get();
    launch.report_fd = report_pipe.second.get();
    launch.go_fd = go_pipe.first.get();
    launch.close_first = {record_fd_, go_pipe.second.get(), report_pipe.first.get(), signal_fd_.get(),
                          timer_fd_.get()};

    TRY_ASSIGN(pid_t pid, fork_job(err.get()));
    if (pid == 0) exec_job(launch);
    make_group_leader(pid);  // also here, so the group exists before we might signal it
    job_ = pid;
    // Our copies of the pipes' write ends close on return, so the job's exit ends the streams.
    output_[0] = OutputCopy{std::move(out_pipe.first), std::move(out), true};
    output_[1] = OutputCopy{std::move(err_pipe.first), std::move(err), true};
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
    auto ready = create_attempt_group(*files, isolation.mechanism, isolation.group, isolation.denied);
    if (ready && isolation.mechanism == IsolationMechanism::CgroupV2) {
      auto group = open_file(isolation.group, O_RDONLY | O_DIRECTORY);
      if (group) {
        group_fd_ = std::move(*group);
        return {};
      }
      ready = std::move(group).error();
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
    (void)write_in_one_call(stderr_fd, warning.data(), warning.size());
    return {};
  }

  Result<pid_t> fork_job(int stderr_fd) {
    if (group_fd_.valid()) {
      TRY_ASSIGN(std::optional<pid_t> pid, fork_into_cgroup(group_fd_.get(), attempt_.isolation->group));
      if (pid) return *pid;
      // A kernel before 5.7: into the group the old way.
      TRY(join_own_group(*system_cgroup_files(), stderr_fd));
    }
    return fork_process();
  }

  // Until the job's leader has exited and been reaped.
  void supervise() {
    while (!leader_status_) {
      auto ready = wait_until_ready({signal_fd_.get(), timer_fd_.get(), report_fd_.get(), output_[0].pipe.get(),
                                     output_[1].pipe.get()},
                                    std::nullopt);
      if (!ready) {
        stop_now();  // cannot wait any more: make sure the job does not outlive its supervision
        wait_for_leader(true);
        return;
      }
      // Signals first: a cancel that came while the child prepared must win over its "ready".
      if ((*ready)[0]) on_signals();
      if ((*ready)[1]) on_timer();
      if ((*ready)[2]) on_report();
      if ((*ready)[3]) copy_output(OutputStream::Out);
      if ((*ready)[4]) copy_output(OutputStream::Err);
    }
  }

  // What the job wrote before it ended may still be in the pipes, and goes to the logs before
  // "exited" is recorded, so whoever waits for the job then finds its logs whole. Something the
  // job left running outside its process group (started with setsid) may hold the pipes open:
  // it gets a few seconds, not the supervisor's life.
  void finish_output() {
    auto deadline = std::chrono::steady_clock::now() + kOutputAfterExit;
    while (output_[0].pipe.valid() || output_[1].pipe.valid()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      auto ready = wait_until_ready({output_[0].pipe.get(), output_[1].pipe.get()}, left);
      if (!ready || (!(*ready)[0] && !(*ready)[1])) return;
      if ((*ready)[0]) copy_output(OutputStream::Out);
      if ((*ready)[1]) copy_output(OutputStream::Err);
    }
  }

  // One read from the job's stream, into its log as far as the allowance goes.
  void copy_output(OutputStream stream) {
    OutputCopy& copy = output_[static_cast<int>(stream)];
    auto got = read_some(copy.pipe.get(), buffer_.data(), buffer_.size());
    if (!got || *got == 0) {
      copy.pipe.reset();
      return;
    }
    // Unmeasurable: write, as before there was a reserve; a full disk then refuses the write.
    auto measured = free_bytes(copy.log.get());
    uint64_t free = measured ? *measured : UINT64_MAX;
    OutputDecision decision = allowance_->admit(stream, *got, free);
    if (decision.write > 0) {
      if (write_all(copy.log.get(), std::string_view(buffer_.data(), decision.write))) {
        copy.at_line_start = buffer_[decision.write - 1] == '\n';
      } else {
        decision.notice = allowance_->write_failed(stream, free);
      }
    }
    if (decision.notice) {
      // On a line of its own, whatever the job's last line was.
      (void)write_all(copy.log.get(), (copy.at_line_start ? "" : "\n") + *decision.notice);
      copy.at_line_start = true;
    }
  }

  void on_signals() {
    while (auto signal = read_signal(signal_fd_.get())) {
      if (*signal == SIGTERM) stop("cancelled");
      if (*signal == kStopTheClock) stop_the_clock();
      if (*signal == kStartTheClock) start_the_clock();
    }
    wait_for_leader(false);
  }

  // A suspended job's time does not count against its limit, as in Slurm. Either word twice is
  // the same as once, so a restarted daemon may say it again.
  void stop_the_clock() {
    if (!clock_running_) return;
    clock_running_ = false;
    clock_left_s_ = disarm_timer(timer_fd_.get());
    (void)append_event(record_fd_, {{"event", "clock_stopped"}, {"time", unix_now()}, {"left_s", *clock_left_s_}});
  }

  void start_the_clock() {
    if (!clock_left_s_ || stop_reason_) return;
    arm_timer(timer_fd_.get(), *clock_left_s_);
    clock_left_s_.reset();
    clock_running_ = true;
    (void)append_event(record_fd_, {{"event", "clock_started"}, {"time", unix_now()}});
  }

  void on_timer() {
    if (!take_timer_expiry(timer_fd_.get())) return;  // not expired after all
    if (!stop_reason_) {
      stop("time limit");
    } else {
      stop_now();
    }
  }

  void on_report() {
    ChildReport report;
    if (!read_in_one_call(report_fd_.get(), &report, sizeof report)) {  // exec succeeded, or the child died
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
    json started = {{"event", "started"}, {"job_pid", job_}, {"pgid", job_}, {"time", unix_now()}};
    if (auto written = append_event(record_fd_, started); !written) {
      failure_ = "could not start: " + written.error().message;
      failed_before_exec_ = true;
      stop_now();
      return;
    }
    char go = 1;
    (void)write_in_one_call(go_fd_.get(), &go, 1);
    go_fd_.reset();
    if (attempt_.time_limit_s) {
      arm_timer(timer_fd_.get(), *attempt_.time_limit_s);
      clock_running_ = true;
    }
  }

  // SIGTERM to the job's group, SIGKILL after the grace period.
  void stop(const char* reason) {
    if (stop_reason_) return;
    stop_reason_ = reason;
    clock_running_ = false;  // the timer counts the grace period from here
    if (attempt_.kill_grace_s <= 0) {
      stop_now();
      return;
    }
    (void)signal_process_group(job_, SIGTERM);
    arm_timer(timer_fd_.get(), attempt_.kill_grace_s);
  }

  void stop_now() { (void)signal_process_group(job_, SIGKILL); }

  void wait_for_leader(bool wait) {
    if (!child_has_exited(job_, wait)) return;
    // The leader has exited, but what it left running in its group would go on holding the GPUs
    // (through the inherited lease descriptors) with nobody to stop it, and outside the time
    // limit: kill it now, while the unreaped leader keeps the group's id from being reused.
    stop_now();
    leader_status_ = reap_child(job_);
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
                   {"reason", reason}, {"time", unix_now()}};
    return append_event(record_fd_, exited) ? 0 : 1;
  }

  // How long output is still copied once the job's leader has exited.
  static constexpr std::chrono::seconds kOutputAfterExit{5};

  // One of the job's streams on its way to its log.
  struct OutputCopy {
    Fd pipe;  // our read end; closed at the end of the stream
    Fd log;
    bool at_line_start = true;  // the last byte written was a newline (or none was written)
  };

  SupervisedAttempt attempt_;
  int record_fd_;
  OutputCopy output_[2];  // indexed by OutputStream
  std::optional<OutputAllowance> allowance_;
  std::vector<char> buffer_ = std::vector<char>(size_t{64} * 1024);
  Fd signal_fd_, timer_fd_, report_fd_, go_fd_;
  Fd group_fd_;  // the attempt's cgroup v2 directory, which the job is forked into
  pid_t job_ = -1;  // also its process group
  std::optional<int> leader_status_;
  std::optional<std::string> stop_reason_;
  bool clock_running_ = false;          // the timer counts down the time limit
  std::optional<double> clock_left_s_;  // the limit's time left when the clock was stopped
  std::optional<std::string> failure_;  // "could not start: ..."
  bool failed_before_exec_ = false;
};

}  // namespace

Result<StandbySupervisor> StandbySupervisor::spawn(const std::string& supervisor_program) {
  // The attempt comes through a socket rather than a pipe: it carries descriptors, and sending on
  // it cannot raise SIGPIPE here when the supervisor dies early.
  TRY_ASSIGN(auto sockets, socket_pair());
  auto& [ours, theirs] = sockets;
  if (theirs.get() <= STDERR_FILENO) {  // a daemon started with closed standard descriptors
    TRY_ASSIGN(theirs, duplicate(theirs.get()));
  }
  // Signals: every disposition back to its default, and the supervisor's own blocked from the
  // first instant, so a cancel sent as soon as it has an attempt is never lost.
  TRY_ASSIGN(pid_t pid, spawn_helper({supervisor_program, "supervise"}, theirs.get(), kSupervisorSignals));
  return StandbySupervisor(pid, std::move(ours));
}

StandbySupervisor::StandbySupervisor(StandbySupervisor&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), socket_(std::move(other.socket_)) {}

StandbySupervisor& StandbySupervisor::operator=(StandbySupervisor&& other) noexcept {
  if (this != &other) {
    end();
    pid_ = std::exchange(other.pid_, -1);
    socket_ = std::move(other.socket_);
  }
  return *this;
}

StandbySupervisor::~StandbySupervisor() { end(); }

void StandbySupervisor::end() {
  if (!socket_.valid()) return;
  socket_.reset();  // it reads the end of the stream and exits at once
  (void)reap_child(pid_);
  pid_ = -1;
}

Result<void> StandbySupervisor::hand(const SupervisedAttempt& attempt, const std::vector<int>& lease_descriptors) {
  if (!socket_.valid()) return fail("this supervisor has been handed an attempt already");
  if (attempt.argv.empty()) return fail("job {} has no command to run", attempt.id);
  if (lease_descriptors.size() + 1 > kMaxDescriptorsPerMessage) {
    return fail("job {} holds {} leases, more than one message can carry", attempt.id, lease_descriptors.size());
  }
  std::string text;
  try {
    text = attempt_text(attempt);
  } catch (const nlohmann::json::exception&) {
    return fail("job {}: its command, environment or paths are not valid UTF-8", attempt.id);
  }
  TRY_ASSIGN(auto created, create_file(attempt.record_path, O_WRONLY | O_APPEND | O_NOFOLLOW, 0600));
  if (!created) return fail("cannot create {}: {}", attempt.record_path, std::strerror(EEXIST));
  Fd record = std::move(*created);
  // Room for every line the record will get, taken now: a job's end must reach its record even
  // when the file system fills while the job runs. Without it (a file system that cannot), as before.
  (void)preallocate(record.get(), kRecordRoom);
  // Whatever goes wrong from here on, the record goes too, so the attempt can be started again,
  // and so does the supervisor, which may have part of the attempt.
  auto give_up = [&](const std::string& why) -> Error {
    (void)send_signal(pid_, SIGKILL);
    end();
    (void)remove_file(attempt.record_path);
    return fail("cannot hand job {} to its supervisor: {}", attempt.id, why);
  };
  // The whole file, however long it grows. (try_lock_range makes one fcntl(2): errno says why.)
  if (!try_lock_range(record.get(), ByteRange{0, kToEndOfFile})) {
    return give_up(fmt::format("cannot lock {}: {}", attempt.record_path, std::strerror(errno)));
  }
  // Before the supervisor has its attempt, so this line always comes first.
  // "clock": this supervisor takes kStopTheClock and kStartTheClock (one of an older release
  // would die of them).
  json supervising = {{"event", "supervising"}, {"supervisor_pid", pid_}, {"time", unix_now()}, {"clock", true}};
  if (auto written = append_event(record.get(), supervising); !written) {
    return give_up(written.error().message);
  }
  // The descriptors ride on the first byte: the record first, then the leases.
  std::vector<int> handed = {record.get()};
  handed.insert(handed.end(), lease_descriptors.begin(), lease_descriptors.end());
  if (auto sent = send_with_descriptors(socket_.get(), text, handed); !sent) {
    return give_up(fmt::format("cannot send it the attempt: {}", sent.error().message));
  }
  // The end of the stream ends the attempt's text. Our copy of the record goes; the lock stays,
  // held by the supervisor's copy of the same open file.
  socket_.reset();
  return {};
}

int supervise_main() {
  // Out of the daemon's session and process group: what is sent to those never reaches us.
  start_new_session();
  // Its own process name, so `pkill gpupoold` or `killall gpupoold` aimed at the daemon
  // leaves the jobs' supervisors alone.
  set_process_name("gpupool-superv");
  block_signals(kSupervisorSignals);
  // Neither the supervisor nor the job should inherit the daemon's signal choices.
  reset_signal_dispositions();
  ignore_signals({SIGHUP, SIGPIPE});

  // No attempt to run (the daemon died, or ended this standby, before handing one over): record
  // nothing, so the record says the job never started and the daemon queues it again. The first
  // byte of the attempt brings the record and then the leases, received close-on-exec.
  auto handed = receive_byte_with_descriptors(STDIN_FILENO, kMaxDescriptorsPerMessage);
  if (!handed || handed->descriptors.empty()) return 3;
  // The job must never get the record (it could forge its outcome); it inherits the leases.
  int record_fd = handed->descriptors.front().release();
  for (size_t i = 1; i < handed->descriptors.size(); ++i) {
    if (!set_inherited_by_exec(handed->descriptors[i].release(), true)) return 2;
  }
  auto rest = read_to_end(STDIN_FILENO);
  auto attempt = rest ? parse_attempt(handed->byte + *rest)
                      : Result<SupervisedAttempt>(fail("cannot read the attempt"));
  if (!attempt) return 3;
  // The job's stdin is /dev/null; the daemon's socket goes.
  auto null = open_file("/dev/null", O_RDONLY);
  if (!null || redirect_standard_streams(null->get(), -1, -1) != 0) return 2;
  null->reset();
  return AttemptSupervisor(std::move(*attempt), record_fd).run();
}

Result<void> cancel_supervised(pid_t supervisor_pid) {
  if (supervisor_pid <= 0) return fail("no supervisor to cancel (pid {})", supervisor_pid);
  if (auto sent = send_signal(supervisor_pid, SIGTERM); !sent) {
    return fail("cannot cancel its supervisor: {}", sent.error().message);
  }
  return {};
}

}  // namespace gpupool
