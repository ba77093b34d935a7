// Inside a Slurm allocation gpupool's pool is exactly the GPUs Slurm gave the job: read from the
// variables Slurm sets, named by UUID, and the machine cut down to them. Pure: the environment
// and the machine come in as values (docs/slurm.md, "Inside an allocation").
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool {

struct SlurmAllocation {
  std::string job_id;              // SLURM_JOB_ID
  std::vector<std::string> uuids;  // the allocated GPUs, in the machine's (nvidia-smi) order
  std::string source;              // what they were read from, for people: "SLURM_JOB_GPUS=3,4"
};

// nullopt outside an allocation (no SLURM_JOB_ID). Reads, first found: SLURM_STEP_GPUS (a job
// step's own GPUs), SLURM_JOB_GPUS (the job's), then CUDA_VISIBLE_DEVICES as CUDA would read it.
// Slurm writes the node's numbers in its two variables: the N of the /dev/nvidiaN each GPU's
// gres.conf File= names, which is the GPU's minor number (not always nvidia-smi's index), or
// UUIDs (Flags=env_uuid). An error when a name matches no GPU of the machine, or when the job
// has no GPU at all.
Result<std::optional<SlurmAllocation>> slurm_allocation(const std::map<std::string, std::string>& environment,
                                                        const Machine& machine);

// The machine cut down to `uuids`: their GPUs renumbered 0..k-1 in the machine's order (the
// numbers CUDA gives them when Slurm constrains the job's devices) and the links between them.
// An error when a UUID is not on the machine.
Result<Machine> machine_restricted_to(const Machine& machine, const std::vector<std::string>& uuids);

}  // namespace gpupool
