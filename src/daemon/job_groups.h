// Device isolation's cgroups as the daemon keeps them (docs/daemon.md, "Device isolation"):
// chosen once at start, one per attempt (made by its supervisor), removed by the daemon once
// the attempt's supervisor has exited — at once when the group is empty, else by sweeps that
// come back less and less often for as long as one is left.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <asio.hpp>

#include "base/result.h"
#include "daemon/config.h"
#include "machine/gpu.h"
#include "os/job_cgroup.h"

namespace gpupool {

class JobGroups {
 public:
  // `running` names the groups of the attempts still running, which are kept.
  JobGroups(asio::io_context& io, std::function<std::set<std::string>()> running);

  // Chooses how jobs are kept from the GPUs they do not lease, and says it in one line. An
  // error only where the configuration requires isolation and it cannot be had.
  Result<void> set_up(DeviceIsolationMode mode, const Machine& machine, const std::string& state_dir);
  // nullopt: jobs may open every GPU's device node.
  const std::optional<DeviceIsolation>& isolation() const { return isolation_; }

  // The ended attempt's group alone, so a job's end costs one rmdir however long the queue is;
  // the sweep over every group comes later, and only when that one is in use.
  void remove_ended(const std::string& name);
  // Every group but the running attempts' (also those of attempts that ended while no daemon
  // ran); the ones still in use are looked at again later.
  void remove_finished();
  // When the daemon stops: the groups of ended attempts (waiting a little for the last), and the
  // daemon's own group once no running job's group is left in it.
  void remove_at_stop();

 private:
  void sweep_after(std::chrono::milliseconds pause);

  std::function<std::set<std::string>()> running_;
  std::unique_ptr<CgroupFiles> files_ = system_cgroup_files();
  std::optional<DeviceIsolation> isolation_;
  asio::steady_timer sweep_timer_;
  std::chrono::milliseconds sweep_pause_{0};
};

}  // namespace gpupool
