#include "core/job.h"

#include <array>
#include <utility>

namespace gpupool {
namespace {

constexpr std::array<std::pair<JobState, const char*>, 6> kStateNames = {{
    {JobState::Queued, "queued"},
    {JobState::Held, "held"},
    {JobState::Running, "running"},
    {JobState::Done, "done"},
    {JobState::Failed, "failed"},
    {JobState::Cancelled, "cancelled"},
}};

}  // namespace

const char* to_string(JobState state) {
  for (const auto& [value, name] : kStateNames) {
    if (value == state) return name;
  }
  return "unknown";
}

Result<JobState> parse_job_state(std::string_view text) {
  for (const auto& [value, name] : kStateNames) {
    if (text == name) return value;
  }
  return fail("unknown job state '{}' (queued, held, running, done, failed or cancelled)", text);
}

bool is_finished(JobState state) {
  return state == JobState::Done || state == JobState::Failed || state == JobState::Cancelled;
}

const char* to_string(JobKind kind) { return kind == JobKind::Batch ? "batch" : "interactive"; }

Result<JobKind> parse_job_kind(std::string_view text) {
  if (text == "batch") return JobKind::Batch;
  if (text == "interactive") return JobKind::Interactive;
  return fail("unknown job kind '{}' (batch or interactive)", text);
}

std::string display_name(const Job& job) {
  if (!job.spec.name.empty()) return job.spec.name;
  if (job.spec.argv.empty()) return "job-" + std::to_string(job.id);
  const std::string& program = job.spec.argv.front();
  size_t slash = program.rfind('/');
  return slash == std::string::npos ? program : program.substr(slash + 1);
}

}  // namespace gpupool
