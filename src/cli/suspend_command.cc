// gpupool suspend JOB... and gpupool resume JOB... (docs/suspend.md): the daemon checkpoints a
// running job's GPU processes to host memory and lets its GPUs go, or restores them once its GPUs
// are free. Both wait, unless --no-wait, until the daemon has done it or said why not.
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "base/display_text.h"
#include "base/quote.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/value_checks.h"
#include "jobs/job_text.h"
#include "protocol/messages.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

// How often the job is looked at while the daemon works on it: a checkpoint takes seconds.
constexpr auto kPoll = std::chrono::milliseconds(100);

Result<Job> show(DaemonClient& client, JobId id) {
  TRY_ASSIGN(proto::Response response, client.request(proto::ShowRequest{id}));
  TRY_ASSIGN(proto::JobsResponse shown, expect<proto::JobsResponse>(std::move(response)));
  if (shown.jobs.empty()) return fail("job {} has disappeared", id);
  return std::move(shown.jobs.front());
}

}  // namespace

Result<int> await_suspend(DaemonClient& client, JobId id) {
  auto began = std::chrono::steady_clock::now();
  while (true) {
    TRY_ASSIGN(Job job, show(client, id));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (job.state == JobState::Suspended) {
      fmt::print("suspended job {} in {:.1f} s: {}\n", id, seconds, printable(suspension_text(job), kMaxShownBytes));
      return 0;
    }
    if (job.state != JobState::Running || !job.reason.starts_with("being suspended")) {
      std::string why = job.state == JobState::Running ? job.reason : fmt::format("it is {}: {}", state_text(job), job.reason);
      fmt::print(stderr, "gpupool: job {} {}\n", id, printable(why, kMaxShownBytes));
      return kExitError;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

namespace {

// Waits until the daemon has restored the job on its GPUs (0), or it ended (1).
Result<int> await_resume(DaemonClient& client, JobId id) {
  auto began = std::chrono::steady_clock::now();
  bool told_waiting = false;
  while (true) {
    TRY_ASSIGN(Job job, show(client, id));
    if (job.state == JobState::Running) {
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      fmt::print("resumed job {} on GPU {} in {:.1f} s\n", id, gpu_list_text(job.gpus), seconds);
      return 0;
    }
    if (job.state != JobState::Suspended) {
      fmt::print(stderr, "gpupool: job {} {}: {}\n", id, state_text(job), printable(job.reason, kMaxShownBytes));
      return kExitError;
    }
    if (!told_waiting && job.reason.starts_with("waiting")) {
      fmt::print(stderr, "job {} is {} (GPU {})\n", id, printable(job.reason, kMaxShownBytes), gpu_list_text(job.gpus));
      told_waiting = true;
    }
    std::this_thread::sleep_for(kPoll);
  }
}

Result<int> suspend_or_resume(proto::JobAction action, const std::vector<std::string>& id_texts, bool wait) {
  TRY_ASSIGN(std::vector<JobId> ids, parse_job_ids(id_texts));
  TRY_ASSIGN(DaemonClient client, DaemonClient::connect(runtime_directory()));
  TRY_ASSIGN(proto::Response response, client.request(proto::JobActionRequest{action, ids}));
  TRY_ASSIGN(proto::JobActionResponse outcomes, expect<proto::JobActionResponse>(std::move(response)));
  int code = 0;
  std::vector<JobId> accepted;
  for (const proto::ActionOutcome& outcome : outcomes.outcomes) {
    if (outcome.error) {
      fmt::print(stderr, "gpupool: {}\n", printable(*outcome.error, kMaxShownBytes));
      code = kExitError;
    } else {
      accepted.push_back(outcome.id);
    }
  }
  for (JobId id : accepted) {
    if (!wait) {
      fmt::print("{} job {}\n", action == proto::JobAction::Suspend ? "suspending" : "resuming", id);
      continue;
    }
    TRY_ASSIGN(int waited, action == proto::JobAction::Suspend ? await_suspend(client, id) : await_resume(client, id));
    code = std::max(code, waited);
  }
  return code;
}

}  // namespace

Result<int> resume_jobs(const std::vector<std::string>& ids, bool wait) {
  return suspend_or_resume(proto::JobAction::Resume, ids, wait);
}

void add_suspend_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "suspend", "Checkpoint running jobs' GPU memory to host memory and free their GPUs (`gpupool resume JOB`)");
  auto ids = std::make_shared<std::vector<std::string>>();
  auto no_wait = std::make_shared<bool>(false);
  cmd->add_option("ids", *ids, "Job ids, and ranges like 40-45")
      ->required()
      ->type_name("JOB_ID")
      ->check(job_ids_value());
  cmd->add_flag("--no-wait", *no_wait, "Return once the daemon has begun, not when the checkpoint is done");
  cmd->footer(
      "The job's processes that use its GPUs are checkpointed, all together, by the CUDA driver "
      "(driver 550 or newer); they stay alive, blocked at their next CUDA call, until resumed on the same GPUs. "
      "What the driver refuses is undone and the job runs on. docs/suspend.md says more.");
  cmd->callback([&exit_code, ids, no_wait] {
    run_command(exit_code, [&] { return suspend_or_resume(proto::JobAction::Suspend, *ids, !*no_wait); });
  });
}

}  // namespace gpupool::cli
