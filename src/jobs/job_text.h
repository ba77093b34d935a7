// How jobs read in tables (gpupool jobs, show, top): shared so they all say it the same way.
#pragma once

#include <string>
#include <vector>

#include "jobs/job.h"

namespace gpupool {

// "0:05:07", "26:00:00" below a day; "3d02h" from a day on.
std::string duration_text(double seconds);

// How long, roughly, for sentences: "under a minute", "40m", "1h05m", "2d03h".
std::string rough_duration_text(double seconds);

// "0-3,6": runs of consecutive indices shortened, as Slurm prints node lists; "-" when empty.
std::string gpu_list_text(std::vector<unsigned> gpus);

// What the job asked for: "2" whole GPUs, or slices "2x20G", "1x1536M" (whole GiB in G).
std::string request_text(const Job& job);

// The state, with a finished job's non-zero exit code: "running", "failed(3)".
std::string state_text(const Job& job);

}  // namespace gpupool
