#include "daemon/daemon.h"
#include "daemon/daemon_options.h"

#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include <asio.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/text.h"
#include "daemon/http_server.h"
#include "daemon/supervisor.h"
#include "gpu/gpu_backend.h"
#include "isolation/device_rules.h"
#include "jobs/job_store.h"
#include "lease/gpu_pool.h"
#include "lease/lease_directory.h"
#include "monitor/monitor.h"
#include "os/clock.h"
#include "os/host_files.h"
#include "os/job_cgroup.h"
#include "os/service_manager.h"
#include "os/unix_socket.h"
#include "protocol/messages.h"
#include "sched/allocation.h"
#include "sched/scheduler.h"
#include "sim/open_backend.h"

namespace gpupool {
namespace {

using asio::local::stream_protocol;
namespace proto = protocol;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// The supplementary groups of a connected process, from /proc (what the user's session has),
// falling back to the group database.
std::vector<gid_t> process_groups(const HostFiles& host, pid_t pid, const std::string& user, gid_t gid) {
  std::vector<gid_t> groups;
  if (auto status = host.read(fmt::format("/proc/{}/status", pid))) {
    size_t at = status->find("\nGroups:");
    if (at != std::string::npos) {
      size_t end = status->find('\n', at + 1);
      for (const std::string& piece : split(status->substr(at + 8, end - at - 8), ' ')) {
        std::string word;
        for (char c : piece) {
          if (c != '\t') word += c;
        }
        if (all_digits(word)) groups.push_back(static_cast<gid_t>(std::stoul(word)));
      }
      return groups;
    }
  }
  int count = 64;
  groups.resize(static_cast<size_t>(count));
  if (getgrouplist(user.c_str(), gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count));
    getgrouplist(user.c_str(), gid, groups.data(), &count);
  }
  groups.resize(static_cast<size_t>(std::max(count, 0)));
  return groups;
}

Result<void> ensure_directory(const std::string& path, mode_t mode) {
  if (mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return fail("cannot create {}: {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return fail("{} is not a directory", path);
  if (st.st_uid != geteuid()) return fail("{} belongs to uid {}, not to the daemon's user", path, st.st_uid);
  if (chmod(path.c_str(), mode) != 0) return fail("cannot set the mode of {}: {}", path, std::strerror(errno));
  return {};
}

int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// A pidfd polls readable once its process has ended.
bool pidfd_ended(int pidfd) {
  pollfd ready{pidfd, POLLIN, 0};
  int n = 0;
  do {
    n = poll(&ready, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n != 0;  // an error counts as ended: on_exit then reads the attempt's record
}

// The scheduler's decayed usage per user, in the settings table as JSON: {"as_of": unix
// seconds, "usage": {"alice": GPU-seconds, ...}}.
constexpr const char* kFairShareSetting = "fair_share_usage";
constexpr auto kFairShareSaveEvery = std::chrono::seconds(60);

std::string encode_fair_share(const FairShareUsage& saved) {
  return nlohmann::json{{"as_of", saved.as_of_s}, {"usage", saved.usage}}.dump();
}

Result<FairShareUsage> decode_fair_share(const std::string& text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, false);
  auto as_of = json.is_object() ? json.find("as_of") : json.end();
  auto usage = json.is_object() ? json.find("usage") : json.end();
  if (as_of == json.end() || !as_of->is_number() || usage == json.end() || !usage->is_object()) {
    return fail("expected {{\"as_of\": seconds, \"usage\": {{user: GPU-seconds}}}}");
  }
  FairShareUsage saved{as_of->get<double>(), {}};
  for (const auto& [user, value] : usage->items()) {
    if (!value.is_number()) return fail("the usage of {} is not a number", user);
    saved.usage[user] = value.get<double>();
  }
  return saved;
}

// Asio opens its sockets inheritable; a supervisor must not carry the daemon's sockets.
void keep_from_children(int fd) { fcntl(fd, F_SETFD, FD_CLOEXEC); }

// Two cover the common case of one job ending and the next starting, and a second start in the
// same moment; a burst beyond that starts supervisors on demand.
constexpr size_t kStandbySupervisors = 2;

// How stale the monitor's view of the queue (/api/jobs, the dashboard, top) may be.
constexpr auto kPublishEvery = std::chrono::milliseconds(100);

// How soon a finished attempt's cgroup that is still in use is looked at again: the pause
// doubles up to the last, then stays there for as long as any such group is left (a job's end
// removes only its own group, so nothing else would come back for one whose straggler outlived
// the first pauses).
constexpr auto kFirstGroupSweepPause = std::chrono::milliseconds(50);
constexpr auto kLastGroupSweepPause = std::chrono::seconds(10);

// Connections one user (root aside) may hold open: each `run`, `launch`, `wait` or Python
// acquire() holds one while it waits. Without a cap, one user could take every descriptor the
// daemon has (then it cannot start jobs) and up to a message's worth of memory per connection.
constexpr unsigned kMaxConnectionsPerUser = 512;

JobRequest scheduler_request(const Job& job) {
  return JobRequest{job.id, job.owner.user, job.spec.gpu_count, job.spec.slice_mib, job.spec.priority,
                    job.spec.time_limit_s, job.spec.allowed_gpus, job.spec.excluded_gpus};
}

// How an attempt (batch) or a lease (interactive) ended.
struct Outcome {
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string reason;
  bool cancelled = false;
};

// How jobs are kept from the GPUs they do not lease, said in one line at start; nullopt: they
// are not. An error only where the configuration requires isolation and it cannot be had.
Result<std::optional<DeviceIsolation>> set_up_device_isolation(DeviceIsolationMode mode, const Machine& machine,
                                                               const std::string& state_dir, CgroupFiles& files) {
  if (mode == DeviceIsolationMode::Off) {
    fmt::print(stderr, "gpupoold: device isolation off (device_isolation = \"off\")\n");
    return std::optional<DeviceIsolation>();
  }
  auto found = [&]() -> Result<DeviceIsolation> {
    // Every GPU's minor number, to probe with and to prove that each job's rules can be written.
    TRY_ASSIGN(std::vector<unsigned> every_gpu, denied_minors(machine, {}));
    std::error_code ignored;
    std::filesystem::path canonical = std::filesystem::canonical(state_dir, ignored);
    return find_device_isolation(HostFiles(), files,
                                 isolation_group_name(canonical.empty() ? state_dir : canonical.string()),
                                 every_gpu);
  }();
  if (!found) {
    if (mode == DeviceIsolationMode::On) {
      return fail("device_isolation = \"on\", but jobs cannot be kept from other GPUs' device nodes: {}",
                  found.error().message);
    }
    fmt::print(stderr, "gpupoold: device isolation off: {}\n", found.error().message);
    return std::optional<DeviceIsolation>();
  }
  fmt::print(stderr, "gpupoold: device isolation: {} (job cgroups in {})\n",
             found->mechanism == IsolationMechanism::CgroupV1 ? "cgroup v1 devices controller"
                                                              : "cgroup v2 eBPF device filter",
             found->base);
  return std::optional<DeviceIsolation>(std::move(*found));
}

}  // namespace

std::string default_state_dir() {
  if (const char* dir = std::getenv("GPUPOOL_STATE_DIR"); dir != nullptr && *dir != '\0') return dir;
  // A Slurm job's daemon keeps its queue with the job: it ends with the allocation.
  if (auto job = LeaseDirectory::slurm_job_directory()) return *job + "/state";
  if (geteuid() == 0) return "/var/lib/gpupool";
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/gpupool";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/tmp") + "/.local/state/gpupool";
}

class Daemon::Impl {
 public:
  Impl(DaemonSettings settings, JobStore store, LeaseDirectory leases, std::unique_ptr<GpuBackend> backend,
       Machine machine, Scheduler scheduler)
      : settings_(std::move(settings)),
        store_(std::move(store)),
        leases_(std::move(leases)),
        backend_(std::move(backend)),
        machine_(std::move(machine)),
        scheduler_(std::move(scheduler)),
        acceptor_(io_),
        signals_(io_, SIGTERM, SIGINT),
        service_manager_(ServiceManager::from_environment()) {}
  // A start-up step after open_socket() may fail: its socket must not outlive it, or clients
  // would be refused by a daemon that is not there instead of told that none runs.
  ~Impl() { stop_listening(); }

  Result<void> open_socket();
  Result<void> watch_end_with();
  Result<void> isolate_devices();
  Result<void> open_monitor(UsageStore usage);
  Result<void> recover();
  Result<void> run();

 private:
  void stop_listening();
  struct Session : std::enable_shared_from_this<Session> {
    explicit Session(stream_protocol::socket s) : socket(std::move(s)), input(proto::kMaxMessageBytes) {}
    ~Session() {
      if (connections != nullptr) --*connections;
    }
    unsigned* connections = nullptr;  // its user's count of open connections, when one is kept
    stream_protocol::socket socket;
    asio::streambuf input;
    PeerCredentials peer;
    JobOwner owner;
    bool greeted = false;
    bool admin = false;
    bool closing = false;
    std::optional<JobNumber> lease_job;  // an interactive job this connection waits for or holds
    bool granted = false;
    std::set<JobNumber> waiting_for;     // a `wait` in progress
    std::vector<JobNumber> wait_ids;
    struct Outgoing {
      std::string line;
      std::vector<int> descriptors;  // owned copies, closed once sent
    };
    std::deque<Outgoing> outbox;
    bool writing = false;
  };
  using SessionPtr = std::shared_ptr<Session>;

  // sessions and messages
  void accept();
  void read(const SessionPtr& session);
  void handle_line(const SessionPtr& session, const std::string& line);
  void send(const SessionPtr& session, const proto::Response& response, std::vector<int> descriptors = {});
  void flush(const SessionPtr& session);
  void close(const SessionPtr& session);
  void on_disconnect(const SessionPtr& session);
  void handle(const SessionPtr& s, const proto::SubmitRequest& r);
  void handle(const SessionPtr& s, const proto::JobsRequest& r);
  void handle(const SessionPtr& s, const proto::ShowRequest& r);
  void handle(const SessionPtr& s, const proto::JobActionRequest& r);
  void handle(const SessionPtr& s, const proto::WaitRequest& r);
  void handle(const SessionPtr& s, const proto::LogsRequest& r);
  void handle(const SessionPtr& s, const proto::AdminRequest& r);
  void handle(const SessionPtr& s, const proto::StatusRequest& r);
  void handle(const SessionPtr& s, const proto::LeaseRequest& r);
  void handle(const SessionPtr& s, const proto::FinishedRequest& r);
  void handle(const SessionPtr& s, const proto::ReportRequest& r);
  void commit_submissions();

  // jobs
  Result<Job> admit(const SessionPtr& session, const proto::SubmitRequest& request, JobKind kind);
  Result<std::optional<Job>> find_job(JobNumber id) const;
  size_t waiting_jobs_of(uid_t uid) const;
  bool may_act_on(const Session& session, const Job& job) const;
  Job for_client(Job job, const Session& session) const;
  void enqueue(JobNumber id);
  void dispatch();
  void start(const JobStart& start);
  void start_batch(Job& job, HeldLeases held, StandbySupervisor supervisor);
  Result<StandbySupervisor> take_standby();
  void replenish_standbys();
  void start_interactive(Job& job, HeldLeases held);
  void watch(JobNumber id, pid_t pid);
  void await_exit(JobNumber id);
  void on_exit(JobNumber id);
  std::set<std::string> running_batch_groups() const;
  void remove_finished_groups();
  void remove_ended_group(const std::string& name);
  void sweep_groups_after(std::chrono::milliseconds pause);
  void complete(JobNumber id, const Outcome& outcome);
  void finalize(Job& job, JobState state, std::string reason);
  void job_finished(const Job& job);
  void answer_wait(const SessionPtr& session);
  std::optional<std::string> cancel(Job& job, const std::string& by);
  void wait_for_signal();
  void end_session(const std::string& by);
  void stop_once_idle();
  void save(const Job& job);
  std::string record_path(const Job& job) const;
  void fill_log_paths(Job& job) const;

  // sampling and monitoring (the monitor's thread reads NVML; docs/monitoring.md)
  void schedule_sample(std::chrono::milliseconds delay);
  void on_sample(const Machine& machine);
  void publish();

  // The service manager (systemd, Type=notify): readiness, status line, watchdog, stopping.
  void tell_service_manager(const std::string& state);
  void pet_watchdog_periodically();

  // Fair share outlives a restart: saved every minute and at shutdown, taken up in recover().
  void restore_fair_share();
  void save_fair_share();
  void save_fair_share_periodically();

  DaemonSettings settings_;
  JobStore store_;
  LeaseDirectory leases_;
  std::unique_ptr<GpuBackend> backend_;
  Machine machine_;
  Scheduler scheduler_;
  std::unique_ptr<CgroupFiles> cgroup_files_ = system_cgroup_files();
  std::optional<DeviceIsolation> isolation_;  // none: jobs may open every GPU's device node
  HostFiles host_;
  // Open connections per user, root's not counted. Before io_: the sessions that io_'s handlers
  // hold count themselves out of it when io_ goes.
  std::map<uid_t, unsigned> connections_;
  asio::io_context io_;
  stream_protocol::acceptor acceptor_;
  asio::signal_set signals_;
  std::optional<gid_t> admin_gid_;
  bool drained_ = false;
  bool ending_ = false;  // end_session(): stopping once the cancelled jobs have ended
  std::optional<asio::posix::stream_descriptor> end_with_;  // a pidfd of settings_.end_with
  std::string socket_path_;
  bool socket_bound_ = false;  // socket_path_ is this daemon's, to remove when it stops
  int instance_lock_ = -1;

  std::vector<std::pair<SessionPtr, Job>> pending_submissions_;  // admitted, not yet stored
  std::map<JobNumber, Job> active_;                 // queued, held and running jobs
  std::set<JobNumber> in_scheduler_;                // queued jobs the scheduler knows
  std::set<JobNumber> cancel_requested_;
  std::map<JobNumber, std::vector<JobNumber>> dependents_;  // job → jobs waiting for it
  std::unordered_map<JobNumber, std::unique_ptr<asio::posix::stream_descriptor>> watchers_;
  std::unordered_map<JobNumber, SessionPtr> lease_sessions_;
  // Supervisors started ahead of need, so a dispatch does not wait for a process to start.
  std::vector<StandbySupervisor> standbys_;
  bool replenish_pending_ = false;
  std::map<JobNumber, std::vector<std::weak_ptr<Session>>> waiters_;
  bool publish_pending_ = false;
  asio::steady_timer publish_timer_{io_};
  asio::steady_timer group_sweep_timer_{io_};
  std::chrono::milliseconds group_sweep_pause_{0};
  asio::steady_timer fair_share_timer_{io_};
  ServiceManager service_manager_;
  bool service_manager_failing_ = false;
  asio::steady_timer watchdog_timer_{io_};
  std::string last_status_;
  // Last, so they stop first: the HTTP threads read the monitor, whose thread posts to io_.
  std::unique_ptr<Monitor> monitor_;
  std::unique_ptr<HttpServer> http_;
};

// ---------------------------------------------------------------------------------------------
// Start-up

Result<void> Daemon::Impl::open_socket() {
  // One daemon per state directory: the lock lives as long as this process.
  std::string lock_path = settings_.state_dir + "/gpupoold.lock";
  instance_lock_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (instance_lock_ < 0) return fail("cannot open {}: {}", lock_path, std::strerror(errno));
  if (flock(instance_lock_, LOCK_EX | LOCK_NB) != 0) {
    return fail("another gpupoold is running with state directory {}", settings_.state_dir);
  }
  socket_path_ = proto::socket_path(settings_.runtime_dir);
  struct stat st {};
  if (lstat(socket_path_.c_str(), &st) == 0) {
    // Left by a daemon that died, unless someone else planted it there.
    if (st.st_uid != geteuid()) {
      return fail("{} belongs to uid {}: remove it, it is not this daemon's", socket_path_, st.st_uid);
    }
    if (auto fd = connect_unix_socket(socket_path_)) {
      ::close(*fd);
      return fail("another gpupoold is listening on {}", socket_path_);
    }
    unlink(socket_path_.c_str());
  }
  asio::error_code error;
  acceptor_.open(stream_protocol(), error);
  if (!error) acceptor_.bind(stream_protocol::endpoint(socket_path_), error);
  socket_bound_ = !error;
  if (!error) acceptor_.listen(asio::socket_base::max_listen_connections, error);
  if (error) return fail("cannot listen on {}: {}", socket_path_, error.message());
  keep_from_children(acceptor_.native_handle());
  // A system daemon serves everyone (identity comes from the kernel, not the socket's mode);
  // a personal daemon only its own user.
  if (chmod(socket_path_.c_str(), geteuid() == 0 ? 0666 : 0600) != 0) {
    return fail("cannot set the mode of {}: {}", socket_path_, std::strerror(errno));
  }
  return {};
}

void Daemon::Impl::stop_listening() {
  asio::error_code ignored;  // also from the destructor, which must not throw
  acceptor_.close(ignored);
  if (socket_bound_) unlink(socket_path_.c_str());
  socket_bound_ = false;
}

Result<void> Daemon::Impl::isolate_devices() {
  TRY_ASSIGN(isolation_, set_up_device_isolation(settings_.config.device_isolation, machine_, settings_.state_dir,
                                                 *cgroup_files_));
  return {};
}

Result<void> Daemon::Impl::recover() {
  if (settings_.config.admin_group) {
    group entry{};
    group* found = nullptr;
    std::vector<char> buffer(16384);
    if (getgrnam_r(settings_.config.admin_group->c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
        found == nullptr) {
      return fail("admin_group '{}' does not exist", *settings_.config.admin_group);
    }
    admin_gid_ = found->gr_gid;
  }
  TRY_ASSIGN(auto drained, store_.setting("drained"));
  drained_ = drained && *drained == "1";
  TRY_ASSIGN(std::vector<Job> jobs, store_.unfinished());
  double now = unix_now();
  std::vector<JobNumber> queued;
  for (Job& job : jobs) {
    JobNumber id = job.id;
    active_[id] = job;
    Job& stored = active_[id];
    if (stored.state == JobState::Queued) queued.push_back(id);
    if (stored.state != JobState::Running) continue;
    if (stored.spec.kind == JobKind::Interactive) {
      bool alive = stored.pid && stored.pid_start_ticks &&
                   host_.process_start_ticks(static_cast<uint32_t>(*stored.pid)) == stored.pid_start_ticks;
      TRY(scheduler_.adopt(scheduler_request(stored), stored.gpus, stored.start_time.value_or(now)));
      if (alive) {
        watch(id, *stored.pid);
      } else {
        complete(id, Outcome{std::nullopt, std::nullopt, "exit status unknown: the daemon restarted while it ran", false});
      }
      continue;
    }
    TRY_ASSIGN(AttemptRecord record, read_attempt_record(record_path(stored)));
    if (record.progress == AttemptProgress::NeverStarted) {
      // The daemon died between recording the start and the supervisor starting the job: the
      // attempt is done again, under the same number, so its record must go.
      unlink(record_path(stored).c_str());
      stored.state = JobState::Queued;
      stored.attempts -= 1;
      stored.gpus.clear();
      stored.gpu_uuids.clear();
      stored.start_time.reset();
      stored.pid.reset();
      save(stored);
      queued.push_back(id);
      continue;
    }
    TRY(scheduler_.adopt(scheduler_request(stored), stored.gpus, stored.start_time.value_or(now)));
    if (record.progress == AttemptProgress::Running && record.supervisor_pid) {
      stored.pid = record.supervisor_pid;
      watch(id, *record.supervisor_pid);
    } else {
      on_exit(id);  // Exited or Lost: record it now
    }
  }
  restore_fair_share();  // after adoption: the adopted jobs add what they ran while it was down
  remove_finished_groups();  // also those of attempts that ended while no daemon ran
  for (JobNumber id : queued) enqueue(id);
  save_fair_share_periodically();
  return {};
}

Result<void> Daemon::Impl::run() {
  wait_for_signal();
  accept();
  monitor_->start();
  replenish_standbys();
  dispatch();
  fmt::print(stderr, "gpupoold: serving {} GPUs on {} (state in {})\n", machine_.gpus.size(), socket_path_,
             settings_.state_dir);
  // The socket accepts clients from here on: only now may systemd start the units ordered after us.
  tell_service_manager(fmt::format("READY=1\nSTATUS=serving {} GPUs on {}", machine_.gpus.size(), socket_path_));
  pet_watchdog_periodically();
  io_.run();
  http_.reset();
  monitor_->stop();
  monitor_->save_usage();
  save_fair_share();
  stop_listening();
  // Only once no job is left in it: the running jobs' cgroups keep it. The last ended job's may
  // still be waiting for its sweep.
  if (isolation_) {
    constexpr int kTries = 100;  // at most a second
    for (int i = 0; i < kTries && remove_stale_groups(*cgroup_files_, *isolation_, running_batch_groups()) > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    (void)cgroup_files_->remove_directory(isolation_->base);
  }
  fmt::print(stderr, "gpupoold: stopped; {} running jobs keep running\n", scheduler_.running());
  return {};
}

void Daemon::Impl::tell_service_manager(const std::string& state) {
  auto told = service_manager_.notify(state);
  // Said once per run of failures, not once per watchdog ping.
  if (!told && !service_manager_failing_) fmt::print(stderr, "gpupoold: {}\n", told.error().message);
  service_manager_failing_ = !told;
}

// From the event loop, so a hung loop stops the pings and the service manager restarts us.
void Daemon::Impl::pet_watchdog_periodically() {
  auto interval = service_manager_.watchdog_interval();
  if (!interval) return;
  tell_service_manager("WATCHDOG=1");
  watchdog_timer_.expires_after(*interval / 2);
  watchdog_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) pet_watchdog_periodically();
  });
}

void Daemon::Impl::restore_fair_share() {
  auto saved = store_.setting(kFairShareSetting);
  if (!saved || !*saved) {
    if (!saved) fmt::print(stderr, "gpupoold: cannot read the saved fair-share usage: {}\n", saved.error().message);
    return;
  }
  auto decoded = decode_fair_share(**saved);
  Result<void> restored = decoded ? scheduler_.import_fair_share(*decoded, unix_now()) : Result<void>(decoded.error());
  // Not worth refusing to start over: the queue works without it, only less fairly for a while.
  if (!restored) fmt::print(stderr, "gpupoold: ignoring the saved fair-share usage: {}\n", restored.error().message);
}

void Daemon::Impl::save_fair_share() {
  std::string encoded = encode_fair_share(scheduler_.export_fair_share(unix_now()));
  if (auto stored = store_.set_setting(kFairShareSetting, encoded); !stored) {
    fmt::print(stderr, "gpupoold: cannot save the fair-share usage: {}\n", stored.error().message);
  }
}

void Daemon::Impl::save_fair_share_periodically() {
  fair_share_timer_.expires_after(kFairShareSaveEvery);
  fair_share_timer_.async_wait([this](const asio::error_code& error) {
    if (error) return;
    save_fair_share();
    save_fair_share_periodically();
  });
}

// ---------------------------------------------------------------------------------------------
// Sessions

void Daemon::Impl::accept() {
  acceptor_.async_accept([this](const asio::error_code& error, stream_protocol::socket socket) {
    if (error) {
      if (error != asio::error::operation_aborted) accept();
      return;
    }
    keep_from_children(socket.native_handle());
    auto session = std::make_shared<Session>(std::move(socket));
    auto peer = peer_credentials(session->socket.native_handle());
    if (peer) {
      session->peer = *peer;
      session->owner.uid = peer->uid;
      session->owner.gid = peer->gid;
      session->owner.user = user_name(peer->uid);
      session->owner.groups = process_groups(host_, peer->pid, session->owner.user, peer->gid);
      session->admin = peer->uid == 0 || (admin_gid_ && (peer->gid == *admin_gid_ ||
                                                         std::find(session->owner.groups.begin(),
                                                                   session->owner.groups.end(),
                                                                   *admin_gid_) != session->owner.groups.end()));
      if (peer->uid != 0 && connections_[peer->uid] >= kMaxConnectionsPerUser) {
        send(session, proto::ErrorResponse{fmt::format("user {} already has {} connections open to gpupoold",
                                                       session->owner.user, kMaxConnectionsPerUser)});
        session->closing = true;
        flush(session);
      } else {
        if (peer->uid != 0) session->connections = &++connections_[peer->uid];
        read(session);
      }
    }
    accept();
  });
}

void Daemon::Impl::read(const SessionPtr& session) {
  asio::async_read_until(session->socket, session->input, '\n',
                         [this, session](const asio::error_code& error, size_t length) {
                           if (error) {
                             if (error == asio::error::not_found) {
                               send(session, proto::ErrorResponse{fmt::format(
                                                 "bad request: longer than {} bytes", proto::kMaxMessageBytes)});
                               session->closing = true;
                               flush(session);
                             }
                             on_disconnect(session);
                             return;
                           }
                           std::string line(asio::buffers_begin(session->input.data()),
                                            asio::buffers_begin(session->input.data()) +
                                                static_cast<std::ptrdiff_t>(length - 1));
                           session->input.consume(length);
                           handle_line(session, line);
                           if (!session->closing) read(session);
                         });
}

void Daemon::Impl::handle_line(const SessionPtr& session, const std::string& line) {
  if (!session->greeted) {
    auto hello = proto::parse_hello(line);
    if (!hello) {
      send(session, proto::ErrorResponse{hello.error().message});
    } else if (hello->protocol != proto::kVersion) {
      send(session, proto::ErrorResponse{fmt::format("protocol {} is not supported: this gpupoold speaks {}",
                                                     hello->protocol, proto::kVersion)});
    } else {
      session->greeted = true;
      std::string reply = proto::encode(
          proto::Hello{proto::kVersion, std::string("gpupoold ") + GPUPOOL_VERSION, session->owner.user});
      session->outbox.push_back({std::move(reply), {}});
      flush(session);
      return;
    }
    session->closing = true;
    flush(session);
    return;
  }
  auto request = proto::parse_request(line);
  if (!request) {
    // A malformed message says nothing trustworthy about what else the client will send.
    send(session, proto::ErrorResponse{request.error().message});
    session->closing = true;
    flush(session);
    return;
  }
  std::visit([&](const auto& r) { handle(session, r); }, *request);
  dispatch();
}

void Daemon::Impl::send(const SessionPtr& session, const proto::Response& response, std::vector<int> descriptors) {
  session->outbox.push_back({proto::encode(response), std::move(descriptors)});
  flush(session);
}

void Daemon::Impl::flush(const SessionPtr& session) {
  if (session->writing) return;
  while (!session->outbox.empty() && !session->outbox.front().descriptors.empty()) {
    // Descriptors go with sendmsg; the line is short and the client is waiting for it.
    Session::Outgoing& out = session->outbox.front();
    auto sent = send_line(session->socket.native_handle(), out.line, out.descriptors);
    for (int fd : out.descriptors) ::close(fd);
    session->outbox.pop_front();
    if (!sent) {
      close(session);
      return;
    }
  }
  if (session->outbox.empty()) {
    if (session->closing) close(session);
    return;
  }
  session->writing = true;
  session->outbox.front().line += '\n';
  asio::async_write(session->socket, asio::buffer(session->outbox.front().line),
                    [this, session](const asio::error_code& error, size_t) {
                      session->writing = false;
                      session->outbox.pop_front();
                      if (error) {
                        close(session);
                        return;
                      }
                      flush(session);
                    });
}

void Daemon::Impl::close(const SessionPtr& session) {
  for (auto& out : session->outbox) {
    for (int fd : out.descriptors) ::close(fd);
  }
  // A line being written stays until its handler pops it: the write reads from it. (Clearing it
  // too crashed the daemon on a client's oversized line, whose error reply is then in flight.)
  session->outbox.erase(session->outbox.begin() + (session->writing ? 1 : 0), session->outbox.end());
  asio::error_code ignored;
  session->socket.shutdown(asio::socket_base::shutdown_both, ignored);
  session->socket.close(ignored);
}

void Daemon::Impl::on_disconnect(const SessionPtr& session) {
  close(session);
  if (!session->lease_job) return;
  JobNumber id = *session->lease_job;
  session->lease_job.reset();
  lease_sessions_.erase(id);
  auto it = active_.find(id);
  if (it == active_.end()) return;
  if (it->second.state == JobState::Running) {
    // The client went away without reporting: its program may live on and keep the lease
    // (the locks say so at the next sample), but the job as the queue knows it is over.
    complete(id, Outcome{std::nullopt, std::nullopt, "exit status unknown: the client disconnected", false});
  } else {
    cancel(it->second, "its client, which disconnected");
  }
  dispatch();
}

// ---------------------------------------------------------------------------------------------
// Requests

Result<Job> Daemon::Impl::admit(const SessionPtr& session, const proto::SubmitRequest& request, JobKind kind) {
  Job job;
  job.spec = request.spec;
  job.spec.kind = kind;
  job.owner = session->owner;
  if (geteuid() != 0 && job.owner.uid != geteuid()) {
    return fail("this gpupoold runs as {} and can only run {}'s jobs", user_name(geteuid()), user_name(geteuid()));
  }
  if (job.spec.priority > 0 && !session->admin) {
    return fail("only an administrator may submit with a priority above 0");
  }
  if (!job.spec.time_limit_s) job.spec.time_limit_s = settings_.config.default_time_limit_s;
  if (job.spec.time_limit_s && settings_.config.max_time_limit_s &&
      *job.spec.time_limit_s > *settings_.config.max_time_limit_s) {
    return fail("time limit {} s is above this machine's maximum of {} s", *job.spec.time_limit_s,
                *settings_.config.max_time_limit_s);
  }
  if (size_t waiting = waiting_jobs_of(job.owner.uid); waiting >= settings_.config.max_queued_jobs_per_user) {
    return fail("user {} already has {} jobs queued (max_queued_jobs_per_user = {})", job.owner.user, waiting,
                settings_.config.max_queued_jobs_per_user);
  }
  // Refused now, rather than stored to fail or wait for ever: more GPUs than the machine, the
  // user's quota or its --gpus/--exclude can ever give it.
  if (auto admissible = scheduler_.admissible(scheduler_request(job)); !admissible) {
    return fail("this job {}", admissible.error().message);
  }
  for (JobNumber after : job.spec.after) {
    TRY_ASSIGN(auto found, find_job(after));
    if (!found) return fail("job {} (in --after) does not exist", after);
  }
  job.submit_time = unix_now();
  return job;
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::SubmitRequest& r) {
  auto admitted = admit(s, r, JobKind::Batch);
  if (!admitted) return send(s, proto::ErrorResponse{admitted.error().message});
  if (r.hold) {
    // Stored held: no window in which it could start before the hold.
    admitted->state = JobState::Held;
    admitted->reason = fmt::format("held by {}", s->owner.user);
  }
  // Group commit: the submissions that arrive while the loop is busy share one sync to disk.
  pending_submissions_.emplace_back(s, std::move(*admitted));
  if (pending_submissions_.size() == 1) asio::post(io_, [this] { commit_submissions(); });
}

void Daemon::Impl::commit_submissions() {
  auto pending = std::move(pending_submissions_);
  pending_submissions_.clear();
  std::vector<Job> jobs;
  for (auto& [session, job] : pending) jobs.push_back(job);
  auto ids = store_.insert_all(jobs);  // durable before the clients hear their ids
  for (size_t i = 0; i < pending.size(); ++i) {
    auto& [session, job] = pending[i];
    if (!ids) {
      send(session, proto::ErrorResponse{ids.error().message});
      continue;
    }
    job.id = (*ids)[i];
    fill_log_paths(job);
    active_[job.id] = job;
    enqueue(job.id);
    send(session, proto::SubmitResponse{job.id});
  }
  dispatch();
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::LeaseRequest& r) {
  if (s->lease_job) return send(s, proto::ErrorResponse{"this connection already has a lease request"});
  proto::SubmitRequest submitted{r.spec};
  submitted.spec.allowed_gpus = r.allowed;
  submitted.spec.excluded_gpus = r.excluded;
  auto admitted = admit(s, submitted, JobKind::Interactive);
  if (!admitted) return send(s, proto::ErrorResponse{admitted.error().message});
  Job job = std::move(*admitted);
  job.pid = s->peer.pid;
  job.pid_start_ticks = host_.process_start_ticks(static_cast<uint32_t>(s->peer.pid));
  auto id = store_.insert(job);
  if (!id) return send(s, proto::ErrorResponse{id.error().message});
  job.id = *id;
  active_[job.id] = job;
  s->lease_job = job.id;
  lease_sessions_[job.id] = s;
  enqueue(job.id);
  dispatch();
  Job& queued = active_[job.id];
  if (queued.state == JobState::Queued || queued.state == JobState::Held) {
    std::string reason = queued.reason.empty() ? scheduler_.waiting_reason(job.id) : queued.reason;
    send(s, proto::LeaseQueued{job.id, reason});
  }
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::FinishedRequest& r) {
  if (!s->lease_job || !s->granted) return send(s, proto::ErrorResponse{"no lease was granted on this connection"});
  JobNumber id = *s->lease_job;
  s->lease_job.reset();
  lease_sessions_.erase(id);
  complete(id, Outcome{r.exit_code, r.signal, "", false});
  send(s, proto::Ack{});
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::JobsRequest& r) {
  // One page: the client asks for the next after the last job of this one. The store leaves
  // the environments out (listings stay small; `show` gives the owner everything).
  JobFilter filter;
  filter.include_finished = r.all;
  filter.user = r.user;
  filter.state = r.state;
  filter.after_id = r.after_id;
  filter.limit = size_t{r.limit} + 1;  // the one past the page says whether more remain
  size_t listed = 0;
  {
    auto jobs = store_.list(filter);
    if (!jobs) return send(s, proto::ErrorResponse{jobs.error().message});
    listed = jobs->size();
    proto::JobsResponse response;
    size_t bytes = 0;
    for (Job& job : *jobs) {
      if (response.jobs.size() == r.limit) {
        response.more = true;
        break;
      }
      Job shown = for_client(std::move(job), *s);
      bytes += proto::encoded_size(shown);
      // Long commands could make a full page too long for one message: end it sooner. (64:
      // room for what the answer holds besides its jobs, `{"jobs":[` and `],"more":true,"ok":true}`.)
      if (!response.jobs.empty() && bytes > proto::kMaxMessageBytes - 64) {
        response.more = true;
        break;
      }
      response.jobs.push_back(std::move(shown));
    }
    send(s, response);
  }
  // Give what the page took back to the system, rather than keep the peak of the largest
  // listing for the daemon's lifetime.
  if (listed > 100) malloc_trim(0);
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::ShowRequest& r) {
  auto job = find_job(r.id);
  if (!job) return send(s, proto::ErrorResponse{job.error().message});
  if (!*job) return send(s, proto::ErrorResponse{fmt::format("no job {}", r.id)});
  send(s, proto::JobsResponse{{for_client(std::move(**job), *s)}});
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::LogsRequest& r) {
  auto job = find_job(r.id);
  if (!job) return send(s, proto::ErrorResponse{job.error().message});
  if (!*job) return send(s, proto::ErrorResponse{fmt::format("no job {}", r.id)});
  if (!may_act_on(*s, **job)) {
    return send(s, proto::ErrorResponse{fmt::format("job {} belongs to {}: only they may read its logs", r.id,
                                                    (*job)->owner.user)});
  }
  if ((*job)->spec.kind != JobKind::Batch) {
    return send(s, proto::ErrorResponse{fmt::format("job {} ran in its user's terminal: it has no logs", r.id)});
  }
  Job shown = for_client(std::move(**job), *s);
  if (!r.open) return send(s, proto::JobsResponse{{std::move(shown)}});
  // The daemon opens the log for the client, who may not be able to (an administrator reading
  // another user's, which is theirs alone). The job's user owns the file: O_NOFOLLOW, the type
  // check and O_NONBLOCK (a FIFO would block the open) keep them from passing off a link to a
  // file only root may read, or a device, as their log.
  const std::string& path = *r.open == proto::LogStream::Stderr ? shown.stderr_path : shown.stdout_path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0 && errno == ENOENT) return send(s, proto::JobsResponse{{std::move(shown)}, false, 0u});
  if (fd < 0 && errno != ELOOP) {
    return send(s, proto::ErrorResponse{fmt::format("cannot open {}: {}", path, std::strerror(errno))});
  }
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // ELOOP: a symbolic link
    if (fd >= 0) ::close(fd);
    return send(s, proto::ErrorResponse{fmt::format("{} is not a regular file: not reading it", path)});
  }
  send(s, proto::JobsResponse{{std::move(shown)}, false, 1u}, {fd});
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::JobActionRequest& r) {
  proto::JobActionResponse response;
  for (JobNumber id : r.ids) {
    proto::ActionOutcome outcome{id, std::nullopt, std::nullopt};
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto stored = find_job(id);
      if (!stored) {
        outcome.error = stored.error().message;
      } else if (!*stored) {
        outcome.error = fmt::format("no job {}", id);
      } else {
        outcome.error = fmt::format("job {} has already {}", id, to_string((*stored)->state));
        outcome.state = (*stored)->state;
      }
      response.outcomes.push_back(outcome);
      continue;
    }
    Job& job = it->second;
    if (!may_act_on(*s, job)) {
      outcome.error = fmt::format("job {} belongs to {}: only they or an administrator may change it", id,
                                  job.owner.user);
      outcome.state = job.state;
      response.outcomes.push_back(outcome);
      continue;
    }
    switch (r.action) {
      case proto::JobAction::Cancel:
        outcome.error = cancel(job, s->owner.user);
        break;
      case proto::JobAction::Hold:
        if (job.state == JobState::Running) {
          outcome.error = fmt::format("job {} is running: cancel it instead", id);
        } else if (job.state == JobState::Queued) {
          if (in_scheduler_.erase(id) > 0) (void)scheduler_.remove(id);
          job.state = JobState::Held;
          job.reason = fmt::format("held by {}", s->owner.user);
          save(job);
        }
        break;
      case proto::JobAction::Release:
        if (job.state == JobState::Held) {
          job.state = JobState::Queued;
          job.reason.clear();
          save(job);
          enqueue(id);
        } else {
          outcome.error = fmt::format("job {} is not held", id);
        }
        break;
    }
    auto after = active_.find(id);
    outcome.state = after != active_.end() ? after->second.state : JobState::Cancelled;
    response.outcomes.push_back(outcome);
  }
  send(s, response);
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::WaitRequest& r) {
  s->waiting_for.clear();
  s->wait_ids = r.ids;
  for (JobNumber id : r.ids) {
    auto job = find_job(id);
    if (!job) return send(s, proto::ErrorResponse{job.error().message});
    if (!*job) return send(s, proto::ErrorResponse{fmt::format("no job {}", id)});
    if (!is_finished((*job)->state)) {
      s->waiting_for.insert(id);
      waiters_[id].push_back(s);
    }
  }
  if (s->waiting_for.empty()) answer_wait(s);
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::AdminRequest& r) {
  if (!s->admin) return send(s, proto::ErrorResponse{"only root or the admin group may drain or resume"});
  drained_ = r.action == proto::AdminAction::Drain;
  auto stored = store_.set_setting("drained", drained_ ? "1" : "0");
  if (!stored) return send(s, proto::ErrorResponse{stored.error().message});
  send(s, proto::Ack{});
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::StatusRequest&) {
  proto::StatusResponse status;
  status.software = std::string("gpupoold ") + GPUPOOL_VERSION;
  status.pid = getpid();
  status.drained = drained_;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string simulated = backend_->simulated_machine();
  status.machine = simulated.empty() ? std::string(host) : fmt::format("{} (simulated {})", host, simulated);
  status.gpus = static_cast<unsigned>(machine_.gpus.size());
  for (const auto& [id, job] : active_) {
    if (job.state == JobState::Queued) ++status.queued;
    if (job.state == JobState::Held) ++status.held;
    if (job.state == JobState::Running) ++status.running;
  }
  status.samples = monitor_->samples_surveyed();
  send(s, status);
}

// ---------------------------------------------------------------------------------------------
// Jobs

Result<std::optional<Job>> Daemon::Impl::find_job(JobNumber id) const {
  if (auto it = active_.find(id); it != active_.end()) return std::optional<Job>(it->second);
  TRY_ASSIGN(std::optional<Job> stored, store_.get(id));
  if (stored) fill_log_paths(*stored);
  return stored;
}

// Queued and held, submitted but not yet stored included. A walk over the active jobs (the limit
// bounds them too), simpler than keeping a count right through every change of state.
size_t Daemon::Impl::waiting_jobs_of(uid_t uid) const {
  auto waiting = [uid](const Job& job) {
    return job.owner.uid == uid && (job.state == JobState::Queued || job.state == JobState::Held);
  };
  size_t count = 0;
  for (const auto& [id, job] : active_) count += waiting(job) ? 1 : 0;
  for (const auto& [session, job] : pending_submissions_) count += waiting(job) ? 1 : 0;
  return count;
}

bool Daemon::Impl::may_act_on(const Session& session, const Job& job) const {
  return session.admin || session.owner.uid == job.owner.uid;
}

Job Daemon::Impl::for_client(Job job, const Session& session) const {
  // Another user's environment may hold their secrets.
  if (!may_act_on(session, job)) job.spec.environment.clear();
  fill_log_paths(job);
  if (job.state == JobState::Queued && job.reason.empty()) job.reason = scheduler_.waiting_reason(job.id);
  return job;
}

void Daemon::Impl::fill_log_paths(Job& job) const {
  if (job.spec.kind != JobKind::Batch || job.id == 0) return;
  job.stdout_path = fmt::format("{}/logs/{}.out", settings_.state_dir, job.id);
  job.stderr_path = fmt::format("{}/logs/{}.err", settings_.state_dir, job.id);
}

std::string Daemon::Impl::record_path(const Job& job) const {
  return fmt::format("{}/attempts/{}.{}", settings_.state_dir, job.id, job.attempts);
}

void Daemon::Impl::save(const Job& job) {
  if (auto saved = store_.update(job); !saved) {
    fmt::print(stderr, "gpupoold: cannot save job {}: {}\n", job.id, saved.error().message);
  }
}

// Puts a queued job in the scheduler once the jobs it runs after are done.
void Daemon::Impl::enqueue(JobNumber id) {
  Job& job = active_.at(id);
  if (job.state != JobState::Queued || in_scheduler_.count(id) > 0) return;
  for (JobNumber after : job.spec.after) {
    auto found = find_job(after);
    if (!found || !*found) {
      finalize(job, JobState::Failed, fmt::format("job {}, which it runs after, cannot be found", after));
      return;
    }
    JobState state = (*found)->state;
    if (state == JobState::Done) continue;
    if (is_finished(state)) {
      finalize(job, JobState::Failed, fmt::format("job {}, which it runs after, {}", after, to_string(state)));
      return;
    }
    job.reason = fmt::format("waiting for job {}", after);
    auto& list = dependents_[after];
    if (std::find(list.begin(), list.end(), id) == list.end()) list.push_back(id);
    return;
  }
  if (auto submitted = scheduler_.submit(scheduler_request(job), unix_now()); !submitted) {
    finalize(job, JobState::Failed, submitted.error().message);
    return;
  }
  job.reason.clear();
  in_scheduler_.insert(id);
}

void Daemon::Impl::dispatch() {
  publish();
  if (drained_) return;
  for (const JobStart& start_decision : scheduler_.schedule(unix_now())) {
    auto began = std::chrono::steady_clock::now();
    start(start_decision);
    monitor_->observe_dispatch(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
}

void Daemon::Impl::start(const JobStart& decision) {
  in_scheduler_.erase(decision.id);
  Job& job = active_.at(decision.id);
  std::string holder_name = fmt::format("job-{}", job.id);
  // A batch job's leases name its supervisor from the start; a run's, its client.
  std::optional<StandbySupervisor> supervisor;
  if (job.spec.kind == JobKind::Batch) {
    auto standby = take_standby();
    if (!standby) {
      complete(job.id, Outcome{std::nullopt, std::nullopt, "could not start: " + standby.error().message, false});
      return;
    }
    supervisor = std::move(*standby);
  }
  pid_t holder_pid = supervisor ? supervisor->pid() : job.pid ? *job.pid : getpid();
  LeaseHolder holder{holder_pid, job.owner.user, holder_name, static_cast<int64_t>(unix_now())};
  auto held = leases_.try_acquire(claims_for(machine_, decision.gpus, job.spec.slice_mib), holder);
  if (!held || !*held) {
    if (supervisor) standbys_.push_back(std::move(*supervisor));
    // Someone outside the daemon took one of the GPUs since the last sample: look again soon.
    (void)scheduler_.requeue(job.id, unix_now());
    in_scheduler_.insert(job.id);
    if (!held) fmt::print(stderr, "gpupoold: job {}: {}\n", job.id, held.error().message);
    schedule_sample(std::chrono::milliseconds(50));
    return;
  }
  job.state = JobState::Running;
  job.gpus = decision.gpus;
  job.gpu_uuids.clear();
  for (unsigned index : decision.gpus) job.gpu_uuids.push_back(machine_.gpus.at(index).uuid);
  job.start_time = unix_now();
  job.end_time.reset();
  job.exit_code.reset();
  job.signal.reset();
  job.reason.clear();
  if (supervisor) {
    start_batch(job, std::move(**held), std::move(*supervisor));
  } else {
    start_interactive(job, std::move(**held));
  }
}

void Daemon::Impl::start_batch(Job& job, HeldLeases held, StandbySupervisor supervisor) {
  job.attempts += 1;
  job.pid = supervisor.pid();
  job.pid_start_ticks = host_.process_start_ticks(static_cast<uint32_t>(supervisor.pid()));
  save(job);  // "running, attempt N, this supervisor" is stored before the attempt can begin
  SupervisedAttempt attempt;
  attempt.id = job.id;
  attempt.attempt = job.attempts;
  attempt.uid = job.owner.uid;
  attempt.gid = job.owner.gid;
  attempt.groups = job.owner.groups;
  attempt.argv = job.spec.argv;
  attempt.environment = with_overrides(
      job.spec.environment, gpu_environment(machine_, job.gpus, std::to_string(job.id), job.spec.slice_mib));
  attempt.cwd = job.spec.cwd;
  attempt.umask = job.spec.umask;
  fill_log_paths(job);
  attempt.stdout_path = job.stdout_path;
  attempt.stderr_path = job.stderr_path;
  attempt.time_limit_s = job.spec.time_limit_s;
  attempt.kill_grace_s = settings_.config.kill_grace_s;
  attempt.record_path = record_path(job);
  if (isolation_) {
    auto minors = denied_minors(machine_, job.gpus);  // every GPU's minor number was there at start
    if (!minors) {
      held.release();
      complete(job.id, Outcome{std::nullopt, std::nullopt, "could not start: " + minors.error().message, false});
      return;
    }
    attempt.isolation = AttemptIsolation{isolation_->mechanism,
                                         isolation_->base + "/" + attempt_group_name(job.id, job.attempts),
                                         std::move(*minors),
                                         settings_.config.device_isolation == DeviceIsolationMode::On};
  }
  if (auto handed = supervisor.hand(attempt, held.descriptors()); !handed) {
    held.release();
    complete(job.id, Outcome{std::nullopt, std::nullopt, "could not start: " + handed.error().message, false});
    return;
  }
  held.hand_over();
  watch(job.id, supervisor.pid());
}

// A standby, or a new supervisor when none is left (a burst of starts).
Result<StandbySupervisor> Daemon::Impl::take_standby() {
  if (!replenish_pending_) {
    replenish_pending_ = true;
    asio::post(io_, [this] { replenish_standbys(); });  // after the current dispatch, not in it
  }
  if (standbys_.empty()) return StandbySupervisor::spawn(settings_.supervisor_program);
  StandbySupervisor standby = std::move(standbys_.back());
  standbys_.pop_back();
  return standby;
}

void Daemon::Impl::replenish_standbys() {
  replenish_pending_ = false;
  while (standbys_.size() < kStandbySupervisors) {
    auto spawned = StandbySupervisor::spawn(settings_.supervisor_program);
    if (!spawned) {
      fmt::print(stderr, "gpupoold: {}\n", spawned.error().message);
      return;  // the next start tries again, and reports the failure for its job
    }
    standbys_.push_back(std::move(*spawned));
  }
}



void Daemon::Impl::start_interactive(Job& job, HeldLeases held) {
  auto session = lease_sessions_.find(job.id);
  if (session == lease_sessions_.end()) {
    held.release();
    complete(job.id, Outcome{std::nullopt, std::nullopt, "its client disconnected", true});
    return;
  }
  std::vector<int> copies;
  for (int fd : held.descriptors()) copies.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 3));
  proto::LeaseGranted granted{job.id, job.gpus, job.gpu_uuids, job.spec.slice_mib,
                              static_cast<unsigned>(copies.size())};
  session->second->granted = true;
  send(session->second, granted, std::move(copies));
  held.hand_over();
  save(job);
  // The client's exit (or its message) ends the job; its pid is watched for after a restart.
}

void Daemon::Impl::watch(JobNumber id, pid_t pid) {
  int fd = pidfd_open(pid);
  if (fd < 0) {
    asio::post(io_, [this, id] { on_exit(id); });  // already gone
    return;
  }
  watchers_[id] = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  await_exit(id);
}

void Daemon::Impl::await_exit(JobNumber id) {
  watchers_.at(id)->async_wait(asio::posix::stream_descriptor::wait_read, [this, id](const asio::error_code& error) {
    if (error == asio::error::operation_aborted) return;
    // A wake-up alone does not prove the exit: epoll can hand this watcher the event of a socket
    // closed while a just-forked child still held a copy of it (Asio reuses its per-descriptor
    // state), so the pidfd itself is asked.
    auto watcher = watchers_.find(id);
    if (watcher != watchers_.end() && !pidfd_ended(watcher->second->native_handle())) {
      await_exit(id);
      return;
    }
    on_exit(id);
  });
}

void Daemon::Impl::on_exit(JobNumber id) {
  watchers_.erase(id);
  auto it = active_.find(id);
  if (it == active_.end() || it->second.state != JobState::Running) return;
  Job& job = it->second;
  if (job.spec.kind == JobKind::Interactive) {
    if (lease_sessions_.count(id) > 0) return;  // the connection reports for it
    complete(id, Outcome{std::nullopt, std::nullopt, "exit status unknown: the daemon restarted while it ran", false});
    dispatch();
    return;
  }
  if (job.pid) {
    int status = 0;
    waitpid(*job.pid, &status, WNOHANG);  // reap our own child; an adopted one is init's
  }
  Outcome outcome;
  auto record = read_attempt_record(record_path(job));
  if (!record) {
    outcome.reason = record.error().message;
  } else if (record->progress == AttemptProgress::Exited) {
    outcome.exit_code = record->exit_code;
    outcome.signal = record->signal;
    outcome.reason = record->reason;
    outcome.cancelled = record->reason == "cancelled";
  } else if (record->progress == AttemptProgress::Lost) {
    outcome.reason = "its supervisor was killed while it ran; its processes may still be running";
  } else if (record->progress == AttemptProgress::Running && record->supervisor_pid) {
    watch(id, *record->supervisor_pid);  // it still holds its record's lock: it has not ended
    return;
  } else {
    // The supervisor ended before starting the job (e.g. the daemon was killed before handing
    // it the attempt): the job never ran, so it goes back to the queue as it was.
    (void)scheduler_.finish(id, unix_now());
    unlink(record_path(job).c_str());
    job.attempts -= 1;
    job.state = JobState::Queued;
    job.gpus.clear();
    job.gpu_uuids.clear();
    job.start_time.reset();
    job.pid.reset();
    save(job);
    enqueue(id);
    dispatch();
    return;
  }
  std::string group = attempt_group_name(id, job.attempts);  // before complete(), which may retire the job
  complete(id, outcome);
  remove_ended_group(group);
  dispatch();
}

// The ended attempt's cgroup alone, so a job's end costs one rmdir however long the queue is;
// the sweep over every group (which reads the whole active set) comes later, and only when that
// one is in use.
void Daemon::Impl::remove_ended_group(const std::string& name) {
  if (!isolation_) return;
  auto removed = cgroup_files_->remove_directory(isolation_->base + "/" + name);
  if (removed && !*removed) sweep_groups_after(kFirstGroupSweepPause);  // most empty within milliseconds
}

std::set<std::string> Daemon::Impl::running_batch_groups() const {
  std::set<std::string> running;
  for (const auto& [id, job] : active_) {
    if (job.state == JobState::Running && job.spec.kind == JobKind::Batch) {
      running.insert(attempt_group_name(id, job.attempts));
    }
  }
  return running;
}

// Attempts' cgroups are removed here, not by their supervisors: a supervisor that left its group
// to remove it made a cgroup migration, which waits for an RCU grace period, on every job's way
// to "exited" (a 17 ms job-to-job gap on an H200 machine, 3 ms without isolation). A group is
// empty once its supervisor has exited, unless what its job started is still on its way out
// after the SIGKILL to its process group: then it is looked at again, less and less often.
void Daemon::Impl::remove_finished_groups() {
  if (!isolation_) return;
  size_t in_use = remove_stale_groups(*cgroup_files_, *isolation_, running_batch_groups());
  if (in_use == 0) {
    group_sweep_pause_ = std::chrono::milliseconds(0);
    group_sweep_timer_.cancel();
    return;
  }
  // Doubles from the first pause (0 before any, at start-up) up to the last.
  sweep_groups_after(std::clamp<std::chrono::milliseconds>(2 * group_sweep_pause_, kFirstGroupSweepPause,
                                                           kLastGroupSweepPause));
}

void Daemon::Impl::sweep_groups_after(std::chrono::milliseconds pause) {
  group_sweep_pause_ = pause;
  group_sweep_timer_.expires_after(pause);
  group_sweep_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) remove_finished_groups();
  });
}

void Daemon::Impl::complete(JobNumber id, const Outcome& outcome) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  Job& job = it->second;
  (void)scheduler_.finish(id, unix_now());
  watchers_.erase(id);
  job.exit_code = outcome.exit_code;
  job.signal = outcome.signal;
  job.end_time = unix_now();
  bool cancelled = outcome.cancelled || cancel_requested_.erase(id) > 0;
  if (cancelled) {
    // Keep "cancelled by USER" (set when the cancel was asked) over the supervisor's "cancelled".
    bool said_who = job.reason.rfind("cancelled by", 0) == 0;
    finalize(job, JobState::Cancelled, said_who || outcome.reason.empty() ? job.reason : outcome.reason);
    return;
  }
  if (outcome.exit_code == 0) {
    finalize(job, JobState::Done, outcome.reason);
    return;
  }
  if (!outcome.exit_code && job.spec.kind == JobKind::Interactive) {
    finalize(job, JobState::Done, outcome.reason);  // ran; how it ended was not reported
    return;
  }
  std::string why = !outcome.reason.empty() ? outcome.reason
                    : outcome.signal      ? fmt::format("killed by signal {}", *outcome.signal)
                                          : fmt::format("exit code {}", outcome.exit_code.value_or(-1));
  if (job.spec.kind == JobKind::Batch && job.attempts <= job.spec.retries) {
    job.state = JobState::Queued;
    job.reason = fmt::format("retry {} of {} after: {}", job.attempts, job.spec.retries, why);
    job.pid.reset();
    save(job);
    enqueue(id);
    return;
  }
  finalize(job, JobState::Failed, why);
}

void Daemon::Impl::finalize(Job& job, JobState state, std::string reason) {
  JobNumber id = job.id;
  if (in_scheduler_.erase(id) > 0) (void)scheduler_.remove(id);
  job.state = state;
  job.reason = std::move(reason);
  if (!job.end_time) job.end_time = unix_now();
  job.pid.reset();
  save(job);
  Job finished = std::move(job);
  active_.erase(id);
  if (auto session = lease_sessions_.find(id); session != lease_sessions_.end()) {
    // A `gpupool run` still waiting: tell it, and let it go.
    SessionPtr client = session->second;
    lease_sessions_.erase(session);
    client->lease_job.reset();
    if (!client->granted) send(client, proto::ErrorResponse{fmt::format("job {} {}: {}", id, to_string(state),
                                                                       finished.reason)});
  }
  job_finished(finished);
  auto dependents = dependents_.extract(id);
  if (!dependents.empty()) {
    for (JobNumber dependent : dependents.mapped()) {
      if (active_.count(dependent) > 0) enqueue(dependent);
    }
  }
}

// Answers the `wait`s that were waiting for this job last.
void Daemon::Impl::job_finished(const Job& job) {
  if (ending_) asio::post(io_, [this] { stop_once_idle(); });
  auto waiting = waiters_.extract(job.id);
  if (waiting.empty()) return;
  for (auto& weak : waiting.mapped()) {
    SessionPtr session = weak.lock();
    if (!session || session->waiting_for.erase(job.id) == 0) continue;
    if (session->waiting_for.empty()) answer_wait(session);
  }
}

void Daemon::Impl::answer_wait(const SessionPtr& session) {
  proto::JobsResponse response;
  for (JobNumber id : session->wait_ids) {
    auto job = find_job(id);
    if (!job || !*job) return send(session, proto::ErrorResponse{fmt::format("job {} has disappeared", id)});
    Job found = std::move(**job);
    found.spec.environment.clear();
    response.jobs.push_back(for_client(std::move(found), *session));
  }
  send(session, response);
}

std::optional<std::string> Daemon::Impl::cancel(Job& job, const std::string& by) {
  switch (job.state) {
    case JobState::Queued:
    case JobState::Held:
      finalize(job, JobState::Cancelled, fmt::format("cancelled by {}", by));
      return std::nullopt;
    case JobState::Running:
      cancel_requested_.insert(job.id);
      if (job.spec.kind == JobKind::Interactive) {
        // `gpupool run` passes SIGTERM on to the program in the user's terminal.
        if (job.pid && kill(*job.pid, SIGTERM) != 0) return fmt::format("cannot signal the client: {}", std::strerror(errno));
      } else if (job.pid) {
        if (auto sent = cancel_supervised(*job.pid); !sent) return sent.error().message;
      }
      job.reason = fmt::format("cancelled by {}", by);
      return std::nullopt;
    default:
      return fmt::format("job {} has already {}", job.id, to_string(job.state));
  }
}

Result<void> Daemon::Impl::watch_end_with() {
  if (!settings_.end_with) return {};
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, *settings_.end_with, 0));
  if (pidfd < 0) return fail("--end-with {}: {}", *settings_.end_with, std::strerror(errno));
  end_with_.emplace(io_, pidfd);
  // A pidfd turns readable when its process has exited.
  end_with_->async_wait(asio::posix::stream_descriptor::wait_read, [this](const asio::error_code& error) {
    if (error) return;
    fmt::print(stderr, "gpupoold: process {} has exited: cancelling every job and stopping\n", *settings_.end_with);
    end_session(fmt::format("the exit of process {}", *settings_.end_with));
  });
  return {};
}

// SIGTERM leaves the jobs running for the next daemon, except for a daemon that lives for a
// process (--end-with): it has no next one, so it ends its jobs first; a second signal stops it
// at once.
void Daemon::Impl::wait_for_signal() {
  signals_.async_wait([this](const asio::error_code& error, int) {
    if (error) return;
    if (settings_.end_with && !ending_) {
      fmt::print(stderr, "gpupoold: signalled: cancelling every job and stopping\n");
      end_session("gpupoold stopping");
      return wait_for_signal();
    }
    tell_service_manager("STOPPING=1");
    io_.stop();
  });
}

void Daemon::Impl::end_session(const std::string& by) {
  ending_ = true;
  drained_ = true;  // not stored: a daemon started again later starts what is queued then
  std::vector<JobNumber> ids;
  for (const auto& [id, job] : active_) ids.push_back(id);
  for (JobNumber id : ids) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    if (auto error = cancel(it->second, by)) {
      fmt::print(stderr, "gpupoold: job {}: {}\n", id, *error);
    }
    if (auto still = active_.find(id); still != active_.end()) save(still->second);
  }
  stop_once_idle();
}

void Daemon::Impl::stop_once_idle() {
  if (scheduler_.running() > 0) return;
  tell_service_manager("STOPPING=1");
  io_.stop();
}

// ---------------------------------------------------------------------------------------------
// Sampling: what stands on the GPUs apart from the daemon's own jobs

Result<void> Daemon::Impl::open_monitor(UsageStore usage) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  MonitorSettings settings{settings_.config.sample_interval_s, settings_.config.history_s,
                           settings_.config.idle_flag_after_s, host};
  monitor_ = std::make_unique<Monitor>(settings, machine_, *backend_, std::move(usage), [this](Machine machine) {
    asio::post(io_, [this, machine = std::move(machine)] { on_sample(machine); });
  });
  if (settings_.config.http) {
    // Monitoring is not worth refusing jobs over: without its address the daemon serves on.
    auto http = HttpServer::start(*settings_.config.http, *monitor_);
    if (http) {
      http_ = std::move(*http);
      fmt::print(stderr, "gpupoold: HTTP on http://{}/ (/metrics, /api/gpus, /api/jobs, /api/history)\n",
                 http_->address());
    } else {
      fmt::print(stderr, "gpupoold: {}; serving without HTTP\n", http.error().message);
    }
  }
  return {};
}

void Daemon::Impl::schedule_sample(std::chrono::milliseconds delay) { monitor_->sample_within(delay); }

// Hands the monitor the queue as it stands once the current event is handled: one copy per
// burst of events, not one per event.
void Daemon::Impl::publish() {
  if (publish_pending_) return;
  publish_pending_ = true;
  // At most a few times a second: every queued job's reason is worked out, and a busy queue
  // dispatches far more often than anyone reads the view.
  publish_timer_.expires_after(kPublishEvery);
  publish_timer_.async_wait([this](const asio::error_code& error) {
    if (error) return;
    publish_pending_ = false;
    QueueView view;
    view.drained = drained_;
    size_t queued = 0;
    for (const auto& [id, job] : active_) {
      QueueEntry entry = queue_entry(job);
      if (entry.state == JobState::Queued && entry.reason.empty()) entry.reason = scheduler_.waiting_reason(id);
      queued += entry.state == JobState::Queued;
      view.jobs.push_back(std::move(entry));
    }
    monitor_->publish(std::move(view));
    std::string status = fmt::format("STATUS={} running, {} queued{}", scheduler_.running(), queued,
                                     drained_ ? ", drained" : "");
    if (status != last_status_) {
      last_status_ = status;
      tell_service_manager(status);
    }
  });
}

void Daemon::Impl::handle(const SessionPtr& s, const proto::ReportRequest& r) {
  auto report = monitor_->report(r.since);
  if (!report) return send(s, proto::ErrorResponse{report.error().message});
  send(s, std::move(*report));
}

// A reading from the monitor's thread, posted to the loop.
void Daemon::Impl::on_sample(const Machine& machine) {
  auto survey = survey_pool(machine, leases_, host_, busy_memory_threshold_mib());
  if (!survey) {
    fmt::print(stderr, "gpupoold: cannot read the leases: {}\n", survey.error().message);
    return;
  }
  monitor_->set_pool(*survey);
  // Leases of the daemon's own running jobs are the scheduler's business, not outside use.
  std::vector<GpuAvailability> outside = std::move(*survey);
  outside.resize(machine_.gpus.size());
  for (const auto& [id, job] : active_) {
    if (job.state != JobState::Running) continue;
    for (unsigned index : job.gpus) {
      if (index >= outside.size()) continue;
      GpuAvailability& a = outside[index];
      if (job.spec.slice_mib) {
        a.shared_mib -= std::min(a.shared_mib, *job.spec.slice_mib);
      } else {
        a.exclusive_held = false;
      }
    }
  }
  if (auto set = scheduler_.set_outside_use(outside); !set) {
    fmt::print(stderr, "gpupoold: {}\n", set.error().message);
  }
  dispatch();
}

// ---------------------------------------------------------------------------------------------

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonSettings settings) {
  // The database holds every job's environment: nothing the daemon creates is for others to
  // read unless it says so (the socket, the directories and the logs get their modes set).
  umask(077);
  TRY(LeaseDirectory::prepare_slurm_job_directory());
  TRY(ensure_directory(settings.state_dir, 0755));
  TRY(ensure_directory(settings.state_dir + "/logs", 0755));
  TRY(ensure_directory(settings.state_dir + "/attempts", 0700));
  std::string database = settings.state_dir + "/gpupool.db";
  // The job store first: it refuses a database with tables it does not know, and would take
  // a new file holding only the accounting's table for someone else's.
  TRY_ASSIGN(JobStore store, JobStore::open(database));
  TRY_ASSIGN(UsageStore usage, UsageStore::open(database));
  for (const char* suffix : {"", "-wal", "-shm"}) chmod((database + suffix).c_str(), 0600);
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open(settings.runtime_dir));
  TRY_ASSIGN(auto backend, open_pool_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = true, .processes = false}));
  TRY_ASSIGN(Scheduler scheduler, Scheduler::create(machine, settings.config.scheduler));
  auto impl = std::make_unique<Impl>(std::move(settings), std::move(store), std::move(leases), std::move(backend),
                                     std::move(machine), std::move(scheduler));
  TRY(impl->open_socket());
  TRY(impl->watch_end_with());
  TRY(impl->isolate_devices());  // once this is the one daemon of its state directory
  TRY(impl->open_monitor(std::move(usage)));
  TRY(impl->recover());
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Result<void> Daemon::run() { return impl_->run(); }

}  // namespace gpupool

namespace gpupool {

int daemon_main(int argc, char** argv) {
  // The supervisor of one job attempt: gpupoold re-executed by itself (see supervisor.h).
  if (argc == 2 && std::string_view(argv[1]) == "supervise") return supervise_main();

  DaemonOptions options;
  std::unique_ptr<CLI::App> app = make_daemon_app(options);
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }
  const std::optional<std::string>& http = options.http;
  if (http && *http != "off" && !split_http_address(*http)) {
    fmt::print(stderr, "gpupoold: --http {}: expected HOST:PORT or off\n", *http);
    return 2;
  }
  std::string& config_path = options.config_path;
  bool named = !config_path.empty();
  if (!named) {
    const char* env = std::getenv("GPUPOOL_CONFIG");
    named = env != nullptr && *env != '\0';
    config_path = named ? env : kDefaultConfigPath;
  }
  auto config = load_config(config_path, named);
  if (!config) {
    fmt::print(stderr, "gpupoold: {}\n", config.error().message);
    return 1;
  }
  if (options.check_config) {
    fmt::print("{}: OK\n", config_path);
    return 0;
  }
  if (http) config->http = *http == "off" ? std::nullopt : http;
  char self[PATH_MAX] = {};
  ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    fmt::print(stderr, "gpupoold: cannot find its own program: {}\n", std::strerror(errno));
    return 1;
  }
  DaemonSettings settings{options.runtime_dir, options.state_dir, std::string(self, static_cast<size_t>(length)),
                          std::move(*config), options.end_with};
  auto daemon = Daemon::create(std::move(settings));
  if (!daemon) {
    fmt::print(stderr, "gpupoold: {}\n", daemon.error().message);
    return 1;
  }
  if (auto served = (*daemon)->run(); !served) {
    fmt::print(stderr, "gpupoold: {}\n", served.error().message);
    return 1;
  }
  return 0;
}

}  // namespace gpupool
