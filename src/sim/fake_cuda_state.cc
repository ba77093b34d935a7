#include "sim/fake_cuda_state.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace gpupool::sim {
namespace {

constexpr CudaProcessState kStates[] = {CudaProcessState::Running, CudaProcessState::Locked,
                                        CudaProcessState::Checkpointed, CudaProcessState::Failed};

std::string state_path(const std::string& directory, int pid) { return directory + "/" + std::to_string(pid); }

}  // namespace

const char* to_string(CudaProcessState state) {
  switch (state) {
    case CudaProcessState::Running:
      return "running";
    case CudaProcessState::Locked:
      return "locked";
    case CudaProcessState::Checkpointed:
      return "checkpointed";
    case CudaProcessState::Failed:
      return "failed";
  }
  return "?";
}

std::optional<std::string> cuda_state_directory() {
  const char* directory = std::getenv("GPUPOOL_SIM_CUDA_STATE");
  if (directory == nullptr || *directory == '\0') return std::nullopt;
  return std::string(directory);
}

std::optional<CudaProcessState> read_cuda_process_state(const std::string& directory, int pid) {
  std::ifstream file(state_path(directory, pid));
  if (!file)
    return access(state_path(directory, pid).c_str(), F_OK) == 0 ? std::nullopt
                                                                 : std::optional(CudaProcessState::Running);
  std::string word;
  file >> word;
  for (CudaProcessState state : kStates) {
    if (word == to_string(state)) return state;
  }
  return std::nullopt;
}

bool write_cuda_process_state(const std::string& directory, int pid, CudaProcessState state) {
  std::string path = state_path(directory, pid);
  std::string fresh = path + ".new";
  {
    std::ofstream file(fresh, std::ios::trunc);
    file << to_string(state) << '\n';
    if (!file.flush()) return false;
  }
  return std::rename(fresh.c_str(), path.c_str()) == 0;
}

bool is_checkpointed(int pid) {
  std::optional<std::string> directory = cuda_state_directory();
  return directory && read_cuda_process_state(*directory, pid) == CudaProcessState::Checkpointed;
}

}  // namespace gpupool::sim
