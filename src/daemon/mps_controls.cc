#include "daemon/mps_controls.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "base/text.h"
#include "os/clock.h"
#include "os/files.h"
#include "os/process.h"
#include "os/program.h"
#include "sched/mps.h"

namespace gpupool {
namespace {

// How long a started control daemon has to answer: `-d` returns once it has forked, which may be
// before it listens.
constexpr auto kAnswerWithin = std::chrono::seconds(5);
constexpr auto kAskEvery = std::chrono::milliseconds(20);

// What a program said on failing, in one line.
std::string first_words(const ProgramOutcome& outcome) {
  std::string text = outcome.err.empty() ? outcome.out : outcome.err;
  std::vector<std::string> lines = split(text, '\n');
  std::erase_if(lines, [](const std::string& line) { return line.empty(); });
  return lines.empty() ? fmt::format("exit status {}", outcome.exit_code) : lines.front();
}

// What the control programs do not get of the daemon's environment: the service manager's
// sockets, which the MPS servers they start, as other users, would inherit.
const std::vector<std::string> kNotForMps = {"NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_FDS",
                                             "LISTEN_PID", "LISTEN_FDNAMES"};
// How long a control program may take: the daemon's loop waits for it.
constexpr auto kCommandWithin = std::chrono::seconds(5);

Result<ProgramOutcome> tell_control(const MpsDirectories& directories, const std::string& command) {
  ProgramOptions options;
  options.input = command + "\n";
  options.environment = {"CUDA_MPS_PIPE_DIRECTORY=" + directories.pipe};
  options.unset = kNotForMps;
  options.not_found_hint = "is CUDA's MPS installed? (slice_enforcement = \"watch\" does without it)";
  options.timeout = kCommandWithin;
  return run_program({kMpsControlProgram}, options);
}

// The command's answer, or why there is none.
Result<std::string> ask_control(const MpsDirectories& directories, const std::string& command) {
  TRY_ASSIGN(ProgramOutcome outcome, tell_control(directories, command));
  if (outcome.exit_code != 0) return fail("'{}': {}", command, first_words(outcome));
  return outcome.out;
}

// Whether a control daemon answers on the directories' pipe.
bool control_answers(const MpsDirectories& directories) {
  auto servers = ask_control(directories, "get_server_list");
  return servers && parse_mps_pids(*servers).ok();
}

// Whether one of the control daemon's servers has a client.
bool has_clients(const MpsDirectories& directories) {
  auto servers = ask_control(directories, "get_server_list");
  auto pids = servers ? parse_mps_pids(*servers) : Result<std::vector<uint32_t>>(fail("no answer"));
  for (uint32_t pid : pids ? *pids : std::vector<uint32_t>{}) {
    auto clients = ask_control(directories, fmt::format("get_client_list {}", pid));
    auto listed = clients ? parse_mps_pids(*clients) : Result<std::vector<uint32_t>>(fail("no answer"));
    if (listed && !listed->empty()) return true;
  }
  return false;
}

// `path` as a directory of the daemon's own that only it may write to: the runtime directory
// is open to everyone (1777), so anything else of that name (another user's directory, a link)
// is moved aside first, and a path that is not then ours is an error. Below a directory that is
// ours, nobody else can plant anything.
Result<void> own_directory(const std::string& path) {
  if (auto status = link_status(path); status && !(status->type == FileType::directory &&
                                                   status->owner == effective_user_id() &&
                                                   (status->permissions & 022) == 0)) {
    std::string aside = fmt::format("{}.not-ours-{}", path, static_cast<int64_t>(unix_now()));
    TRY(rename_file(path, aside));
    fmt::print(stderr, "gpupoold: {} was not gpupoold's own directory: moved aside to {}\n", path, aside);
  }
  return ensure_own_directory(path, 0755);  // an error when someone made it first
}

}  // namespace

bool mps_in_effect(SliceEnforcement mode) {
  return mode == SliceEnforcement::Mps || (mode == SliceEnforcement::Auto && find_program(kMpsControlProgram));
}

MpsControls::MpsControls(std::string runtime_dir, const Machine& machine) : runtime_dir_(std::move(runtime_dir)) {
  for (const Gpu& gpu : machine.gpus) gpu_uuids_.push_back(gpu.uuid);
}

MpsDirectories MpsControls::directories_of(const std::string& gpu_uuid) const {
  return mps_directories(runtime_dir_, gpu_uuid, gpu_uuids_);
}

void MpsControls::adopt() {
  if (!link_status(runtime_dir_ + "/mps")) return;  // none was ever started here
  // Only a control daemon below a directory of ours was started by a gpupoold.
  if (auto owned = own_directory(runtime_dir_ + "/mps"); !owned) {
    fmt::print(stderr, "gpupoold: {}\n", owned.error().message);
    return;
  }
  for (const std::string& gpu : gpu_uuids_) {
    MpsDirectories directories = directories_of(gpu);
    if (link_status(directories.pipe) && control_answers(directories)) {
      running_.emplace(gpu, 0);
      skip_logged(gpu);
    }
  }
}

Result<std::vector<std::string>> MpsControls::client_environment(const std::string& gpu_uuid, uint64_t slice_mib,
                                                                 std::optional<unsigned> sm_percent) {
  // One that died since (killed, or its directory removed with the runtime directory) is started
  // again: a job handed a pipe with no control behind it would run outside MPS.
  if (running_.contains(gpu_uuid) && !control_answers(directories_of(gpu_uuid))) {
    fmt::print(stderr, "gpupoold: the MPS control for GPU {} no longer answers: starting it again\n", gpu_uuid);
    running_.erase(gpu_uuid);
  }
  if (!running_.contains(gpu_uuid)) {
    if (auto started = start(gpu_uuid); !started) {
      return fail("MPS control for GPU {}: {}", gpu_uuid, started.error().message);
    }
  }
  if (auto capped = cap(gpu_uuid, slice_mib); !capped) {
    return fail("MPS control for GPU {}: {}", gpu_uuid, capped.error().message);
  }
  return mps_client_environment(directories_of(gpu_uuid), slice_mib, sm_percent);
}

// A client's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can lower the server's limit but not raise
// it: the server's is the largest slice on the GPU since its control started (the one user's
// slices there), so a job that sets its own cannot take more than that.
Result<void> MpsControls::cap(const std::string& gpu_uuid, uint64_t slice_mib) {
  uint64_t& limit = running_.at(gpu_uuid);
  if (slice_mib <= limit) return {};
  MpsDirectories directories = directories_of(gpu_uuid);
  TRY(ask_control(directories, fmt::format("set_default_device_pinned_mem_limit 0 {}M", slice_mib)));
  TRY_ASSIGN(std::string servers, ask_control(directories, "get_server_list"));
  TRY_ASSIGN(std::vector<uint32_t> pids, parse_mps_pids(servers));
  for (uint32_t pid : pids) {  // a running server keeps its default; its new clients get this
    TRY(ask_control(directories, fmt::format("set_device_pinned_mem_limit {} 0 {}M", pid, slice_mib)));
  }
  limit = slice_mib;
  return {};
}

Result<void> MpsControls::start(const std::string& gpu_uuid) {
  MpsDirectories directories = directories_of(gpu_uuid);
  if (auto too_long = mps_pipe_too_long(directories)) return fail("{}", *too_long);
  // Every user's clients reach the pipe; the control daemon keeps its own files' modes.
  for (const std::string& directory : {runtime_dir_ + "/mps", directories.root, directories.pipe, directories.log}) {
    TRY(own_directory(directory));
  }
  if (control_answers(directories)) {  // left by an earlier daemon and not adopted: the same GPU's
    running_.emplace(gpu_uuid, 0);
    skip_logged(gpu_uuid);
    return {};
  }
  ProgramOptions options;
  options.environment = mps_control_environment(directories, gpu_uuid);
  options.unset = kNotForMps;
  options.timeout = kCommandWithin;
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
  running_.emplace(gpu_uuid, 0);
  skip_logged(gpu_uuid);
  return {};
}

void MpsControls::stop_unneeded(const std::set<std::string>& in_use) {
  std::set<std::string> running;
  for (const auto& [gpu, limit] : running_) running.insert(gpu);
  for (const std::string& gpu : unneeded_mps_controls(running, in_use)) {
    MpsDirectories directories = directories_of(gpu);
    // A process of a job that has ended may still be a client (a context left open): the
    // control quits once its servers have no client left, not before.
    if (has_clients(directories)) continue;
    auto outcome = tell_control(directories, "quit");
    if (!outcome || outcome->exit_code != 0) {
      fmt::print(stderr, "gpupoold: MPS control for GPU {} did not quit: {}\n", gpu,
                 outcome ? first_words(*outcome) : outcome.error().message);
    }
    running_.erase(gpu);
  }
}

namespace {

constexpr size_t kMaxLogRead = 1 << 20;

std::string server_log(const MpsDirectories& directories) { return directories.log + "/server.log"; }

}  // namespace

void MpsControls::skip_logged(const std::string& gpu_uuid) {
  std::string path = server_log(directories_of(gpu_uuid));
  auto identity = file_identity(path);
  auto status = link_status(path);
  log_read_[gpu_uuid] = identity && status ? LogPosition{*identity, status->size} : LogPosition{};
}

std::vector<MpsFault> MpsControls::new_faults() {
  std::vector<MpsFault> faults;
  for (const auto& [gpu, limit] : running_) {
    std::string path = server_log(directories_of(gpu));
    // The log directory is ours (own_directory); the control daemon writes the file.
    auto fd = open_file(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
    if (!fd) continue;
    auto status = file_status(fd->get());
    auto identity = file_identity(path);
    if (!status || !identity || status->type != FileType::regular) continue;
    LogPosition& position = log_read_[gpu];
    if (!(position.file == *identity) || status->size < position.offset) position = LogPosition{*identity, 0};
    size_t bytes = static_cast<size_t>(std::min<uint64_t>(status->size - position.offset, kMaxLogRead));
    if (bytes == 0) continue;
    auto text = read_at(fd->get(), bytes, static_cast<off_t>(position.offset));
    if (!text) continue;
    size_t whole = text->rfind('\n');
    if (whole == std::string::npos) {
      if (bytes == kMaxLogRead) position.offset += bytes;  // a line longer than that is no fault's
      continue;
    }
    position.offset += whole + 1;
    std::vector<MpsFault> found = parse_mps_faults(std::string_view(*text).substr(0, whole + 1));
    faults.insert(faults.end(), found.begin(), found.end());
  }
  return faults;
}

}  // namespace gpupool
