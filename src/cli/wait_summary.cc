#include "cli/wait_summary.h"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "base/display_text.h"
#include "base/quote.h"
#include "jobs/job_text.h"

namespace gpupool::cli {
namespace {

// Groups in the order a summary names them.
enum class Group { Done, Failed, Cancelled, Unknown, NotEnded };
constexpr std::array<std::pair<Group, const char*>, 5> kGroups = {{{Group::Done, "done"},
                                                                     {Group::Failed, "failed"},
                                                                     {Group::Cancelled, "cancelled"},
                                                                     {Group::Unknown, "unknown to Slurm"},
                                                                     {Group::NotEnded, "not ended"}}};

Group group_of(const WaitedJob& waited) {
  if (!waited.known) return Group::Unknown;
  switch (waited.job.state) {
    case JobState::Done:
      return Group::Done;
    case JobState::Failed:
      return Group::Failed;
    case JobState::Cancelled:
      return Group::Cancelled;
    case JobState::Queued:
    case JobState::Held:
    case JobState::Running:
    case JobState::Suspended:
      break;
  }
  return Group::NotEnded;
}

}  // namespace

int wait_exit_code(const std::vector<WaitedJob>& jobs) {
  int worst = 0;
  for (const WaitedJob& waited : jobs) {
    Group group = group_of(waited);
    if (group == Group::NotEnded) return 124;
    if (group == Group::Done) continue;
    worst = std::max(worst, std::max(1, waited.job.exit_code.value_or(1)));
  }
  return worst;
}

std::string waited_job_line(const WaitedJob& waited) {
  std::string state = !waited.known ? "unknown" : state_text(waited.job);
  if (group_of(waited) == Group::NotEnded) state = "has not ended (" + state + ")";
  // The reason may hold another user's text (a cancel names them): shown escaped.
  std::string reason = waited.job.reason.empty() ? "" : ": " + printable(waited.job.reason, kMaxShownBytes);
  return fmt::format("job {} {}{}", waited.id, state, reason);
}

std::string wait_summary(const std::vector<WaitedJob>& jobs) {
  if (jobs.size() == 1) return waited_job_line(jobs.front());
  std::vector<std::string> parts;
  for (const auto& [group, name] : kGroups) {
    std::vector<std::string> ids;
    for (const WaitedJob& waited : jobs) {
      if (group_of(waited) == group) ids.push_back(waited.id);
    }
    if (ids.empty()) continue;
    std::string part = fmt::format("{} {}", ids.size(), name);
    if (group != Group::Done) {
      size_t shown = std::min(ids.size(), kIdsShown);
      part += fmt::format(" (ids {}", fmt::join(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(shown), ", "));
      part += ids.size() > shown ? fmt::format(" and {} more)", ids.size() - shown) : ")";
    }
    parts.push_back(std::move(part));
  }
  return fmt::format("{} jobs: {}", jobs.size(), fmt::join(parts, ", "));
}

}  // namespace gpupool::cli
