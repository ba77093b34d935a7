// `gpupool jobs` as a table: one line per job within 100 columns, the reason a job waits in one
// word (squeue's REASON), the detail left to `gpupool show`. Pure: the caller passes the time
// and how a time of day reads, so the layout is tested without a clock or a time zone.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "jobs/job.h"
#include "protocol/messages.h"

namespace gpupool::cli {

// A Unix time as the table shows it: "14:05" today, "12-04" another day.
using ClockText = std::function<std::string(double unix_seconds)>;

// What stands above the table: a drained queue, drained GPUs, a state file system short of space
// or jobs the database refused, one line each (escaped: the reasons are an administrator's text
// shown to everyone). `clock` says when ("since 12-05 15:30:12").
std::vector<std::string> daemon_notices(const protocol::StatusResponse& status, const ClockText& clock);

std::string jobs_table_header();

// `id` and `state` as they read: "42" or "slurm:42"; "failed(3)", "unknown". START is when it
// started, or for a queued job "~" and when it is expected to; TIME how long it has run; LEFT
// what its time limit leaves; UTIL how much of its GPUs it used (SM activity over the GPU time
// held, where the GPUs measure it; else their mean utilisation); GPU-H its GPU-hours;
// REASON why a waiting job waits, or "Idle 25m" for a running job flagged idle.
std::string jobs_table_row(const Job& job, const std::string& id, const std::string& state, double now,
                           const ClockText& clock);

// A job's or a user's efficiency, as `show` and `report --efficiency` say it: "62 %" of the GPU
// time used (n/a without SM activity readings), kWh, peak memory in GiB.
std::string used_text(const GpuEfficiency& efficiency);
std::string energy_text(const GpuEfficiency& efficiency);
std::string peak_memory_text(const GpuEfficiency& efficiency);
// One line for `show`: "SMs busy 62 % of the GPU time held (0.78 GPU-hours), 0.41 kWh, peak 38.2
// GiB on one GPU"; "" when nothing is known.
std::string efficiency_line(const GpuEfficiency& efficiency);

}  // namespace gpupool::cli
