#include "daemon/supervisor_pool.h"

#include <fmt/format.h>

namespace gpupool {
namespace {

// Two cover the common case of one job ending and the next starting, and a second start in the
// same moment; a burst beyond that starts supervisors on demand.
constexpr size_t kStandbySupervisors = 2;

}  // namespace

SupervisorPool::SupervisorPool(asio::io_context& io, std::string supervisor_program)
    : io_(io), program_(std::move(supervisor_program)) {}

Result<StandbySupervisor> SupervisorPool::take() {
  if (!fill_pending_) {
    fill_pending_ = true;
    asio::post(io_, [this] { fill(); });
  }
  if (waiting_.empty()) return StandbySupervisor::spawn(program_);
  StandbySupervisor standby = std::move(waiting_.back());
  waiting_.pop_back();
  return standby;
}

void SupervisorPool::put_back(StandbySupervisor supervisor) { waiting_.push_back(std::move(supervisor)); }

void SupervisorPool::fill() {
  fill_pending_ = false;
  while (waiting_.size() < kStandbySupervisors) {
    auto spawned = StandbySupervisor::spawn(program_);
    if (!spawned) {
      fmt::print(stderr, "gpupoold: {}\n", spawned.error().message);
      return;
    }
    waiting_.push_back(std::move(*spawned));
  }
}

}  // namespace gpupool
