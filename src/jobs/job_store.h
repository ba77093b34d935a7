// The daemon's durable state: every job ever submitted and the daemon's own settings, in
// SQLite (WAL mode) under GPUPOOL_STATE_DIR. Every write is committed before the call returns,
// so it survives `kill -9` of the daemon; new jobs are also synced to the disk before their ids
// are given out, so they survive a power loss too.
// Only the daemon's thread uses it; finished jobs live here, not in the daemon's memory.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"

struct sqlite3;

namespace gpupool {

struct JobFilter {
  bool include_finished = false;
  std::optional<std::string> user;
  std::optional<JobState> state;  // when set, overrides include_finished
  size_t limit = 0;               // 0: no limit; else the first `limit` jobs (after `after_id`)
  JobId after_id = 0;         // only jobs with a larger id: where the previous page ended
  // Listings leave the environment out (empty): it is most of a job's bytes and they do not
  // show it. The daemon's own reload of its queue needs it.
  bool with_environment = false;
};

// What one submission stored: its first job's id, and how many jobs (an array's tasks).
struct StoredSubmission {
  JobId first_id = 0;
  unsigned count = 1;
};

class JobStore {
 public:
  // Opens or creates `path` (the parent directory must exist), creating the schema or
  // checking its version ("state database has schema 3; this gpupoold reads 1").
  static Result<JobStore> open(const std::string& path);
  JobStore(JobStore&&) noexcept;
  JobStore& operator=(JobStore&&) noexcept;
  ~JobStore();

  // Stores a new job, giving it the next id (ids are never reused, even after deletion of
  // the newest row); `job.id` is ignored. On disk (synced) when it returns.
  Result<JobId> insert(const Job& job);
  // Several at once, in one transaction and one sync: all are stored or none.
  Result<std::vector<JobId>> insert_all(const std::vector<Job>& jobs);
  // The tasks of one array job (each with `array` set), in one transaction: all are stored or
  // none. Their array id becomes the first task's id, whatever they were given.
  Result<std::vector<JobId>> insert_array(const std::vector<Job>& tasks);
  // Replaces every field of an existing job (an error if the id is unknown).
  Result<void> update(const Job& job);
  Result<std::optional<Job>> get(JobId id) const;
  // In id order; a page costs what its jobs cost, however long the history.
  Result<std::vector<Job>> list(const JobFilter& filter) const;
  // Queued, held and running jobs: what the daemon loads at start.
  Result<std::vector<Job>> unfinished() const;
  // How long each user's last `per_user` ended jobs ran (end minus start, seconds), oldest
  // first; jobs that never started are left out. What the scheduler's run-time estimates are
  // taken up from after a restart.
  Result<std::map<std::string, std::vector<double>>> recent_run_times(size_t per_user) const;
  // The jobs a user stored with a submission token (one, or an array's tasks), if any.
  Result<std::optional<StoredSubmission>> find_submission(uid_t uid, const std::string& token) const;
  // The largest id of the jobs submitted before `unix_time` (0: none was), as a list's
  // `after_id` that starts at the jobs submitted since. Found by bisecting the ids, whose
  // submission times grow with them (to within a group commit's milliseconds), so it costs a
  // few dozen key lookups however long the history.
  Result<JobId> last_submitted_before(double unix_time) const;
  // New jobs get ids above `largest_used` from now on: ids found outside the database (its
  // jobs' log and attempt files) are never handed out again after it is deleted or replaced.
  Result<void> keep_ids_above(JobId largest_used);
  // Settings that outlive a restart (e.g. "drained" = "1").
  Result<std::optional<std::string>> setting(const std::string& name) const;
  Result<void> set_setting(const std::string& name, const std::string& value);

 private:
  explicit JobStore(sqlite3* db);
  Result<std::vector<JobId>> insert_rows(const std::vector<Job>& jobs, bool one_array);
  struct Statements;
  sqlite3* db_ = nullptr;
  std::unique_ptr<Statements> statements_;  // prepared once, reused
};

}  // namespace gpupool
