// The simulated CUDA driver's record of each process's checkpoint state: one file per process,
// named by its pid, in the directory GPUPOOL_SIM_CUDA_STATE names (docs/fixtures.md). The
// simulated libcuda.so.1 keeps it; the simulated NVML reads it, to leave out the processes a
// checkpoint took off their GPU. Compiled into both libraries; it links nothing of ours.
#pragma once

#include <optional>
#include <string>

namespace gpupool::sim {

// The driver's CUprocessState values.
enum class CudaProcessState { Running = 0, Locked = 1, Checkpointed = 2, Failed = 3 };

const char* to_string(CudaProcessState state);

// GPUPOOL_SIM_CUDA_STATE; nullopt when it is unset or empty.
std::optional<std::string> cuda_state_directory();

// The state recorded for `pid`: Running when there is no file; nullopt when the file cannot be
// read or holds no state's name.
std::optional<CudaProcessState> read_cuda_process_state(const std::string& directory, int pid);

// Replaces the file whole (a new file renamed into place), so a reader never sees half of it.
bool write_cuda_process_state(const std::string& directory, int pid, CudaProcessState state);

// Whether GPUPOOL_SIM_CUDA_STATE records `pid` as checkpointed.
bool is_checkpointed(int pid);

}  // namespace gpupool::sim
