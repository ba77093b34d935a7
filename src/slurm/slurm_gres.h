// A Slurm node's configuration from what gpupool discovered (docs/slurm.md, "Node
// configuration"): gres.conf, one line per GPU with its device file, the cores near it and its
// NVLinks (and, if asked, its shards), and slurm.conf's NodeName line with the node's GPUs and CPU
// layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/cpu_topology.h"
#include "machine/gpu.h"

namespace gpupool {

struct SlurmNodeFacts {
  std::string generator;  // "gpupool 1.2.0", named in the first comment lines
  std::string machine;    // where the GPUs are, for the comments: "host gpu01", "simulated machine hgx-h200"
  std::optional<std::string> type;  // one GRES type for every GPU instead of the one from its name
  // The host's online CPUs; nullopt when unknown (Cores= and the CPU layout are then left out).
  std::optional<std::vector<CpuThread>> cpus;
  // GPU shards (GRES "shard"), one per this many MiB of each GPU's memory, the size
  // `gpupool submit --slurm --mem` counts in; nullopt: no shards.
  std::optional<uint64_t> shard_mib;
};

// The GRES type Slurm's NVML autodetection gives a GPU: its name in lower case, spaces as '_'
// ("NVIDIA H200" -> "nvidia_h200", "Tesla V100-SXM2-32GB" -> "tesla_v100-sxm2-32gb").
std::string slurm_gpu_type(std::string_view gpu_name);

// Whether Slurm can take these as words of its files.
Result<void> check_gres_type(std::string_view type);
Result<void> check_node_name(std::string_view name);  // a host name or a hostlist: gpu[01-04]
Result<void> check_device_dir(std::string_view dir);  // absolute

struct GresConf {
  std::string text;                   // the whole file
  std::vector<std::string> warnings;  // what an admin must act on, also said in the file's comments
};

// gres.conf for the machine's GPUs, with their device files in `device_dir` ("/dev").
Result<GresConf> gres_conf(const Machine& machine, const SlurmNodeFacts& facts, std::string_view device_dir);

// slurm.conf's line for the node, NodeName=NAME Gres=gpu:TYPE:COUNT,... with the CPU layout when
// the CPUs are known and uniform, after comment lines.
Result<std::string> node_conf(const Machine& machine, const SlurmNodeFacts& facts, std::string_view node_name);

}  // namespace gpupool
