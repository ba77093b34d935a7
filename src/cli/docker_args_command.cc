// gpupool docker-args: the docker, docker compose and Kubernetes spellings that give a container
// exactly the named GPUs, always by full UUID: inside the container the GPUs are renumbered from 0,
// and the NVIDIA container toolkit takes no UUID prefixes.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "cli/commands.h"
#include "gpu/gpu_backend.h"
#include "machine/numbering.h"
#include "sim/open_backend.h"

namespace gpupool::cli {
namespace {

struct DockerArgsOptions {
  std::vector<std::string> gpus;
  std::string format = "text";
};

void print_text(const std::vector<std::string>& uuids) {
  const std::string joined = fmt::format("{}", fmt::join(uuids, ","));
  fmt::print(
      "docker run {} ...\n\n"
      "docker compose, under the service:\n{}\n"
      "Kubernetes: the NVIDIA device plugin's envvar strategy hands a container its GPUs as\n"
      "  env:\n"
      "    - name: NVIDIA_VISIBLE_DEVICES\n"
      "      value: \"{}\"\n"
      "Setting it yourself bypasses the scheduler's GPU accounting, and clusters may refuse it "
      "for\n"
      "unprivileged pods; the usual way is `resources.limits: nvidia.com/gpu: {}` and letting the\n"
      "plugin choose.\n",
      docker_gpus_argument(uuids), compose_gpu_reservation_yaml(uuids), joined, uuids.size());
}

Result<int> run_docker_args(const DockerArgsOptions& options) {
  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  TRY_ASSIGN(std::vector<std::string> uuids, select_gpu_uuids(machine.gpus, options.gpus));
  if (options.format == "docker") {
    fmt::print("{}\n", docker_gpus_words(uuids));
  } else if (options.format == "json") {
    nlohmann::json out = {
        {"uuids", uuids},
        {"docker", docker_gpus_argument(uuids)},
        {"compose", compose_gpu_reservation(uuids)},
        {"env", {{"NVIDIA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(uuids, ","))}}}};
    fmt::print("{}\n", out.dump(2));
  } else {
    print_text(uuids);
  }
  return kExitOk;
}

}  // namespace

void add_docker_args_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "docker-args",
      "Print the docker, compose and Kubernetes settings that give a container these GPUs");
  auto options = std::make_shared<DockerArgsOptions>();
  // Comma lists too, as `run --gpus` takes them: "1,2" is two GPUs.
  cmd->add_option("gpu", options->gpus,
                  "GPUs as nvidia-smi indices or (prefixes of) UUIDs, MIG devices as MIG UUIDs or GPU:DEVICE, "
                  "blank- or comma-separated")
      ->required()
      ->delimiter(',');
  cmd->add_flag("--json{json}", options->format, "Print {uuids, docker, compose, env} as JSON");
  cmd->add_option("--format", options->format,
                  "text (default), json, or docker: only the --gpus argument, quoted for "
                  "`docker run $(gpupool docker-args --format docker 1 3) ...`")
      ->check(CLI::IsMember({"text", "json", "docker"}));
  cmd->footer(
      "The GPUs are always written as full UUIDs: they mean the same card inside and outside "
      "the container, whatever the numbering.");
  cmd->callback(
      [&exit_code, options] { run_command(exit_code, [&] { return run_docker_args(*options); }); });
}

}  // namespace gpupool::cli
