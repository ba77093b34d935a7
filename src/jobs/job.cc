#include "jobs/job.h"

#include <array>
#include <optional>
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
constexpr std::array<std::pair<WaitReason, const char*>, 7> kWaitReasonNames{{
    {WaitReason::Resources, "Resources"},
    {WaitReason::Priority, "Priority"},
    {WaitReason::Reservation, "Reservation"},
    {WaitReason::Dependency, "Dependency"},
    {WaitReason::Held, "Held"},
    {WaitReason::Drained, "Drained"},
    {WaitReason::QuotaLimit, "QuotaLimit"},
}};

// The name of `value` in one of the tables above, and back.
template <typename Enum, size_t N>
const char* name_in(const std::array<std::pair<Enum, const char*>, N>& names, Enum value) {
  for (const auto& [entry, name] : names) {
    if (entry == value) return name;
  }
  return "unknown";
}

template <typename Enum, size_t N>
std::optional<Enum> named_in(const std::array<std::pair<Enum, const char*>, N>& names, std::string_view text) {
  for (const auto& [entry, name] : names) {
    if (text == name) return entry;
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(JobState state) { return name_in(kStateNames, state); }

Result<JobState> parse_job_state(std::string_view text) {
  if (auto state = named_in(kStateNames, text)) return *state;
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

const char* to_string(WaitReason reason) { return name_in(kWaitReasonNames, reason); }

Result<WaitReason> parse_wait_reason(std::string_view text) {
  if (auto reason = named_in(kWaitReasonNames, text)) return *reason;
  return fail("unknown wait reason {}", quote(text));
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
