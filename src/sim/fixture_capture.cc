#include "sim/fixture_capture.h"

#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gpu/gpm_metrics.h"
#include "machine/cuda_arch.h"
#include "machine/gpu_json.h"

namespace gpupool::sim {
namespace {

using nlohmann::ordered_json;

// GPUs joined into groups by a relation; a group is named by its smallest member.
class Groups {
 public:
  explicit Groups(size_t count) : parent_(count) {
    std::iota(parent_.begin(), parent_.end(), size_t{0});
  }
  size_t root(size_t gpu) {
    while (parent_[gpu] != gpu) gpu = parent_[gpu] = parent_[parent_[gpu]];
    return gpu;
  }
  void join(size_t a, size_t b) {
    a = root(a);
    b = root(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }
  size_t size_of(size_t gpu) {
    size_t group = root(gpu), members = 0;
    for (size_t i = 0; i < parent_.size(); ++i) members += root(i) == group ? 1 : 0;
    return members;
  }

 private:
  std::vector<size_t> parent_;
};

// The GPUs joined by a known PCIe path at least as close as `level` (levels are ordered best
// first). A lost GPU's links are unknown, so it stays alone.
Groups groups_within(const Machine& machine, PcieLevel level) {
  Groups groups(machine.gpus.size());
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    for (size_t j = i + 1; j < machine.gpus.size(); ++j) {
      const std::optional<PcieLevel>& pcie = machine.links[i][j].pcie;
      if (pcie && *pcie <= level) groups.join(i, j);
    }
  }
  return groups;
}

// NUMA node numbers for the groups of GPUs not separated by SYS: NVML's own node where it says
// one (and no other group took it), else the smallest free number.
std::vector<int> numa_nodes(const Machine& machine) {
  Groups same_node = groups_within(machine, PcieLevel::NumaNode);
  std::map<size_t, int> node_of_group;
  std::set<int> taken;
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    const std::optional<int>& reported = machine.gpus[i].numa_node;
    size_t group = same_node.root(i);
    if (machine.gpus[i].fault || !reported || node_of_group.count(group) || taken.count(*reported))
      continue;
    node_of_group[group] = *reported;
    taken.insert(*reported);
  }
  std::vector<int> nodes;
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    if (machine.gpus[i].fault) {  // its links are unknown: any node will do
      nodes.push_back(nodes.empty() ? 0 : nodes.front());
      continue;
    }
    auto [entry, added] = node_of_group.try_emplace(same_node.root(i), 0);
    if (added) {
      while (taken.count(entry->second)) ++entry->second;
      taken.insert(entry->second);
    }
    nodes.push_back(entry->second);
  }
  return nodes;
}

// The PCIe tree: host bridges, then switches. GPUs at PIX (or on one board) share their last
// switch; GPUs at PXB share only the first, so a switch group with several leaves gets a common
// upstream switch.
std::vector<PcieLocation> pcie_locations(const Machine& machine) {
  const size_t n = machine.gpus.size();
  std::vector<int> nodes = numa_nodes(machine);
  Groups bridges = groups_within(machine, PcieLevel::HostBridge);
  Groups switch_trees = groups_within(machine, PcieLevel::MultipleSwitches);
  Groups leaves = groups_within(machine, PcieLevel::SingleSwitch);
  Groups boards = groups_within(machine, PcieLevel::Board);
  std::map<size_t, int> bridge_numbers;
  std::map<size_t, std::set<size_t>> leaves_of_tree;
  for (size_t i = 0; i < n; ++i) leaves_of_tree[switch_trees.root(i)].insert(leaves.root(i));

  std::vector<PcieLocation> locations(n);
  for (size_t i = 0; i < n; ++i) {
    PcieLocation& location = locations[i];
    location.numa_node = nodes[i];
    location.host_bridge =
        bridge_numbers.try_emplace(bridges.root(i), static_cast<int>(bridge_numbers.size()))
            .first->second;
    size_t tree = switch_trees.root(i), leaf = leaves.root(i);
    if (leaves_of_tree[tree].size() > 1) {
      location.switches = {fmt::format("switch{}", tree), fmt::format("switch{}.{}", tree, leaf)};
    } else if (leaves.size_of(i) > 1) {
      location.switches = {fmt::format("switch{}", tree)};
    }
    if (boards.size_of(i) > 1) location.board = fmt::format("board{}", boards.root(i));
  }
  return locations;
}

// NVLinks through an NVSwitch fabric become each GPU's links into the fabric (a pair gets the
// smaller count); the others become peer entries.
void add_nvlinks(const Machine& machine, std::vector<FixtureGpu>& gpus) {
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = 0; j < gpus.size(); ++j) {
      const Link& link = machine.links[i][j];
      if (i == j || link.nvlinks == 0) continue;
      if (link.via_nvswitch) {
        gpus[i].nvswitch_links = std::max(gpus[i].nvswitch_links, link.nvlinks);
      } else {
        gpus[i].nvlinks.push_back(NvLinkPeer{static_cast<unsigned>(j), link.nvlinks});
      }
    }
  }
}

// A fixture's plain value for a ZeroNotNull reading, its std::optional for the others.
template <typename T>
void set_reading(T& out, const std::optional<T>& value) {
  out = value.value_or(T{});
}

template <typename T>
void set_reading(std::optional<T>& out, const std::optional<T>& value) {
  out = value;
}

FixtureGpu fixture_gpu(const Gpu& gpu) {
  FixtureGpu out;
  out.uuid = gpu.uuid;
  out.pci_bus_id = gpu.pci_bus_id;
  out.name = gpu.name;
  if (gpu.fault) {
    out.minor_number = gpu.minor_number;  // an identity call: a lost GPU answers it
    out.fault = "lost";
    return out;
  }
#define GPUPOOL_SET_FIXTURE_READING(type, field, fixture, ...) \
  GPUPOOL_IF_IN_FIXTURE(fixture, set_reading(out.field, gpu.field);)
  GPUPOOL_GPU_READINGS(GPUPOOL_SET_FIXTURE_READING)
#undef GPUPOOL_SET_FIXTURE_READING

  // What the fixture keeps apart from what NVML derives from it.
  if (gpu.memory_total_mib) {
    uint64_t free = gpu.memory_free_mib.value_or(*gpu.memory_total_mib - out.memory_used_mib);
    // NVML's v2 memory call leaves what the driver holds out of both used and free.
    out.memory_reserved_mib = out.memory_used_mib + free <= *gpu.memory_total_mib
                                  ? *gpu.memory_total_mib - out.memory_used_mib - free
                                  : 0;
  } else {
    out.memory_used_mib = 0;
  }
  if (!gpu.utilization_gpu || !gpu.utilization_memory) {
    out.utilization_gpu.reset();
    out.utilization_memory.reset();
  }
  if (gpu.compute_capability && gpu.multiprocessors) {
    unsigned per_multiprocessor =
        cores_per_multiprocessor(gpu.compute_capability->major, gpu.compute_capability->minor);
    if (per_multiprocessor > 0) out.cuda_cores = *gpu.multiprocessors * per_multiprocessor;
  }
  for (const GpuProcess& process : gpu.processes)
    out.processes.push_back(
        FixtureProcess{process.pid, process.used_memory_mib, process.kind, process.mps_client.value_or(false),
                       process.gpu_instance_id, process.sm_utilization.value_or(0)});
  for (const MigDevice& mig : gpu.mig_devices) {
    out.mig_devices.push_back(FixtureMigDevice{mig.uuid, mig.gpu_instance_id, mig.compute_instance_id, mig.gpu_slices,
                                               mig.compute_slices, mig.memory_mib, mig.multiprocessors});
  }
  return out;
}

template <typename T>
ordered_json nullable(const std::optional<T>& value) {
  return value ? ordered_json(*value) : ordered_json(nullptr);
}

// A reading as a fixture spells it.
template <typename T>
ordered_json reading_json(const T& value) {
  if constexpr (std::is_same_v<T, ComputeMode> || std::is_same_v<T, ComputeCapability>) {
    return to_string(value);
  } else {
    return value;
  }
}

template <typename T>
ordered_json reading_json(const std::optional<T>& value) {
  return value ? reading_json(*value) : ordered_json(nullptr);
}

ordered_json gpu_json(const FixtureGpu& gpu) {
  ordered_json out = {{"uuid", gpu.uuid}, {"pci_bus_id", gpu.pci_bus_id}, {"name", gpu.name}};
  if (gpu.fault) out["fault"] = *gpu.fault;
  for_each_fixture_reading(gpu, [&](const ReadingInfo& reading, const auto& value) {
    out[reading.key] = reading_json(value);
  });
  // A snapshot measures no activity: left out, the fixture's default by compute capability applies.
#define GPUPOOL_OMIT_UNKNOWN_ACTIVITY(id, field, unit) \
  if (!gpu.field) out.erase(#field);
  GPUPOOL_GPM_METRICS(GPUPOOL_OMIT_UNKNOWN_ACTIVITY)
#undef GPUPOOL_OMIT_UNKNOWN_ACTIVITY
  out["memory_reserved_mib"] = gpu.memory_reserved_mib;
  out["cuda_cores"] = nullable(gpu.cuda_cores);
  out["pcie"] = {{"numa_node", gpu.pcie.numa_node},
                 {"host_bridge", gpu.pcie.host_bridge},
                 {"switches", gpu.pcie.switches},
                 {"board", nullable(gpu.pcie.board)}};
  out["nvlinks"] = ordered_json::array();
  for (const NvLinkPeer& link : gpu.nvlinks)
    out["nvlinks"].push_back({{"peer", link.peer}, {"links", link.links}});
  out["nvswitch_links"] = gpu.nvswitch_links;
  out["processes"] = ordered_json::array();
  for (const FixtureProcess& process : gpu.processes) {
    out["processes"].push_back({{"pid", process.pid},
                                {"used_memory_mib", nullable(process.used_memory_mib)},
                                {"kind", to_string(process.kind)}});
    if (process.mps_client) out["processes"].back()["mps_client"] = true;
    if (process.gpu_instance_id) out["processes"].back()["gpu_instance_id"] = *process.gpu_instance_id;
    if (process.sm_utilization > 0) out["processes"].back()["sm_utilization"] = process.sm_utilization;
  }
  // Only GPUs in MIG mode have the key, as only they may.
  if (!gpu.mig_devices.empty()) out["mig_devices"] = ordered_json::array();
  for (const FixtureMigDevice& mig : gpu.mig_devices) {
    out["mig_devices"].push_back({{"uuid", mig.uuid},
                                  {"gpu_instance_id", mig.gpu_instance_id},
                                  {"compute_instance_id", mig.compute_instance_id},
                                  {"gpu_slices", mig.gpu_slices},
                                  {"compute_slices", mig.compute_slices},
                                  {"memory_mib", mig.memory_mib},
                                  {"multiprocessors", mig.multiprocessors}});
  }
  return out;
}

std::string describe(const Link& link) {
  return link.via_nvswitch ? topo_label(link) + " via NVSwitch" : topo_label(link);
}

bool same_link(const Link& a, const Link& b) {
  return a.nvlinks == b.nvlinks && a.via_nvswitch == b.via_nvswitch && a.pcie == b.pcie;
}

// A fixture cannot carry a process's owner or command line (they come from /proc).
nlohmann::json comparable(const Gpu& gpu) {
  nlohmann::json out = to_json(gpu);
  for (nlohmann::json& process : out["processes"]) {
    process.erase("user");
    process.erase("command");
  }
  return out;
}

// Reads the written fixture back as the simulated NVML would and checks it gives the same
// machine: the links exactly, the GPU fields as far as the format carries them.
Result<std::vector<std::string>> check_round_trip(const Machine& machine, const Fixture& fixture) {
  Result<Fixture> parsed = parse_fixture(format_fixture(fixture), fixture.name);
  if (!parsed) return fail("the captured fixture does not validate: {}", parsed.error().message);
  Machine again = machine_from_fixture(*parsed);
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    for (size_t j = i + 1; j < machine.gpus.size(); ++j) {
      if (!same_link(machine.links[i][j], again.links[i][j])) {
        return fail(
            "GPU {} and GPU {} are linked by {} but no fixture's PCIe tree gives that with the "
            "other links (the fixture would say {})",
            i, j, describe(machine.links[i][j]), describe(again.links[i][j]));
      }
    }
  }
  std::vector<std::string> approximations;
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    nlohmann::json reported = comparable(machine.gpus[i]);
    nlohmann::json simulated = comparable(again.gpus[i]);
    for (const auto& [key, value] : reported.items()) {
      if (simulated[key] != value) {
        approximations.push_back(
            fmt::format("GPU {}: {} is {} but the fixture gives {}", i, key, value.dump(),
                        simulated[key].dump()));
      }
    }
  }
  return approximations;
}

}  // namespace

Result<CapturedFixture> capture_fixture(const Machine& machine, const std::string& name,
                                        const std::string& description) {
  if (machine.gpus.empty()) return fail("there are no GPUs to capture");
  CapturedFixture captured;
  Fixture& fixture = captured.fixture;
  fixture.name = name;
  fixture.description = description;
  fixture.driver = machine.driver;
  std::vector<PcieLocation> locations = pcie_locations(machine);
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    fixture.gpus.push_back(fixture_gpu(machine.gpus[i]));
    fixture.gpus.back().pcie = locations[i];
    const std::optional<std::string>& cpus = machine.gpus[i].cpu_affinity;
    if (cpus && !machine.gpus[i].fault)
      fixture.numa_cpus.try_emplace(locations[i].numa_node, *cpus);
  }
  add_nvlinks(machine, fixture.gpus);
  TRY_ASSIGN(captured.approximations, check_round_trip(machine, fixture));
  return captured;
}

std::string format_fixture(const Fixture& fixture) {
  ordered_json numa_cpus = ordered_json::object();
  for (const auto& [node, cpus] : fixture.numa_cpus) numa_cpus[std::to_string(node)] = cpus;
  ordered_json gpus = ordered_json::array();
  for (const FixtureGpu& gpu : fixture.gpus) gpus.push_back(gpu_json(gpu));
  ordered_json out = {{"name", fixture.name},
                      {"description", fixture.description},
                      {"nvml_library", fixture.nvml_library},
                      {"driver",
                       {{"driver_version", nullable(fixture.driver.driver_version)},
                        {"nvml_version", nullable(fixture.driver.nvml_version)},
                        {"cuda_driver_version", nullable(fixture.driver.cuda_driver_version)}}},
                      {"numa_cpus", numa_cpus},
                      {"gpus", gpus}};
  return out.dump(2) + "\n";
}

}  // namespace gpupool::sim
