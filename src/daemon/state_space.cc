#include "daemon/state_space.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpupool {

OutputAllowance::OutputAllowance(OutputLimits limits, uint64_t written_before)
    : limits_(limits), written_(written_before) {}

OutputDecision OutputAllowance::admit(OutputStream stream, size_t size, uint64_t free_bytes) {
  int s = static_cast<int>(stream);
  OutputDecision decision;
  size_t allowed = size;
  if (limits_.max_bytes) {
    uint64_t left = *limits_.max_bytes - std::min(*limits_.max_bytes, written_);
    allowed = static_cast<size_t>(std::min<uint64_t>(size, left));
  }
  // Whole pieces or nothing for space: the reserve is a margin, not a budget to fill exactly.
  if (allowed > 0 && free_bytes < limits_.reserve_bytes + allowed) {
    decision.notice = space_notice(stream, free_bytes);
    return decision;
  }
  space_told_[s] = false;
  decision.write = allowed;
  written_ += allowed;
  if (allowed < size && !limit_told_[s]) {
    limit_told_[s] = true;
    decision.notice = fmt::format(
        "gpupool: output cut at {} bytes: the job reached its output limit (max_log_mb); the rest is dropped\n",
        *limits_.max_bytes);
  }
  return decision;
}

std::optional<std::string> OutputAllowance::write_failed(OutputStream stream, uint64_t free_bytes) {
  return space_notice(stream, free_bytes);
}

std::optional<std::string> OutputAllowance::space_notice(OutputStream stream, uint64_t free_bytes) {
  bool& told = space_told_[static_cast<int>(stream)];
  if (told) return std::nullopt;
  told = true;
  return fmt::format(
      "gpupool: output dropped: the state filesystem is short of space ({} bytes free, {} kept for the job "
      "database)\n",
      free_bytes, limits_.reserve_bytes);
}

void SaveRetry::failed(double now) {
  delay_s_ = delay_s_ == 0 ? kFirstDelayS : std::min(delay_s_ * 2, kMaxDelayS);
  next_ = now + delay_s_;
}

void SaveRetry::succeeded() {
  next_.reset();
  delay_s_ = 0;
}

}  // namespace gpupool
