// `gpupool doctor`: the GPU troubleshooting checklist. The gatherer (src/cli/doctor_facts) reads
// the machine into DoctorFacts; everything here only decides, so every outcome is unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "machine/gpu.h"
#include "sched/allocation.h"

namespace gpupool {

enum class CheckStatus { Ok, Warning, Problem };  // worst last: the exit code is the worst

const char* to_string(CheckStatus status);  // "ok", "warning", "problem"

struct Finding {
  std::string check;  // stable id, e.g. "kernel-module"
  CheckStatus status = CheckStatus::Ok;
  std::string summary;                // one line
  std::vector<std::string> evidence;  // what was read, one line each
  std::string fix;                    // empty when nothing is to be done
};

// A /dev entry whose name starts with "nvidia".
struct DeviceNode {
  std::string name;          // "nvidiactl", "nvidia-uvm", "nvidia0"
  unsigned permissions = 0;  // st_mode & 07777
};

// A CUDA version some software on the machine was built for, read from its files.
struct InstalledCuda {
  std::string what;     // "PyTorch in /usr/lib/python3/dist-packages", "CUDA toolkit /usr/local/cuda-12.4"
  std::string version;  // "12.1"
};

// A lease as the lock layer lists it, with whether its holder process still runs.
struct LeaseFact {
  unsigned index = 0;
  std::string uuid;
  uint32_t pid = 0;
  std::string user;
  std::string job;
  bool holder_alive = true;
};

// The state directory's file system, as the daemon measures it (its status).
struct StateSpaceFact {
  uint64_t free_bytes = 0;
  uint64_t reserve_bytes = 0;  // state_reserve_mb
  uint64_t unsaved_jobs = 0;   // jobs whose latest change the database refused
};

// A GPU the daemon's quarantine keeps from new jobs (its status).
struct QuarantinedGpuFact {
  unsigned index = 0;
  double since = 0;  // Unix seconds
  std::string reason;
};

struct DaemonFact {
  std::string runtime_dir;
  bool running = false;
  std::optional<std::string> error;  // a socket is there but the daemon could not be reached
  std::optional<StateSpaceFact> state_space;  // nullopt: no daemon, or it did not say
  std::vector<QuarantinedGpuFact> quarantined = {};
  // How it holds memory slices ("mps", "watch", "off"); "" when no daemon said.
  std::string slice_enforcement = "";
};

// What `--pid PID` looks at.
struct ProcessFacts {
  uint32_t pid = 0;
  // /proc/PID/environ; nullopt when the process is gone or not ours to read.
  std::optional<std::map<std::string, std::string>> environment;
  std::vector<uint32_t> ancestry;  // the pid, its parent, ... up to PID 1, as far as /proc tells
};

struct DoctorFacts {
  std::optional<std::string> module_version_text;  // /proc/driver/nvidia/version
  std::vector<DeviceNode> device_nodes;
  std::string nvml_library;                 // what answered NVML (or was tried)
  std::optional<std::string> nvml_error;    // why NVML did not load, or discovery failed
  std::optional<Machine> machine;           // set when NVML loaded and discovered the GPUs
  std::vector<InstalledCuda> installed_cuda;
  bool in_container = false;
  std::optional<std::string> container_evidence;
  // This process's variables that the checks read (CUDA_*, NVIDIA_*, SLURM_*, GPU_DEVICE_ORDINAL).
  std::map<std::string, std::string> environment;
  std::optional<std::vector<GpuAvailability>> pool;  // survey_pool, indexed like machine->gpus
  std::optional<std::string> pool_error;
  std::optional<std::vector<LeaseFact>> leases;
  std::optional<std::string> lease_error;
  DaemonFact daemon;
  // Where nvidia-cuda-mps-control is on this shell's PATH (CUDA MPS, which gpupoold's slices use
  // where it finds it on its own).
  std::optional<std::string> mps_control;
  bool dmem_controller = false;  // the kernel's cgroup v2 dmem controller (device memory limits)
  std::optional<ProcessFacts> process;  // --pid
};

// The version in /proc/driver/nvidia/version's first line ("... Kernel Module  580.159.04 ...").
std::optional<std::string> parse_kernel_module_version(std::string_view text);
// torch/version.py's `cuda = '12.1'` (or `cuda: Optional[str] = '12.1'`); nullopt for a CPU build.
std::optional<std::string> parse_torch_cuda_version(std::string_view text);
// A CUDA toolkit's version.json: {"cuda": {"version": "12.4.1"}}.
std::optional<std::string> parse_cuda_toolkit_version(std::string_view json_text);

// Every check of the machine, in a fixed order, then the --pid checks when facts.process is set.
std::vector<Finding> diagnose(const DoctorFacts& facts);

// 0 when every finding is ok, 1 with a warning, 2 with a problem.
int doctor_exit_code(const std::vector<Finding>& findings);

// The text report: one line per check, the evidence under a check that is not ok (under every
// check with `verbose`) and the fix, then the counts. A healthy machine reads in a screen.
std::string findings_text(const std::vector<Finding>& findings, bool verbose);

}  // namespace gpupool
