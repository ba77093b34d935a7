// Collects what `gpupool doctor` judges: /proc, /dev and /sys under the host files' root, NVML
// through the GPU backend (real or simulated), the leases, the daemon's socket and this
// process's environment. Nothing here decides; src/doctor/doctor does.
#pragma once

#include <cstdint>
#include <optional>

#include "doctor/doctor.h"
#include "os/host_files.h"

namespace gpupool::cli {

// Never fails: whatever cannot be read is recorded as such in the facts.
DoctorFacts gather_doctor_facts(const HostFiles& host, std::optional<uint32_t> pid);

}  // namespace gpupool::cli
