#include "gpu/process_checkpoint.h"

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

}  // namespace

Result<CheckpointOutcome> run_checkpoint_step(const CheckpointProgram& program, CheckpointStep step,
                                              const std::vector<pid_t>& pids, std::chrono::milliseconds lock_timeout,
                                              std::chrono::milliseconds timeout) {
  if (pids.empty()) return fail("no process to {}", to_string(step));
  std::vector<std::string> argv = {private_library_directory() + "/" + kHelper};
  for (std::string& argument : checkpoint_helper_arguments(program, step, pids, lock_timeout)) {
    argv.push_back(std::move(argument));
  }
  ProgramOptions options;
  options.timeout = timeout;
  TRY_ASSIGN(ProgramOutcome helper, run_program(argv, options));
  return checkpoint_answer(helper, pids);
}

std::vector<std::string> checkpoint_helper_arguments(const CheckpointProgram& program, CheckpointStep step,
                                                     const std::vector<pid_t>& pids,
                                                     std::chrono::milliseconds lock_timeout) {
  std::vector<std::string> arguments = {"--library", program.library};
  if (!program.lock_directory.empty()) arguments.insert(arguments.end(), {"--lock-dir", program.lock_directory});
  if (step == CheckpointStep::Lock && lock_timeout.count() > 0) {
    arguments.insert(arguments.end(), {"--lock-timeout-ms", std::to_string(lock_timeout.count())});
  }
  arguments.emplace_back(to_string(step));
  for (pid_t pid : pids) arguments.push_back(std::to_string(pid));
  return arguments;
}

Result<CheckpointOutcome> parse_checkpoint_output(std::string_view output, const std::vector<pid_t>& pids) {
  CheckpointOutcome outcome;
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
    if (!outcome.ok(outcome.pids.size())) return fail("{} went on after pid {} failed", kHelper, outcome.pids.back().pid);
    outcome.pids.push_back({.pid = *pid,
                            .result = words[1],
                            .state = parse_process_checkpoint_state(words[2]),
                            .seconds = *seconds});
  }
  return outcome;
}

Result<CheckpointOutcome> checkpoint_answer(const ProgramOutcome& helper, const std::vector<pid_t>& pids) {
  if (helper.exit_code != kDone && helper.exit_code != kStepFailed) return helper_failure(helper);
  TRY_ASSIGN(CheckpointOutcome outcome, parse_checkpoint_output(helper.out, pids));
  bool complete = helper.exit_code == kDone ? outcome.ok(pids.size())
                                            : !outcome.pids.empty() && !outcome.ok(outcome.pids.size());
  if (!complete) {
    return fail("{} exited {} after answering for {} of {} processes", kHelper, helper.exit_code, outcome.pids.size(),
                pids.size());
  }
  return outcome;
}

}  // namespace gpupool
