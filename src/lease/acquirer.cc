#include "lease/acquirer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "lease/gpu_pool.h"

namespace gpupool {
namespace {

// A place in line: a file named by arrival time, locked while its owner waits.
class Ticket {
 public:
  static Result<Ticket> take(const std::string& queue_dir) {
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    std::string name = fmt::format("{:010}{:09}.{}", now.tv_sec, now.tv_nsec, getpid());
    // Made and locked under a dot-name that scanners skip, then renamed into line: a ticket
    // that is visible but not yet locked would look dead and be cleared by a waiter.
    std::string draft = queue_dir + "/." + name;
    std::string path = queue_dir + "/" + name;
    int fd = ::open(draft.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return fail("cannot join the queue in {}: {}", queue_dir, std::strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(draft.c_str(), path.c_str()) != 0) {
      const int error = errno;
      ::close(fd);
      unlink(draft.c_str());
      return fail("cannot take a place in the queue in {}: {}", queue_dir, std::strerror(error));
    }
    return Ticket(queue_dir, name, fd);
  }
  Ticket(Ticket&& other) noexcept : dir_(other.dir_), name_(other.name_), fd_(other.fd_) { other.fd_ = -1; }
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  Ticket& operator=(Ticket&&) = delete;
  ~Ticket() {
    if (fd_ < 0) return;
    unlink((dir_ + "/" + name_).c_str());
    ::close(fd_);
  }

  size_t ahead() const { return live_tickets_before(dir_, name_); }

  // How many live tickets sort before `name` (dead ones are cleared on the way).
  static size_t live_tickets_before(const std::string& dir, const std::string& name) {
    std::vector<std::string> older;
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* entry = readdir(d)) {
        std::string other = entry->d_name;
        if (other.front() != '.' && other < name) older.push_back(other);
      }
      closedir(d);
    }
    size_t live = 0;
    for (const std::string& other : older) {
      std::string path = dir + "/" + other;
      // O_NONBLOCK: a FIFO planted here must not hold everyone's run in open().
      int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) continue;
      if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        unlink(path.c_str());  // its owner died waiting; only the owner or root can remove it
      } else {
        ++live;
      }
      ::close(fd);
    }
    return live;
  }

 private:
  Ticket(std::string dir, std::string name, int fd) : dir_(std::move(dir)), name_(std::move(name)), fd_(fd) {}
  std::string dir_;
  std::string name_;
  int fd_;
};

}  // namespace

Result<Acquired> acquire_gpus(GpuBackend& backend, const LeaseDirectory& leases, const HostFiles& host,
                              const AcquireOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t busy_mib = busy_memory_threshold_mib();
  const std::string queue_dir = leases.path() + "/queue";
  std::optional<Ticket> ticket;
  std::string last_reason;
  auto tell = [&](const std::string& reason) {
    if (reason != last_reason && options.on_wait) options.on_wait(reason);
    last_reason = reason;
  };
  for (;;) {
    // Without a ticket, anyone already in line goes first.
    size_t ahead = ticket ? ticket->ahead() : Ticket::live_tickets_before(queue_dir, "~");
    if (ahead == 0) {
      TRY_ASSIGN(Machine machine, backend.discover(DiscoveryScope{}));
      TRY_ASSIGN(std::vector<GpuAvailability> availability, survey_pool(machine, leases, host, busy_mib));
      TRY_ASSIGN(auto choice, choose_gpus(machine, availability, options.request));
      if (choice) {
        TRY_ASSIGN(auto held, leases.try_acquire(claims_for(machine, *choice, options.request.slice_mib),
                                                 options.holder));
        if (held) return Acquired{std::move(*held), *choice, std::move(machine)};
        // Someone took a GPU between the survey and the lock: look again at once.
        continue;
      }
      tell(describe_wait(machine, availability, options.request));
    } else {
      tell(fmt::format("waiting in line: {} earlier request{} first", ahead, ahead == 1 ? " goes" : "s go"));
    }
    // Join the line only once we have to wait, so an uncontended request costs no queue files.
    if (!ticket) {
      TRY_ASSIGN(Ticket taken, Ticket::take(queue_dir));
      ticket.emplace(std::move(taken));
      continue;
    }
    if (options.timeout && std::chrono::steady_clock::now() - start >= *options.timeout) {
      return fail("gave up after {} s: {}",
                  std::chrono::duration_cast<std::chrono::seconds>(*options.timeout).count(), last_reason);
    }
    std::this_thread::sleep_for(options.poll_interval);
  }
}

}  // namespace gpupool
