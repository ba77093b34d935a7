// The queue commands: submit, jobs, show, cancel, hold, release, wait, logs, drain, resume.
// Each is one request to gpupoold (src/protocol/messages.h) and a way to print the answer; jobs
// handed to Slurm (submit --slurm, ids slurm:ID) go through cli/slurm_queue instead.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/display_text.h"
#include "base/quote.h"
#include "base/text.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/jobs_table.h"
#include "cli/lease_options.h"
#include "cli/slurm_queue.h"
#include "cli/value_checks.h"
#include "jobs/job_text.h"
#include "machine/gpu_selection.h"
#include "sched/allocation.h"
#include "os/accounts.h"
#include "os/clock.h"
#include "os/environment.h"
#include "os/fd.h"
#include "os/files.h"
#include "os/process.h"
#include "sched/allocation.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

// A Unix time in local time: `today_format` on the same day, `other_day_format` on another.
std::string local_time_text(double unix_seconds, const char* today_format, const char* other_day_format) {
  time_t t = static_cast<time_t>(unix_seconds);
  tm local{};
  localtime_r(&t, &local);
  time_t now = std::time(nullptr);
  tm today{};
  localtime_r(&now, &today);
  char text[32];
  bool same_day = local.tm_yday == today.tm_yday && local.tm_year == today.tm_year;
  strftime(text, sizeof(text), same_day ? today_format : other_day_format, &local);
  return text;
}

std::string clock_time(std::optional<double> unix_seconds) {
  return unix_seconds ? local_time_text(*unix_seconds, "%H:%M:%S", "%m-%d %H:%M") : "-";
}

// The jobs table's narrower column.
std::string table_clock(double unix_seconds) { return local_time_text(unix_seconds, "%H:%M", "%m-%d"); }

std::string elapsed_text(const Job& job) {
  if (!job.start_time) return "-";
  double end = job.end_time.value_or(static_cast<double>(std::time(nullptr)));
  return duration_text(std::max(0.0, end - *job.start_time));
}

// A Slurm job Slurm has forgotten reads "unknown".
std::string state_text(const SlurmJobStatus& status) { return status.known ? state_text(status.job) : "unknown"; }

// One job as an entry of a JSON array printed with an indent of 2: what the whole array's
// dump(2) would show for it. Strings hold no raw newline (JSON escapes it), so every newline
// starts a line of the object.
std::string json_array_entry(const nlohmann::json& job) {
  std::string entry = "  ";
  for (char c : job.dump(2)) {
    entry += c;
    if (c == '\n') entry += "  ";
  }
  return entry;
}

// `extra`: lines after the job's own (a Slurm job's).
void print_job_details(const Job& job, const std::string& id, const std::string& state,
                       const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  // Every value may hold another user's text: shown escaped, each on its one line.
  auto line = [](const std::string& key, const std::string& value) {
    fmt::print("{:<12} {}\n", key, printable(value, kMaxShownBytes));
  };
  line("id", id);
  line("name", display_name(job));
  line("state", state + (job.reason.empty() ? "" : " (" + job.reason + ")"));
  if (job.wait_reason) line("waiting", to_string(*job.wait_reason));
  if (job.expected_start) line("expected", "to start at " + clock_time(std::max(*job.expected_start, unix_now())));
  line("user", job.owner.user);
  line("kind", to_string(job.spec.kind));
  if (job.details_withheld) {
    line("command", "(private: another user's, under the daemon's private_data)");
  } else {
    std::vector<std::string> words;
    for (const std::string& word : job.spec.argv) words.push_back(shell_quote(word));
    line("command", fmt::format("{}", fmt::join(words, " ")));
    line("cwd", job.spec.cwd);
  }
  line("request", job.spec.gpus.mig
                      ? fmt::format("{} ({})", describe_mig_request(*job.spec.gpus.mig), request_text(job))
                  : job.spec.gpus.slice_mib
                      ? fmt::format("{} GPU(s), {} MiB each (shared){}", job.spec.gpus.count, *job.spec.gpus.slice_mib,
                                    job.spec.gpus.sm_percent
                                        ? fmt::format(", {} % of the multiprocessors", *job.spec.gpus.sm_percent)
                                        : "")
                      : fmt::format("{} whole GPU(s)", job.spec.gpus.count));
  line("gpus", gpu_list_text(job.gpus));
  if (job.spec.gpus.mig && !job.gpu_uuids.empty()) line("mig device", job.gpu_uuids.front());
  if (job.suspension) {
    line("suspended", fmt::format("since {}: {}; pids {}", clock_time(job.suspension->since), suspension_text(job),
                                  fmt::join(job.suspension->pids, ",")));
  }
  if (job.spec.priority != 0) line("priority", std::to_string(job.spec.priority));
  if (!job.spec.after.empty()) line("after", fmt::format("{}", fmt::join(job.spec.after, ",")));
  if (job.spec.retries > 0) line("retries", fmt::format("{} (attempts so far: {})", job.spec.retries, job.attempts));
  if (job.spec.time_limit_s) line("time limit", duration_text(*job.spec.time_limit_s));
  line("submitted", clock_time(job.submit_time));
  line("started", clock_time(job.start_time));
  line("ended", clock_time(job.end_time));
  line("elapsed", elapsed_text(job));
  if (job.state == JobState::Running && job.spec.time_limit_s && job.start_time) {
    line("time left", duration_text(*job.start_time + *job.spec.time_limit_s - unix_now()));
  }
  if (job.usage) {
    std::string utilization = job.usage->mean_utilization ? fmt::format(", {:.0f} % utilisation on average", *job.usage->mean_utilization) : "";
    std::string idle = job.usage->idle_since ? fmt::format(", idle since {}", clock_time(job.usage->idle_since)) : "";
    line("usage", fmt::format("{:.2f} GPU-hours{}{}", job.usage->gpu_hours, utilization, idle));
    if (std::string efficiency = efficiency_line(job.usage->efficiency); !efficiency.empty()) {
      line("efficiency", efficiency);
    }
  }
  if (job.exit_code) line("exit code", std::to_string(*job.exit_code));
  if (!job.stdout_path.empty()) line("stdout", job.stdout_path);
  if (!job.stderr_path.empty()) line("stderr", job.stderr_path);
  for (const auto& [key, value] : extra) line(key, value);
}

Result<std::vector<Job>> jobs_answer(DaemonClient& client, const proto::Request& request) {
  TRY_ASSIGN(proto::Response response, client.request(request));
  TRY_ASSIGN(proto::JobsResponse jobs, expect<proto::JobsResponse>(std::move(response)));
  return std::move(jobs.jobs);
}

// --- submit ---

struct SubmitOptions {
  unsigned count = 1;
  std::string memory;
  std::optional<unsigned> sm_percent;
  std::optional<std::string> mig;
  std::string name;
  int priority = 0;
  std::string after;
  unsigned retries = 0;
  std::string time_limit;
  bool hold = false;
  std::string array;
  std::vector<std::string> command;
  SlurmSubmitOptions slurm;
};

// 128 random bits: unique per submission on this machine.
std::string submission_token() {
  std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", random());
  return token;
}

Result<int> submit(const SubmitOptions& options) {
  proto::SubmitRequest request;
  request.hold = options.hold;
  JobSpec& spec = request.spec;
  spec.name = options.name;
  spec.argv = options.command;
  spec.environment = own_environment_entries();
  auto cwd = current_directory();
  if (!cwd) return fail("cannot read the working directory: {}", cwd.error().message);
  spec.cwd = *cwd;
  spec.umask = current_umask();
  spec.gpus.count = options.count;
  TRY(set_slice(spec.gpus, options.memory, options.sm_percent, options.mig));
  spec.priority = options.priority;
  spec.retries = options.retries;
  TRY_ASSIGN(auto time_limit, parse_time_limit(options.time_limit));
  if (time_limit) spec.time_limit_s = seconds_of(*time_limit);
  if (options.slurm.enabled) {
    if (spec.gpus.sm_percent) return fail("--sm is gpupoold's (CUDA MPS on this machine); with --slurm, leave it out");
    if (spec.gpus.mig) return fail("--mig is gpupoold's (this machine's MIG devices); with --slurm, ask Slurm's gres for them");
    return submit_to_slurm(spec, options.after, options.hold, options.slurm);
  }
  if (!options.after.empty()) {
    TRY_ASSIGN(spec.after, parse_job_ids(std::array{options.after}));
  }
  if (!options.array.empty()) {
    TRY_ASSIGN(request.array, parse_array_spec(options.array));
  }
  // Sent again after a lost connection (a daemon restart) under the same token: the daemon
  // stores the submission once, however many times it arrives.
  request.token = submission_token();
  TRY_ASSIGN(ReconnectingClient client, ReconnectingClient::connect(runtime_directory()));
  TRY_ASSIGN(std::optional<ReceivedResponse> received, client.request(request));
  TRY_ASSIGN(proto::SubmitResponse submitted, expect<proto::SubmitResponse>(std::move(received->response)));
  if (!request.array) {
    fmt::print("{}\n", submitted.id);
    return 0;
  }
  if (!submitted.tasks) {
    return fail("this gpupoold is older than this gpupool and queued one job ({}), not an array: cancel it and "
                "restart gpupoold",
                submitted.id);
  }
  // FIRST-LAST: what cancel, hold, release and wait take as it is.
  fmt::print("{}-{}\n", submitted.id, submitted.id + *submitted.tasks - 1);
  return 0;
}

// --- jobs / show ---

struct JobsOptions {
  bool all = false;
  std::string user;
  std::string state;
  bool json = false;
};

// Whether `jobs` lists a Slurm job: by the same rules as gpupoold's (a state asked for, else
// finished ones only with --all). One Slurm has forgotten counts as finished, in no state.
bool listed(const SlurmJobStatus& status, const proto::JobsRequest& request) {
  if (request.user && *request.user != status.job.owner.user) return false;
  if (request.state) return status.known && status.job.state == *request.state;
  return request.all || (status.known && !is_finished(status.job.state));
}

// gpupoold's jobs page after page, each printed as it comes: a long history fits neither one
// message nor, at 100,000 jobs, comfortably in memory. The output is what one answer would have
// given. Then the Slurm jobs this user submitted; without a daemon those alone, and with
// neither, the error that says how to start a daemon.
Result<int> list_jobs(const JobsOptions& options) {
  proto::JobsRequest request;
  request.all = options.all;
  if (!options.user.empty()) request.user = options.user;
  if (!options.state.empty()) {
    TRY_ASSIGN(JobState state, parse_job_state(options.state));
    request.state = state;
  }
  // Asked first; an error of Slurm's is told after gpupoold's jobs are listed.
  Result<std::optional<std::vector<SlurmJobStatus>>> slurm = recorded_slurm_jobs();
  TRY_ASSIGN(std::optional<DaemonClient> client, DaemonClient::connect_if_running(runtime_directory()));
  if (!client && slurm.ok() && !*slurm) TRY(DaemonClient::connect(runtime_directory()));
  if (!client) TRY(slurm);
  if (client && !options.json) {
    // A drained queue says so above the table: otherwise its queued jobs just seem slow.
    TRY_ASSIGN(proto::Response response, client->request(proto::StatusRequest{}));
    TRY_ASSIGN(proto::StatusResponse status, expect<proto::StatusResponse>(std::move(response)));
    for (const std::string& notice : daemon_notices(status, [](double at) { return clock_time(at); })) {
      fmt::print("{}\n", notice);
    }
  }
  if (!options.json) fmt::print("{}\n", jobs_table_header());
  size_t printed = 0;
  auto print = [&](const Job& job, const std::string& id, const std::string& state, auto to_json) {
    if (options.json) {
      fmt::print("{}\n{}", printed == 0 ? "[" : ",", json_array_entry(to_json()));
    } else {
      fmt::print("{}\n", jobs_table_row(job, id, state, unix_now(), table_clock));
    }
    ++printed;
  };
  while (client) {
    TRY_ASSIGN(proto::Response response, client->request(request));
    TRY_ASSIGN(proto::JobsResponse page, expect<proto::JobsResponse>(std::move(response)));
    for (const Job& job : page.jobs) {
      print(job, std::to_string(job.id), state_text(job), [&] { return proto::job_to_json(job); });
    }
    if (!page.more || page.jobs.empty()) break;
    request.after_id = page.jobs.back().id;
  }
  for (const SlurmJobStatus& status : slurm.ok() && *slurm ? **slurm : std::vector<SlurmJobStatus>()) {
    if (!listed(status, request)) continue;
    print(status.job, slurm_id_text(status.job.id), state_text(status), [&] { return slurm_job_json(status); });
  }
  if (options.json) fmt::print("{}\n", printed == 0 ? "[]" : "\n]");
  TRY(slurm);
  return 0;
}

// One job shown: its details as text, or its JSON added to `shown`.
Result<void> show_slurm_job(JobId id, bool json, nlohmann::json& shown) {
  TRY_ASSIGN(std::vector<SlurmJobStatus> statuses, slurm_jobs_now(std::array{id}, true));
  const SlurmJobStatus& status = statuses.at(0);
  if (json) {
    shown.push_back(slurm_job_json(status));
  } else {
    print_job_details(status.job, slurm_id_text(id), status.known ? to_string(status.job.state) : "unknown",
                      slurm_detail_lines(status));
  }
  return {};
}

Result<void> show_local_job(DaemonClient& client, JobId id, bool json, nlohmann::json& shown) {
  TRY_ASSIGN(std::vector<Job> jobs, jobs_answer(client, proto::ShowRequest{id}));
  if (jobs.empty()) return fail("no job {}", id);
  if (json) {
    shown.push_back(proto::job_to_json(jobs.front()));
  } else {
    print_job_details(jobs.front(), std::to_string(jobs.front().id), to_string(jobs.front().state));
  }
  return {};
}

// Each job in the order asked, a blank line between; one that cannot be shown is one line on
// stderr and exit 1, the others are shown all the same. JSON: the job's object for one id, an
// array of them for several.
Result<int> show_jobs(const std::vector<std::string>& id_texts, bool json) {
  std::vector<std::pair<bool, JobId>> ids;  // (a Slurm job, its id)
  std::optional<DaemonClient> client;         // when any is gpupoold's
  for (const std::string& text : id_texts) {
    TRY_ASSIGN(JobIds parsed, parse_any_job_ids(std::array{text}));
    for (JobId id : parsed.local) ids.emplace_back(false, id);
    for (JobId id : parsed.slurm) ids.emplace_back(true, id);
    if (!parsed.local.empty() && !client) {
      TRY_ASSIGN(DaemonClient connected, DaemonClient::connect(runtime_directory()));
      client.emplace(std::move(connected));
    }
  }
  nlohmann::json shown = nlohmann::json::array();
  int code = kExitOk;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!json && i > 0) fmt::print("\n");
    auto [slurm, id] = ids[i];
    auto done = slurm ? show_slurm_job(id, json, shown) : show_local_job(*client, id, json, shown);
    if (!done) {
      fmt::print(stderr, "gpupool: {}\n", done.error().message);
      code = kExitError;
    }
  }
  if (json && !shown.empty()) fmt::print("{}\n", (ids.size() == 1 ? shown.front() : shown).dump(2));
  return code;
}

// --- cancel / hold / release ---

// The jobs `cancel --all`, `-u USER` and `--state STATE` take: a user's unfinished jobs (one's
// own unless -u names another), in one state when given; among the named ids when ids are named.
struct JobSelection {
  bool all = false;
  std::string user;
  std::string state;
  bool any() const { return all || !user.empty() || !state.empty(); }
};

Result<std::vector<JobId>> selected_ids(DaemonClient& client, const JobSelection& selection,
                                        const std::vector<JobId>& named) {
  proto::JobsRequest request;
  request.user = selection.user.empty() ? user_name(real_user_id()) : selection.user;
  if (!selection.state.empty()) {
    TRY_ASSIGN(JobState state, parse_job_state(selection.state));
    request.state = state;
  }
  const std::set<JobId> among(named.begin(), named.end());
  std::vector<JobId> ids;
  for (;;) {
    TRY_ASSIGN(proto::Response response, client.request(request));
    TRY_ASSIGN(proto::JobsResponse page, expect<proto::JobsResponse>(std::move(response)));
    for (const Job& job : page.jobs) {
      if (among.empty() || among.contains(job.id)) ids.push_back(job.id);
    }
    if (!page.more || page.jobs.empty()) return ids;
    request.after_id = page.jobs.back().id;
  }
}

// Says how many jobs it acted on when it was asked for more than one ("cancelled 12 jobs"); each
// job it could not act on is a line on stderr.
Result<int> act_on_jobs(proto::JobAction action, const std::vector<std::string>& id_texts,
                        const JobSelection& selection) {
  TRY_ASSIGN(JobIds ids, parse_any_job_ids(id_texts));
  if (selection.any() && !ids.slurm.empty()) {
    return fail("--all, --user and --state choose among gpupoold's jobs, not Slurm's ({})", slurm_id_text(ids.slurm.front()));
  }
  int code = act_on_slurm_jobs(action, ids.slurm);
  if (ids.local.empty() && !selection.any()) return code;
  TRY_ASSIGN(DaemonClient client, DaemonClient::connect(runtime_directory()));
  if (selection.any()) {
    TRY_ASSIGN(ids.local, selected_ids(client, selection, ids.local));
  }
  size_t acted = 0;
  // A request names at most a page of jobs, so that a long selection keeps within a message.
  for (size_t first = 0; first < ids.local.size(); first += proto::kMaxJobsPage) {
    size_t count = std::min<size_t>(proto::kMaxJobsPage, ids.local.size() - first);
    std::vector<JobId> some(ids.local.begin() + static_cast<std::ptrdiff_t>(first),
                            ids.local.begin() + static_cast<std::ptrdiff_t>(first + count));
    TRY_ASSIGN(proto::Response response, client.request(proto::JobActionRequest{action, std::move(some)}));
    TRY_ASSIGN(proto::JobActionResponse outcomes, expect<proto::JobActionResponse>(std::move(response)));
    for (const proto::ActionOutcome& outcome : outcomes.outcomes) {
      if (outcome.error) {
        fmt::print(stderr, "gpupool: {}\n", printable(*outcome.error, kMaxShownBytes));
        code = kExitError;
      } else {
        ++acted;
      }
    }
  }
  if (selection.any() || ids.local.size() > 1) {
    const char* done = action == proto::JobAction::Cancel ? "cancelled" : action == proto::JobAction::Hold ? "held" : "released";
    fmt::print("{} {} job{}\n", done, acted, acted == 1 ? "" : "s");
  }
  return code;
}

// --- logs ---

// A job's standard output goes to ours, its standard error to ours (`logs --both`).
Result<void> copy_new_bytes(int fd, FILE* out = stdout) {
  return read_each_chunk(fd, [out](std::string_view chunk) -> Result<void> {
    if (fwrite(chunk.data(), 1, chunk.size(), out) != chunk.size()) return fail("cannot write");
    return {};
  });
}

struct LogsOptions {
  std::string id;
  bool follow = false;
  bool errors = false;
  bool both = false;           // both streams, each to its own
  std::optional<size_t> tail;  // only the last lines (of each)
};

// What a log holds so far, or its last `tail` lines; either way read to its end, where a
// follower goes on.
Result<void> copy_log_so_far(int fd, std::optional<size_t> tail, FILE* out) {
  if (!tail) return copy_new_bytes(fd, out);
  LastLines last(*tail);
  TRY(read_each_chunk(fd, [&](std::string_view chunk) -> Result<void> {
    last.add(chunk);
    return {};
  }));
  std::string text = last.text();
  if (fwrite(text.data(), 1, text.size(), out) != text.size()) return fail("cannot write");
  return {};
}

// How often a followed log is looked at for new bytes, and a missing one asked for again.
constexpr std::chrono::milliseconds kLogPoll(100);

// A job and, opened by the daemon, one of its logs (none: not created yet).
struct OpenedLog {
  Job job;
  Fd fd;
};

// The daemon opens the log and passes the descriptor: the file is its user's alone, and an
// administrator may read it through the daemon.
Result<OpenedLog> request_log(ReconnectingClient& client, JobId id, proto::LogStream stream) {
  TRY_ASSIGN(auto received, client.request(proto::LogsRequest{id, stream}));
  if (!received) return fail("no answer from gpupoold");  // no deadline was given: not reached
  auto* answer = std::get_if<proto::JobsResponse>(&received->response);
  if (answer == nullptr || answer->jobs.size() != 1 || !answer->descriptors ||
      *answer->descriptors != received->descriptors.size()) {
    if (answer != nullptr && !answer->descriptors) {
      return fail("this gpupoold is older than this gpupool and does not send logs; restart it");
    }
    return fail("the daemon sent an unexpected answer: {}", proto::encode(received->response));
  }
  return OpenedLog{std::move(answer->jobs.front()),
                   received->descriptors.empty() ? Fd() : std::move(received->descriptors.front())};
}

// A log being read and where it goes.
struct ReadLog {
  Fd fd;
  FILE* out = stdout;
};

Result<void> copy_new_bytes(const std::vector<ReadLog>& logs) {
  for (const ReadLog& log : logs) {
    TRY(copy_new_bytes(log.fd.get(), log.out));
    fflush(log.out);
  }
  return {};
}

// Follows logs until the job finishes: looks for new bytes every kLogPoll (the reader may
// not be allowed to watch the files themselves); a `wait` on a second connection says when the
// job has ended. A restart of the daemon ends neither: the wait is asked of the next one.
// `waiter` has asked for the job's end already (before anything was printed: a connection made
// after the log so far was shown could find the daemon restarting, and none).
Result<void> follow_logs(const std::vector<ReadLog>& logs, ReconnectingClient& waiter) {
  for (;;) {
    TRY(copy_new_bytes(logs));
    TRY_ASSIGN(auto ended, waiter.answer(std::chrono::steady_clock::now() + kLogPoll));
    if (ended) return copy_new_bytes(logs);  // what the job wrote last
  }
}

// A queued job, or one whose supervisor is just starting, has no log yet: asks again every
// kLogPoll until the log exists or the job has ended without one (no fd).
Result<OpenedLog> open_once_created(ReconnectingClient& client, JobId id, proto::LogStream stream) {
  TRY_ASSIGN(ReconnectingClient waiter, ReconnectingClient::connect(runtime_directory()));
  TRY(waiter.start(proto::WaitRequest{{id}}));
  for (;;) {
    TRY_ASSIGN(auto ended, waiter.answer(std::chrono::steady_clock::now() + kLogPoll));
    TRY_ASSIGN(OpenedLog log, request_log(client, id, stream));
    if (log.fd || ended) return log;
  }
}

// A Slurm job's log is a file of its user's, read directly: looked at every kLogPoll, and
// Slurm asked every tenth time whether the job has ended (the last look comes after that).
Result<void> print_slurm_log(JobId id, const LogsOptions& options) {
  TRY_ASSIGN(std::vector<SlurmJobStatus> now, slurm_jobs_now(std::array{id}, true));
  const std::string path = options.errors ? now.at(0).job.stderr_path : now.at(0).job.stdout_path;
  if (path.empty()) return fail("Slurm names no {} file for job {}", options.errors ? "error" : "output", id);
  std::optional<Fd> fd;
  for (int look = 1;; ++look) {
    bool ended = !now.at(0).known || is_finished(now.at(0).job.state);
    if (!fd) {
      auto opened = open_existing(path, O_RDONLY);
      if (!opened) return fail("cannot read {}: {}", path, opened.error().message);
      fd = std::move(*opened);
      if (fd) TRY(copy_log_so_far(fd->get(), options.tail, stdout));
    } else {
      TRY(copy_new_bytes(fd->get()));
    }
    fflush(stdout);
    if (!options.follow || ended) break;
    std::this_thread::sleep_for(kLogPoll);
    if (look % 10 == 0) {
      TRY_ASSIGN(now, slurm_jobs_now(std::array{id}, false));
    }
  }
  // Not there although the job started: written on a node that does not share this directory.
  if (!fd && now.at(0).job.start_time) return fail("cannot read {}: {}", path, std::strerror(ENOENT));
  return {};
}

Result<int> show_logs(const LogsOptions& options) {
  TRY_ASSIGN(JobIds any, parse_any_job_ids(std::array{options.id}));
  if (any.local.size() + any.slurm.size() != 1) return fail("logs takes one job id, not {}", quote(options.id));
  if (!any.slurm.empty()) {
    if (options.both) return fail("--both reads gpupoold's jobs; a Slurm job's error file is `logs -e slurm:ID`");
    TRY(print_slurm_log(any.slurm.front(), options));
    return 0;
  }
  TRY_ASSIGN(ReconnectingClient client, ReconnectingClient::connect(runtime_directory()));
  std::vector<std::pair<proto::LogStream, FILE*>> streams;
  if (options.both || !options.errors) streams.emplace_back(proto::LogStream::Stdout, stdout);
  // Asked for alone (-e), the job's standard error is what this prints, on stdout.
  if (options.both || options.errors) streams.emplace_back(proto::LogStream::Stderr, options.both ? stderr : stdout);
  std::vector<ReadLog> logs;
  Job job;
  std::optional<ReconnectingClient> waiter;
  if (options.follow) {
    TRY_ASSIGN(ReconnectingClient connected, ReconnectingClient::connect(runtime_directory()));
    TRY(connected.start(proto::WaitRequest{{any.local.at(0)}}));
    waiter.emplace(std::move(connected));
  }
  for (auto [stream, out] : streams) {
    TRY_ASSIGN(OpenedLog log, request_log(client, any.local.at(0), stream));
    // Not written yet: a follower waits for it, unless the job ended without one.
    if (!log.fd && options.follow && !is_finished(log.job.state)) {
      TRY_ASSIGN(log, open_once_created(client, log.job.id, stream));
    }
    job = std::move(log.job);
    if (!log.fd) continue;
    TRY(copy_log_so_far(log.fd.get(), options.tail, out));
    fflush(out);
    logs.push_back(ReadLog{std::move(log.fd), out});
  }
  if (waiter && !logs.empty() && !is_finished(job.state)) TRY(follow_logs(logs, *waiter));
  return 0;
}

// --- drain / resume ---

// Says what it did, on stdout: "drained: ...", "resumed: ...".
Result<int> admin(proto::AdminAction action, const std::string& reason, const std::string& gpu_list,
                  bool suspend = false) {
  if (reason.size() > proto::kMaxReasonBytes) return fail("--reason is longer than {} bytes", proto::kMaxReasonBytes);
  std::vector<unsigned> gpus;
  if (!gpu_list.empty()) {  // indices or UUIDs, as `run --gpus` takes them
    TRY_ASSIGN(auto backend, open_pool_backend());
    TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
    TRY_ASSIGN(gpus, find_gpus(machine.gpus, split(gpu_list, ',')));
  }
  TRY_ASSIGN(DaemonClient client, DaemonClient::connect(runtime_directory()));
  TRY_ASSIGN(proto::Response response, client.request(proto::AdminRequest{action, reason, gpus, suspend}));
  int code = 0;
  if (suspend) {
    TRY_ASSIGN(proto::JobActionResponse suspended, expect<proto::JobActionResponse>(std::move(response)));
    for (const proto::ActionOutcome& outcome : suspended.outcomes) {
      if (outcome.error) {
        fmt::print(stderr, "gpupool: job {} runs on: {}\n", outcome.id, printable(*outcome.error, kMaxShownBytes));
        code = kExitError;
        continue;
      }
      TRY_ASSIGN(int waited, await_suspend(client, outcome.id));
      code = std::max(code, waited);
    }
  } else {
    TRY(expect<proto::Ack>(std::move(response)));
  }
  TRY_ASSIGN(response, client.request(proto::StatusRequest{}));
  TRY_ASSIGN(proto::StatusResponse status, expect<proto::StatusResponse>(std::move(response)));
  bool drain = action == proto::AdminAction::Drain;
  if (!gpus.empty()) {
    std::string which = fmt::format("GPU{} {}", gpus.size() == 1 ? "" : "s", fmt::join(gpus, ","));
    if (drain) {
      fmt::print("drained {}: {}; no new job starts there until `gpupool resume --gpu {}`\n", which,
                 suspend ? "its jobs are suspended, to resume there" : "jobs running there go on",
                 fmt::join(gpus, ","));
    } else {
      fmt::print("resumed {}: jobs may start there again{}\n", which,
                 status.drained ? " (the queue stays drained until `gpupool resume`)" : "");
    }
  } else if (drain) {
    fmt::print("drained: no job starts until `gpupool resume`; {} running go on, {} queued wait\n", status.running,
               status.queued);
  } else {
    fmt::print("resumed: queued jobs start again ({} queued, {} running){}\n", status.queued, status.running,
               status.drained_gpus.empty() ? "" : fmt::format("; {} GPU(s) stay drained (`gpupool resume --gpu`)",
                                                              status.drained_gpus.size()));
  }
  return code;
}

}  // namespace

void add_queue_commands(CLI::App& app, int& exit_code, const std::vector<std::string>& program) {
  {
    auto* cmd = app.add_subcommand("submit", "Queue a batch job with gpupoold (or Slurm: --slurm); prints its id");
    auto options = std::make_shared<SubmitOptions>();
    // The last value given wins: a batch script's #GPUPOOL directives come before the command line's.
    cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    cmd->add_option("-g,--gpu-count", options->count, "How many GPUs (default 1)")->check(whole_number(1, 1024));
    cmd->add_option("--mem", options->memory, "Share the GPUs: this much of each one's memory (e.g. 20G)")
        ->type_name("SIZE")
        ->check(memory_size_value());
    add_compute_share_option(*cmd, options->sm_percent);
    add_mig_option(*cmd, options->mig);
    cmd->add_option("--name", options->name, "The job's name (default: the command's)");
    cmd->add_option("--priority", options->priority, "Higher runs first; above 0 needs an administrator");
    // One string (not a list option), so `--after 3 -- cmd` cannot swallow the command.
    cmd->add_option("--after", options->after,
                    "Start only after these jobs are done (ids, comma-separated; slurm:ID with --slurm)")
        ->type_name("JOB_ID");
    cmd->add_option("--retries", options->retries, "Run again after a failure, up to this many times");
    cmd->add_option("--time", options->time_limit, "Time limit (e.g. 30m, 2h): SIGTERM, then SIGKILL")
        ->type_name("DURATION")
        ->check(duration_value());
    cmd->add_flag("--hold", options->hold, "Queue it held: it starts only after `gpupool release`");
    auto* array = cmd->add_option("--array", options->array,
                                  "An array job: one task per index (0-99, 1,3,5-7, 0-15:4), at most N running "
                                  "with %N; prints FIRST-LAST of their ids")
                      ->type_name("SPEC")
                      ->check(array_spec_value());
    add_slurm_submit_options(*cmd, options->slurm);
    array->excludes("--slurm");
    cmd->add_option("command", options->command,
                    "The command and its arguments: gpupool's options end at its first word or at --; a script's "
                    "#GPUPOOL lines are options too. None: a script on standard input")
        ->type_name("COMMAND")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    cmd->footer("The job runs as you, in this directory, with this environment and umask; its output goes to log\n"
                "files (`gpupool logs ID`). It sees exactly its GPUs through CUDA_VISIBLE_DEVICES.\n"
                "Each task of an --array is a job of its own, with GPUPOOL_ARRAY_TASK_ID (its index) and\n"
                "GPUPOOL_ARRAY_JOB_ID (the first task's id) in its environment.\n"
                "A script's leading `#GPUPOOL --gpu-count 2` lines are options too (the command line's win);\n"
                "with no command, the script comes from standard input (run by its shell).\n"
                "With --slurm, sbatch queues it on the cluster instead and gpupool records it: jobs, show,\n"
                "cancel, hold, release, wait and logs take its slurm:ID (docs/slurm.md).");
    cmd->callback([&exit_code, &program, options] {
      options->command = required_program(program);
      run_command(exit_code, [&] { return submit(*options); });
    });
  }
  {
    auto* cmd = app.add_subcommand("jobs", "List the queue: queued, held and running jobs");
    auto options = std::make_shared<JobsOptions>();
    cmd->add_flag("-a,--all", options->all, "Include finished jobs");
    cmd->add_option("-u,--user", options->user, "Only this user's jobs");
    cmd->add_option("-s,--state", options->state, "Only jobs in this state (queued, held, running, done, failed, cancelled)")
        ->check(job_state_value());
    cmd->add_flag("--json", options->json, "Print JSON");
    cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return list_jobs(*options); }); });
  }
  {
    auto* cmd = app.add_subcommand("show", "Everything about jobs");
    auto ids = std::make_shared<std::vector<std::string>>();
    auto json = std::make_shared<bool>(false);
    cmd->add_option("ids", *ids, "Job ids")->required()->type_name("JOB_ID")->check(job_ids_value());
    cmd->add_flag("--json", *json, "Print JSON: the job's object for one id, an array of them for several");
    cmd->callback([&exit_code, ids, json] { run_command(exit_code, [&] { return show_jobs(*ids, *json); }); });
  }
  struct Action {
    const char* name;
    const char* help;
    proto::JobAction action;
  };
  for (const Action& action : {Action{"cancel", "Cancel jobs (running ones get SIGTERM, then SIGKILL)", proto::JobAction::Cancel},
                               Action{"hold", "Keep queued jobs from starting", proto::JobAction::Hold},
                               Action{"release", "Let held jobs start again", proto::JobAction::Release}}) {
    auto* cmd = app.add_subcommand(action.name, action.help);
    auto ids = std::make_shared<std::vector<std::string>>();
    auto selection = std::make_shared<JobSelection>();
    auto* named = cmd->add_option("ids", *ids, "Job ids, and ranges like 40-45")->type_name("JOB_ID")->check(job_ids_value());
    proto::JobAction which = action.action;
    if (which == proto::JobAction::Cancel) {
      cmd->add_flag("-a,--all", selection->all, "All your queued, held and running jobs");
      cmd->add_option("-u,--user", selection->user, "All of this user's unfinished jobs")->type_name("USER");
      cmd->add_option("-s,--state", selection->state, "Only jobs in this state (queued, held, running)")
          ->type_name("STATE")
          ->check(CLI::Validator(
              [](std::string& text) -> std::string {
                bool unfinished = text == "queued" || text == "held" || text == "running";
                return unfinished ? "" : fmt::format("--state takes queued, held or running, not {}", quote(text));
              },
              "STATE"));
      cmd->footer("Without ids, --all, --user or --state choose the jobs; with ids, they choose among them.");
    } else {
      named->required();
    }
    cmd->callback([&exit_code, ids, which, selection] {
      // A bare `cancel` cancels nothing by accident.
      if (ids->empty() && !selection->any()) throw CLI::ValidationError("name the jobs: ids, or --all, --user or --state");
      run_command(exit_code, [&] { return act_on_jobs(which, *ids, *selection); });
    });
  }
  {
    auto* cmd = app.add_subcommand("logs", "Print a job's output");
    auto options = std::make_shared<LogsOptions>();
    cmd->add_option("id", options->id, "Job id")->required()->type_name("JOB_ID")->check(job_ids_value());
    cmd->add_flag("-f,--follow", options->follow, "Keep printing until the job finishes");
    auto* errors = cmd->add_flag("-e,--stderr", options->errors, "Its standard error instead of its standard output");
    cmd->add_flag("-b,--both", options->both,
                  "Its standard output and its standard error, each to ours (a terminal shows them together)")
        ->excludes(errors);
    cmd->add_option("-n,--tail", options->tail, "Only the last N lines written so far (then, with -f, what follows)")
        ->type_name("N")
        ->check(whole_number(0, 1000000000));
    cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return show_logs(*options); }); });
  }
  {
    auto* cmd = app.add_subcommand("drain", "Start no more jobs (running ones go on); administrators only");
    auto reason = std::make_shared<std::string>();
    auto gpus = std::make_shared<std::string>();
    auto suspend = std::make_shared<bool>(false);
    cmd->add_option("-r,--reason", *reason, "Why, shown to everyone who looks at the queue (jobs, show, top)")
        ->type_name("TEXT");
    cmd->add_option("--gpu", *gpus, "Only these GPUs (indices, comma-separated): for the maintenance of a card")
        ->type_name("GPUS");
    cmd->add_flag("--suspend", *suspend,
                  "Also suspend the jobs running there (`gpupool suspend`): they resume on their GPUs once "
                  "these are resumed and free");
    cmd->callback([&exit_code, reason, gpus, suspend] {
      run_command(exit_code, [&] { return admin(proto::AdminAction::Drain, *reason, *gpus, *suspend); });
    });
  }
  {
    auto* cmd = app.add_subcommand(
        "resume", "Start jobs again after `gpupool drain` (administrators only), or resume suspended jobs");
    auto gpus = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<std::string>>();
    auto no_wait = std::make_shared<bool>(false);
    cmd->add_option("ids", *ids, "Suspended jobs to resume (`gpupool suspend`), on their GPUs once free")
        ->type_name("JOB_ID")
        ->check(job_ids_value());
    auto* gpu_option =
        cmd->add_option("--gpu", *gpus, "Only these drained GPUs (indices, comma-separated)")->type_name("GPUS");
    cmd->add_flag("--no-wait", *no_wait, "With job ids: return once they wait for their GPUs")->excludes(gpu_option);
    cmd->callback([&exit_code, gpus, ids, no_wait] {
      if (!ids->empty() && !gpus->empty()) throw CLI::ValidationError("give job ids or --gpu, not both");
      if (!ids->empty()) return run_command(exit_code, [&] { return resume_jobs(*ids, !*no_wait); });
      run_command(exit_code, [&] { return admin(proto::AdminAction::Resume, "", *gpus); });
    });
  }
}

}  // namespace gpupool::cli
