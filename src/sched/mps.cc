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

namespace {

// The hexadecimal digits of a UUID after "GPU-": only what is plain of it, so nothing can climb out.
std::string hex_digits(const std::string& uuid) {
  std::string digits;
  for (char c : uuid.substr(std::min<size_t>(4, uuid.size()))) {
    if (std::isxdigit(static_cast<unsigned char>(c))) digits += c;
  }
  return digits;
}

}  // namespace

MpsDirectories mps_directories(const std::string& runtime_dir, const std::string& gpu_uuid,
                               const std::vector<std::string>& machine_uuids) {
  std::string digits = hex_digits(gpu_uuid);
  size_t length = 8;
  for (const std::string& other : machine_uuids) {
    std::string theirs = hex_digits(other);
    if (theirs == digits) continue;  // itself
    auto [mine, differ] = std::ranges::mismatch(digits, theirs);
    length = std::max(length, static_cast<size_t>(mine - digits.begin()) + 1);
  }
  std::string root = runtime_dir + "/mps/GPU-" + digits.substr(0, length);
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

namespace {

// The message of a server.log line: what follows the "[DATE TIME Server PID] " prefix.
std::string_view log_message(std::string_view line) {
  size_t end = line.starts_with('[') ? line.find("] ") : std::string_view::npos;
  return end == std::string_view::npos ? line : line.substr(end + 2);
}

std::optional<uint32_t> whole_pid(std::string_view text) {
  uint32_t pid = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), pid);
  if (error != std::errc{} || end != text.data() + text.size() || pid == 0) return std::nullopt;
  return pid;
}

// "Client {PID: 487, Context: 1} encountered a fatal GPU error." -> 487.
std::optional<uint32_t> fatal_client(std::string_view message) {
  constexpr std::string_view kPrefix = "Client {PID: ";
  if (!message.starts_with(kPrefix) || message.find("} encountered a fatal GPU error") == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view rest = message.substr(kPrefix.size());
  return whole_pid(rest.substr(0, rest.find(',')));
}

}  // namespace

std::vector<MpsFault> parse_mps_faults(std::string_view log) {
  std::vector<MpsFault> faults;
  std::optional<MpsFault> open;  // the fault being read
  bool in_list = false;          // reading its sticky-error list
  auto end_fault = [&] {
    if (open) faults.push_back(std::move(*open));
    open.reset();
    in_list = false;
  };
  for (const std::string& line : split(log, '\n')) {
    std::string_view message = log_message(line);
    while (!message.empty() && (message.back() == '\r' || message.back() == ' ')) message.remove_suffix(1);
    if (in_list) {
      if (std::optional<uint32_t> pid = whole_pid(message)) {
        open->torn_down_pids.push_back(*pid);
        continue;
      }
      end_fault();
    }
    if (std::optional<uint32_t> culprit = fatal_client(message)) {
      end_fault();
      open = MpsFault{culprit, {}};
    } else if (message.starts_with("Server is handling a fatal GPU error")) {
      if (!open) open = MpsFault{};  // after the culprit's line, the same fault
    } else if (open && message.starts_with("The following client process")) {
      in_list = true;
    }
  }
  end_fault();
  return faults;
}

std::map<JobId, std::string> mps_fault_reasons(const std::vector<MpsFault>& faults,
                                               const std::map<uint32_t, JobId>& job_of_client) {
  std::map<JobId, std::string> reasons;
  auto job_of = [&](uint32_t pid) -> std::optional<JobId> {
    auto it = job_of_client.find(pid);
    return it == job_of_client.end() ? std::nullopt : std::optional(it->second);
  };
  for (const MpsFault& fault : faults) {
    std::optional<JobId> culprit = fault.culprit_pid ? job_of(*fault.culprit_pid) : std::nullopt;
    std::string others = culprit             ? fmt::format("ended by a fault in job {} on the same GPU", *culprit)
                         : fault.culprit_pid ? fmt::format("ended by a fault in process {}, of no gpupool job, "
                                                           "on the same GPU", *fault.culprit_pid)
                                             : std::string("ended by a fatal GPU fault on its GPU's MPS server");
    for (uint32_t pid : fault.torn_down_pids) {
      std::optional<JobId> job = job_of(pid);
      if (!job) continue;
      reasons[*job] = job == culprit ? fmt::format("a fatal GPU fault in its process {} ended every MPS client on "
                                                   "its GPU", *fault.culprit_pid)
                                     : others;
    }
  }
  return reasons;
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

std::string mps_other_clients_text(unsigned gpu, const std::string& user) {
  return fmt::format("GPU {}'s MPS server serves {}'s processes outside gpupool's jobs: MPS serves one user at a "
                     "time on a GPU",
                     gpu, user);
}

}  // namespace gpupool
