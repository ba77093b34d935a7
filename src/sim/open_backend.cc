#include "sim/open_backend.h"

#include <fmt/format.h>

#include "os/environment.h"
#include "os/host_files.h"
#include "sim/fixture.h"

namespace gpupool {

std::vector<std::string> fixture_search_dirs() {
  std::vector<std::string> dirs;
  if (std::string dir = environment_variable("GPUPOOL_FIXTURE_DIR").value_or(""); !dir.empty()) dirs.push_back(dir);
  dirs.push_back(executable_directory() + "/../share/gpupool/fixtures");
  return dirs;
}

namespace {

// GPUPOOL_SIM, unless GPUPOOL_NVML_LIBRARY names the NVML library to load; "" when neither.
std::string simulated_machine() {
  if (!environment_variable("GPUPOOL_NVML_LIBRARY").value_or("").empty()) return "";
  return environment_variable("GPUPOOL_SIM").value_or("");
}

Result<NvmlSource> nvml_source() {
  if (std::string library = environment_variable("GPUPOOL_NVML_LIBRARY").value_or(""); !library.empty()) {
    return NvmlSource{.libraries = {library}, .simulated_machine = ""};
  }
  if (std::string sim = simulated_machine(); !sim.empty()) {
    // Read here for its name and its library generation; the simulated library finds the same
    // fixture by the same search (GPUPOOL_FIXTURE_DIR, then beside itself).
    TRY_ASSIGN(std::string path, sim::locate_fixture(sim, fixture_search_dirs()));
    TRY_ASSIGN(sim::Fixture fixture, sim::load_fixture(path));
    return NvmlSource{
        .libraries = {fmt::format("{}/sim/{}/libnvidia-ml.so.1", private_library_directory(), fixture.nvml_library)},
        .simulated_machine = fixture.name};
  }
  return NvmlSource{.libraries = {"libnvidia-ml.so.1", "libnvidia-ml.so"}, .simulated_machine = ""};
}

}  // namespace

Result<std::unique_ptr<GpuBackend>> open_gpu_backend() {
  TRY_ASSIGN(NvmlSource source, nvml_source());
  return open_nvml_backend(source);
}

CheckpointProgram checkpoint_program() {
  if (simulated_machine().empty()) return CheckpointProgram{};
  return CheckpointProgram{.library = private_library_directory() + "/sim/libcuda.so.1"};
}

Result<std::unique_ptr<GpuBackend>> open_pool_backend() {
  TRY_ASSIGN(std::unique_ptr<GpuBackend> machine, open_gpu_backend());
  return restrict_to_slurm_allocation(std::move(machine), own_environment());
}

}  // namespace gpupool
