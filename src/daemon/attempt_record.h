// An attempt's record file as the daemon reads it back: how far the attempt got, proved by the
// supervisor's lock and the events it wrote (the format is in supervisor.h).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"

namespace gpupool {

enum class AttemptProgress {
  NeverStarted,  // no file, or no "started": the job may be started again
  Running,       // the record is locked: the supervisor lives
  Exited,        // "exited" recorded
  Lost,          // started, but the supervisor died before recording the end
};

struct AttemptRecord {
  AttemptProgress progress = AttemptProgress::NeverStarted;
  std::optional<pid_t> supervisor_pid;
  std::optional<pid_t> job_pid;
  std::optional<double> start_time;
  std::optional<double> end_time;
  std::optional<int> exit_code;  // shell's view: status or 128 + signal
  std::optional<int> signal;
  std::string reason;            // "", "time limit", "cancelled", "could not start: ...", ...
  bool takes_the_clock = false;  // its supervisor takes kStopTheClock and kStartTheClock ("clock")
  bool clock_stopped = false;    // its time limit's clock stopped (the job suspended) and not started again
  double clock_stopped_s = 0;    // how long the clock stood still, until it was last started
};

// The largest job id that names one of `file_names` ("12.out", "12.err", "12.3"), the job's
// files in the state directory's logs/ and attempts/; 0 when none does.
JobId largest_recorded_id(const std::vector<std::string>& file_names);

// Reads (and checks the lock of) an attempt's record file. A torn last line (the writer was
// killed mid-write) is ignored.
Result<AttemptRecord> read_attempt_record(const std::string& record_path);

}  // namespace gpupool
