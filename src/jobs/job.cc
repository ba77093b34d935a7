#include "jobs/job.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "base/quote.h"
#include "base/text.h"

namespace gpupool {
namespace {

constexpr std::array<std::pair<JobState, const char*>, 7> kStateNames = {{
    {JobState::Queued, "queued"},
    {JobState::Held, "held"},
    {JobState::Running, "running"},
    {JobState::Suspended, "suspended"},
    {JobState::Done, "done"},
    {JobState::Failed, "failed"},
    {JobState::Cancelled, "cancelled"},
}};
constexpr std::array<std::pair<WaitReason, const char*>, 8> kWaitReasonNames{{
    {WaitReason::Resources, "Resources"},
    {WaitReason::Priority, "Priority"},
    {WaitReason::Reservation, "Reservation"},
    {WaitReason::Dependency, "Dependency"},
    {WaitReason::Held, "Held"},
    {WaitReason::Drained, "Drained"},
    {WaitReason::QuotaLimit, "QuotaLimit"},
    {WaitReason::ArrayLimit, "ArrayLimit"},
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
  return fail("unknown job state {} (queued, held, running, suspended, done, failed or cancelled)", quote(text));
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

namespace {

// A whole number of 1 to `max_digits` digits (so it always fits), or nullopt.
std::optional<uint64_t> whole_number(std::string_view text, size_t max_digits) {
  if (!all_digits(text) || text.size() > max_digits) return std::nullopt;
  return std::stoull(std::string(text));
}

// "7" or "7-9": the first and last number of the range, the last not below the first.
std::optional<std::pair<uint64_t, uint64_t>> number_range(std::string_view text, size_t max_digits) {
  size_t dash = text.find('-');
  std::optional<uint64_t> first = whole_number(text.substr(0, dash), max_digits);
  if (!first || dash == std::string_view::npos) return first ? std::optional(std::pair(*first, *first)) : std::nullopt;
  std::optional<uint64_t> last = whole_number(text.substr(dash + 1), max_digits);
  if (!last || *last < *first) return std::nullopt;
  return std::pair(*first, *last);
}

}  // namespace

Result<void> add_job_ids(std::string_view piece, std::vector<JobId>& ids) {
  // 18 digits always fit in a JobId.
  auto range = number_range(piece, 18);
  if (!range || range->first == 0) {
    return fail("invalid job id {}: expected a number like 42 or a range like 40-45", quote(piece));
  }
  if (range->second - range->first >= kMaxTypedJobIds - std::min(ids.size(), kMaxTypedJobIds)) {
    return fail("{} makes more than {} job ids", quote(piece), kMaxTypedJobIds);
  }
  for (JobId id = range->first; id <= range->second; ++id) ids.push_back(id);
  return {};
}

Result<std::vector<JobId>> parse_job_ids(std::span<const std::string> texts) {
  std::vector<JobId> ids;
  for (const std::string& text : texts) {
    for (const std::string& piece : split(text, ',')) TRY(add_job_ids(piece, ids));
  }
  return ids;
}

Result<ArraySpec> parse_array_spec(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return fail("invalid --array {}: {} (e.g. 0-99, 1,3,5-7, 0-15:4, 0-99%8)", quote(text), why);
  };
  ArraySpec spec;
  std::string_view indices = text.substr(0, text.find('%'));
  if (indices.size() < text.size()) {
    std::optional<uint64_t> limit = whole_number(text.substr(indices.size() + 1), 6);
    if (!limit || *limit == 0) return bad("after % comes how many tasks may run at once, at least 1");
    spec.limit = static_cast<unsigned>(*limit);
  }
  const size_t max_digits = std::to_string(kMaxArrayIndex).size();
  for (const std::string& piece : split(indices, ',')) {
    std::string_view range_text = std::string_view(piece).substr(0, piece.find(':'));
    uint64_t step = 1;
    if (range_text.size() < piece.size()) {
      std::optional<uint64_t> given = whole_number(std::string_view(piece).substr(range_text.size() + 1), 6);
      if (!given || *given == 0 || range_text.find('-') == std::string_view::npos) {
        return bad(fmt::format("{} is not a range with a step of at least 1 (FIRST-LAST:STEP)", quote(piece)));
      }
      step = *given;
    }
    auto range = number_range(range_text, max_digits);
    if (!range || range->second > kMaxArrayIndex) {
      return bad(fmt::format("{} is not an index or a range of indices from 0 to {}", quote(piece), kMaxArrayIndex));
    }
    for (uint64_t index = range->first; index <= range->second; index += step) {
      if (spec.indices.size() == kMaxArrayTasks) return bad(fmt::format("more than {} tasks", kMaxArrayTasks));
      spec.indices.push_back(static_cast<unsigned>(index));
    }
  }
  std::sort(spec.indices.begin(), spec.indices.end());
  spec.indices.erase(std::unique(spec.indices.begin(), spec.indices.end()), spec.indices.end());
  return spec;
}

namespace {

std::string base_name(const Job& job) {
  if (job.details_withheld) return "(private)";
  if (!job.spec.name.empty()) return job.spec.name;
  if (job.spec.argv.empty()) return "job-" + std::to_string(job.id);
  const std::string& program = job.spec.argv.front();
  size_t slash = program.rfind('/');
  return slash == std::string::npos ? program : program.substr(slash + 1);
}

}  // namespace

std::string display_name(const Job& job) {
  return job.array ? fmt::format("{}[{}]", base_name(job), job.array->index) : base_name(job);
}

}  // namespace gpupool
