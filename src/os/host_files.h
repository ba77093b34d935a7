// Reads the host's /proc and /sys. Every path is taken under a root directory
// (default "/"), so tests and `--root` point it at a fake tree instead.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/cpu_topology.h"
#include "os/environment.h"

namespace gpupool {

struct ProcessIdentity {
  std::string user;     // login name, or the numeric uid when it has none
  std::string command;  // command line, arguments separated by spaces
};

class HostFiles {
 public:
  explicit HostFiles(std::string root = "/");

  // Who runs a process; nullopt when it is gone or not visible (another PID namespace).
  std::optional<ProcessIdentity> process_identity(uint32_t pid) const;
  // The parent of a process (from /proc/PID/stat); nullopt when it is gone.
  std::optional<uint32_t> parent_pid(uint32_t pid) const;
  // When a process started, in clock ticks after boot (/proc/PID/stat); with the pid it names
  // one process for good, since a pid can be recycled but not at the same start time.
  std::optional<uint64_t> process_start_ticks(uint32_t pid) const;
  // Whether any process of process group `group` lives (one that has ended but is not reaped yet
  // does not count: where nobody reaps orphans, it would count for ever).
  bool group_has_living_process(uint32_t group) const;
  // When a process started, in Unix seconds (the boot time of /proc/stat plus its start ticks).
  std::optional<double> process_start_time(uint32_t pid) const;
  // The NUMA node a PCI device hangs off (sysfs numa_node), nullopt when unknown (-1).
  std::optional<int> pci_numa_node(const std::string& nvml_bus_id) const;
  // How many NUMA nodes the host has (sysfs); 0 when it cannot tell.
  unsigned numa_node_count() const;
  // The CPUs local to a PCI device (sysfs local_cpulist).
  std::optional<std::string> pci_local_cpus(const std::string& nvml_bus_id) const;
  // The online CPUs with their socket and core siblings (sysfs cpuN/topology); empty when unknown.
  std::vector<CpuThread> cpu_threads() const;

  // A process's environment (/proc/PID/environ); nullopt when it is gone or not ours to read.
  std::optional<EnvironmentMap> process_environment(uint32_t pid) const;
  // Any file under the root, e.g. "/proc/1/cgroup"; nullopt when it cannot be read.
  std::optional<std::string> read(const std::string& absolute) const;
  bool exists(const std::string& absolute) const;
  // A file's permission bits (st_mode & 07777); nullopt when it does not exist. Device nodes in a
  // fake tree are plain files, so the file type is not looked at.
  std::optional<unsigned> permissions(const std::string& absolute) const;
  // The names in a directory, sorted; empty when it cannot be read.
  std::vector<std::string> list_directory(const std::string& absolute) const;

  const std::string& root() const { return root_; }

 private:
  std::string path(const std::string& absolute) const;
  std::string root_;
};

// The root from GPUPOOL_HOST_ROOT, else "/".
HostFiles host_files_from_environment();

// The running executable's path (/proc/self/exe): e.g. to start the same program again.
Result<std::string> executable_path();
// The directory holding the running executable (for finding lib/ and share/ beside it).
std::string executable_directory();

// lib/gpupool beside bin/, in the build tree as in every install: what only gpupool's own
// programs use (the simulated NVML, gpupool-cuda-probe), kept off the loader's path and PATH.
std::string private_library_directory();

}  // namespace gpupool
