// Whether gpupool runs inside a container, and how that was told: inside one, NVML's indices and
// the /dev/nvidiaN minor numbers are the container's own, not the host's.
#pragma once

#include <optional>
#include <string>

#include "os/host_files.h"

namespace gpupool {

struct ContainerDetection {
  bool detected = false;
  std::optional<std::string> how;  // the evidence, for the user; nullopt when none was found
};

// Looks, under the host files' root, for /.dockerenv, /run/.containerenv, container= in PID 1's
// environment, then a container runtime's name in PID 1's cgroup. A cgroup v2 container without
// the first three leaves no trace that can be read from inside, so "not detected" is not proof.
ContainerDetection detect_container(const HostFiles& files);

}  // namespace gpupool
