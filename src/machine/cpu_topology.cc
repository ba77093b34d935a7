#include "machine/cpu_topology.h"

#include <algorithm>
#include <map>
#include <set>

namespace gpupool {

std::vector<CpuCore> ordered_cores(const std::vector<CpuThread>& threads) {
  // One core per set of siblings; the thread itself counts even when its list leaves it out.
  std::set<std::pair<unsigned, std::vector<unsigned>>> distinct;
  for (const CpuThread& thread : threads) {
    std::vector<unsigned> cpus = thread.core_cpus;
    cpus.push_back(thread.cpu);
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    distinct.emplace(thread.package, std::move(cpus));
  }
  std::map<unsigned, unsigned> package_first_cpu;
  for (const auto& [package, cpus] : distinct) {
    auto [it, added] = package_first_cpu.emplace(package, cpus.front());
    if (!added) it->second = std::min(it->second, cpus.front());
  }
  std::vector<CpuCore> cores;
  for (const auto& [package, cpus] : distinct) cores.push_back({package, cpus});
  std::sort(cores.begin(), cores.end(), [&](const CpuCore& a, const CpuCore& b) {
    unsigned a_socket = package_first_cpu[a.package];
    unsigned b_socket = package_first_cpu[b.package];
    if (a_socket != b_socket) return a_socket < b_socket;
    return a.cpus.front() < b.cpus.front();
  });
  return cores;
}

std::optional<CpuLayout> uniform_layout(const std::vector<CpuCore>& cores) {
  if (cores.empty()) return std::nullopt;
  std::map<unsigned, unsigned> cores_per_package;
  CpuLayout layout;
  layout.threads_per_core = static_cast<unsigned>(cores.front().cpus.size());
  for (const CpuCore& core : cores) {
    if (core.cpus.size() != layout.threads_per_core) return std::nullopt;
    ++cores_per_package[core.package];
    layout.cpus += layout.threads_per_core;
  }
  layout.sockets = static_cast<unsigned>(cores_per_package.size());
  layout.cores_per_socket = cores_per_package.begin()->second;
  for (const auto& [package, count] : cores_per_package) {
    if (count != layout.cores_per_socket) return std::nullopt;
  }
  return layout;
}

}  // namespace gpupool
