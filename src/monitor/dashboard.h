// What `gpupool top` shows: one frame computed from a sample of the machine, the leases and the
// daemon's queue, for a terminal of a given size, and what each key does to the view. Pure, so
// every layout and every key is unit-tested; the terminal itself is src/cli/top_command.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobs/job.h"
#include "machine/gpu.h"

namespace gpupool {

// One lease on a GPU as the lease records say (`gpupool run` without a daemon, or any lease
// whose job the daemon does not list).
struct CardLease {
  unsigned gpu = 0;
  std::string job;   // the holder's job name (lease_job_name for the daemon's jobs)
  std::string user;
  int64_t pid = 0;
  std::optional<uint64_t> slice_mib;
  std::string mig_uuid = {};  // a MIG device's lease (the record names the device)
};

struct DashboardInput {
  Machine machine;                // GPUs with their processes
  std::vector<CardLease> leases;
  std::vector<Job> jobs;          // the daemon's unfinished jobs; empty without a daemon
  bool daemon_running = false;
  std::vector<std::string> notices;  // the daemon's, above the queue: a drained queue or GPU
  std::string source;             // where the sample came from (the backend's description)
  double now = 0;                 // Unix seconds
  std::string clock;              // the time to show, "14:03:07" (the caller's time zone)
  // The daemon's running jobs it flags idle (its idle_flag_after): the flag of a card a daemon
  // job holds, the same as the report and the web dashboard show.
  std::set<JobId> idle_jobs;
  // For cards held by leases alone (no daemon job): since when each has been at about 0 %
  // utilisation (kept by the caller across frames), flagged after idle_flag_after_s.
  std::map<unsigned, double> idle_since;
  double idle_flag_after_s = 600;
};

enum class SortKey { Index, Utilization, Memory, User };
const char* to_string(SortKey key);

struct DashboardView {
  SortKey sort = SortKey::Index;
  std::optional<std::string> user;  // show only this user's GPUs and jobs
  size_t selected = 0;              // row among the GPUs shown
  bool details = false;             // the selected GPU's job in full, instead of the queue
  bool help = false;
  bool key_bar = true;              // the keys on the last line; not in a frame printed once
};

enum class LineStyle { Normal, Title, Header, Selected, Flagged, Dim };

struct ScreenLine {
  std::string text;  // at most the frame's width
  LineStyle style = LineStyle::Normal;
};

// Who is on a GPU, in a word or two: "job 12 (alice, train)", "2 holders: alice, bob",
// "outside: pid 4242 bob", or "" when it is free.
struct CardUse {
  std::string holder;
  std::string user;                 // for sorting: the first holder's user
  std::vector<std::string> users;   // every holder's user (or the external processes' users)
  std::optional<JobId> job;  // the daemon's job on it, when one holds it whole or first
  bool external = false;        // processes on it that no lease accounts for
};
CardUse card_use(const DashboardInput& input, const Gpu& gpu);

// The GPUs shown, in the view's order and filter.
std::vector<const Gpu*> shown_gpus(const DashboardInput& input, const DashboardView& view);

// The frame: exactly `height` lines (fewer only when there is nothing more to show), none
// longer than `width`. Usable from 80x24 up.
std::vector<ScreenLine> render_dashboard(const DashboardInput& input, const DashboardView& view, size_t width,
                                         size_t height);

// Keys: 's' next sort key, 'u' next user (all, then each user seen, in order), up/down (and
// 'k'/'j') select a GPU, Enter or 'd' toggles the selected GPU's job details, Escape closes
// details and help, '?' or 'h' toggles help. Any key (Other too) keeps the selection on a GPU
// still shown, after a new sample. Quitting is the caller's.
enum class DashboardKey { Sort, User, Up, Down, Details, Close, Help, Other };
DashboardView apply_key(const DashboardInput& input, DashboardView view, DashboardKey key);

// Updates idle_since from a new sample: a GPU held by leases alone at <= 1 % keeps (or starts)
// its time; any other drops it (a daemon job's card has the daemon's flag).
void track_idle(std::map<unsigned, double>& idle_since, const DashboardInput& input);

}  // namespace gpupool
