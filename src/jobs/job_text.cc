#include "jobs/job_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace gpupool {

std::string duration_text(double seconds) {
  auto s = static_cast<int64_t>(std::max(0.0, seconds));
  if (s >= 86400) return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s % 3600 / 60, s % 60);
}

std::string rough_duration_text(double seconds) {
  auto minutes = static_cast<int64_t>(std::max(0.0, seconds) / 60);
  if (minutes == 0) return "under a minute";
  if (minutes < 60) return fmt::format("{}m", minutes);
  if (minutes < 24 * 60) return fmt::format("{}h{:02}m", minutes / 60, minutes % 60);
  return fmt::format("{}d{:02}h", minutes / (24 * 60), minutes % (24 * 60) / 60);
}

std::string gib_text(uint64_t mib) {
  double tenths = std::floor(static_cast<double>(mib) * 10 / 1024);
  if (std::fmod(tenths, 10) == 0) return fmt::format("{:.0f}", tenths / 10);
  return fmt::format("{:.1f}", tenths / 10);
}

std::string suspension_text(const Job& job) {
  if (!job.suspension) return "";
  const Suspension& s = *job.suspension;
  return fmt::format("{} GiB of GPU memory of {} process{} in host memory, suspended by {}{}", gib_text(s.host_mib),
                     s.pids.size(), s.pids.size() == 1 ? "" : "es", s.by, s.resume ? "; waiting to resume" : "");
}

std::string gpu_list_text(std::vector<unsigned> gpus) {
  if (gpus.empty()) return "-";
  std::sort(gpus.begin(), gpus.end());
  std::string text;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += j == i ? fmt::format("{}", gpus[i]) : fmt::format("{}-{}", gpus[i], gpus[j]);
    i = j + 1;
  }
  return text;
}

std::string request_text(const Job& job) {
  if (const std::optional<MigRequest>& mig = job.spec.gpus.mig) {
    // "mig:1g.18gb", "mig:20G" (any profile with that much), "mig:any".
    std::string memory = mig->min_memory_mib == 0        ? ""
                         : mig->min_memory_mib % 1024 == 0 ? fmt::format("{}G", mig->min_memory_mib / 1024)
                                                           : fmt::format("{}M", mig->min_memory_mib);
    std::string what = !mig->profile.empty() && !memory.empty() ? mig->profile + "/" + memory
                       : !mig->profile.empty()                  ? mig->profile
                       : !memory.empty()                        ? memory
                                                                : "any";
    return "mig:" + what;
  }
  if (std::optional<uint64_t> mib = job.spec.gpus.slice_mib) {
    std::string share = job.spec.gpus.sm_percent ? fmt::format("/{}%", *job.spec.gpus.sm_percent) : "";
    return *mib % 1024 == 0 ? fmt::format("{}x{}G{}", job.spec.gpus.count, *mib / 1024, share)
                            : fmt::format("{}x{}M{}", job.spec.gpus.count, *mib, share);
  }
  return fmt::format("{}", job.spec.gpus.count);
}

std::string state_text(const Job& job) {
  std::string state = to_string(job.state);
  if (is_finished(job.state) && job.exit_code && *job.exit_code != 0) state += fmt::format("({})", *job.exit_code);
  return state;
}

std::string job_label(JobId id, std::string_view user, std::string_view name) {
  if (name.empty()) return fmt::format("job {} ({})", id, user);
  return fmt::format("job {} ({}, {})", id, user, name);
}

namespace {
constexpr std::string_view kLeaseJobPrefix = "job-";
}  // namespace

std::string lease_job_name(JobId id) { return fmt::format("{}{}", kLeaseJobPrefix, id); }

std::optional<JobId> job_of_lease(std::string_view lease_job) {
  if (!lease_job.starts_with(kLeaseJobPrefix)) return std::nullopt;
  std::string_view digits = lease_job.substr(kLeaseJobPrefix.size());
  JobId id = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty() || digits[0] == '0') {
    return std::nullopt;
  }
  return id;
}

std::string lease_holder_text(std::string_view lease_job, std::string_view user) {
  if (auto id = job_of_lease(lease_job)) return job_label(*id, user);
  return fmt::format("{} ({})", lease_job, user);
}

std::string already_ended_text(JobId id, JobState state) {
  return fmt::format("job {} has already ended ({})", id, to_string(state));
}

}  // namespace gpupool
