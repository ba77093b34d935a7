#include "sched/preemption.h"

#include <algorithm>
#include <tuple>

namespace gpupool {

std::vector<JobId> jobs_to_preempt(int priority, unsigned needed, unsigned free,
                                   std::vector<PreemptionCandidate> running) {
  if (free >= needed) return {};
  std::erase_if(running, [&](const PreemptionCandidate& job) { return job.priority >= priority || job.gpus == 0; });
  std::sort(running.begin(), running.end(), [](const PreemptionCandidate& a, const PreemptionCandidate& b) {
    return std::tie(a.priority, b.start_s, b.id) < std::tie(b.priority, a.start_s, a.id);
  });
  std::vector<JobId> chosen;
  unsigned freed = free;
  for (const PreemptionCandidate& job : running) {
    if (freed >= needed) break;
    chosen.push_back(job.id);
    freed += job.gpus;
  }
  if (freed < needed) return {};
  return chosen;
}

}  // namespace gpupool
