#include "daemon/mps_controls.h"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/text.h"
#include "os/files.h"
#include "os/program.h"
#include "sched/mps.h"

namespace gpupool {
namespace {

// How long a started control daemon has to answer: `-d` returns once it has forked, which may be
// before it listens.
constexpr auto kAnswerWithin = std::chrono::seconds(5);
constexpr auto kAskEvery = std::chrono::milliseconds(20);

Result<ProgramOutcome> tell_control(const MpsDirectories& directories, const std::string& command) {
  ProgramOptions options;
  options.input = command + "\n";
  options.environment = {"CUDA_MPS_PIPE_DIRECTORY=" + directories.pipe};
  options.not_found_hint = "is CUDA's MPS installed? (slice_enforcement = \"watch\" does without it)";
  return run_program({kMpsControlProgram}, options);
}

// Whether a control daemon answers on the directories' pipe.
bool control_answers(const MpsDirectories& directories) {
  auto outcome = tell_control(directories, "get_server_list");
  return outcome && outcome->exit_code == 0 && parse_mps_server_list(outcome->out).ok();
}

// What a program said on failing, in one line.
std::string first_words(const ProgramOutcome& outcome) {
  std::string text = outcome.err.empty() ? outcome.out : outcome.err;
  std::vector<std::string> lines = split(text, '\n');
  std::erase_if(lines, [](const std::string& line) { return line.empty(); });
  return lines.empty() ? fmt::format("exit status {}", outcome.exit_code) : lines.front();
}

}  // namespace

bool mps_in_effect(SliceEnforcement mode) {
  return mode == SliceEnforcement::Mps || (mode == SliceEnforcement::Auto && find_program(kMpsControlProgram));
}

void MpsControls::adopt(const std::vector<std::string>& gpu_uuids) {
  for (const std::string& gpu : gpu_uuids) {
    MpsDirectories directories = mps_directories(runtime_dir_, gpu);
    if (link_status(directories.pipe) && control_answers(directories)) running_.insert(gpu);
  }
}

Result<std::vector<std::string>> MpsControls::client_environment(const std::string& gpu_uuid, uint64_t slice_mib,
                                                                 std::optional<unsigned> sm_percent) {
  if (!running_.contains(gpu_uuid)) {
    if (auto started = start(gpu_uuid); !started) {
      return fail("MPS control for GPU {}: {}", gpu_uuid, started.error().message);
    }
  }
  return mps_client_environment(mps_directories(runtime_dir_, gpu_uuid), slice_mib, sm_percent);
}

Result<void> MpsControls::start(const std::string& gpu_uuid) {
  MpsDirectories directories = mps_directories(runtime_dir_, gpu_uuid);
  if (auto too_long = mps_pipe_too_long(directories)) return fail("{}", *too_long);
  // Every user's clients reach the pipe; the control daemon keeps its own files' modes.
  for (const std::string& directory : {runtime_dir_ + "/mps", directories.root, directories.pipe, directories.log}) {
    TRY(make_directory(directory, 0755));
    TRY(change_mode(directory, 0755));  // not the daemon's umask
  }
  if (control_answers(directories)) {  // left by an earlier daemon and not adopted: the same GPU's
    running_.insert(gpu_uuid);
    return {};
  }
  ProgramOptions options;
  options.environment = mps_control_environment(directories, gpu_uuid);
  // Under the usual umask, not the daemon's 077: the files it makes in the pipe directory are
  // for every user's clients. (The program's name is the shell's $0, never parsed as a command.)
  TRY_ASSIGN(ProgramOutcome outcome,
             run_program({"sh", "-c", "umask 022 && exec \"$0\" -d", kMpsControlProgram}, options));
  if (outcome.exit_code != 0) return fail("{} -d: {}", kMpsControlProgram, first_words(outcome));
  for (auto deadline = std::chrono::steady_clock::now() + kAnswerWithin; !control_answers(directories);) {
    if (std::chrono::steady_clock::now() > deadline) {
      return fail("{} -d started but does not answer on {}", kMpsControlProgram, directories.pipe);
    }
    std::this_thread::sleep_for(kAskEvery);
  }
  running_.insert(gpu_uuid);
  return {};
}

void MpsControls::stop_unneeded(const std::set<std::string>& in_use) {
  for (const std::string& gpu : unneeded_mps_controls(running_, in_use)) {
    auto outcome = tell_control(mps_directories(runtime_dir_, gpu), "quit");
    if (!outcome || outcome->exit_code != 0) {
      fmt::print(stderr, "gpupoold: MPS control for GPU {} did not quit: {}\n", gpu,
                 outcome ? first_words(*outcome) : outcome.error().message);
    }
    running_.erase(gpu);
  }
}

}  // namespace gpupool
