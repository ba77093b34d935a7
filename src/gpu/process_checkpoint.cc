#include "gpu/process_checkpoint.h"

#include <algorithm>

#include "base/text.h"
#include "os/host_files.h"

namespace gpupool {
namespace {

constexpr const char* kHelper = "gpupool-cuda-checkpoint";

// The helper's exit statuses (cuda_checkpoint_main.cc).
constexpr int kDone = 0;
constexpr int kStepFailed = 1;

// Why the helper gave no outcome: its one line on stderr (usage, no driver, no checkpoint API),
// or how it ended.
Error helper_failure(const ProgramOutcome& helper) {
  std::string line = helper.err.substr(0, helper.err.find('\n'));
  if (line.empty()) return fail("{} ended with exit {} and said nothing", kHelper, helper.exit_code);
  return fail("{} (exit {})", line.substr(0, 300), helper.exit_code);
}

Result<CudaStepOutcome> run_helper(const CheckpointProgram& program, std::string_view step,
                                   const std::vector<pid_t>& pids, std::chrono::milliseconds lock_timeout,
                                   std::chrono::milliseconds timeout) {
  if (pids.empty()) return fail("no process to {}", step);
  std::vector<std::string> argv = {private_library_directory() + "/" + kHelper};
  for (std::string& argument : checkpoint_helper_arguments(program, step, pids, lock_timeout)) {
    argv.push_back(std::move(argument));
  }
  ProgramOptions options;
  options.timeout = timeout;
  TRY_ASSIGN(ProgramOutcome helper, run_program(argv, options));
  return checkpoint_answer(helper, pids);
}

}  // namespace

const char* to_string(CudaCheckpointStep step) {
  switch (step) {
    case CudaCheckpointStep::Lock:
      return "lock";
    case CudaCheckpointStep::Checkpoint:
      return "checkpoint";
    case CudaCheckpointStep::Restore:
      return "restore";
    case CudaCheckpointStep::Unlock:
      return "unlock";
  }
  return "?";
}

bool CudaStepOutcome::ok() const {
  return std::all_of(pids.begin(), pids.end(), [](const CudaPidOutcome& pid) { return pid.ok(); });
}

std::string CudaStepOutcome::failure() const {
  for (const CudaPidOutcome& pid : pids) {
    if (!pid.ok()) return fmt::format("pid {}: {} (state {})", pid.pid, pid.result, pid.state);
  }
  return "";
}

Result<CudaStepOutcome> run_checkpoint_step(const CheckpointProgram& program, CudaCheckpointStep step,
                                            const std::vector<pid_t>& pids, std::chrono::milliseconds lock_timeout,
                                            std::chrono::milliseconds timeout) {
  return run_helper(program, to_string(step), pids, lock_timeout, timeout);
}

Result<CudaStepOutcome> read_checkpoint_states(const CheckpointProgram& program, const std::vector<pid_t>& pids,
                                               std::chrono::milliseconds timeout) {
  return run_helper(program, "state", pids, std::chrono::milliseconds(0), timeout);
}

std::vector<std::string> checkpoint_helper_arguments(const CheckpointProgram& program, std::string_view step,
                                                     const std::vector<pid_t>& pids,
                                                     std::chrono::milliseconds lock_timeout) {
  std::vector<std::string> arguments = {"--library", program.library};
  if (step == to_string(CudaCheckpointStep::Lock) && lock_timeout.count() > 0) {
    arguments.insert(arguments.end(), {"--lock-timeout-ms", std::to_string(lock_timeout.count())});
  }
  arguments.emplace_back(step);
  for (pid_t pid : pids) arguments.push_back(std::to_string(pid));
  return arguments;
}

Result<CudaStepOutcome> parse_checkpoint_output(std::string_view output, const std::vector<pid_t>& pids) {
  CudaStepOutcome outcome;
  for (const std::string& line : split(output, '\n')) {
    if (line.empty()) continue;
    std::vector<std::string> words = split(line, ' ');
    auto pid = words.size() == 4 ? parse_number<pid_t>(words[0]) : std::nullopt;
    auto seconds = words.size() == 4 ? parse_number<double>(words[3]) : std::nullopt;
    if (!pid || !seconds || words[1].empty() || words[2].empty()) {
      return fail("{} said '{}', not 'PID RESULT STATE SECONDS'", kHelper, line.substr(0, 200));
    }
    if (outcome.pids.size() == pids.size() || pids[outcome.pids.size()] != *pid) {
      return fail("{} answered for pid {}, which it was not asked about next", kHelper, *pid);
    }
    if (!outcome.ok()) return fail("{} went on after pid {} failed", kHelper, outcome.pids.back().pid);
    outcome.pids.push_back({.pid = *pid, .result = words[1], .state = words[2], .seconds = *seconds});
  }
  return outcome;
}

Result<CudaStepOutcome> checkpoint_answer(const ProgramOutcome& helper, const std::vector<pid_t>& pids) {
  if (helper.exit_code != kDone && helper.exit_code != kStepFailed) return helper_failure(helper);
  TRY_ASSIGN(CudaStepOutcome outcome, parse_checkpoint_output(helper.out, pids));
  bool complete = helper.exit_code == kDone ? outcome.ok() && outcome.pids.size() == pids.size()
                                            : !outcome.pids.empty() && !outcome.ok();
  if (!complete) {
    return fail("{} exited {} after answering for {} of {} processes", kHelper, helper.exit_code, outcome.pids.size(),
                pids.size());
  }
  return outcome;
}

}  // namespace gpupool
