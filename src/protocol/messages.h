// The daemon's protocol: the messages a client and gpupoold exchange over the unix socket, and
// their encoding. Pure (no I/O): the daemon, the CLI and the tests all use these types, so
// the CLI never reaches into the daemon's internals. docs/protocol.md is the specification.
//
// Wire format: one JSON object per line ('\n'-terminated, at most kMaxMessageBytes). The
// client opens with a Hello, the daemon answers with its own Hello (or an error and closes
// when it cannot speak the client's version); then requests and responses alternate. A
// Lease request is answered by LeaseQueued (zero or more times, when the reason for waiting
// changes) and then LeaseGranted, which carries the lock descriptors (SCM_RIGHTS); the
// client then reports Finished on the same connection.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/result.h"
#include "jobs/event.h"
#include "jobs/job.h"

namespace gpupool::protocol {

// 2: another user's job may come with `"private": true` and without what it runs and where
// (private_data). A daemon never sends such a job to a client of version 1.
// 3: a job may be `suspended` (with its `suspension`), and `suspend` and `resume` act on jobs. A
// daemon shows a suspended job to clients of version 1 and 2 as running, its reason saying so.
inline constexpr int kVersion = 3;
inline constexpr int kOldestVersion = 1;  // the oldest the daemon still speaks
inline constexpr size_t kMaxMessageBytes = 1 << 20;
// The most jobs in one answer to `jobs`: a client pages through longer listings. The daemon
// ends a page sooner when its jobs would not fit one message.
inline constexpr unsigned kMaxJobsPage = 1000;

// Where the daemon listens: gpupoold.sock in the runtime (lease) directory.
inline std::string socket_path(const std::string& runtime_dir) { return runtime_dir + "/gpupoold.sock"; }

// --- both directions ---
struct Hello {
  int protocol = kVersion;
  std::string software;  // "gpupool 0.2.0" / "gpupoold 0.2.0"
  std::string user;      // daemon → client: who the daemon takes the client to be
};

// --- requests (client → daemon) ---
struct SubmitRequest {
  JobSpec spec;
  bool hold = false;  // stored held, in the same step: it cannot start before `release`
  // An array job: one task per index, all stored in one step, at most `limit` running at once.
  std::optional<ArraySpec> array = std::nullopt;
  // Chosen by the client, unique per submission: sent again (the connection was lost before the
  // answer), it gets the jobs stored the first time instead of new ones.
  std::optional<std::string> token = std::nullopt;
};
inline constexpr size_t kMaxSubmitTokenBytes = 64;
struct JobsRequest {
  bool all = false;  // include finished jobs (default: queued, held, running)
  std::optional<std::string> user;
  std::optional<JobState> state;
  JobId after_id = 0;             // only jobs with a larger id (the previous page's last)
  unsigned limit = kMaxJobsPage;      // at most this many, 1 to kMaxJobsPage
  // Only jobs submitted at or after this Unix time (give or take a group commit's milliseconds).
  std::optional<double> submitted_since;
};
struct ShowRequest {
  JobId id = 0;
};
enum class JobAction { Cancel, Hold, Release, Suspend, Resume };
struct JobActionRequest {
  JobAction action = JobAction::Cancel;
  std::vector<JobId> ids;
};
struct WaitRequest {  // answered when every job has finished
  std::vector<JobId> ids;
};
enum class LogStream { Stdout, Stderr };
struct LogsRequest {
  JobId id = 0;
  // Asks the daemon to open this log and send its descriptor with the answer, for a reader
  // who may not open the file (an administrator reading another user's log).
  std::optional<LogStream> open = std::nullopt;
};
enum class AdminAction { Drain, Resume };
struct AdminRequest {
  AdminAction action = AdminAction::Drain;
  std::string reason;  // drain: why, for everyone who sees the queue (at most kMaxReasonBytes)
  // Only these GPUs (nvidia-smi indices): no new job starts on them, running ones go on. Empty:
  // the whole queue.
  std::vector<unsigned> gpus;
  // drain: the running batch jobs there are suspended too (docs/suspend.md), to resume once their
  // GPUs are free and resumed; answered with one outcome per job instead of an acknowledgement.
  bool suspend = false;
};
constexpr size_t kMaxReasonBytes = 200;
struct StatusRequest {};
struct LeaseRequest {  // `gpupool run` / `launch`: queue, then hand the lease to the client
  JobSpec spec;  // kind Interactive, with its allowed and excluded GPUs; argv is shown, not run
  // The client stops its time limit's clock while its job is suspended, on the daemon's signals
  // (os/child_process.h, suspended_signal); a client that does not say so is never sent them.
  bool stops_the_clock = false;
};
struct FinishedRequest {  // after LeaseGranted: the program has exited
  int exit_code = 0;
  std::optional<int> signal;
  bool timed_out = false;  // the client ended it at its time limit
};
struct ReportRequest {  // `gpupool report`: GPU time of the jobs that held GPUs since a time
  std::optional<double> since;  // Unix seconds; nullopt: since the beginning
};
// The most events in one answer to `events`: a client pages through longer stretches.
inline constexpr unsigned kMaxEventsPage = 1000;
struct EventsRequest {  // `gpupool events`: what happened, a page at a time (docs/events.md)
  uint64_t after = 0;                       // only events with a larger sequence number
  std::optional<double> since = std::nullopt;  // only events at or after this Unix time
  EventFilter filter = {};
  unsigned limit = 100;  // at most this many, 1 to kMaxEventsPage
  bool latest = false;   // the newest `limit` that match rather than the oldest
  // None matches yet: answered when the first does, however long that takes (`events -f`).
  bool wait = false;
};
using Request = std::variant<SubmitRequest, JobsRequest, ShowRequest, JobActionRequest, WaitRequest,
                             LogsRequest, AdminRequest, StatusRequest, LeaseRequest, FinishedRequest,
                             ReportRequest, EventsRequest>;

// --- responses (daemon → client) ---
struct ErrorResponse {
  std::string message;  // one line, shown to the user as is
};
struct SubmitResponse {
  JobId id = 0;  // an array's: its first task's, which is also the array's id
  // An array's tasks have the ids id to id + tasks - 1. nullopt for a single job (and from a
  // daemon older than arrays, which stored one job where an array was asked for).
  std::optional<unsigned> tasks = std::nullopt;
};
struct JobsResponse {  // jobs, show (one job), wait, logs (the job, with its log paths)
  std::vector<Job> jobs;
  bool more = false;  // jobs: more match after the last of these
  // logs with `open`: how many descriptors ride along (0: the log does not exist yet, 1: it);
  // nullopt in every other answer.
  std::optional<unsigned> descriptors = std::nullopt;
};
struct ActionOutcome {
  JobId id = 0;
  std::optional<std::string> error;  // nullopt: done
  std::optional<JobState> state;     // the job's state afterwards
};
struct JobActionResponse {
  std::vector<ActionOutcome> outcomes;  // one per requested id, in order
};
// A GPU that `gpupool drain --gpu` took out of service: by whom, when (Unix seconds), why.
struct DrainedGpu {
  unsigned index = 0;
  std::string by;
  double at = 0;
  std::string reason;
};
struct StateSpace {  // the state directory's file system: the database and the job logs
  uint64_t free_bytes = 0;
  uint64_t reserve_bytes = 0;  // state_reserve_mb: job output stops below it
  uint64_t unsaved_jobs = 0;   // jobs whose latest change the database refused, being retried
};
struct StatusResponse {
  std::string software;
  int64_t pid = 0;
  bool drained = false;
  // Of a drained queue: who drained it, when (Unix seconds), why ("" when not said).
  std::string drained_by;
  std::optional<double> drained_at;
  std::string drain_reason;
  std::vector<DrainedGpu> drained_gpus;  // in index order
  // GPUs the quarantine keeps from new jobs (health/quarantine.h): `at` is since when, `reason`
  // the faults, `by` empty.
  std::vector<DrainedGpu> quarantined_gpus;
  std::string machine;  // fixture name or host name
  unsigned gpus = 0;
  unsigned queued = 0, held = 0, running = 0;
  // GPU readings the daemon has acted on since it started: a test waits for more of them to
  // know that the scheduler has looked again, instead of sleeping.
  uint64_t samples = 0;
  std::optional<StateSpace> state_space;  // nullopt: not measured
  // How the daemon holds memory slices now: "mps" (MPS for slices of one GPU, the watchdog for the
  // rest), "watch" or "off"; "" from a daemon that does not say.
  std::string slice_enforcement = "";
};
struct LeaseQueued {
  JobId id = 0;
  std::string reason;  // "waiting for 2 GPUs: ..." as describe_wait says it
  std::optional<double> expected_start = std::nullopt;  // Unix seconds, when the plan says
};
struct LeaseGranted {  // sent with the lock descriptors attached
  JobId id = 0;
  std::vector<unsigned> gpus;  // nvidia-smi indices, placement order
  std::vector<std::string> uuids;
  std::optional<uint64_t> slice_mib;
  // "NAME=value" the program's environment adds: an MPS slice's client settings (sched/mps.h).
  std::vector<std::string> environment = {};
  unsigned descriptors = 0;    // how many descriptors ride along with this message
};
struct Ack {};
struct JobUsageLine {  // one job's accounting
  JobId id = 0;
  std::string user;
  std::string name;
  double gpu_hours = 0;                     // a slice counts its share of the GPU
  std::optional<double> mean_utilization;   // percent; nullopt when the GPUs never said
  double first_time = 0, last_time = 0;     // Unix seconds: first and latest sample accounted
  bool running = false;
  bool idle = false;                        // running and flagged idle (idle_flag_after)
  GpuEfficiency efficiency = {};
};
struct UserUsageLine {
  std::string user;
  unsigned jobs = 0;
  double gpu_hours = 0;
  std::optional<double> mean_utilization;
  GpuEfficiency efficiency = {};
};
struct ReportResponse {
  std::optional<double> since;
  std::vector<UserUsageLine> users;  // by GPU-hours, most first
  std::vector<JobUsageLine> jobs;    // in id order
};
struct EventsResponse {
  std::vector<Event> events;  // in sequence order
  bool more = false;          // more match beyond these
  // Where the next page starts (its `after`): the last event sent when there are more, else the
  // newest event the daemon has, so a filtered reader passes over what it does not match.
  uint64_t last = 0;
};
using Response = std::variant<ErrorResponse, SubmitResponse, JobsResponse, JobActionResponse,
                              StatusResponse, LeaseQueued, LeaseGranted, Ack, ReportResponse, EventsResponse>;

// Encodings: one line of JSON without the trailing newline. Parsing checks every field's
// type and range; any problem is one Error naming the field ("bad request: 'gpu_count' must
// be a whole number from 1 to 1024").
std::string encode(const Hello& hello);
Result<Hello> parse_hello(std::string_view line);
std::string encode(const Request& request);
Result<Request> parse_request(std::string_view line);
std::string encode(const Response& response);
Result<Response> parse_response(std::string_view line);

// A job's or user's efficiency figures as keys of `object`, which carries its usage:
// sm_active_gpu_hours, sm_efficiency, energy_kwh, peak_memory_mib (null where unknown).
void put_efficiency(nlohmann::json& object, const GpuEfficiency& efficiency);

// The JSON of one event, as `gpupool events --json` prints it and the on_event hook reads it:
// seq, time, kind, job (null for none), user, name, gpus, detail, jobs, users, message (the line
// describe_event says), and `"private": true` where its details are withheld.
nlohmann::json event_to_json(const Event& event);
Result<Event> event_from_json(const nlohmann::json& json);

// The JSON of one job, as `gpupool show --json` prints it (also used inside responses):
// id, name, state, reason, kind, user, uid, gpu_count, mem_mib, gpus, gpu_uuids, priority,
// after, retries, attempts, time_limit_s, command, cwd, umask, exit_code, signal, submit_time,
// start_time, end_time, pid, stdout, stderr; plus environment when it is non-empty, and a
// waiting job's wait_reason and expected_start when the daemon knows them. The owner's
// gid and groups and pid_start_ticks stay in the daemon.
nlohmann::json job_to_json(const Job& job);
Result<Job> job_from_json(const nlohmann::json& json);
// The bytes `job` adds to an encoded jobs answer, so that a daemon can keep a page within
// the message limit.
size_t encoded_size(const Job& job);

}  // namespace gpupool::protocol
