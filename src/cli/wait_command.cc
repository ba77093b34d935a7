// `gpupool wait`: blocks until jobs end, then says how they ended in one line and in its exit
// status, for people and for scripts (docs/daemon.md, "Waiting for jobs"). It carries on across
// a restart of the daemon (ReconnectingClient).
#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/duration.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/report_command.h"
#include "cli/slurm_queue.h"
#include "cli/value_checks.h"
#include "cli/wait_summary.h"
#include "slurm/slurm_jobs.h"
#include "os/accounts.h"
#include "os/clock.h"
#include "os/host_files.h"
#include "os/process.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

struct WaitOptions {
  std::vector<std::string> ids;
  bool all = false;
  std::string since;    // --all: jobs submitted since then ("" : since the calling shell started)
  std::string timeout;  // "": no limit
  bool json = false;
  bool verbose = false;
  bool quiet = false;
};

// Each wait is answered with all its jobs in one message: ids are waited for a batch at a time
// (all of them must end anyway), each answer well within the message limit.
constexpr size_t kWaitBatch = proto::kMaxJobsPage / 2;

// The jobs in `ids` once each has ended. Those still unended when `deadline` passes are as they
// stand then.
Result<std::vector<Job>> wait_for_ids(ReconnectingClient& client, const std::vector<JobId>& ids,
                                      std::optional<Deadline> deadline) {
  std::vector<Job> jobs;
  for (size_t first = 0; first < ids.size(); first += kWaitBatch) {
    std::vector<JobId> batch(ids.begin() + static_cast<std::ptrdiff_t>(first),
                             ids.begin() + static_cast<std::ptrdiff_t>(std::min(first + kWaitBatch, ids.size())));
    TRY_ASSIGN(auto answer, client.request(proto::WaitRequest{batch}, deadline));
    if (answer) {
      TRY_ASSIGN(proto::JobsResponse ended, expect<proto::JobsResponse>(std::move(answer->response)));
      jobs.insert(jobs.end(), std::make_move_iterator(ended.jobs.begin()), std::make_move_iterator(ended.jobs.end()));
      continue;
    }
    // Out of time: the rest as they stand.
    for (size_t rest = first; rest < ids.size(); ++rest) {
      TRY_ASSIGN(std::vector<Job> shown, client.jobs(proto::ShowRequest{ids[rest]}));
      if (shown.empty()) return fail("no job {}", ids[rest]);
      jobs.push_back(std::move(shown.front()));
    }
    break;
  }
  return jobs;
}

// The caller's jobs submitted since `since` (ended or not), with an id above `after_id`.
Result<std::vector<Job>> jobs_of_mine(ReconnectingClient& client, double since, JobId after_id) {
  proto::JobsRequest request;
  request.user = user_name(real_user_id());
  request.all = true;
  request.after_id = after_id;
  request.submitted_since = since;
  std::vector<Job> jobs;
  for (;;) {
    TRY_ASSIGN(std::vector<Job> page, client.jobs(request));
    if (page.empty()) return jobs;
    request.after_id = page.back().id;
    bool full = page.size() == request.limit;
    jobs.insert(jobs.end(), std::make_move_iterator(page.begin()), std::make_move_iterator(page.end()));
    if (!full) return jobs;
  }
}

// When the shell (or script) that runs `wait --all` started: the jobs it submitted count, also
// those that have already ended.
double caller_start_time() {
  auto started = HostFiles().process_start_time(static_cast<uint32_t>(own_parent_pid()));
  return started.value_or(unix_now());
}

// `wait --all`: every job of the caller's submitted since `since`, ended or not, and those it
// submits while the wait goes on (a job that submits more, a loop still submitting), until none
// is left unended. Held jobs are left out: they never end by themselves. Ids only grow, so the
// jobs submitted since a look are those above the largest id it saw.
Result<std::vector<Job>> wait_for_mine(ReconnectingClient& client, double since, std::optional<Deadline> deadline) {
  std::vector<Job> jobs;
  TRY_ASSIGN(std::vector<Job> seen, jobs_of_mine(client, since, 0));
  for (;;) {
    std::vector<JobId> unfinished;
    JobId largest = 0;
    for (Job& job : seen) {
      largest = std::max(largest, job.id);
      if (job.state == JobState::Held) continue;
      if (is_finished(job.state)) {
        jobs.push_back(std::move(job));
      } else {
        unfinished.push_back(job.id);
      }
    }
    if (unfinished.empty()) return jobs;
    TRY_ASSIGN(std::vector<Job> waited, wait_for_ids(client, unfinished, deadline));
    bool timed_out = std::any_of(waited.begin(), waited.end(), [](const Job& job) { return !is_finished(job.state); });
    jobs.insert(jobs.end(), std::make_move_iterator(waited.begin()), std::make_move_iterator(waited.end()));
    if (timed_out) return jobs;
    TRY_ASSIGN(seen, jobs_of_mine(client, since, largest));
  }
}

// gpupoold's jobs, then Slurm's (slurm:ID): all of them must end anyway.
Result<int> wait_for_jobs(const WaitOptions& options) {
  if (options.all == !options.ids.empty()) return fail("wait needs job ids or --all (not both)");
  if (!options.since.empty() && !options.all) return fail("--since goes with --all");
  std::optional<Deadline> deadline;
  if (!options.timeout.empty()) {
    TRY_ASSIGN(double timeout_s, parse_duration_s(options.timeout));
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  }
  JobIds ids;
  if (!options.all) {
    TRY_ASSIGN(ids, parse_any_job_ids(options.ids));
  }
  std::vector<WaitedJob> waited;
  nlohmann::json json = nlohmann::json::array();
  if (options.all || !ids.local.empty()) {
    TRY_ASSIGN(ReconnectingClient client, ReconnectingClient::connect(runtime_directory()));
    std::vector<Job> jobs;
    if (options.all) {
      double since = caller_start_time();
      if (!options.since.empty()) {
        TRY_ASSIGN(since, parse_since(options.since, unix_now()));
      }
      TRY_ASSIGN(jobs, wait_for_mine(client, since, deadline));
    } else {
      TRY_ASSIGN(jobs, wait_for_ids(client, ids.local, deadline));
    }
    for (Job& job : jobs) {
      if (options.json) json.push_back(proto::job_to_json(job));
      waited.push_back(WaitedJob{std::to_string(job.id), std::move(job), true});
    }
  }
  TRY_ASSIGN(std::vector<SlurmJobStatus> slurm, wait_for_slurm_jobs(ids.slurm));
  for (SlurmJobStatus& status : slurm) {
    if (options.json) json.push_back(slurm_job_json(status));
    waited.push_back(WaitedJob{slurm_id_text(status.job.id), std::move(status.job), status.known});
  }
  if (options.json) fmt::print("{}\n", json.dump(2));
  if (!options.quiet && waited.empty()) fmt::print(stderr, "gpupool: no jobs of yours to wait for\n");
  if (!options.quiet) {
    if (options.verbose && waited.size() > 1) {
      for (const WaitedJob& job : waited) fmt::print(stderr, "gpupool: {}\n", waited_job_line(job));
    }
    if (!waited.empty()) fmt::print(stderr, "gpupool: {}\n", wait_summary(waited));
  }
  return wait_exit_code(waited);
}

}  // namespace

void add_wait_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<WaitOptions>();
  auto* cmd = app.add_subcommand("wait", "Wait until jobs end; one line says how they ended, the exit code the worst");
  cmd->add_option("ids", options->ids, "Job ids")->type_name("JOB_ID")->check(job_ids_value());
  cmd->add_flag("-a,--all", options->all,
                "Every job of yours submitted since the shell running wait started (also those ended already), "
                "and those submitted meanwhile, until none is left");
  cmd->add_option("--since", options->since,
                  "With --all: the jobs submitted since then instead, a duration back from now (2h) or a date")
      ->type_name("WHEN")
      ->check(since_value());
  cmd->add_option("-t,--timeout", options->timeout,
                  "Give up after this long (30s, 10m, 2h): exit 124 and say which jobs have not ended")
      ->type_name("DURATION")
      ->check(duration_value());
  cmd->add_flag("--json", options->json, "Print the jobs as a JSON array on stdout (as show --json prints each)");
  cmd->add_flag("-v,--verbose", options->verbose, "Also print one line per job");
  cmd->add_flag("-q,--quiet", options->quiet, "Print nothing on stderr; only the exit code tells");
  cmd->footer(
      "The exit code is 0 when every job is done, 124 when --timeout passed first, else the highest\n"
      "exit code among the jobs (1 for one that ended without one). A restart of gpupoold does not\n"
      "end the wait: it carries on with the next daemon.");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return wait_for_jobs(*options); }); });
}

}  // namespace gpupool::cli
