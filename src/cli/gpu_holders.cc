#include "cli/gpu_holders.h"

#include "cli/daemon_client.h"
#include "lease/lease_directory.h"
#include "os/clock.h"

namespace gpupool::cli {

void read_gpu_holders(DashboardInput& input) {
  input.leases.clear();
  if (auto directory = LeaseDirectory::open_default()) {
    if (auto records = directory->list()) {
      for (const LeaseRecord& r : *records) {
        input.leases.push_back(CardLease{r.index, r.holder.job, r.holder.user, r.holder.pid, r.slice_mib});
      }
    }
  }
  input.jobs.clear();
  input.idle_jobs.clear();
  input.daemon_running = false;
  auto client = DaemonClient::connect_if_running(runtime_directory());
  if (!client || !*client) return;
  if (auto answer = (*client)->request(protocol::JobsRequest{})) {
    if (auto listed = expect<protocol::JobsResponse>(std::move(*answer))) {
      input.jobs = std::move(listed->jobs);
      input.daemon_running = true;
    }
  }
  // The running jobs' accounting: the daemon's idle flag, which its report and web page show too.
  protocol::ReportRequest running_now;
  running_now.since = unix_now();
  if (auto answer = (*client)->request(running_now)) {
    if (auto report = expect<protocol::ReportResponse>(std::move(*answer))) {
      for (const protocol::JobUsageLine& line : report->jobs) {
        if (line.idle) input.idle_jobs.insert(line.id);
      }
    }
  }
}

}  // namespace gpupool::cli
