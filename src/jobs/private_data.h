// What users may see of one another's jobs: Slurm's PrivateData for gpupool
// (`private_data = ["jobs", "usage"]`, docs/configuration.md). Pure: the daemon applies it to
// every answer and to its HTTP side, which has no users and so gets what anyone may see.
#pragma once

#include "jobs/job.h"

namespace gpupool {

struct PrivateData {
  // Other users' job names, commands, working directories, environments, log paths, process
  // ids and failure reasons. Who holds which GPUs stays public: the lock files and nvidia-smi
  // tell anyone, and a user must see why they wait.
  bool jobs = false;
  // Other users' GPU time and utilisation (report, listings, the API and /metrics).
  bool usage = false;
};

// Takes out what PrivateData::jobs keeps to a job's owner, and marks the job so that clients
// show "(private)" instead of an empty name.
void withhold_details(Job& job);

}  // namespace gpupool
