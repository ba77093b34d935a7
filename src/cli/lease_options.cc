#include "cli/lease_options.h"
#include "sim/open_backend.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <memory>

#include <fmt/format.h>

#include "base/display_text.h"
#include "base/duration.h"
#include "base/quote.h"
#include "base/text.h"
#include "cli/value_checks.h"
#include "machine/gpu_selection.h"
#include "os/child_process.h"
#include "os/environment.h"
#include "os/files.h"
#include "os/process.h"
#include "os/signals.h"

namespace gpupool::cli {

void add_lease_options(CLI::App& cmd, LeaseRequestOptions& options) {
  cmd.add_option("-g,--gpu-count", options.count, "How many GPUs (default 1)")->check(whole_number(1, 1024));
  cmd.add_option("--mem", options.memory,
                 "Share the GPUs: take this much of each one's memory (e.g. 20G) instead of whole GPUs")
      ->type_name("SIZE")
      ->check(memory_size_value());
  add_compute_share_option(cmd, options.sm_percent);
  add_mig_option(cmd, options.mig);
  cmd.add_option("--gpus", options.gpus, "Only these GPUs (indices or UUIDs, comma-separated)")->type_name("GPUS");
  cmd.add_option("--exclude", options.exclude, "Never these GPUs (indices or UUIDs, comma-separated)")
      ->type_name("GPUS");
  cmd.add_option("--wait", options.wait,
                 "Give up after this long (e.g. 30s, 10m, 0 = do not wait); default: wait until the GPUs are free")
      ->expected(0, 1)
      ->type_name("DURATION")
      ->check(duration_or_nothing_value());
  cmd.add_option("--name", options.name, "The job's name, shown in `gpupool leases` (default: run-PID)");
  cmd.add_option("--time", options.time_limit,
                 "Time limit (e.g. 30m, 2h): SIGTERM at the limit, SIGKILL 10s later, exit code 124. Through "
                 "gpupoold, a job with a limit may start beside GPUs reserved for a wider job (backfill)")
      ->type_name("DURATION")
      ->check(duration_value());
  cmd.add_flag("-q,--quiet", options.quiet, "Do not report waiting and the GPUs taken on stderr");
}

void add_compute_share_option(CLI::App& cmd, std::optional<unsigned>& sm_percent) {
  cmd.add_option("--sm", sm_percent,
                 "With --mem: use at most PCT % of each GPU's multiprocessors (CUDA MPS; needs gpupoold with "
                 "slice_enforcement \"mps\" or \"auto\" where MPS is installed)")
      ->type_name("PCT")
      ->check(whole_number(1, 100));
}

void add_mig_option(CLI::App& cmd, std::optional<std::string>& mig) {
  cmd.add_option("--mig", mig,
                 "One MIG device of this profile (e.g. 1g.18gb, as `gpupool list` shows them), or `any`; with --mem, "
                 "one with at least that much memory. Hard-isolated by the GPU; leased instead of whole GPUs")
      ->type_name("PROFILE");
}

Result<void> set_slice(GpuRequest& request, const std::string& memory, const std::optional<unsigned>& sm_percent,
                       const std::optional<std::string>& mig) {
  if (mig) {
    if (mig->empty()) return fail("--mig needs a MIG profile, such as 1g.18gb (as `gpupool list` shows them), or any");
    if (request.count != 1) return fail("--mig gives one MIG device: CUDA runs a process on one MIG device only");
    if (sm_percent) return fail("--sm is a share of a whole GPU's multiprocessors; a MIG device has its own");
    MigRequest device{*mig == "any" ? "" : *mig, 0};
    if (!memory.empty()) {
      TRY_ASSIGN(device.min_memory_mib, parse_memory_mib(memory));
    }
    request.mig = device;
    return {};
  }
  if (!memory.empty()) {
    TRY_ASSIGN(request.slice_mib, parse_memory_mib(memory));
  }
  if (sm_percent && !request.slice_mib) {
    return fail("--sm needs --mem: a compute share is a share of a GPU that slices share");
  }
  request.sm_percent = sm_percent;
  return {};
}

Result<std::chrono::milliseconds> parse_duration(const std::string& text) {
  TRY_ASSIGN(double seconds, parse_duration_s(text));
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

Result<std::optional<std::chrono::milliseconds>> parse_time_limit(const std::string& text) {
  if (text.empty()) return std::optional<std::chrono::milliseconds>();
  TRY_ASSIGN(auto limit, parse_duration(text));
  if (limit.count() <= 0) return fail("invalid time limit '{}': must be more than 0", text);
  return std::optional(limit);
}

double seconds_of(std::chrono::milliseconds duration) { return static_cast<double>(duration.count()) / 1000.0; }

namespace {

void announce(const LeasedGpus& leased) {
  std::vector<std::string> names;
  for (unsigned index : leased.gpus) names.push_back(fmt::format("{}", index));
  std::string share = leased.slice_mib ? fmt::format(" ({} MiB each, shared)", *leased.slice_mib) : "";
  for (unsigned index : leased.gpus) {
    if (const MigDevice* device = mig_device_with_uuid(leased.acquired.machine.gpus.at(index), leased.mig_uuid)) {
      share = fmt::format(" (MIG device {}:{}, {})", index, device->index, device->profile);
    }
  }
  fmt::print(stderr, "gpupool: {}{} has GPU{} {}{}\n", leased.daemon ? "job " : "", leased.job, leased.gpus.size() == 1 ? "" : "s",
             fmt::join(names, ","), share);
}

// Queues the request with gpupoold and waits for it to hand over the lock descriptors.
Result<LeasedGpus> lease_from_daemon(DaemonClient client, GpuBackend& backend, const AcquireOptions& acquire,
                                     const LeaseRequestOptions& options, const std::vector<std::string>& command) {
  protocol::LeaseRequest request;
  request.spec.kind = JobKind::Interactive;
  request.spec.name = options.name;
  request.spec.argv = command;
  request.spec.gpus = acquire.request;
  request.stops_the_clock = true;  // run and launch wait with os/child_process's clock
  TRY_ASSIGN(auto time_limit, parse_time_limit(options.time_limit));
  if (time_limit) request.spec.time_limit_s = seconds_of(*time_limit);
  auto cwd = current_directory();
  request.spec.cwd = cwd ? *cwd : "/";
  // `gpupool cancel` of a running job sends SIGTERM to this client: held back from before the
  // request, so that it cannot kill us between the grant and the start of the program; taken
  // here while waiting, and by start_unless_cancelled() or the program's signal forwarding after.
  // The time limit's clock signals likewise: they wait for the program's wait to take them.
  block_signals({SIGTERM, suspended_signal(), resumed_signal()});
  TRY_ASSIGN(Fd term_fd, signal_descriptor({SIGTERM}));
  TRY(client.send(request));
  auto deadline = acquire.timeout ? std::optional(std::chrono::steady_clock::now() + *acquire.timeout) : std::nullopt;
  std::optional<JobId> id;
  bool terminated = false;  // then only what the daemon has sent already is read
  auto cancelled = [&] {
    return id ? fail("job {} cancelled before it started", *id) : fail("got SIGTERM before the job started");
  };
  for (;;) {
    if (!client.has_message()) {
      std::optional<std::chrono::milliseconds> timeout;
      if (terminated) {
        timeout = std::chrono::milliseconds(0);
      } else if (deadline) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
        timeout = std::max(std::chrono::milliseconds(0), left);
      }
      auto ready = wait_until_ready({client.descriptor(), term_fd.get()}, timeout);
      if (!ready) return fail("cannot wait for gpupoold: {}", ready.error().message);
      if ((*ready)[1]) {
        (void)read_signal(term_fd.get());
        terminated = true;
        continue;
      }
      if (!(*ready)[0]) {
        if (terminated) return cancelled();
        // Closing the connection takes the request out of the queue.
        return fail("gave up waiting after {}", *options.wait);
      }
    }
    TRY_ASSIGN(ReceivedResponse received, client.receive());
    if (auto* queued = std::get_if<protocol::LeaseQueued>(&received.response)) {
      id = queued->id;
      if (acquire.on_wait && !terminated) acquire.on_wait(fmt::format("job {} queued: {}", queued->id, queued->reason));
      continue;
    }
    auto* granted = std::get_if<protocol::LeaseGranted>(&received.response);
    if (granted == nullptr) {
      return fail("gpupoold sent an unexpected answer: {}", protocol::encode(received.response));
    }
    HeldLeases leases = HeldLeases::from_descriptors(std::move(received.descriptors));
    if (terminated) {
      id = granted->id;
      leases.release();
      (void)client.request(protocol::FinishedRequest{128 + SIGTERM, SIGTERM, false});
      return cancelled();
    }
    if (leases.descriptors().size() != granted->descriptors) {
      return fail("gpupoold granted {} leases but {} arrived", granted->descriptors, leases.descriptors().size());
    }
    TRY_ASSIGN(Machine machine, backend.discover(DiscoveryScope{.links = false, .processes = false}));
    std::string job = options.name.empty() ? std::to_string(granted->id) : options.name;
    std::string mig_uuid = acquire.request.mig && !granted->uuids.empty() ? granted->uuids.front() : "";
    LeasedGpus leased{Acquired{std::move(leases), granted->gpus, mig_uuid, std::move(machine)},
                      granted->gpus,
                      job,
                      granted->slice_mib,
                      mig_uuid,
                      std::make_shared<DaemonClient>(std::move(client)),
                      granted->id,
                      granted->environment};
    return leased;
  }
}

}  // namespace

Result<AcquireOptions> acquire_options(const LeaseRequestOptions& options, GpuBackend& backend) {
  AcquireOptions acquire;
  acquire.request.count = options.count;
  TRY(set_slice(acquire.request, options.memory, options.sm_percent, options.mig));
  if (!options.gpus.empty() || !options.exclude.empty()) {
    TRY_ASSIGN(Machine machine, backend.discover(DiscoveryScope{.links = false, .processes = false}));
    if (!options.gpus.empty()) {
      TRY_ASSIGN(acquire.request.allowed, find_gpus(machine.gpus, split(options.gpus, ',')));
    }
    if (!options.exclude.empty()) {
      TRY_ASSIGN(acquire.request.excluded, find_gpus(machine.gpus, split(options.exclude, ',')));
    }
  }
  // --wait with no value keeps the default: wait as long as it takes.
  if (options.wait && !options.wait->empty()) {
    TRY_ASSIGN(auto timeout, parse_duration(*options.wait));
    acquire.timeout = timeout;
  }
  return acquire;
}

Result<LeasedGpus> lease_directly(GpuBackend& backend, const LeaseDirectory& leases, AcquireOptions acquire,
                                  std::string job, pid_t holder_pid) {
  if (acquire.request.sm_percent) {
    return fail("--sm needs gpupoold, which holds a slice's compute share with CUDA MPS; no daemon is running");
  }
  acquire.holder = LeaseHolder{holder_pid, "", job, static_cast<int64_t>(std::time(nullptr))};
  TRY_ASSIGN(Acquired acquired, acquire_gpus(backend, leases, host_files_from_environment(), acquire));
  LeasedGpus leased{std::move(acquired), {}, std::move(job), acquire.request.slice_mib, {}, nullptr};
  leased.gpus = leased.acquired.gpus;
  leased.mig_uuid = leased.acquired.mig_uuid;
  return leased;
}

Result<LeasedGpus> lease_gpus(const LeaseRequestOptions& options, const std::vector<std::string>& command) {
  TRY_ASSIGN(auto backend, open_pool_backend());
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open_default());
  TRY_ASSIGN(AcquireOptions acquire, acquire_options(options, *backend));
  // The reason names the holders: other users' job names and commands, shown escaped.
  if (!options.quiet) {
    acquire.on_wait = [](const std::string& why) { fmt::print(stderr, "gpupool: {}\n", printable(why, kMaxShownBytes)); };
  }
  TRY_ASSIGN(auto daemon, DaemonClient::connect_if_running(leases.path()));
  if (daemon) {
    TRY_ASSIGN(LeasedGpus leased, lease_from_daemon(std::move(*daemon), *backend, acquire, options, command));
    if (!options.quiet) announce(leased);
    return leased;
  }
  std::string job = options.name.empty() ? fmt::format("run-{}", own_pid()) : options.name;
  TRY_ASSIGN(LeasedGpus leased, lease_directly(*backend, leases, std::move(acquire), std::move(job), own_pid()));
  if (!options.quiet) announce(leased);
  return leased;
}

Result<void> start_unless_cancelled(LeasedGpus& leased) {
  if (!leased.daemon) return {};
  if (!take_pending_signal(SIGTERM)) return {};
  leased.acquired.leases.release();
  report_finished(leased, 128 + SIGTERM, false);
  return fail("job {} cancelled before it started", leased.id);
}

void report_finished(LeasedGpus& leased, int exit_code, bool timed_out) {
  if (!leased.daemon) return;
  protocol::FinishedRequest finished;
  finished.exit_code = exit_code;
  if (exit_code > 128) finished.signal = exit_code - 128;
  finished.timed_out = timed_out;
  // The daemon may have gone away meanwhile; the job still ran, so this is not an error.
  (void)leased.daemon->request(finished);
  leased.daemon.reset();
}

std::vector<std::string> job_environment(const LeasedGpus& leased, const std::vector<unsigned>& gpus) {
  return with_overrides(
      lease_environment(own_environment_entries(), leased.acquired.machine,
                        LeasedDevices{gpus, leased.slice_mib, leased.mig_uuid}, leased.job),
      leased.mps_environment);
}

}  // namespace gpupool::cli
