#include "jobs/private_data.h"

namespace gpupool {

void withhold_details(Job& job) {
  job.details_withheld = true;
  job.spec.name.clear();
  job.spec.argv.clear();
  job.spec.environment.clear();
  job.spec.cwd.clear();
  // A failure's reason may quote the command ("cannot run 'train.py'"); a waiting job's is
  // written again by the daemon from the queue, which names no command.
  job.reason.clear();
  job.stdout_path.clear();
  job.stderr_path.clear();
  job.pid.reset();
  job.pid_start_ticks.reset();
  job.submit_token.reset();
}

}  // namespace gpupool
