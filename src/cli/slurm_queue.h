// The queue commands' Slurm side (docs/slurm.md, "Submitting to Slurm"): `submit --slurm` hands
// a job to sbatch and records it; jobs, show, cancel, hold, release, wait and logs take
// slurm:ID. Slurm's programs are run from PATH with argument vectors (os/program), what they
// say is read by slurm/slurm_jobs.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "protocol/messages.h"
#include "slurm/slurm_jobs.h"

namespace gpupool::cli {

struct SlurmSubmitOptions {
  bool enabled = false;  // --slurm
  std::string partition;
  uint64_t shard_mib = kDefaultShardMib;
  std::string output;
  std::string error;
};
void add_slurm_submit_options(CLI::App& cmd, SlurmSubmitOptions& options);

// Hands the job to sbatch, records it and prints "slurm:ID". `after` is --after's text.
Result<int> submit_to_slurm(const JobSpec& spec, const std::string& after, bool hold,
                            const SlurmSubmitOptions& options);

// This user's recorded Slurm jobs, in the order submitted, with their state now: Slurm is asked
// once about all that have not been seen to end. nullopt when none was ever recorded.
Result<std::optional<std::vector<SlurmJobStatus>>> recorded_slurm_jobs();

// These jobs, recorded or not, as Slurm knows them now; an error for one that neither gpupool nor
// Slurm knows. `one_by_one`: scontrol, the most Slurm says about a job, for each (show, logs);
// else squeue once for all.
Result<std::vector<SlurmJobStatus>> slurm_jobs_now(std::span<const JobId> ids, bool one_by_one);

// scancel, scontrol uhold, scontrol release; Slurm's errors printed, a line for each job (scancel)
// or call (scontrol). Returns the exit code.
int act_on_slurm_jobs(protocol::JobAction action, std::span<const JobId> ids);

// Polls Slurm until every one of them has ended (or Slurm has forgotten it).
Result<std::vector<SlurmJobStatus>> wait_for_slurm_jobs(std::span<const JobId> ids);

// What `jobs --json` and `show --json` print: a job's fields as for gpupoold's jobs, the id as
// "slurm:ID", and a "slurm" object with what Slurm said.
nlohmann::json slurm_job_json(const SlurmJobStatus& status);

// The lines `show` adds for a Slurm job.
std::vector<std::pair<std::string, std::string>> slurm_detail_lines(const SlurmJobStatus& status);

}  // namespace gpupool::cli
