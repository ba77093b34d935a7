// Room on the state file system (docs/daemon.md, "A full state file system"). The job logs and the
// database share it, so one job's output could fill it and leave no room to store submissions
// or jobs' ends. These decisions keep that from happening: each job's output is bounded, output
// stops while free space is under the database's reserve, and what the database refused to
// save is saved again with a backoff until it is. Pure: sizes and clock in, decisions out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gpupool {

struct OutputLimits {
  std::optional<uint64_t> max_bytes;  // per job, its stdout and stderr together; nullopt: no limit
  uint64_t reserve_bytes = 0;         // free space kept for the database
};

enum class OutputStream { Out = 0, Err = 1 };

// What becomes of one piece of a job's output.
struct OutputDecision {
  size_t write = 0;                   // the first `write` bytes go to the log, the rest is dropped
  std::optional<std::string> notice;  // a line to add to that log, the first time it drops for a reason
};

// One job's output, both streams counted together, from the sizes its logs already had (earlier
// attempts append to the same logs).
class OutputAllowance {
 public:
  OutputAllowance(OutputLimits limits, uint64_t written_before);

  // A piece of `size` bytes on `stream`, with `free_bytes` free on the logs' file system now.
  OutputDecision admit(OutputStream stream, size_t size, uint64_t free_bytes);
  // The file system refused a write the free space allowed (it filled meanwhile): as if short.
  std::optional<std::string> write_failed(OutputStream stream, uint64_t free_bytes);

  uint64_t written() const { return written_; }

 private:
  std::optional<std::string> space_notice(OutputStream stream, uint64_t free_bytes);

  OutputLimits limits_;
  uint64_t written_;
  bool limit_told_[2] = {false, false};
  bool space_told_[2] = {false, false};  // during the current shortage; a later one is told again
};

// When to try again to save jobs the database refused to store (the disk full, an I/O error):
// soon at first, then less often, so a full disk is not hammered but a freed one is noticed
// within a minute.
class SaveRetry {
 public:
  static constexpr double kFirstDelayS = 1;
  static constexpr double kMaxDelayS = 60;

  bool due(double now) const { return !next_ || now >= *next_; }
  void failed(double now);
  void succeeded();

 private:
  std::optional<double> next_;
  double delay_s_ = 0;
};

}  // namespace gpupool
