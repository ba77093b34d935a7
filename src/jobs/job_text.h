// How jobs read in tables (gpupool jobs, show, top): shared so they all say it the same way.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/job.h"

namespace gpupool {

// "0:05:07", "26:00:00" below a day; "3d02h" from a day on.
std::string duration_text(double seconds);

// How long, roughly, for sentences: "under a minute", "40m", "1h05m", "2d03h".
std::string rough_duration_text(double seconds);

// "0-3,6": runs of consecutive indices shortened, as Slurm prints node lists; "-" when empty.
std::string gpu_list_text(std::vector<unsigned> gpus);
// "20", "31.2": MiB as GiB to one decimal, without a trailing ".0". Rounded down, so a use just
// past a limit never reads as the limit itself.
std::string gib_text(uint64_t mib);
// A suspended job's checkpoint in words: "9.1 GiB of GPU memory of 1 process in host memory,
// suspended by ana"; empty for a job that is not suspended.
std::string suspension_text(const Job& job);

// What the job asked for: "2" whole GPUs, or slices "2x20G", "1x1536M" (whole GiB in G), with a
// compute share "1x20G/25%".
std::string request_text(const Job& job);

// The state, with a finished job's non-zero exit code: "running", "failed(3)".
std::string state_text(const Job& job);

// A job as every view names it (top, list, leases, doctor, the dashboard): "job 329 (alice,
// pretrain)"; "job 329 (alice)" where its name is not known.
std::string job_label(JobId id, std::string_view user, std::string_view name = {});

// The job name in the leases the daemon takes for a job, "job-329", and the job it names back.
std::string lease_job_name(JobId id);
std::optional<JobId> job_of_lease(std::string_view lease_job);

// A lease's holder as the views name it: a daemon job's lease as that job ("job 329 (alice)"),
// another (`gpupool run` without a daemon) by its name and user ("run-777 (bob)").
std::string lease_holder_text(std::string_view lease_job, std::string_view user);

// Why a finished job cannot be changed: "job 349 has already ended (cancelled)".
std::string already_ended_text(JobId id, JobState state);

}  // namespace gpupool
