#include "cli/gpu_holders.h"

#include <ctime>

#include <fmt/format.h>

#include "cli/daemon_client.h"
#include "cli/jobs_table.h"
#include "lease/lease_directory.h"
#include "os/clock.h"

namespace gpupool::cli {

std::string clock_of_day(double unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm local{};
  localtime_r(&t, &local);
  return fmt::format("{:02}:{:02}:{:02}", local.tm_hour, local.tm_min, local.tm_sec);
}

void read_gpu_holders(DashboardInput& input) {
  input.leases.clear();
  if (auto directory = LeaseDirectory::open_default()) {
    if (auto records = directory->list()) {
      for (const LeaseRecord& r : *records) {
        std::string mig_uuid = r.uuid.starts_with("MIG-") ? r.uuid : "";
        input.leases.push_back(CardLease{r.index, r.holder.job, r.holder.user, r.holder.pid, r.slice_mib, mig_uuid});
      }
    }
  }
  input.jobs.clear();
  input.idle_jobs.clear();
  input.notices.clear();
  input.daemon_running = false;
  auto client = DaemonClient::connect_if_running(runtime_directory());
  if (!client || !*client) return;
  if (auto answer = (*client)->request(protocol::JobsRequest{})) {
    if (auto listed = expect<protocol::JobsResponse>(std::move(*answer))) {
      input.jobs = std::move(listed->jobs);
      input.daemon_running = true;
    }
  }
  // The daemon's idle flag, which its report and web page show too, comes with each running job.
  for (const Job& job : input.jobs) {
    if (job.usage && job.usage->idle_since) input.idle_jobs.insert(job.id);
  }
  if (auto answer = (*client)->request(protocol::StatusRequest{})) {
    if (auto status = expect<protocol::StatusResponse>(std::move(*answer))) {
      input.notices = daemon_notices(*status, clock_of_day);
    }
  }
}

}  // namespace gpupool::cli
