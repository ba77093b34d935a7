// The JSON shape of discovered GPUs and topology: the contract of
// `gpupool list --json` and `gpupool topo --json` (and later of the daemon's
// API). A field the driver does not report is null.
#pragma once

#include <nlohmann/json.hpp>

#include "machine/gpu.h"

namespace gpupool {

nlohmann::json to_json(const GpuProcess& process);
nlohmann::json to_json(const MigDevice& mig);
nlohmann::json to_json(const Gpu& gpu);
nlohmann::json to_json(const DriverInfo& driver);
// {"gpus": [...affinity...], "links": [...pairs...], "matrix": [[labels]]}
nlohmann::json topology_json(const Machine& machine);

// "13.0" from 13000, as nvidia-smi prints the CUDA version.
std::string cuda_version_string(int version);

}  // namespace gpupool
