#include "gpu/cuda_probe.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "os/host_files.h"

extern char** environ;

namespace gpupool {
namespace {

// The child's environment: ours, with the two CUDA variables replaced as asked.
std::vector<std::string> child_environment(const std::optional<std::string>& visible_devices,
                                           const std::optional<std::string>& device_order) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0 || std::strncmp(*e, "CUDA_DEVICE_ORDER=", 18) == 0) {
      continue;
    }
    env.emplace_back(*e);
  }
  if (visible_devices) env.push_back("CUDA_VISIBLE_DEVICES=" + *visible_devices);
  if (device_order) env.push_back("CUDA_DEVICE_ORDER=" + *device_order);
  return env;
}

Result<std::string> run_probe(const std::string& probe, std::vector<std::string> env) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return fail("cannot create a pipe: {}", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string program = probe;
  char* argv[] = {program.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, probe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return fail("cannot run {}: {}", probe, std::strerror(rc));
  }
  std::string output;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = read(pipe_fds[0], buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return output;
}

}  // namespace

Result<VisibleDevicesResolution> probe_cuda_driver(const Machine& machine,
                                                   const std::optional<std::string>& visible_devices,
                                                   const std::optional<std::string>& device_order) {
  std::string probe = executable_directory() + "/gpupool-cuda-probe";
  TRY_ASSIGN(std::string output, run_probe(probe, child_environment(visible_devices, device_order)));
  nlohmann::json answer = nlohmann::json::parse(output, nullptr, false);
  if (answer.is_discarded() || !answer.is_object()) {
    return fail("gpupool-cuda-probe gave no answer (output: '{}')", output.substr(0, 200));
  }
  if (answer.contains("error")) {
    return fail("cannot ask the CUDA driver: {} ({})", answer["error"].get<std::string>(),
                answer.value("detail", std::string("libcuda.so.1 missing or incomplete")));
  }
  VisibleDevicesResolution resolution;
  std::string init = answer.value("init", std::string("?"));
  if (init != "CUDA_SUCCESS" && init != "CUDA_ERROR_NO_DEVICE") resolution.error = init;
  if (answer.contains("count_error")) resolution.error = answer["count_error"].get<std::string>();
  unsigned cuda_index = 0;
  for (const auto& device : answer.value("devices", nlohmann::json::array())) {
    std::string uuid = device.value("uuid", std::string());
    auto gpu = std::find_if(machine.gpus.begin(), machine.gpus.end(),
                            [&](const Gpu& g) { return g.uuid == uuid; });
    if (gpu == machine.gpus.end()) {
      return fail("the CUDA driver reports GPU {} that NVML does not list", uuid);
    }
    resolution.devices.push_back({cuda_index++, gpu->index});
  }
  return resolution;
}

}  // namespace gpupool
