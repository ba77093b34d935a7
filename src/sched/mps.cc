#include "sched/mps.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"

namespace gpupool {

namespace {

// The longest name the control daemon gives a socket in its pipe directory.
constexpr std::string_view kLongestMpsSocket = "/control_privileged";
constexpr size_t kMaxSocketPath = 107;  // sockaddr_un's sun_path, less its NUL

}  // namespace

MpsDirectories mps_directories(const std::string& runtime_dir, const std::string& gpu_uuid) {
  // "GPU-" and 8 hexadecimal digits; only what is plain of a UUID, so nothing can climb out.
  std::string name = "GPU-";
  for (char c : gpu_uuid.substr(std::min<size_t>(4, gpu_uuid.size()))) {
    if (name.size() == 12) break;
    if (std::isxdigit(static_cast<unsigned char>(c))) name += c;
  }
  std::string root = runtime_dir + "/mps/" + name;
  return MpsDirectories{root, root + "/pipe", root + "/log"};
}

std::optional<std::string> mps_pipe_too_long(const MpsDirectories& directories) {
  size_t length = directories.pipe.size() + kLongestMpsSocket.size();
  if (length <= kMaxSocketPath) return std::nullopt;
  return fmt::format("the MPS pipe directory {} is too long for the control daemon's sockets ({} bytes of at most {}): "
                     "give gpupoold a shorter runtime directory",
                     directories.pipe, length, kMaxSocketPath);
}

bool runs_under_mps(const GpuRequest& request) { return request.slice_mib && request.count == 1; }

std::vector<std::string> mps_control_environment(const MpsDirectories& directories, const std::string& gpu_uuid) {
  return {"CUDA_VISIBLE_DEVICES=" + gpu_uuid, "CUDA_MPS_PIPE_DIRECTORY=" + directories.pipe,
          "CUDA_MPS_LOG_DIRECTORY=" + directories.log};
}

std::vector<std::string> mps_client_environment(const MpsDirectories& directories, uint64_t slice_mib,
                                                std::optional<unsigned> sm_percent) {
  std::vector<std::string> environment = {"CUDA_MPS_PIPE_DIRECTORY=" + directories.pipe,
                                          "CUDA_MPS_LOG_DIRECTORY=" + directories.log,
                                          fmt::format("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={}M", slice_mib)};
  if (sm_percent) environment.push_back(fmt::format("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={}", *sm_percent));
  return environment;
}

Result<std::vector<uint32_t>> parse_mps_pids(const std::string& text) {
  std::vector<uint32_t> pids;
  for (std::string line : split(text, '\n')) {
    std::erase_if(line, [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
    if (line.empty()) continue;
    uint32_t pid = 0;
    auto error = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (!all_digits(line) || error.ec != std::errc{} || pid == 0) {
      return fail("the MPS control's answer has {}, not a process id", quote(line));
    }
    pids.push_back(pid);
  }
  return pids;
}

std::vector<std::string> unneeded_mps_controls(const std::set<std::string>& running_gpu_uuids,
                                               const std::set<std::string>& gpu_uuids_in_use) {
  std::vector<std::string> unneeded;
  std::ranges::set_difference(running_gpu_uuids, gpu_uuids_in_use, std::back_inserter(unneeded));
  return unneeded;
}

std::vector<uint64_t> jobs_outside_mps(const std::map<uint64_t, SliceUse>& worst,
                                       const std::function<bool(uint64_t job)>& is_mps_job,
                                       const std::function<bool(uint64_t job)>& told_to_end) {
  std::vector<uint64_t> jobs;
  for (const auto& [job, use] : worst) {
    if (use.outside_mps_pid != 0 && is_mps_job(job) && !told_to_end(job)) jobs.push_back(job);
  }
  return jobs;
}

std::string outside_mps_text(uint32_t pid, unsigned gpu) {
  return fmt::format("its process {} used GPU {} outside MPS, where its slice's memory limit does not hold", pid,
                     gpu);
}

std::string mps_one_user_text(unsigned gpu, const std::string& user) {
  return fmt::format("GPU {}'s MPS server serves {}'s slices: MPS serves one user at a time on a GPU", gpu, user);
}

}  // namespace gpupool
