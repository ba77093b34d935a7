// dcgm-exporter's HPC job mapping (its --hpc-job-mapping-dir): a directory with one file per GPU,
// named by its index ("2"), or per MIG GPU instance ("2.3": GPU 2, GPU instance 3), listing the
// ids of the jobs running there, one per line. The daemon keeps it (`[monitor] job_mapping_dir`),
// so a dcgm-exporter beside it labels its series with gpupool's jobs (`hpc_job`) and dashboards
// built on that work unchanged.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "monitor/usage_accounting.h"

namespace gpupool {

// Each file's name and text: every GPU's file (empty when no job runs on it), and a file for each
// MIG GPU instance a job runs in. Pure.
std::map<std::string, std::string> job_mapping_files(const std::vector<RunningJob>& running, size_t gpu_count);

// Keeps the directory in step with job_mapping_files, writing only what changed (each file
// replaced whole: dcgm-exporter never reads half of one). Used on the daemon's thread only.
class JobMappingDirectory {
 public:
  explicit JobMappingDirectory(std::string dir) : dir_(std::move(dir)) {}
  // Writes the files whose text changed and removes the MIG files no job needs any more (the
  // first time, also those an earlier daemon left).
  Result<void> update(const std::map<std::string, std::string>& files);

 private:
  std::string dir_;
  std::optional<std::map<std::string, std::string>> written_;  // nullopt until the first update
};

}  // namespace gpupool
