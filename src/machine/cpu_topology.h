// How a host's CPUs (hardware threads) group into cores and sockets, as the kernel describes
// each online CPU in /sys/devices/system/cpu/cpuN/topology.
#pragma once

#include <optional>
#include <vector>

namespace gpupool {

struct CpuThread {
  unsigned cpu = 0;                   // the OS CPU number N
  unsigned package = 0;               // physical_package_id: the socket
  std::vector<unsigned> core_cpus;    // thread_siblings_list: every thread of its core, itself included
};

struct CpuCore {
  unsigned package = 0;
  std::vector<unsigned> cpus;  // ascending
};

// The cores in hwloc's logical order, which is lstopo's "Core L#" and Slurm's core index: socket
// by socket, the sockets and the cores within each ordered by their lowest CPU.
std::vector<CpuCore> ordered_cores(const std::vector<CpuThread>& threads);

// A host whose sockets all have the same number of cores, and whose cores the same number of
// threads, described as slurm.conf and `slurmd -C` do.
struct CpuLayout {
  unsigned cpus = 0;
  unsigned sockets = 0;
  unsigned cores_per_socket = 0;
  unsigned threads_per_core = 0;
};

// nullopt when the host has no CPUs listed or is not uniform (e.g. cores with and without SMT).
std::optional<CpuLayout> uniform_layout(const std::vector<CpuCore>& cores);

}  // namespace gpupool
