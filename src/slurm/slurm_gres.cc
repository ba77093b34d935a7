#include "slurm/slurm_gres.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>

#include "base/cpu_list.h"

namespace gpupool {
namespace {

bool only_characters(std::string_view text, std::string_view punctuation) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || punctuation.find(c) != std::string_view::npos;
  });
}

// A GPU as gres.conf lists it.
struct GresGpu {
  const Gpu* gpu = nullptr;
  size_t position = 0;  // in machine.gpus and machine.links
  unsigned device = 0;  // N of /dev/nvidiaN
  std::string type;
  std::optional<uint64_t> shards;  // with facts.shard_mib: its memory in shards, rounded down; nullopt
                                   // where its memory is unknown
};

// The GPUs in /dev/nvidiaN order. Slurm numbers a node's GPUs in the order of gres.conf's lines
// and sets SLURM_JOB_GPUS to the N of their device files, so ascending N keeps both the same.
Result<std::vector<GresGpu>> gres_gpus(const Machine& machine, const SlurmNodeFacts& facts) {
  if (machine.gpus.empty()) return fail("no GPUs found: there is nothing to tell Slurm");
  if (facts.type) TRY(check_gres_type(*facts.type));
  if (facts.shard_mib && *facts.shard_mib == 0) return fail("a shard must be at least 1 MiB");
  std::vector<GresGpu> gpus;
  for (size_t i = 0; i < machine.gpus.size(); ++i) {
    const Gpu& gpu = machine.gpus[i];
    std::string type = facts.type.value_or(slurm_gpu_type(gpu.name));
    if (!facts.type) {
      Result<void> checked = check_gres_type(type);
      if (!checked) return fail("GPU {} ('{}'): {}", gpu.index, gpu.name, checked.error().message);
    }
    std::optional<uint64_t> shards;
    if (facts.shard_mib && gpu.memory_total_mib) shards = *gpu.memory_total_mib / *facts.shard_mib;
    gpus.push_back({&gpu, i, gpu.minor_number.value_or(gpu.index), std::move(type), shards});
  }
  std::stable_sort(gpus.begin(), gpus.end(),
                   [](const GresGpu& a, const GresGpu& b) { return a.device < b.device; });
  for (size_t i = 1; i < gpus.size(); ++i) {
    if (gpus[i].device == gpus[i - 1].device) {
      return fail("GPUs {} and {} would both be device {}", gpus[i - 1].gpu->index, gpus[i].gpu->index,
                  gpus[i].device);
    }
  }
  return gpus;
}

unsigned nvlinks_between(const Machine& machine, size_t a, size_t b) {
  if (a >= machine.links.size() || b >= machine.links[a].size()) return 0;
  return machine.links[a][b].nvlinks;
}

bool any_via_nvswitch(const Machine& machine) {
  return std::any_of(machine.links.begin(), machine.links.end(), [](const std::vector<Link>& row) {
    return std::any_of(row.begin(), row.end(), [](const Link& link) { return link.via_nvswitch; });
  });
}

// How often each value occurs, in order of first occurrence.
std::vector<std::pair<std::string, unsigned>> tally(const std::vector<GresGpu>& gpus,
                                                    std::string (*value)(const GresGpu&)) {
  std::vector<std::pair<std::string, unsigned>> counts;
  for (const GresGpu& g : gpus) {
    std::string v = value(g);
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == v; });
    if (it == counts.end()) {
      counts.emplace_back(std::move(v), 1);
    } else {
      ++it->second;
    }
  }
  return counts;
}

// "8 x NVIDIA H200" or "1 x NVIDIA GeForce RTX 3060, 1 x NVIDIA GeForce RTX 4090".
std::string gpu_summary(const std::vector<GresGpu>& gpus) {
  std::string out;
  for (const auto& [name, count] : tally(gpus, [](const GresGpu& g) { return g.gpu->name; })) {
    out += fmt::format("{}{} x {}", out.empty() ? "" : ", ", count, name);
  }
  return out;
}

// Slurm's core index of every known CPU. gres.conf's Cores= counts cores in hwloc's logical order
// (as Slurm's AutoDetect=nvml converts NVML's CPU affinity), not CPUs: both threads of a core are
// one core, and CPU numbers are core indexes only where the kernel numbers the first thread of
// every core first, socket after socket. Hosts that number siblings side by side (0,1 one core)
// or alternate sockets (even CPUs on socket 0) would get the wrong cores from CPU numbers.
struct CoreIndex {
  std::map<unsigned, unsigned> of_cpu;
  size_t cores = 0;
};

CoreIndex core_index(const std::vector<CpuThread>& threads) {
  CoreIndex index;
  std::vector<CpuCore> cores = ordered_cores(threads);
  for (size_t i = 0; i < cores.size(); ++i) {
    for (unsigned cpu : cores[i].cpus) index.of_cpu[cpu] = static_cast<unsigned>(i);
  }
  index.cores = cores.size();
  return index;
}

struct Cores {
  std::optional<std::string> list;  // the Cores= value
  std::optional<std::string> why_not;
};

Result<Cores> cores_near(const Gpu& gpu, const std::optional<CoreIndex>& index) {
  if (!index) return Cores{};  // said once in the header
  if (!gpu.cpu_affinity || gpu.cpu_affinity->empty()) {
    return Cores{std::nullopt, "its CPU affinity is unknown, so Cores= is left out"};
  }
  Result<std::vector<unsigned>> cpus = parse_cpu_list(*gpu.cpu_affinity);
  if (!cpus) return fail("GPU {}: CPU affinity: {}", gpu.index, cpus.error().message);
  std::set<unsigned> cores;
  std::vector<unsigned> unknown;
  for (unsigned cpu : *cpus) {
    auto it = index->of_cpu.find(cpu);
    if (it == index->of_cpu.end()) {
      unknown.push_back(cpu);
    } else {
      cores.insert(it->second);
    }
  }
  if (!unknown.empty()) {
    return Cores{std::nullopt, fmt::format("CPUs {} of its affinity are not among the host's CPUs, so Cores= is "
                                           "left out",
                                           format_cpu_list(unknown))};
  }
  // Slurm's advice: where any core serves a GPU as well as another, name none (it schedules faster).
  if (cores.size() == index->cores) {
    return Cores{std::nullopt, "every core of the host is as near to it as any other, so Cores= is left out"};
  }
  return Cores{format_cpu_list({cores.begin(), cores.end()}), std::nullopt};
}

std::string header_line(const Machine& machine, const std::vector<GresGpu>& gpus, const SlurmNodeFacts& facts) {
  std::string driver = machine.driver.driver_version
                           ? fmt::format(", NVIDIA driver {}", *machine.driver.driver_version)
                           : "";
  return fmt::format("the GPUs of {}: {}{}", facts.machine, gpu_summary(gpus), driver);
}

}  // namespace

std::string slurm_gpu_type(std::string_view gpu_name) {
  std::string type;
  for (char c : gpu_name) {
    type += c == ' ' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return type;
}

// gres.conf and slurm.conf split on spaces, '=' and '#', and a GRES on ':' and ','.
Result<void> check_gres_type(std::string_view type) {
  if (only_characters(type, "_-.")) return {};
  return fail("GRES type '{}' is not one Slurm takes: use letters, digits, '_', '-' and '.'", type);
}

Result<void> check_node_name(std::string_view name) {
  if (only_characters(name, "_-.[],")) return {};
  return fail("node name '{}' is not one Slurm takes: use a host name or a hostlist such as gpu[01-04]", name);
}

Result<void> check_device_dir(std::string_view dir) {
  if (!dir.empty() && dir.front() == '/' && only_characters(dir, "/_-.+")) return {};
  return fail("device directory '{}' is not an absolute path of letters, digits and /_-.+", dir);
}

Result<GresConf> gres_conf(const Machine& machine, const SlurmNodeFacts& facts, std::string_view device_dir) {
  TRY(check_device_dir(device_dir));
  TRY_ASSIGN(std::vector<GresGpu> gpus, gres_gpus(machine, facts));
  std::string dir(device_dir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir == "/") dir.clear();
  std::optional<CoreIndex> index;
  if (facts.cpus) index = core_index(*facts.cpus);

  GresConf conf;
  std::string& out = conf.text;
  out += fmt::format("# gres.conf for {}.\n", header_line(machine, gpus, facts));
  out += fmt::format("# Generated by {} (gpupool slurm gres-conf): generate it again when the GPUs change.\n",
                     facts.generator);
  out += "# One line per GPU in /dev/nvidiaN order, which is the order Slurm numbers them in.\n";
  out += "# Cores: Slurm's core indexes (lstopo's \"Core L#\"), not CPU numbers.\n";
  out += "# Links: NVLinks to each GPU in the order of these lines; -1 is the GPU itself, 0 no NVLink.\n";
  if (any_via_nvswitch(machine)) {
    out += "# NVLinks through the NVSwitch fabric count as direct. Slurm's AutoDetect=nvml counts them as 0\n"
           "# and ignores GPUs whose Links differ from its own, so use this file without AutoDetect.\n";
  }
  if (!index) {
    out += "# Cores= is left out: the host's CPU topology (which CPUs share a core, a socket) is unknown.\n";
  }
  if (facts.shard_mib) {
    out += fmt::format("# Shards: a Name=shard line after a GPU's gives it one shard per {0} MiB of its memory,\n"
                       "# rounded down. `gpupool submit --slurm --mem` counts in the same shards (--shard-mib {0}).\n",
                       *facts.shard_mib);
  }
  for (const GresGpu& g : gpus) {
    const Gpu& gpu = *g.gpu;
    std::vector<std::string> notes;
    if (gpu.fault) {
      notes.push_back(fmt::format("fault: {}. It keeps its line, so that the numbering stays, but jobs given it "
                                  "will fail: drain the node until it is fixed",
                                  *gpu.fault));
      conf.warnings.push_back(fmt::format("GPU {} ({}) has a fault: {}; gres.conf lists it, but drain the node "
                                          "until it is fixed",
                                          gpu.index, gpu.pci_bus_id, *gpu.fault));
    }
    const std::string file = fmt::format("{}/nvidia{}", dir, g.device);
    if (!gpu.minor_number) {
      notes.push_back(
          fmt::format("the driver did not tell its minor number: nvidia{} is its NVML index", g.device));
      conf.warnings.push_back(fmt::format("GPU {} ({}): the driver did not tell its minor number; gres.conf "
                                          "assumes {}, check it",
                                          gpu.index, gpu.pci_bus_id, file));
    }
    if (facts.shard_mib && !g.shards) {
      notes.push_back("its memory is unknown, so it has no shards");
      conf.warnings.push_back(fmt::format("GPU {} ({}): its memory is unknown; gres.conf gives it no shards",
                                          gpu.index, gpu.pci_bus_id));
    }
    TRY_ASSIGN(Cores cores, cores_near(gpu, index));
    if (cores.why_not) notes.push_back(*cores.why_not);

    std::string links;
    for (const GresGpu& other : gpus) {
      if (!links.empty()) links += ',';
      links += &other == &g ? "-1" : std::to_string(nvlinks_between(machine, g.position, other.position));
    }
    out += fmt::format("\n# GPU {}: {}, PCI {}\n", gpu.index, gpu.name, gpu.pci_bus_id);
    for (const std::string& note : notes) out += fmt::format("#   {}\n", note);
    out += fmt::format("Name=gpu Type={} File={}{} Links={}\n", g.type, file,
                       cores.list ? " Cores=" + *cores.list : "", links);
    // Slurm takes a shard's type and cores from the GPU whose File= it names.
    if (g.shards) out += fmt::format("Name=shard Count={} File={}\n", *g.shards, file);
  }
  return conf;
}

Result<std::string> node_conf(const Machine& machine, const SlurmNodeFacts& facts, std::string_view node_name) {
  TRY(check_node_name(node_name));
  TRY_ASSIGN(std::vector<GresGpu> gpus, gres_gpus(machine, facts));
  std::string gres;
  for (const auto& [type, count] : tally(gpus, [](const GresGpu& g) { return g.type; })) {
    gres += fmt::format("{}gpu:{}:{}", gres.empty() ? "" : ",", type, count);
  }
  if (facts.shard_mib) {
    uint64_t shards = 0;
    for (const GresGpu& g : gpus) shards += g.shards.value_or(0);
    gres += fmt::format(",shard:{}", shards);
  }

  std::string out = fmt::format("# slurm.conf line for {}.\n", header_line(machine, gpus, facts));
  out += fmt::format("# Generated by {} (gpupool slurm node-conf). slurm.conf also needs GresTypes={};\n",
                     facts.generator, facts.shard_mib ? "gpu,shard" : "gpu");
  out += "# `slurmd -C` prints RealMemory and the rest of the node's hardware.\n";
  if (facts.shard_mib) {
    out += fmt::format("# Shards: one per {0} MiB of each GPU's memory, as gres-conf --shard-mib {0} lists them.\n",
                       *facts.shard_mib);
    for (const GresGpu& g : gpus) {
      if (!g.shards) out += fmt::format("# GPU {}'s memory is unknown: it has no shards.\n", g.gpu->index);
    }
  }
  std::string layout;
  if (!facts.cpus) {
    out += "# The CPU layout is left out: the host's CPU topology is unknown.\n";
  } else if (std::optional<CpuLayout> cpus = uniform_layout(ordered_cores(*facts.cpus))) {
    layout = fmt::format(" CPUs={} Sockets={} CoresPerSocket={} ThreadsPerCore={}", cpus->cpus, cpus->sockets,
                         cpus->cores_per_socket, cpus->threads_per_core);
  } else {
    out += "# The CPU layout is left out: the sockets or cores differ; take it from `slurmd -C`.\n";
  }
  out += fmt::format("NodeName={} Gres={}{}\n", node_name, gres, layout);
  return out;
}

}  // namespace gpupool
