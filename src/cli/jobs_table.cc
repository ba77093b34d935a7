#include "cli/jobs_table.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/display_text.h"
#include "base/quote.h"
#include "jobs/job_text.h"
#include "sched/slice_watch.h"

namespace gpupool::cli {
namespace {

constexpr const char* kRowFormat = "{:>6} {:<10} {} {} {:<6} {:<5} {:<6} {:>7} {:>7} {:>4} {:>5} {}";

std::string start_text(const Job& job, double now, const ClockText& clock) {
  if (job.start_time) return clock(*job.start_time);
  if (job.state != JobState::Queued || !job.expected_start) return "-";
  return *job.expected_start <= now ? "~now" : "~" + clock(*job.expected_start);
}

std::string left_text(const Job& job, double now) {
  if (job.state != JobState::Running || !job.start_time || !job.spec.time_limit_s) return "-";
  // A batch job's suspended time is not counted against its limit.
  return duration_text(*job.start_time + *job.spec.time_limit_s + job.suspended_s - now);
}

std::string reason_text(const Job& job, double now) {
  if (job.wait_reason) return to_string(*job.wait_reason);
  if (auto overrun = slice_overrun_warning(job, /*short_form=*/true)) return *overrun;
  if (job.state == JobState::Running && job.usage && job.usage->idle_since) {
    return "Idle " + rough_duration_text(now - *job.usage->idle_since);
  }
  return "";
}

}  // namespace

std::vector<std::string> daemon_notices(const protocol::StatusResponse& status, const ClockText& clock) {
  auto who_when_why = [&](const std::string& by, std::optional<double> at, const std::string& reason) {
    return printable(fmt::format("{}{}{}", by.empty() ? "" : " by " + by, at ? " since " + clock(*at) : "",
                                 reason.empty() ? "" : ": " + reason),
                     kMaxShownBytes);
  };
  std::vector<std::string> notices;
  if (status.drained) {
    notices.push_back(fmt::format("The queue is drained{}. No job starts until `gpupool resume`.",
                                  who_when_why(status.drained_by, status.drained_at, status.drain_reason)));
  }
  for (const protocol::DrainedGpu& gpu : status.drained_gpus) {
    notices.push_back(fmt::format("GPU {} is drained{}. Its jobs run on; none starts on it until `gpupool resume "
                                  "--gpu {}`.",
                                  gpu.index, who_when_why(gpu.by, gpu.at > 0 ? std::optional(gpu.at) : std::nullopt, gpu.reason),
                                  gpu.index));
  }
  for (const protocol::DrainedGpu& gpu : status.quarantined_gpus) {
    notices.push_back(fmt::format("GPU {} is quarantined{}. Its jobs run on; none starts on it until it has been "
                                  "clean for a while, or `gpupool resume --gpu {}`.",
                                  gpu.index, who_when_why("", gpu.at > 0 ? std::optional(gpu.at) : std::nullopt, gpu.reason),
                                  gpu.index));
  }
  if (const auto& space = status.state_space) {
      if (space->free_bytes < space->reserve_bytes) {
      notices.push_back(fmt::format(
          "The state filesystem has {} MiB free, under the {} MiB kept for the job database: job output is "
          "not being saved.",
          space->free_bytes >> 20, space->reserve_bytes >> 20));
    }
    if (space->unsaved_jobs > 0) {
      notices.push_back(fmt::format("{} job{} could not be saved to the job database; gpupoold keeps trying.",
                                    space->unsaved_jobs, space->unsaved_jobs == 1 ? "" : "s"));
    }
  }
  return notices;
}

std::string jobs_table_header() {
  return fmt::format(fmt::runtime(kRowFormat), "ID", "STATE", pad_cells("USER", 8), pad_cells("NAME", 13), "REQ",
                     "GPUS", "START", "TIME", "LEFT", "UTIL", "GPU-H", "REASON");
}

std::string jobs_table_row(const Job& job, const std::string& id, const std::string& state, double now,
                           const ClockText& clock) {
  std::string elapsed = "-";
  if (job.start_time) elapsed = duration_text(job.end_time.value_or(std::max(now, *job.start_time)) - *job.start_time);
  std::string utilization = "-", gpu_hours = "-";
  if (job.usage) {
    // The SMs' activity where the GPUs measure it: a kernel running now and then reads 100 % as
    // utilisation.
    std::optional<double> used = job.usage->efficiency.sm_efficiency
                                     ? std::optional(std::min(9.99, *job.usage->efficiency.sm_efficiency) * 100)
                                     : job.usage->mean_utilization;
    if (used) utilization = fmt::format("{:.0f}%", *used);
    gpu_hours = job.usage->gpu_hours < 100 ? fmt::format("{:.1f}", job.usage->gpu_hours)
                                           : fmt::format("{:.0f}", job.usage->gpu_hours);
  }
  // Names and users may come from other users: escaped, and measured in display cells.
  return fmt::format(fmt::runtime(kRowFormat), id, state, pad_cells(job.owner.user, 8), pad_cells(display_name(job), 13),
                     request_text(job), gpu_list_text(job.gpus), start_text(job, now, clock), elapsed,
                     left_text(job, now), utilization, gpu_hours, reason_text(job, now));
}

std::string used_text(const GpuEfficiency& efficiency) {
  return efficiency.sm_efficiency ? fmt::format("{:.0f} %", *efficiency.sm_efficiency * 100) : "n/a";
}

std::string energy_text(const GpuEfficiency& efficiency) {
  return efficiency.energy_kwh ? fmt::format("{:.3f}", *efficiency.energy_kwh) : "n/a";
}

std::string peak_memory_text(const GpuEfficiency& efficiency) {
  return efficiency.peak_memory_mib ? fmt::format("{:.1f} GiB", static_cast<double>(*efficiency.peak_memory_mib) / 1024)
                                    : "n/a";
}

std::string efficiency_line(const GpuEfficiency& efficiency) {
  std::vector<std::string> parts;
  if (efficiency.sm_efficiency && efficiency.sm_active_gpu_hours) {
    parts.push_back(fmt::format("SMs busy {} of the GPU time held ({:.2f} GPU-hours)", used_text(efficiency),
                                *efficiency.sm_active_gpu_hours));
  }
  if (efficiency.energy_kwh) parts.push_back(energy_text(efficiency) + " kWh");
  if (efficiency.peak_memory_mib) parts.push_back("peak " + peak_memory_text(efficiency) + " on one GPU");
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace gpupool::cli
