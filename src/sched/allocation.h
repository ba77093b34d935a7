// Which GPUs a request gets, given what is held and what is busy: pure logic,
// shared by `gpupool run`/`launch` and the daemon's scheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"
#include "machine/gpu.h"
#include "sched/fragmentation.h"

namespace gpupool {

// What stands on one GPU right now.
struct GpuAvailability {
  bool usable = true;            // false: faulted, or unknown memory size for a slice
  bool exclusive_held = false;   // an exclusive gpupool lease holds it
  uint64_t shared_mib = 0;       // MiB held by gpupool slices
  bool external_busy = false;    // processes gpupool did not start use it (or memory above the threshold)
  uint64_t external_mib = 0;     // memory those processes use
  std::string holders;           // who, for the waiting line: "alice (train-3)", "pid 812 bob python"
  // The scheduler's MPS slices on it (JobRequest::mps) and whose they are: one user's at a time.
  unsigned mps_slices = 0;
  std::string mps_user = {};
  // A user whose MPS clients run on it outside gpupool's running jobs (processes that outlived
  // their job, or ones started without gpupool): the GPU's MPS server serves that user until
  // they end, so another user's MPS slice would wait there unseen.
  std::string mps_client_user = {};
  std::vector<std::string> mig_taken = {};     // MIG devices held: their UUIDs
  std::vector<std::string> mig_external = {};  // held outside the scheduler (leases without the daemon)
};

// Keeps every job off the GPU (drained, quarantined), `why` beside whoever else holds it in the
// waiting line.
void take_out_of_service(GpuAvailability& gpu, const std::string& why);

// Whether the request's allowed and excluded GPUs let it use GPU `index`.
bool may_use(const GpuRequest& request, unsigned index);

// Whether a whole-GPU request may take it: not in MIG mode (where CUDA runs only on its MIG
// devices, leased one by one: docs/mig.md), no lease, no slice, no outside use.
bool whole_gpu_free(const Gpu& gpu, const GpuAvailability& state);

// The MiB a new slice could take on it (outside use counts against it); 0 when it takes none.
uint64_t slice_room(const Gpu& gpu, const GpuAvailability& state);

// Whether a MIG device meets a --mig request: its profile (any when the request names none) and
// at least the memory asked for.
bool mig_device_matches(const MigDevice& device, const MigRequest& request);
// The MIG device of `gpu` that a --mig request gets: the smallest free one that matches (least
// memory, then fewest compute slices, then index), so larger ones stay for larger requests;
// nullptr when none is free. A device is not free while another compute instance of its GPU
// instance is taken: they share its memory.
const MigDevice* free_mig_device(const Gpu& gpu, const GpuAvailability& state, const MigRequest& request);
// "1g.18gb", "a MIG device of at least 20480 MiB", "a 1g.18gb MIG device of at least ...": for messages.
std::string describe_mig_request(const MigRequest& request);

// The GPUs to take, in placement order; nullopt when the request must wait. An error when
// it can never be met on this machine (more GPUs than allowed, a slice larger than any GPU, a
// MIG device no allowed GPU has). A --mig request gets the one GPU whose free_mig_device it takes.
// A slice goes best-fit (the least room left, GPUs already shared first) or, given the recent
// requests, where it least grows the memory they could not use (fragmentation_growth).
Result<std::optional<std::vector<unsigned>>> choose_gpus(const Machine& machine,
                                                         const std::vector<GpuAvailability>& availability,
                                                         const GpuRequest& request,
                                                         const RequestMix* recent = nullptr);

// "waiting for 2 GPUs: 3 busy (GPU 0: alice (train-3); GPU 1: pid 812 bob python; ...)".
std::string describe_wait(const Machine& machine, const std::vector<GpuAvailability>& availability,
                          const GpuRequest& request);

// What a job is given: its GPUs (nvidia-smi indices) and, for a --mig job, the UUID of its MIG
// device on the one GPU; for a slice, the MiB on each.
struct LeasedDevices {
  std::vector<unsigned> gpus;
  std::optional<uint64_t> slice_mib = std::nullopt;
  std::string mig_uuid = {};
};

// What a request takes on the `gpus` choose_gpus gave it: for a --mig request, the MIG device
// free_mig_device picks there.
LeasedDevices devices_for(const Machine& machine, const std::vector<GpuAvailability>& availability,
                          const GpuRequest& request, std::vector<unsigned> gpus);

// What a --mig lease changes in gpu_environment's variables (none for others): CUDA_VISIBLE_DEVICES
// and GPUPOOL_MIG_UUID the MIG device's UUID, GPUPOOL_GPU_UUIDS its GPU's, GPUPOOL_MEM_MIB its
// memory. gpupoold adds them to an interactive lease's grant, so that every client, whatever it
// makes of the grant's UUIDs, gives its program the same environment.
std::vector<std::string> mig_environment(const Machine& machine, const LeasedDevices& leased);

// The environment of a process that uses `leased` of `machine` for job `job`: CUDA_VISIBLE_DEVICES
// (full GPU UUIDs in the order of the GPUs, or the MIG device's UUID), CUDA_DEVICE_ORDER=PCI_BUS_ID,
// and GPUPOOL_JOB, GPUPOOL_GPUS, GPUPOOL_GPU_UUIDS (and GPUPOOL_MEM_MIB for a slice, the MIG
// device's memory for a MIG device; GPUPOOL_MIG_UUID), as "NAME=value".
std::vector<std::string> gpu_environment(const Machine& machine, const LeasedDevices& leased, const std::string& job);

// The frameworks' own memory limits for a slice of `slice_mib` on each of `gpus` (none for whole
// GPUs): XLA_PYTHON_CLIENT_MEM_FRACTION (the slice's share of the smallest of the cards, rounded
// down) and XLA_PYTHON_CLIENT_PREALLOCATE=false for JAX, TF_FORCE_GPU_ALLOW_GROWTH=true for
// TensorFlow, CUPY_GPU_MEMORY_LIMIT (bytes) for CuPy (docs/leases.md).
std::vector<std::string> slice_memory_limits(const Machine& machine, const std::vector<unsigned>& gpus,
                                             const std::optional<uint64_t>& slice_mib);

// A job's environment: `environment` with gpu_environment's variables over it and, for a slice,
// slice_memory_limits under it (a limit the job sets itself wins). `gpupool run`, `launch` and
// the daemon's batch jobs all start their programs with it.
std::vector<std::string> lease_environment(const std::vector<std::string>& environment, const Machine& machine,
                                           const LeasedDevices& leased, const std::string& job);

// Parses a memory size: "20G", "20GiB", "512M", "1.5T", or a plain number of MiB.
Result<uint64_t> parse_memory_mib(const std::string& text);

}  // namespace gpupool
