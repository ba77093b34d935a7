// A queued job as the daemon, its store, the protocol and the CLI all see it. Pure data: the
// daemon fills in who submitted it (from the socket's peer credentials, never from the
// message), the scheduler decides its GPUs, the supervisor reports how it ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpupool {

// A job's id: the one users see, the store's key and the scheduler's. Never reused.
using JobId = uint64_t;

enum class JobState {
  Queued,     // waiting for GPUs (or for the jobs it runs after)
  Held,       // kept out of the queue by `gpupool hold` until `gpupool release`
  Running,    // started (or being started) on its GPUs
  // Its GPU processes checkpointed to host memory by the CUDA driver (`gpupool suspend`): alive,
  // blocked at their next CUDA call, holding no GPU until `gpupool resume` restores them.
  Suspended,
  Done,       // exited 0
  Failed,     // exited non-zero, was killed, could not start, or a job it depends on failed
  Cancelled,  // by `gpupool cancel`
};
const char* to_string(JobState state);
Result<JobState> parse_job_state(std::string_view text);
bool is_finished(JobState state);

enum class JobKind {
  Batch,        // `gpupool submit`: the daemon runs it, output to log files
  Interactive,  // `gpupool run` / `launch` through the daemon: runs in the user's terminal
};
const char* to_string(JobKind kind);
Result<JobKind> parse_job_kind(std::string_view text);

// Why a queued or held job has not started, in one word, as `gpupool jobs` shows it (squeue's
// REASON column); Job::reason says it in full.
enum class WaitReason {
  Resources,    // not enough GPUs free for it (the first in line: the GPUs are reserved for it)
  Priority,     // jobs ahead of it in the policy's order come first
  Reservation,  // GPUs it could use are kept for the first job in line, which starts before it
  Dependency,   // a job it runs after (--after) has not finished
  Held,         // `gpupool hold`
  Drained,      // `gpupool drain`: no job starts
  QuotaLimit,   // its user holds as many GPUs as the quota allows
  ArrayLimit,   // as many tasks of its array run as its %N allows
};
const char* to_string(WaitReason reason);
Result<WaitReason> parse_wait_reason(std::string_view text);

// Job ids as users type them: "42", "7,8,9", one or several arguments.
// Job ids as users type them: "42", "7,8,9", ranges "100-120", one or several arguments.
// At most kMaxTypedJobIds in all, so a typo like 1-99999999 is refused rather than sent.
inline constexpr size_t kMaxTypedJobIds = 100'000;
Result<std::vector<JobId>> parse_job_ids(std::span<const std::string> texts);
// Adds the ids of one piece of such a list ("42" or "40-45") to `ids`.
Result<void> add_job_ids(std::string_view piece, std::vector<JobId>& ids);

// An array job (`submit --array 0-99%8`): one submission, many tasks, each a job of its own
// that sees its index. Indices as Slurm's --array takes them: "0-99", "1,3,5-7", "0-15:4"
// (every 4th), with "%8" for at most 8 tasks running at once.
inline constexpr size_t kMaxArrayTasks = 10'000;
inline constexpr unsigned kMaxArrayIndex = 999'999;
struct ArraySpec {
  std::vector<unsigned> indices;  // ascending, each once
  unsigned limit = 0;             // at most this many running at once; 0: no limit
};
Result<ArraySpec> parse_array_spec(std::string_view text);

// A job that is a task of an array: what the daemon stores with it, so that the array's
// running limit outlives a restart.
struct ArrayTask {
  JobId array_id = 0;  // the id of the array's first task
  unsigned index = 0;  // the task's index, GPUPOOL_ARRAY_TASK_ID
  unsigned limit = 0;  // at most this many of the array's tasks running at once; 0: no limit
  bool operator==(const ArrayTask&) const = default;
};

// --mig: one MIG device (docs/mig.md), of a profile ("1g.18gb"; empty: any), with at least
// `min_memory_mib` of memory (--mem). CUDA enumerates one MIG device per process, so a job gets one.
struct MigRequest {
  std::string profile;
  uint64_t min_memory_mib = 0;
  friend bool operator==(const MigRequest&, const MigRequest&) = default;
};

// The GPUs a job asks for: what the scheduler, the leases and `gpupool run` choose by.
struct GpuRequest {
  unsigned count = 1;
  std::optional<uint64_t> slice_mib;   // nullopt: whole GPUs; else this much memory on each
  std::vector<unsigned> allowed = {};  // nvidia-smi indices; empty: any
  std::vector<unsigned> excluded = {};
  // --sm: the share of each GPU's streaming multiprocessors, 1..100 (a slice's, under MPS).
  std::optional<unsigned> sm_percent = std::nullopt;
  // A MIG device instead of GPUs or slices: `count` is 1 and `slice_mib` nullopt.
  std::optional<MigRequest> mig = std::nullopt;
};

// What a submission asks for. The client fills it in; the daemon checks it.
struct JobSpec {
  std::string name;                       // empty: the daemon names it after the command
  std::vector<std::string> argv;          // batch jobs: the command (argv[0] looked up on PATH)
  std::vector<std::string> environment;   // "NAME=value": the whole environment of the job
  std::string cwd;                        // absolute
  mode_t umask = 022;
  // Its allowed and excluded GPUs are an interactive job's only (a lease request's --gpus /
  // --exclude): not stored, since such a job does not outlive its client's connection.
  GpuRequest gpus;
  int priority = 0;                       // higher first; above 0 needs an admin
  std::vector<JobId> after;           // starts only once all of these are done (exit 0)
  unsigned retries = 0;                   // runs again after a failure, up to this many times
  std::optional<double> time_limit_s;     // SIGTERM, a grace period, SIGKILL when exceeded
  JobKind kind = JobKind::Batch;
};

// Who submitted it, from SO_PEERCRED and the process's groups.
struct JobOwner {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
  std::string user;           // name of uid (or the number when it has none)
};

// What a job (or a user's jobs) took of the GPUs held, beyond the time: each nullopt where the
// GPUs never said (no GPM, no energy counter, memory not attributable).
struct GpuEfficiency {
  std::optional<double> sm_active_gpu_hours;  // GPU-hours with the SMs busy (GPM's SM activity)
  // sm_active_gpu_hours over the GPU-hours it was measured on (docs/monitoring.md: above 1 for a
  // slice whose kernels used more of the card than its memory share).
  std::optional<double> sm_efficiency;
  std::optional<double> energy_kwh;           // its part of its GPUs' energy
  std::optional<uint64_t> peak_memory_mib;    // the most GPU memory it used on one GPU
  friend bool operator==(const GpuEfficiency&, const GpuEfficiency&) = default;
};

// A job's use of its GPUs so far, from the daemon's samples.
struct JobUsage {
  double gpu_hours = 0;                     // a slice counts its share of the GPU
  std::optional<double> mean_utilization;   // percent; nullopt until the GPUs say
  std::optional<double> idle_since;         // Unix seconds; set once the job is flagged idle
  // A slice job's: the most GPU memory its processes used on one of its GPUs at the latest
  // sample (the slice watchdog, sched/slice_watch.h); nullopt when not watched.
  std::optional<uint64_t> slice_used_mib;
  GpuEfficiency efficiency = {};
};

// A suspended job's checkpoint (docs/suspend.md): stored with it, so that a restarted daemon
// knows which processes to restore, and whether a resume was asked for.
struct Suspension {
  std::vector<pid_t> pids;  // its processes that held GPU state, checkpointed together
  std::string by;           // who suspended it
  double since = 0;         // Unix seconds
  uint64_t host_mib = 0;    // the GPU memory they held, now in host memory
  bool resume = false;      // `gpupool resume` asked: it waits for its GPUs to be free
  bool restoring = false;   // its GPUs taken again and its restore begun (a restarted daemon goes on)
  // On loan, it gave way to a reservation's job (docs/scheduling.md, "Backfill by suspending"):
  // it goes next after that job, a restarted daemon's scheduler too.
  bool gave_way = false;
  friend bool operator==(const Suspension&, const Suspension&) = default;
};

struct Job {
  JobId id = 0;
  JobSpec spec;
  JobOwner owner;
  JobState state = JobState::Queued;
  std::string reason;                 // why it waits, failed or was cancelled; empty otherwise
  unsigned attempts = 0;              // runs started so far (retries make it more than 1)
  double submit_time = 0;             // Unix seconds
  // When it last entered the queue for GPUs (Unix seconds): released, its dependencies done, a
  // retry; a resume is no entry. nullopt while its submission was its entry (saving a write),
  // and in rows of schema < 9. A restarted daemon queues it as waiting since then.
  std::optional<double> queued_at;
  std::optional<double> start_time;   // of the latest attempt
  std::optional<double> end_time;
  std::vector<unsigned> gpus;         // nvidia-smi indices while running / when it ran
  std::vector<std::string> gpu_uuids;  // what CUDA is given: the MIG device's UUID for a --mig job
  std::optional<int> exit_code;       // the shell's view: status, or 128 + signal
  std::optional<int> signal;          // the signal that ended it, if one did
  // The process the daemon watches while the job runs: the supervisor of a batch job, the
  // client of an interactive one; with its start time (clock ticks after boot, from
  // /proc/PID/stat), so a recycled pid is never mistaken for it after a daemon restart.
  std::optional<pid_t> pid;
  std::optional<uint64_t> pid_start_ticks;
  std::string stdout_path;            // batch jobs' log files
  std::string stderr_path;
  // What the daemon says of a job when it answers, never stored: why a waiting one waits, in one
  // word, and when the scheduler's plan expects it to start (nullopt when no plan reaches it).
  std::optional<WaitReason> wait_reason;
  std::optional<double> expected_start;  // Unix seconds
  std::optional<JobUsage> usage;          // a job's that held GPUs, likewise
  std::optional<ArrayTask> array = std::nullopt;  // a task of an array job
  // The client's token of the submission (protocol `token`): the same one sent again, after a
  // connection lost before the answer, finds this job instead of storing another.
  std::optional<std::string> submit_token = std::nullopt;
  // Set while it is suspended (and while it is being suspended or resumed).
  std::optional<Suspension> suspension = std::nullopt;
  // Whether its latest attempt was started as an MPS client (its slice held by MPS) or not;
  // nullopt before it starts, and for jobs stored before this was (schema 7).
  std::optional<bool> started_under_mps = std::nullopt;
  // How long the job's attempt was suspended, the suspension under way not counted: its time
  // limit's clock stood still that long. Stored; a batch job's supervisor's record says it too,
  // and a restarted daemon takes the record's word.
  double suspended_s = 0;
  // Its latest attempt started on GPUs reserved for another job, on loan (backfill = "suspend"):
  // a restarted daemon tells the scheduler so, which suspends it when that job needs them.
  bool started_on_loan = false;
  // Shown to another user under `private_data = ["jobs"]`: name, command, working directory and
  // the rest are left out (jobs/private_data.h). Never stored.
  bool details_withheld = false;
};

// The job's name, or its command's base name when it has none, with "[INDEX]" for a task of
// an array ("train[3]"): what tables show. "(private)" for another user's job whose details the
// daemon withholds.
std::string display_name(const Job& job);

}  // namespace gpupool
