// gpupool slurm gres-conf and node-conf: a Slurm node's gres.conf and slurm.conf line from the
// GPUs gpupool discovers (slurm/slurm_gres, docs/slurm.md "Node configuration").
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "cli/app.h"
#include "cli/commands.h"
#include "cli/value_checks.h"
#include "gpu/gpu_backend.h"
#include "os/environment.h"
#include "os/host_files.h"
#include "os/process.h"
#include "sim/open_backend.h"
#include "slurm/slurm_gres.h"

namespace gpupool::cli {
namespace {

struct NodeOptions {
  std::optional<std::string> type;
  std::optional<uint64_t> shard_mib;
  std::string device_dir = "/dev";
  std::string output;  // gres-conf: the file to write; empty: standard output
  std::string name;    // node-conf: the node's name; empty: the short host name
};

std::string short_hostname() {
  std::string name = host_name();
  return name.substr(0, name.find('.'));
}

struct Node {
  Machine machine;
  SlurmNodeFacts facts;
};

Result<Node> discover_node(const NodeOptions& options) {
  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = true, .processes = false}));
  SlurmNodeFacts facts;
  facts.generator = std::string("gpupool ") + GPUPOOL_VERSION;
  facts.type = options.type;
  facts.shard_mib = options.shard_mib;
  const std::string simulated = backend->simulated_machine();
  facts.machine = simulated.empty() ? "host " + short_hostname() : "the simulated machine " + simulated;
  // A simulated machine's CPUs are its fixture's, not this host's: their topology comes only from
  // a tree that GPUPOOL_HOST_ROOT names.
  std::optional<std::string> root = environment_variable("GPUPOOL_HOST_ROOT");
  if (simulated.empty() || (root && !root->empty())) {
    std::vector<CpuThread> cpus = host_files_from_environment().cpu_threads();
    if (!cpus.empty()) facts.cpus = std::move(cpus);
  }
  return Node{std::move(machine), std::move(facts)};
}

Result<int> run_gres_conf(const NodeOptions& options) {
  TRY_ASSIGN(Node node, discover_node(options));
  TRY_ASSIGN(GresConf conf, gres_conf(node.machine, node.facts, options.device_dir));
  for (const std::string& warning : conf.warnings) fmt::print(stderr, "gpupool: warning: {}\n", warning);
  if (options.output.empty()) {
    fmt::print("{}", conf.text);
    return kExitOk;
  }
  std::ofstream out(options.output);
  out << conf.text;
  out.close();
  if (!out) return fail("cannot write {}: {}", options.output, std::strerror(errno));
  return kExitOk;
}

Result<int> run_node_conf(const NodeOptions& options) {
  TRY_ASSIGN(Node node, discover_node(options));
  const std::string name = options.name.empty() ? short_hostname() : options.name;
  TRY_ASSIGN(std::string line, node_conf(node.machine, node.facts, name));
  fmt::print("{}", line);
  return kExitOk;
}

// CLI11 checks from slurm's, so that a bad value is a wrong command line (exit 2).
CLI::Validator slurm_check(Result<void> (*check)(std::string_view), const std::string& name) {
  return CLI::Validator(
      [check](std::string& value) {
        Result<void> checked = check(value);
        return checked.ok() ? std::string() : checked.error().message;
      },
      "", name);
}

void add_type_option(CLI::App& cmd, NodeOptions& options) {
  cmd.add_option("--type", options.type,
                 "The GRES type of every GPU (default: each GPU's name as Slurm's AutoDetect=nvml spells it, "
                 "e.g. nvidia_h200)")
      ->check(slurm_check(check_gres_type, "GRES type"))
      ->type_name("TYPE");
}

void add_shard_option(CLI::App& cmd, NodeOptions& options) {
  cmd.add_option("--shard-mib", options.shard_mib,
                 "Give each GPU one GRES shard per MIB MiB of its memory, the size `gpupool submit --slurm --mem` "
                 "counts in (its --shard-mib, default 1024)")
      ->check(whole_number(1, uint64_t{1} << 30))
      ->type_name("MIB");
}

}  // namespace

void add_slurm_node_commands(CLI::App& slurm, int& exit_code) {
  auto gres = std::make_shared<NodeOptions>();
  auto* gres_cmd = slurm.add_subcommand(
      "gres-conf",
      "Print this node's gres.conf: one line per GPU with its device file, nearby cores and NVLinks");
  add_type_option(*gres_cmd, *gres);
  add_shard_option(*gres_cmd, *gres);
  gres_cmd->add_option("--device-dir", gres->device_dir, "Where the GPUs' device files are (default /dev)")
      ->check(slurm_check(check_device_dir, "device directory"))
      ->type_name("DIR");
  gres_cmd->add_option("-o,--output", gres->output, "Write gres.conf to this file instead of standard output")
      ->type_name("FILE");
  gres_cmd->callback([&exit_code, gres] { run_command(exit_code, [&] { return run_gres_conf(*gres); }); });

  auto node = std::make_shared<NodeOptions>();
  auto* node_cmd = slurm.add_subcommand(
      "node-conf", "Print this node's slurm.conf line: NodeName=... Gres=gpu:TYPE:COUNT and its CPU layout");
  node_cmd
      ->add_option("--name", node->name,
                   "The node's name or a hostlist, e.g. gpu[01-04] (default: the short host name)")
      ->check(slurm_check(check_node_name, "node name"))
      ->type_name("NODE");
  add_type_option(*node_cmd, *node);
  add_shard_option(*node_cmd, *node);
  node_cmd->callback([&exit_code, node] { run_command(exit_code, [&] { return run_node_conf(*node); }); });
}

}  // namespace gpupool::cli
