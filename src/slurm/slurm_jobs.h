// gpupool's jobs handed to Slurm (`gpupool submit --slurm`, docs/slurm.md "Submitting to
// Slurm"): the sbatch call made from a job spec, the record gpupool keeps of each such job, and
// what squeue, sacct and scontrol say about them read back into gpupool's terms. Pure: the
// programs are run by src/cli/slurm_queue.cc, their output comes in here as text.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"
#include "jobs/job.h"

namespace gpupool {

// --- ids ----------------------------------------------------------------------------------------

// Job ids as users type them, gpupoold's and Slurm's mixed: "42", "slurm:7", "5,slurm:8" (the
// prefix is per id: "slurm:7,8" is Slurm's 7 and gpupoold's 8).
struct JobIds {
  std::vector<JobId> local;
  std::vector<JobId> slurm;
};
Result<JobIds> parse_any_job_ids(std::span<const std::string> texts);

// "slurm:42": how a Slurm job's id reads everywhere in gpupool.
std::string slurm_id_text(JobId id);

// --- submitting ---------------------------------------------------------------------------------

// `gpupool slurm gres-conf --shard-mib N` configures one shard per N MiB of each GPU, so a
// memory slice asks for ceil(slice / N) shards; both sides default to this.
inline constexpr uint64_t kDefaultShardMib = 1024;

struct SlurmSubmitSettings {
  std::string partition;                   // empty: the cluster's default partition
  uint64_t shard_mib = kDefaultShardMib;
  std::string output;                      // --output pattern; empty: gpupool-%j.out
  std::string error;                       // --error pattern; empty: --output's file when that is
                                           // given (as sbatch does), else gpupool-%j.err
  bool hold = false;
  std::vector<JobId> after;            // Slurm ids: afterok
  bool cluster_has_shards = false;         // sinfo's answer; asked only for a memory slice
};

struct SbatchCall {
  std::string name;               // --job-name: the spec's, else its command's base name
  std::vector<std::string> argv;  // "sbatch", its options; the script comes on standard input
  std::string script;             // #!/bin/sh, then exec of the command, every word quoted
  std::string output_pattern;     // absolute, Slurm's %-pattern
  std::string error_pattern;
};

// The sbatch call for a batch job spec (its cwd absolute). One line of error for what Slurm
// cannot do as gpupool means it: a priority above 0, retries, a memory slice on a cluster
// without shards or across several GPUs, an output pattern gpupool could not find again.
Result<SbatchCall> sbatch_call(const JobSpec& spec, const SlurmSubmitSettings& settings);

// Slurm's --time: whole minutes, rounded up ("90s" -> "00:02:00", "1.5d" -> "1-12:00:00").
std::string slurm_time_limit(double seconds);

// `sinfo -h -o %G` (one line of generic resources per node group, "gpu:8,shard:64(S:0-1)" or
// "(null)"): whether any node offers shards.
Result<bool> sinfo_offers_shards(std::string_view output);

// `sbatch --parsable`'s answer: "42" or "42;cluster".
Result<JobId> parse_sbatch_answer(std::string_view output);

// An output file's name as Slurm makes it from a pattern of --output/--error: %j and %A (the job
// id, zero-padded to a width: %5j), %x (its name), %u (its user), %%. Other patterns (%N, %a,
// ...) and backslashes are refused: gpupool would not find the file again.
struct SlurmFilenameFields {
  JobId id = 0;
  std::string name;
  std::string user;
};
Result<std::string> expand_slurm_filename(std::string_view pattern, const SlurmFilenameFields& fields);

// --- what Slurm says ----------------------------------------------------------------------------

struct SlurmJob {
  JobId id = 0;
  std::string name;
  std::string user;
  std::string state;               // Slurm's word: RUNNING, COMPLETED, CANCELLED (sacct's "by UID" cut)
  std::string reason;              // Slurm's reason code; empty for None
  std::optional<int> exit_code;    // the shell's view: status, or 128 + signal
  std::optional<int> signal;
  std::optional<double> submit_time;  // Unix seconds
  std::optional<double> start_time;
  std::optional<double> end_time;
  std::string nodes;
  std::string partition;
  std::string time_limit;          // as Slurm prints it: "00:02:00", "UNLIMITED"
  std::string tres;                // what it asked for (squeue: "gres:gpu:2") or holds (TRES)
  std::string stdout_path;         // scontrol's (expanded) only
  std::string stderr_path;
  std::string source;              // who said it: "squeue", "sacct", "sacct -c", "scontrol"
};

nlohmann::json slurm_job_to_json(const SlurmJob& job);
Result<SlurmJob> slurm_job_from_json(const nlohmann::json& object);

// Set for every query below: times as Unix seconds, whatever the user's SLURM_TIME_FORMAT.
inline constexpr const char* kSlurmQueryEnvironment = "SLURM_TIME_FORMAT=%s";

// squeue for these jobs in every state it still knows (finished ones for MinJobAge), one call.
std::vector<std::string> squeue_argv(std::span<const JobId> ids);
Result<std::vector<SlurmJob>> parse_squeue(std::string_view output);
// squeue's answer when it knows none of the ids (it exits 1 then, as for real errors).
bool squeue_knows_none(std::string_view error_output);

// sacct for these jobs (allocations only): the accounting database, or with completion_log its
// job completion log (`sacct -c`, JobCompType, e.g. jobcomp/filetxt).
std::vector<std::string> sacct_argv(std::span<const JobId> ids, bool completion_log);
Result<std::vector<SlurmJob>> parse_sacct(std::string_view output, bool completion_log);

// `scontrol -o show job ID`: one line of Key=Value; a value may hold spaces (a name, a path).
std::vector<std::string> scontrol_show_argv(JobId id);
Result<SlurmJob> parse_scontrol_job(std::string_view output);

struct MappedState {
  JobState state;
  std::string reason;
};
// Slurm's state in gpupool's words: PENDING -> queued (held when held by a user or an
// administrator), RUNNING and its like -> running, COMPLETED -> done, FAILED, TIMEOUT,
// NODE_FAIL, OUT_OF_MEMORY, ... -> failed with why, CANCELLED -> cancelled. An unknown state is
// an error naming it.
Result<MappedState> map_slurm_state(const SlurmJob& job);

// --- gpupool's record -----------------------------------------------------------------------------

// What gpupool remembers of a job it handed to Slurm, a line of the user's record file
// (slurm-jobs.jsonl); a second line holds how it ended once gpupool has seen that, so finished
// jobs are not asked about again and outlive Slurm's memory of them.
struct SlurmRecord {
  JobId id = 0;
  std::string name;
  std::vector<std::string> argv;
  std::string cwd;
  std::string stdout_path;
  std::string stderr_path;
  double submit_time = 0;
  unsigned gpu_count = 1;
  std::optional<uint64_t> slice_mib;
  std::optional<double> time_limit_s;
  std::string partition;
  std::vector<JobId> after;
  std::optional<SlurmJob> ended;   // its final state, once seen
};

std::string submitted_record_line(const SlurmRecord& record);  // no newline
std::string ended_record_line(const SlurmJob& job);
// The records in submission order; a later submission of the same id (a cluster that started
// its numbering again) replaces the earlier one. A malformed line is an error naming it.
Result<std::vector<SlurmRecord>> parse_slurm_records(std::string_view text, std::string_view file_name);

// --- gpupool's view ---------------------------------------------------------------------------------

// A recorded job as gpupool's tables show it: `slurm` is what Slurm says (nullopt: it has
// forgotten the job, and known is false: shown as "unknown", the reason says so).
struct SlurmJobStatus {
  Job job;          // id: Slurm's; the spec from the record, state and times from Slurm
  bool known = false;
  std::optional<SlurmJob> slurm;
};
Result<SlurmJobStatus> slurm_job_status(const SlurmRecord& record, const std::optional<SlurmJob>& slurm,
                                        const std::string& user);

}  // namespace gpupool
