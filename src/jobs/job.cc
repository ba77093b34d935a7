#include "jobs/job.h"

#include <array>
#include <utility>

#include "base/quote.h"
#include "base/text.h"

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
  return fail("unknown job state {} (queued, held, running, done, failed or cancelled)", quote(text));
}

bool is_finished(JobState state) {
  return state == JobState::Done || state == JobState::Failed || state == JobState::Cancelled;
}

const char* to_string(JobKind kind) { return kind == JobKind::Batch ? "batch" : "interactive"; }

Result<JobKind> parse_job_kind(std::string_view text) {
  if (text == "batch") return JobKind::Batch;
  if (text == "interactive") return JobKind::Interactive;
  return fail("unknown job kind {} (batch or interactive)", quote(text));
}

Result<std::vector<JobId>> parse_job_ids(std::span<const std::string> texts) {
  std::vector<JobId> ids;
  for (const std::string& text : texts) {
    for (const std::string& piece : split(text, ',')) {
      // 18 digits always fit in a JobId.
      if (!all_digits(piece) || piece.size() > 18 || std::stoull(piece) == 0) {
        return fail("invalid job id {}: expected a number like 42", quote(piece));
      }
      ids.push_back(std::stoull(piece));
    }
  }
  return ids;
}

std::string display_name(const Job& job) {
  if (!job.spec.name.empty()) return job.spec.name;
  if (job.spec.argv.empty()) return "job-" + std::to_string(job.id);
  const std::string& program = job.spec.argv.front();
  size_t slash = program.rfind('/');
  return slash == std::string::npos ? program : program.substr(slash + 1);
}

}  // namespace gpupool
