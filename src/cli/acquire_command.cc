// gpupool acquire --fd N: the lease behind gpupool.acquire() in Python when no gpupoold runs
// (docs/python.md). It waits in the same line as `gpupool run` without a daemon, names its
// parent (the Python process, whose CUDA work is then gpupool's) as the holder, and hands the
// lock descriptors to it over descriptor N. It keeps its own copies until the parent says it is
// done or dies, then releases: the holder records go with the locks. Not for people: hidden.
#include <csignal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "cli/commands.h"
#include "cli/lease_options.h"
#include "os/fd.h"
#include "os/process.h"
#include "os/unix_socket.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

using nlohmann::json;

// The parent's lines are short ({"op": "finished", ...}).
constexpr size_t kMaxParentLine = 4096;

struct AcquireCommandOptions {
  LeaseRequestOptions lease;
  int fd = -1;
};

Result<void> tell(int channel, const json& message, const std::vector<int>& descriptors = {}) {
  return send_line(channel, message.dump(), descriptors);
}

json granted_message(const LeasedGpus& leased) {
  // As gpupoold's grant: a MIG device's UUID for a --mig lease, else the GPUs'.
  json uuids = json::array();
  for (unsigned index : leased.gpus) uuids.push_back(leased.acquired.machine.gpus.at(index).uuid);
  if (!leased.mig_uuid.empty()) uuids = json::array({leased.mig_uuid});
  return {{"event", "granted"},
          {"id", nullptr},
          {"job", leased.job},
          {"gpus", leased.gpus},
          {"uuids", uuids},
          {"mem_mib", leased.slice_mib ? json(*leased.slice_mib) : json(nullptr)},
          // As gpupoold's grant: what a --mig lease changes in the environment.
          {"environment", mig_environment(leased.acquired.machine, LeasedDevices{leased.gpus, leased.slice_mib, leased.mig_uuid})},
          {"descriptors", leased.acquired.leases.descriptors().size()}};
}

// Until the parent is done: a line ("finished") or the end of the channel (it died). At the time
// limit the parent gets SIGTERM, as a cancel through gpupoold sends it.
Result<bool> wait_for_parent(int channel, pid_t parent, std::optional<std::chrono::milliseconds> time_limit) {
  LineReader reader(channel, kMaxParentLine);
  auto deadline = time_limit ? std::optional(std::chrono::steady_clock::now() + *time_limit) : std::nullopt;
  for (;;) {
    std::optional<std::chrono::milliseconds> timeout;
    if (deadline) {
      timeout = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                           *deadline - std::chrono::steady_clock::now()));
    }
    TRY_ASSIGN(std::vector<bool> ready, wait_until_ready({channel}, timeout));
    if (!ready[0]) {
      (void)send_signal(parent, SIGTERM);
      deadline.reset();
      continue;
    }
    auto line = reader.read_line();
    return line && *line;  // whatever it says, it is done with the GPUs
  }
}

Result<int> hold_for_parent(const AcquireCommandOptions& options) {
  const int channel = options.fd;
  TRY_ASSIGN(auto time_limit, parse_time_limit(options.lease.time_limit));
  TRY_ASSIGN(auto backend, open_pool_backend());
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open_default());
  TRY_ASSIGN(AcquireOptions acquire, acquire_options(options.lease, *backend));
  acquire.on_wait = [channel](const std::string& why) { (void)tell(channel, {{"event", "waiting"}, {"reason", why}}); };
  const pid_t parent = own_parent_pid();
  std::string job = options.lease.name.empty() ? fmt::format("acquire-{}", parent) : options.lease.name;
  TRY_ASSIGN(LeasedGpus leased, lease_directly(*backend, leases, std::move(acquire), std::move(job), parent));
  TRY(tell(channel, granted_message(leased), leased.acquired.leases.descriptors()));
  TRY_ASSIGN(bool said_finished, wait_for_parent(channel, parent, time_limit));
  leased.acquired.leases.release();
  if (said_finished) (void)tell(channel, {{"ok", true}});
  return kExitOk;
}

}  // namespace

void add_acquire_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("acquire", "Lease GPUs for the parent process (gpupool.acquire() without gpupoold)");
  cmd->group("");  // plumbing for the Python package, not a command people type
  auto options = std::make_shared<AcquireCommandOptions>();
  add_lease_options(*cmd, options->lease);
  cmd->add_option("--fd", options->fd, "The Unix socket to the parent, inherited")->required()->check(CLI::NonNegativeNumber);
  cmd->callback([&exit_code, options] {
    auto result = hold_for_parent(*options);
    // The parent hears of a failure on the channel; stderr is for a person running it by hand.
    if (!result) (void)tell(options->fd, {{"ok", false}, {"error", result.error().message}});
    exit_code = result.ok() ? *result : report(result.error());
  });
}

}  // namespace gpupool::cli
