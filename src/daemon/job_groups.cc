#include "daemon/job_groups.h"

#include <algorithm>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "isolation/device_rules.h"
#include "os/host_files.h"

namespace gpupool {
namespace {

// How soon a finished attempt's cgroup that is still in use is looked at again: the pause
// doubles up to the last, then stays there for as long as any such group is left (a job's end
// removes only its own group, so nothing else would come back for one whose straggler outlived
// the first pauses).
constexpr auto kFirstSweepPause = std::chrono::milliseconds(50);
constexpr auto kLastSweepPause = std::chrono::seconds(10);

// How jobs are kept from the GPUs they do not lease, said in one line at start; nullopt: they
// are not. An error only where the configuration requires isolation and it cannot be had.
Result<std::optional<DeviceIsolation>> set_up_device_isolation(DeviceIsolationMode mode, const Machine& machine,
                                                               const std::string& state_dir, CgroupFiles& files) {
  if (mode == DeviceIsolationMode::Off) {
    fmt::print(stderr, "gpupoold: device isolation off (device_isolation = \"off\")\n");
    return std::optional<DeviceIsolation>();
  }
  // Read where `gpupool doctor --root` reads the host (GPUPOOL_HOST_ROOT), so that a simulated
  // MIG machine can have capability nodes too.
  auto capabilities = read_mig_capabilities(host_files_from_environment());
  if (!capabilities) {
    if (mode == DeviceIsolationMode::On) {
      return fail("device_isolation = \"on\", but jobs cannot be kept from other MIG devices: {}",
                  capabilities.error().message);
    }
    fmt::print(stderr, "gpupoold: MIG devices' capability nodes not isolated: {}\n", capabilities.error().message);
  }
  std::optional<MigCapabilities> mig_capabilities = capabilities ? *capabilities : std::nullopt;
  auto found = [&]() -> Result<DeviceIsolation> {
    // Every GPU's and MIG device's node, to probe with and to prove that each job's rules can be written.
    TRY_ASSIGN(std::vector<DeviceNumber> every_device, denied_devices(machine, {}, "", mig_capabilities));
    std::error_code ignored;
    std::filesystem::path canonical = std::filesystem::canonical(state_dir, ignored);
    return find_device_isolation(HostFiles(), files,
                                 isolation_group_name(canonical.empty() ? state_dir : canonical.string()),
                                 every_device);
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
  bool has_mig_devices = std::ranges::any_of(machine.gpus, [](const Gpu& gpu) { return !gpu.mig_devices.empty(); });
  if (mig_capabilities && has_mig_devices) {
    fmt::print(stderr, "gpupoold: device isolation: each MIG job opens only its own MIG device's capability nodes (nvidia-caps, major {})\n",
               mig_capabilities->major);
  }
  if (!mig_capabilities && has_mig_devices) {
    fmt::print(stderr, "gpupoold: device isolation: MIG devices not kept apart: the driver has no "
                       "/proc/driver/nvidia-caps/mig-minors\n");
  }
  found->mig_capabilities = std::move(mig_capabilities);
  return std::optional<DeviceIsolation>(std::move(*found));
}

}  // namespace

JobGroups::JobGroups(asio::io_context& io, std::function<std::set<std::string>()> running)
    : running_(std::move(running)), sweep_timer_(io) {}

Result<void> JobGroups::set_up(DeviceIsolationMode mode, const Machine& machine, const std::string& state_dir) {
  TRY_ASSIGN(isolation_, set_up_device_isolation(mode, machine, state_dir, *files_));
  return {};
}

void JobGroups::remove_ended(const std::string& name) {
  if (!isolation_) return;
  auto removed = files_->remove_directory(isolation_->base + "/" + name);
  if (removed && !*removed) sweep_after(kFirstSweepPause);  // most empty within milliseconds
}

// Attempts' cgroups are removed here, not by their supervisors: a supervisor that left its group
// to remove it made a cgroup migration, which waits for an RCU grace period, on every job's way
// to "exited" (a 17 ms job-to-job gap on an H200 machine, 3 ms without isolation). A group is
// empty once its supervisor has exited, unless what its job started is still on its way out
// after the SIGKILL to its process group: then it is looked at again, less and less often.
void JobGroups::remove_finished() {
  if (!isolation_) return;
  size_t in_use = remove_stale_groups(*files_, *isolation_, running_());
  if (in_use == 0) {
    sweep_pause_ = std::chrono::milliseconds(0);
    sweep_timer_.cancel();
    return;
  }
  // Doubles from the first pause (0 before any, at start-up) up to the last.
  sweep_after(std::clamp<std::chrono::milliseconds>(2 * sweep_pause_, kFirstSweepPause, kLastSweepPause));
}

void JobGroups::sweep_after(std::chrono::milliseconds pause) {
  sweep_pause_ = pause;
  sweep_timer_.expires_after(pause);
  sweep_timer_.async_wait([this](const asio::error_code& error) {
    if (!error) remove_finished();
  });
}

void JobGroups::remove_at_stop() {
  if (!isolation_) return;
  // Only once no job is left in it: the running jobs' cgroups keep it. The last ended job's may
  // still be waiting for its sweep.
  constexpr int kTries = 100;  // at most a second
  for (int i = 0; i < kTries && remove_stale_groups(*files_, *isolation_, running_()) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  (void)files_->remove_directory(isolation_->base);
}

}  // namespace gpupool
