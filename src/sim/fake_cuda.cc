// The simulated libcuda.so.1: the CUDA driver's checkpoint API (cuCheckpointProcess*) for
// machines without a GPU, so that gpupool-cuda-checkpoint and what drives it run in CI. It keeps
// each process's state in GPUPOOL_SIM_CUDA_STATE (sim/fake_cuda_state.h), enforces the driver's
// order of steps, and fails or hangs a step on request (fail-<step> files); docs/fixtures.md.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "sim/fake_cuda_state.h"

#define GPUPOOL_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

namespace gpupool::sim {
namespace {

// The driver's CUresult values this library returns or names.
constexpr int kSuccess = 0;
constexpr int kInvalidValue = 1;
constexpr int kNotInitialized = 3;
constexpr int kNoDevice = 100;
constexpr int kOperatingSystem = 304;
constexpr int kIllegalState = 401;
constexpr int kNotSupported = 801;
constexpr int kUnknown = 999;

constexpr int kDriverVersion = 13000;  // CUDA 13.0, as driver 580 reports

std::atomic<bool> initialized{false};

// Anything kill() can reach is live, a process of another user (EPERM) included.
bool is_live_process(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// What a test asked of this step: the word in fail-<step> in the state directory, if the file is there.
std::optional<std::string> injected_word(const std::string& path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::string word;
  file >> word;
  return word;
}

// Waits while fail-<step> says `word`.
void wait_while(const std::string& path, const std::string& word) {
  while (injected_word(path) == word) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// nullopt to go on, else the error to return. "hang" waits until the file goes, for tests of the
// caller's time limits; "hang-after" goes on now and waits after the step instead.
std::optional<int> injected_failure(const std::string& path) {
  wait_while(path, "hang");
  std::optional<std::string> word = injected_word(path);
  if (!word || *word == "hang-after") return std::nullopt;
  char* end = nullptr;
  long code = std::strtol(word->c_str(), &end, 10);
  return word->empty() || *end != '\0' ? kUnknown : static_cast<int>(code);
}

// One step of the driver: allowed only from `from`, it leaves the process in `to`.
int step(int pid, const char* name, CudaProcessState from, CudaProcessState to) {
  if (!initialized) return kNotInitialized;
  std::optional<std::string> directory = cuda_state_directory();
  if (!directory) return kNotInitialized;
  const std::string injection = *directory + "/fail-" + name;
  if (std::optional<int> failure = injected_failure(injection)) return *failure;
  if (!is_live_process(pid)) return kInvalidValue;
  std::optional<CudaProcessState> state = read_cuda_process_state(*directory, pid);
  if (!state) return kUnknown;
  if (*state != from) return kIllegalState;
  if (!write_cuda_process_state(*directory, pid, to)) return kOperatingSystem;
  // A caller stopped here finds the step done: as a daemon killed during a long checkpoint would.
  wait_while(injection, "hang-after");
  return kSuccess;
}

}  // namespace
}  // namespace gpupool::sim

using gpupool::sim::CudaProcessState;

GPUPOOL_CUDA_EXPORT int cuInit(unsigned flags) {
  if (flags != 0) return gpupool::sim::kInvalidValue;
  // No state directory, no GPU: as the real driver answers on a machine without one.
  if (!gpupool::sim::cuda_state_directory()) return gpupool::sim::kNoDevice;
  gpupool::sim::initialized = true;
  return gpupool::sim::kSuccess;
}

GPUPOOL_CUDA_EXPORT int cuDriverGetVersion(int* version) {
  if (version == nullptr) return gpupool::sim::kInvalidValue;
  *version = gpupool::sim::kDriverVersion;
  return gpupool::sim::kSuccess;
}

// As the real driver: an unknown code is INVALID_VALUE and no name.
GPUPOOL_CUDA_EXPORT int cuGetErrorName(int error, const char** name) {
  if (name == nullptr) return gpupool::sim::kInvalidValue;
  switch (error) {
    case gpupool::sim::kSuccess:
      *name = "CUDA_SUCCESS";
      break;
    case gpupool::sim::kInvalidValue:
      *name = "CUDA_ERROR_INVALID_VALUE";
      break;
    case gpupool::sim::kNotInitialized:
      *name = "CUDA_ERROR_NOT_INITIALIZED";
      break;
    case gpupool::sim::kNoDevice:
      *name = "CUDA_ERROR_NO_DEVICE";
      break;
    case gpupool::sim::kOperatingSystem:
      *name = "CUDA_ERROR_OPERATING_SYSTEM";
      break;
    case gpupool::sim::kIllegalState:
      *name = "CUDA_ERROR_ILLEGAL_STATE";
      break;
    case gpupool::sim::kNotSupported:
      *name = "CUDA_ERROR_NOT_SUPPORTED";
      break;
    case gpupool::sim::kUnknown:
      *name = "CUDA_ERROR_UNKNOWN";
      break;
    default:
      *name = nullptr;
      return gpupool::sim::kInvalidValue;
  }
  return gpupool::sim::kSuccess;
}

// The args structs are optional and this simulation reads none of them (a lock's timeout never
// comes into play: nothing holds a simulated process's CUDA calls).
GPUPOOL_CUDA_EXPORT int cuCheckpointProcessLock(int pid, void* /*args*/) {
  return gpupool::sim::step(pid, "lock", CudaProcessState::Running, CudaProcessState::Locked);
}

GPUPOOL_CUDA_EXPORT int cuCheckpointProcessCheckpoint(int pid, void* /*args*/) {
  return gpupool::sim::step(pid, "checkpoint", CudaProcessState::Locked, CudaProcessState::Checkpointed);
}

GPUPOOL_CUDA_EXPORT int cuCheckpointProcessRestore(int pid, void* /*args*/) {
  return gpupool::sim::step(pid, "restore", CudaProcessState::Checkpointed, CudaProcessState::Locked);
}

GPUPOOL_CUDA_EXPORT int cuCheckpointProcessUnlock(int pid, void* /*args*/) {
  return gpupool::sim::step(pid, "unlock", CudaProcessState::Locked, CudaProcessState::Running);
}

GPUPOOL_CUDA_EXPORT int cuCheckpointProcessGetState(int pid, int* state) {
  if (!gpupool::sim::initialized) return gpupool::sim::kNotInitialized;
  std::optional<std::string> directory = gpupool::sim::cuda_state_directory();
  if (state == nullptr || !directory || !gpupool::sim::is_live_process(pid)) return gpupool::sim::kInvalidValue;
  std::optional<CudaProcessState> recorded = gpupool::sim::read_cuda_process_state(*directory, pid);
  if (!recorded) return gpupool::sim::kUnknown;
  *state = static_cast<int>(*recorded);
  return gpupool::sim::kSuccess;
}
