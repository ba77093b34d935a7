// What happens on the machine, as one stream: jobs starting, ending, failing, queued again, idle
// or past their slice; GPUs quarantined or back, drained or resumed; the queue drained or resumed.
// `gpupool events` reads it, the configured on_event command is run for it (docs/events.md).
// Pure: the daemon makes events from what its parts decide, the event log (jobs/event_log.h)
// keeps them, the protocol carries them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"

namespace gpupool {

enum class EventKind {
  JobStarted,
  JobEnded,      // exited 0
  JobFailed,     // exited non-zero, was killed, could not start, ran past its limit
  JobCancelled,
  JobRequeued,   // failed with retries left: queued for its next attempt
  JobIdle,       // flagged idle by the monitor
  JobSuspended,  // its processes checkpointed to host memory, its GPUs let go (docs/suspend.md)
  JobResumed,    // restored on its GPUs
  JobSuspendFailed,  // a suspend undone (it runs on), or a suspension that went wrong (it ends)
  SliceOverrun,  // uses more GPU memory than its slice
  GpuQuarantined,
  GpuReturned,   // back from quarantine
  GpuDrained,
  GpuResumed,
  QueueDrained,
  QueueResumed,
};
inline constexpr EventKind kAllEventKinds[] = {
    EventKind::JobStarted,    EventKind::JobEnded,       EventKind::JobFailed,   EventKind::JobCancelled,
    EventKind::JobRequeued,   EventKind::JobIdle,        EventKind::JobSuspended, EventKind::JobResumed,
    EventKind::JobSuspendFailed, EventKind::SliceOverrun, EventKind::GpuQuarantined,
    EventKind::GpuReturned,   EventKind::GpuDrained,     EventKind::GpuResumed,  EventKind::QueueDrained,
    EventKind::QueueResumed};
// "job_started", "gpu_quarantined", ...
const char* to_string(EventKind kind);
Result<EventKind> parse_event_kind(std::string_view text);
// "job_ended,job_failed": a list of kinds as the command line and the configuration give it.
Result<std::vector<EventKind>> parse_event_kinds(std::string_view text);

struct Event {
  uint64_t seq = 0;     // given by the event log: grows by one with each event, never reused
  double time = 0;      // Unix seconds
  EventKind kind = EventKind::JobStarted;
  JobId job = 0;        // the job's events; 0 for the others
  std::string user;     // the job's owner; who drained or resumed
  std::string name;     // the job's name as tables show it
  std::vector<unsigned> gpus;
  // What happened, in words: "exit code 3", "XID 79 (the GPU fell off the bus)", a drain's reason.
  std::string detail;
  // A GPU's event: the jobs running on it then, and their owners (whom a hook may tell).
  std::vector<JobId> jobs = {};
  std::vector<std::string> users = {};
  // Another user's job under private_data = ["jobs"]: its name and detail are withheld.
  bool withheld = false;
};

// The events of a job's life, at `now`: started (its attempt's GPUs), and its end as the job's
// state says (ended, failed, cancelled, with how long it ran), queued again for a retry.
Event job_event(EventKind kind, const Job& job, double now, std::string detail);
Event job_started_event(const Job& job, double now);
Event job_finished_event(const Job& job, double now);
Event job_requeued_event(const Job& job, double now);

// What one event may carry of users' text: a job name and a reason are cut there (at a
// character, ending in "..."), so that any event fits a message and a hook's environment.
inline constexpr size_t kMaxEventNameBytes = 256;
inline constexpr size_t kMaxEventDetailBytes = 1024;
void keep_within_limits(Event& event);

// One line for people: "job 12 (alice, train) failed on GPU 0-1: exit code 3 after 5m".
std::string describe_event(const Event& event);

// What private_data = ["jobs"] keeps to the job's owner: its name and what happened in words.
void withhold_details(Event& event);

// Whether `user` is concerned: their job's event, or a GPU's event that touches their jobs.
bool concerns(const Event& event, std::string_view user);

// Which events a reader or a hook asks for.
struct EventFilter {
  std::optional<JobId> job = std::nullopt;
  std::optional<std::string> user = std::nullopt;  // concerns(event, user)
  std::vector<EventKind> kinds = {};               // empty: every kind
};
bool matches(const EventFilter& filter, const Event& event);

}  // namespace gpupool
