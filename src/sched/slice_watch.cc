#include "sched/slice_watch.h"

#include <cmath>

#include <fmt/format.h>

#include "jobs/job_text.h"

namespace gpupool {
namespace {

// Deeper process trees than this are not followed: a loop in a stale /proc reading ends here.
constexpr int kMaxAncestors = 64;

}  // namespace

bool watches_slices(SliceEnforcement enforcement) {
  return enforcement != SliceEnforcement::Off;
}

std::vector<SliceUse> slice_uses(const Machine& sample, const std::vector<WatchedSlice>& slices,
                                 const ParentOf& parent_of) {
  std::map<uint32_t, size_t> slice_of_holder;
  std::vector<SliceUse> uses;
  std::map<std::pair<size_t, unsigned>, size_t> use_of;  // (slice, gpu) → its entry in uses
  for (size_t i = 0; i < slices.size(); ++i) {
    slice_of_holder[slices[i].holder_pid] = i;
    for (unsigned gpu : slices[i].gpus) {
      use_of[{i, gpu}] = uses.size();
      uses.push_back(SliceUse{slices[i].job, gpu, 0, slices[i].slice_mib, 0});
    }
  }
  auto holder_of = [&](uint32_t pid) -> std::optional<size_t> {
    for (int depth = 0; depth < kMaxAncestors && pid > 1; ++depth) {
      if (auto it = slice_of_holder.find(pid); it != slice_of_holder.end()) return it->second;
      auto parent = parent_of(pid);
      if (!parent) return std::nullopt;
      pid = *parent;
    }
    return std::nullopt;
  };
  for (const Gpu& gpu : sample.gpus) {
    for (const GpuProcess& process : gpu.processes) {
      auto slice = holder_of(process.pid);
      if (!slice) continue;
      auto use = use_of.find({*slice, gpu.index});
      if (use == use_of.end()) continue;  // a GPU its slice does not cover: not the watchdog's
      uses[use->second].used_mib += process.used_memory_mib.value_or(0);
      uses[use->second].pids.push_back(process.pid);
      // Only a process NVML says is no client: where it cannot say, nobody is stopped for it.
      if (process.mps_client == false && process.kind != ProcessKind::Graphics) {
        uses[use->second].outside_mps_pid = process.pid;
      }
    }
  }
  return uses;
}

std::map<uint64_t, SliceUse> worst_use_per_job(const std::vector<SliceUse>& uses) {
  std::map<uint64_t, SliceUse> worst;
  auto share = [](const SliceUse& u) {
    return u.slice_mib == 0 ? 0 : static_cast<double>(u.used_mib) / static_cast<double>(u.slice_mib);
  };
  for (const SliceUse& use : uses) {
    auto [it, inserted] = worst.try_emplace(use.job, use);
    if (!inserted && share(use) > share(it->second)) it->second = use;
  }
  return worst;
}

std::string slice_overrun_text(uint64_t used_mib, uint64_t slice_mib) {
  return fmt::format("used {} GiB of its {} GiB slice", gib_text(used_mib), gib_text(slice_mib));
}

std::optional<std::string> slice_overrun_warning(const Job& job, bool short_form) {
  if (job.state != JobState::Running || !job.spec.gpus.slice_mib || !job.usage || !job.usage->slice_used_mib) {
    return std::nullopt;
  }
  if (*job.usage->slice_used_mib <= *job.spec.gpus.slice_mib) return std::nullopt;
  if (short_form) {
    // A share, not the two sizes: "Over 112/100G" would not fit the table's hundred columns.
    return fmt::format("Over {}%", *job.usage->slice_used_mib * 100 / *job.spec.gpus.slice_mib);
  }
  return "over its slice: " + slice_overrun_text(*job.usage->slice_used_mib, *job.spec.gpus.slice_mib);
}

std::vector<uint64_t> jobs_to_stop(const std::map<uint64_t, SliceUse>& worst, SliceOverrunPolicy policy,
                                   const std::function<bool(uint64_t job)>& told_to_end) {
  std::vector<uint64_t> stop;
  if (policy != SliceOverrunPolicy::Stop) return stop;
  for (const auto& [job, use] : worst) {
    if (use.overrun() && !told_to_end(job)) stop.push_back(job);
  }
  return stop;
}

}  // namespace gpupool
