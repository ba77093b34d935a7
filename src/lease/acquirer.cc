#include "lease/acquirer.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/duration.h"
#include "lease/gpu_pool.h"
#include "lease/waiting_line.h"
#include "os/clock.h"
#include "os/environment.h"
#include "os/file_lock.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {
namespace {

// A place in line: a file named by arrival time, locked while its owner waits.
class Ticket {
 public:
  static Result<Ticket> take(const std::string& queue_dir, LineRequestSize size) {
    auto now = std::chrono::system_clock::now().time_since_epoch();
    auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now);
    auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(now - seconds);
    std::string name = ticket_name(seconds.count(), nanoseconds.count(), own_pid(), size);
    // Made and locked under a dot-name that scanners skip, then renamed into line: a ticket
    // that is visible but not yet locked would look dead and be cleared by a waiter.
    std::string draft = queue_dir + "/." + name;
    std::string path = queue_dir + "/" + name;
    auto created = create_file(draft, O_RDWR | O_NOFOLLOW, 0644);
    if (!created || !*created) {
      return fail("cannot join the queue in {}: {}", queue_dir,
                  created ? "a ticket of that name exists" : created.error().message);
    }
    Fd fd = std::move(**created);
    if (!try_lock_file(fd.get(), LockMode::exclusive)) {
      (void)remove_file(draft);
      return fail("cannot take a place in the queue in {}: cannot lock its ticket", queue_dir);
    }
    if (auto renamed = rename_file(draft, path); !renamed) {
      (void)remove_file(draft);
      return fail("cannot take a place in the queue in {}: {}", queue_dir, renamed.error().message);
    }
    return Ticket(queue_dir, name, std::move(fd));
  }
  Ticket(Ticket&& other) = default;
  Ticket(const Ticket&) = delete;
  Ticket& operator=(const Ticket&) = delete;
  Ticket& operator=(Ticket&&) = delete;
  ~Ticket() {
    if (fd_) (void)remove_file(dir_ + "/" + name_);
  }

  std::vector<LinePlace> ahead() const { return live_tickets_before(dir_, name_); }

  // The live tickets that sort before `name` (dead ones are cleared on the way).
  static std::vector<LinePlace> live_tickets_before(const std::string& dir, const std::string& name) {
    std::vector<std::string> older;
    if (auto names = directory_entries(dir)) {
      for (const std::string& other : *names) {
        if (other.front() != '.' && other < name) older.push_back(other);
      }
    }
    std::vector<LinePlace> live;
    for (const std::string& other : older) {
      std::string path = dir + "/" + other;
      // O_NONBLOCK: a FIFO planted here must not hold everyone's run in open().
      auto fd = open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
      if (!fd) continue;
      if (try_lock_file(fd->get(), LockMode::shared)) {
        (void)remove_file(path);  // its owner died waiting; only the owner or root can remove it
      } else {
        // A live name that is no ticket of ours still holds its place, passed by nobody.
        live.push_back(parse_ticket_name(other).value_or(LinePlace{other, 0, std::nullopt}));
      }
    }
    return live;
  }

 private:
  Ticket(std::string dir, std::string name, Fd fd) : dir_(std::move(dir)), name_(std::move(name)), fd_(std::move(fd)) {}
  std::string dir_;
  std::string name_;
  Fd fd_;  // locked while we wait
};

}  // namespace

double line_pass_window_s() {
  std::optional<std::string> text = environment_variable("GPUPOOL_LINE_PASS");
  if (!text || text->empty()) return kDefaultLinePassWindowS;
  auto seconds = parse_duration_s(*text);
  return seconds ? *seconds : kDefaultLinePassWindowS;
}

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
  const LineRequestSize size{options.request.count, options.request.slice_mib.has_value(),
                             options.request.mig.has_value()};
  const double pass_window_s = line_pass_window_s();
  for (;;) {
    // Without a ticket, everyone already in line is ahead.
    std::vector<LinePlace> ahead = ticket ? ticket->ahead() : Ticket::live_tickets_before(queue_dir, "~");
    LineTurn turn = line_turn(ahead, size, unix_now(), pass_window_s);
    if (turn.may_try) {
      TRY_ASSIGN(Machine machine, backend.discover(DiscoveryScope{}));
      TRY_ASSIGN(std::vector<GpuAvailability> availability, survey_pool(machine, leases, host, busy_mib));
      TRY_ASSIGN(auto choice, choose_gpus(machine, availability, options.request));
      if (choice) {
        LeasedDevices devices = devices_for(machine, availability, options.request, *choice);
        TRY_ASSIGN(auto held, leases.try_acquire(claims_for(machine, devices), options.holder));
        if (held) return Acquired{std::move(*held), std::move(devices.gpus), std::move(devices.mig_uuid), std::move(machine)};
        // Someone took a GPU between the survey and the lock: look again at once.
        continue;
      }
      tell(describe_wait(machine, availability, options.request));
    } else {
      tell(turn.why_not);
    }
    // Join the line only once we have to wait, so an uncontended request costs no queue files.
    if (!ticket) {
      TRY_ASSIGN(Ticket taken, Ticket::take(queue_dir, size));
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
