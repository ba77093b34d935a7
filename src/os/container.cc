#include "os/container.h"

#include <fmt/format.h>

#include <array>

namespace gpupool {

ContainerDetection detect_container(const HostFiles& files) {
  if (files.exists("/.dockerenv")) return {true, "/.dockerenv exists (Docker)"};
  if (files.exists("/run/.containerenv")) return {true, "/run/.containerenv exists (Podman)"};
  if (auto init_env = files.process_environment(1)) {
    if (auto it = init_env->find("container"); it != init_env->end()) {
      return {true, fmt::format("container={} in the environment of PID 1", it->second)};
    }
  }
  if (auto cgroup = files.read("/proc/1/cgroup")) {
    for (const char* runtime : std::array{"kubepods", "docker", "containerd", "libpod"}) {
      if (cgroup->find(runtime) != std::string::npos) {
        return {true, fmt::format("/proc/1/cgroup mentions {}", runtime)};
      }
    }
  }
  return {};
}

}  // namespace gpupool
