// What the scheduler's tests build their machines, schedulers and requests with.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sched/scheduler.h"

namespace gpupool::scheduler_testing {

constexpr uint64_t kGpuMib = 80000;

// `count` GPUs of kGpuMib, all joined by an NVSwitch.
inline Machine make_machine(unsigned count) {
  Machine machine;
  for (unsigned i = 0; i < count; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.memory_total_mib = kGpuMib;
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(count, std::vector<Link>(count, Link{12, true, PcieLevel::System}));
  return machine;
}

inline Scheduler make_scheduler(unsigned gpus, Policy policy, std::optional<double> quota = std::nullopt) {
  SchedulerConfig config;
  config.policy = policy;
  config.quota_gpus = quota;
  auto scheduler = Scheduler::create(make_machine(gpus), config);
  EXPECT_TRUE(scheduler.ok());
  return std::move(*scheduler);
}

inline JobRequest job(JobId id, unsigned gpus, std::optional<double> limit = std::nullopt, std::string user = "u") {
  return JobRequest{id, std::move(user), {gpus, std::nullopt}, 0, limit};
}

inline std::vector<JobId> ids(const std::vector<JobStart>& starts) {
  std::vector<JobId> out;
  for (const JobStart& start : starts) out.push_back(start.id);
  return out;
}

// A process gpupool did not start, using `mib` on a GPU.
inline GpuAvailability outside_process(uint64_t mib) {
  GpuAvailability use;
  use.external_busy = true;
  use.external_mib = mib;
  use.holders = "pid 812 bob python";
  return use;
}

}  // namespace gpupool::scheduler_testing
