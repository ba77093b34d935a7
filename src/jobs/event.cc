#include "jobs/event.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "base/text.h"
#include "jobs/job_text.h"

namespace gpupool {

const char* to_string(EventKind kind) {
  switch (kind) {
    case EventKind::JobStarted: return "job_started";
    case EventKind::JobEnded: return "job_ended";
    case EventKind::JobFailed: return "job_failed";
    case EventKind::JobCancelled: return "job_cancelled";
    case EventKind::JobRequeued: return "job_requeued";
    case EventKind::JobIdle: return "job_idle";
    case EventKind::JobSuspended: return "job_suspended";
    case EventKind::JobResumed: return "job_resumed";
    case EventKind::JobSuspendFailed: return "job_suspend_failed";
    case EventKind::SliceOverrun: return "slice_overrun";
    case EventKind::GpuQuarantined: return "gpu_quarantined";
    case EventKind::GpuReturned: return "gpu_returned";
    case EventKind::GpuDrained: return "gpu_drained";
    case EventKind::GpuResumed: return "gpu_resumed";
    case EventKind::QueueDrained: return "queue_drained";
    case EventKind::QueueResumed: return "queue_resumed";
  }
  return "unknown";
}

Result<EventKind> parse_event_kind(std::string_view text) {
  for (EventKind kind : kAllEventKinds) {
    if (text == to_string(kind)) return kind;
  }
  std::vector<std::string> names;
  for (EventKind kind : kAllEventKinds) names.emplace_back(to_string(kind));
  return fail("unknown event '{}' (one of {})", text, fmt::join(names, ", "));
}

Result<std::vector<EventKind>> parse_event_kinds(std::string_view text) {
  std::vector<EventKind> kinds;
  for (const std::string& word : split(text, ',')) {
    TRY_ASSIGN(EventKind kind, parse_event_kind(word));
    if (std::ranges::find(kinds, kind) == kinds.end()) kinds.push_back(kind);
  }
  if (kinds.empty()) return fail("no event named in '{}'", text);
  return kinds;
}

Event job_event(EventKind kind, const Job& job, double now, std::string detail) {
  Event event;
  event.time = now;
  event.kind = kind;
  event.job = job.id;
  event.user = job.owner.user;
  event.name = display_name(job);
  event.gpus = job.gpus;
  event.detail = std::move(detail);
  return event;
}

Event job_started_event(const Job& job, double now) {
  return job_event(EventKind::JobStarted, job, now, job.attempts > 1 ? fmt::format("attempt {}", job.attempts) : "");
}

Event job_finished_event(const Job& job, double now) {
  EventKind kind = job.state == JobState::Done        ? EventKind::JobEnded
                   : job.state == JobState::Cancelled ? EventKind::JobCancelled
                                                      : EventKind::JobFailed;
  // A job that ended well says only how long it ran.
  std::string what = !job.reason.empty()                ? job.reason
                     : job.exit_code && *job.exit_code != 0 ? fmt::format("exit code {}", *job.exit_code)
                                                            : std::string();
  if (job.start_time) {
    std::string ran = "after " + rough_duration_text(job.end_time.value_or(now) - *job.start_time);
    what = what.empty() ? ran : what + " " + ran;
  }
  return job_event(kind, job, now, what);
}

Event job_requeued_event(const Job& job, double now) { return job_event(EventKind::JobRequeued, job, now, job.reason); }

namespace {

void cut(std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return;
  size_t end = max_bytes - 3;
  // Back to the start of a character: never half of one.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  text += "...";
}

}  // namespace

void keep_within_limits(Event& event) {
  cut(event.name, kMaxEventNameBytes);
  cut(event.detail, kMaxEventDetailBytes);
}

std::string describe_event(const Event& event) {
  const std::string label = job_label(event.job, event.user, event.withheld ? "" : event.name);
  const std::string on_gpus = event.gpus.empty() ? "" : " on GPU " + gpu_list_text(event.gpus);
  const std::string gpu = event.gpus.empty() ? "a GPU" : "GPU " + gpu_list_text(event.gpus);
  std::string text;
  switch (event.kind) {
    case EventKind::JobStarted: text = label + " started" + on_gpus; break;
    case EventKind::JobEnded: text = label + " ended" + on_gpus; break;
    case EventKind::JobFailed: text = label + " failed" + on_gpus; break;
    case EventKind::JobCancelled: text = label + " was cancelled" + on_gpus; break;
    case EventKind::JobRequeued: text = label + " is queued again"; break;
    case EventKind::JobIdle: text = label + " is idle" + on_gpus; break;
    case EventKind::JobSuspended: text = label + " was suspended" + on_gpus; break;
    case EventKind::JobResumed: text = label + " resumed" + on_gpus; break;
    case EventKind::JobSuspendFailed: text = label + " was not suspended or resumed"; break;
    case EventKind::SliceOverrun: text = label + " is past its slice" + on_gpus; break;
    case EventKind::GpuQuarantined: text = gpu + " quarantined"; break;
    case EventKind::GpuReturned: text = gpu + " is back from quarantine"; break;
    case EventKind::GpuDrained: text = gpu + " drained by " + event.user; break;
    case EventKind::GpuResumed: text = gpu + " resumed by " + event.user; break;
    case EventKind::QueueDrained: text = "the queue drained by " + event.user; break;
    case EventKind::QueueResumed: text = "the queue resumed by " + event.user; break;
  }
  if (!event.withheld && !event.detail.empty()) text += ": " + event.detail;
  if (!event.jobs.empty()) {
    std::vector<std::string> running;
    for (size_t i = 0; i < event.jobs.size(); ++i) {
      running.push_back(fmt::format("job {}{}", event.jobs[i], i < event.users.size() ? " (" + event.users[i] + ")" : ""));
    }
    text += fmt::format("; running there: {}", fmt::join(running, ", "));
  }
  return text;
}

void withhold_details(Event& event) {
  event.name.clear();
  event.detail.clear();
  event.withheld = true;
}

bool concerns(const Event& event, std::string_view user) {
  if (event.job != 0) return event.user == user;
  return std::ranges::find(event.users, user) != event.users.end();
}

bool matches(const EventFilter& filter, const Event& event) {
  if (filter.job && event.job != *filter.job && std::ranges::find(event.jobs, *filter.job) == event.jobs.end()) {
    return false;
  }
  if (filter.user && !concerns(event, *filter.user)) return false;
  return filter.kinds.empty() || std::ranges::find(filter.kinds, event.kind) != filter.kinds.end();
}

}  // namespace gpupool
