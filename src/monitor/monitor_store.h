// Where the accounting outlives the daemon: a table `job_usage` in the jobs database
// (gpupool.db), one row per job that held GPUs, added to while the job runs (every minute and
// when it stops). A table of its own rather than columns of `jobs`: created when missing, so
// the jobs schema and its version stay as they are, and an older gpupoold ignores it; columns a
// later version measures are added to an older table.
// Used on the daemon's thread only.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"
#include "monitor/usage_accounting.h"

struct sqlite3;

namespace gpupool {

struct StoredUsage {
  JobId id = 0;
  std::string user;
  std::string name;
  UsageTally usage;
  double first_time = 0;  // Unix seconds: the first tick accounted
  double last_time = 0;   // the latest
};

class UsageStore {
 public:
  static Result<UsageStore> open(const std::string& path);
  UsageStore(UsageStore&& other) noexcept;
  UsageStore& operator=(UsageStore&& other) noexcept;
  UsageStore(const UsageStore&) = delete;
  UsageStore& operator=(const UsageStore&) = delete;
  ~UsageStore();

  // Adds each job's usage to its row (created when missing), in one transaction.
  Result<void> add(const std::vector<StoredUsage>& additions);
  Result<std::optional<StoredUsage>> job(JobId id) const;
  // Jobs that held GPUs at or after `since`, in id order.
  Result<std::vector<StoredUsage>> since(double since) const;
  // Each user's usage, all time.
  Result<std::map<std::string, UsageTally>> user_totals() const;

 private:
  explicit UsageStore(sqlite3* db) : db_(db) {}
  Result<std::vector<StoredUsage>> query(const std::string& where, std::variant<JobId, double> parameter) const;
  sqlite3* db_ = nullptr;
};

}  // namespace gpupool
