#include "cli/doctor_facts.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "base/text.h"
#include "cli/daemon_client.h"
#include "gpu/gpu_backend.h"
#include "lease/gpu_pool.h"
#include "lease/lease_directory.h"
#include "os/container.h"
#include "os/environment.h"
#include "os/program.h"
#include "sched/mps.h"
#include "sim/open_backend.h"


namespace gpupool::cli {
namespace {

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

std::vector<DeviceNode> device_nodes(const HostFiles& host) {
  std::vector<DeviceNode> nodes;
  for (const std::string& name : host.list_directory("/dev")) {
    if (!starts_with(name, "nvidia")) continue;
    if (auto mode = host.permissions("/dev/" + name)) nodes.push_back({name, *mode});
  }
  return nodes;
}

// PyTorch in the usual site-packages directories, and CUDA toolkits in /usr/local/cuda*: read from
// their files, since importing torch would initialise CUDA in this process.
std::vector<InstalledCuda> installed_cuda(const HostFiles& host) {
  std::vector<InstalledCuda> found;
  std::vector<std::string> prefixes = {"/usr/lib", "/usr/local/lib"};
  for (const char* variable : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (std::string dir = environment_variable(variable).value_or(""); !dir.empty())
      prefixes.push_back(dir + "/lib");
  }
  if (std::string home = environment_variable("HOME").value_or(""); !home.empty())
    prefixes.push_back(home + "/.local/lib");
  for (const std::string& prefix : prefixes) {
    for (const std::string& python : host.list_directory(prefix)) {
      if (!starts_with(python, "python3")) continue;
      for (const char* packages : {"site-packages", "dist-packages"}) {
        std::string dir = fmt::format("{}/{}/{}", prefix, python, packages);
        auto text = host.read(dir + "/torch/version.py");
        if (!text) continue;
        if (auto version = parse_torch_cuda_version(*text)) found.push_back({"PyTorch in " + dir, *version});
      }
    }
  }
  for (const std::string& name : host.list_directory("/usr/local")) {
    if (!starts_with(name, "cuda")) continue;
    auto text = host.read("/usr/local/" + name + "/version.json");
    if (!text) continue;
    if (auto version = parse_cuda_toolkit_version(*text)) found.push_back({"CUDA toolkit /usr/local/" + name, *version});
  }
  return found;
}

EnvironmentMap relevant_environment() {
  EnvironmentMap out = own_environment();
  std::erase_if(out, [](const auto& variable) {
    const std::string& name = variable.first;
    return !starts_with(name, "CUDA_") && !starts_with(name, "NVIDIA_") &&
           !starts_with(name, "SLURM_") && name != "GPU_DEVICE_ORDINAL";
  });
  return out;
}

void gather_nvml(DoctorFacts& facts) {
  if (std::string library = environment_variable("GPUPOOL_NVML_LIBRARY").value_or(""); !library.empty()) {
    facts.nvml_library = library;
  } else if (std::string sim = environment_variable("GPUPOOL_SIM").value_or(""); !sim.empty()) {
    facts.nvml_library = "simulated: " + sim;
  } else {
    facts.nvml_library = "libnvidia-ml.so.1";
  }
  auto backend = open_gpu_backend();
  if (!backend) {
    facts.nvml_error = backend.error().message;
    return;
  }
  facts.nvml_library = (*backend)->description();
  auto machine = (*backend)->discover(DiscoveryScope{.links = false, .processes = true});
  if (!machine) {
    facts.nvml_error = machine.error().message;
    return;
  }
  facts.machine = std::move(*machine);
}

void gather_leases(DoctorFacts& facts, const HostFiles& host) {
  auto leases = LeaseDirectory::open_default();  // facts.daemon.runtime_dir is its path
  if (!leases) {
    facts.lease_error = leases.error().message;
    facts.pool_error = leases.error().message;
    return;
  }
  auto records = leases->list();
  if (!records) {
    facts.lease_error = records.error().message;
  } else {
    std::vector<LeaseFact> out;
    for (const LeaseRecord& r : *records) {
      auto pid = static_cast<uint32_t>(r.holder.pid);
      out.push_back({r.index, r.uuid, pid, r.holder.user, r.holder.job, host.process_identity(pid).has_value()});
    }
    facts.leases = std::move(out);
  }
  if (!facts.machine) return;
  auto pool = survey_pool(*facts.machine, *leases, host, busy_memory_threshold_mib());
  if (pool) {
    facts.pool = std::move(*pool);
  } else {
    facts.pool_error = pool.error().message;
  }
}

void gather_daemon(DoctorFacts& facts) {
  auto client = DaemonClient::connect_if_running(facts.daemon.runtime_dir);
  if (!client) {
    facts.daemon.error = client.error().message;
  } else {
    facts.daemon.running = client->has_value();
  }
  if (!client || !*client) return;
  // Only the daemon knows its reserve, and it measures the space where it writes.
  auto answer = (**client).request(protocol::StatusRequest{});
  if (!answer) return;
  auto status = expect<protocol::StatusResponse>(std::move(*answer));
  if (status && status->state_space) {
    const protocol::StateSpace& space = *status->state_space;
    facts.daemon.state_space = StateSpaceFact{space.free_bytes, space.reserve_bytes, space.unsaved_jobs};
  }
  if (status) {
    facts.daemon.slice_enforcement = status->slice_enforcement;
    for (const protocol::DrainedGpu& gpu : status->quarantined_gpus) {
      facts.daemon.quarantined.push_back({gpu.index, gpu.at, gpu.reason});
    }
  }
}

ProcessFacts gather_process(const HostFiles& host, uint32_t pid) {
  ProcessFacts p;
  p.pid = pid;
  p.environment = host.process_environment(pid);
  // A parent chain is short; the bound only guards against a fake /proc that loops.
  for (uint32_t at = pid; at > 1 && p.ancestry.size() < 64;) {
    p.ancestry.push_back(at);
    auto parent = host.parent_pid(at);
    if (!parent) break;
    at = *parent;
  }
  return p;
}

}  // namespace

DoctorFacts gather_doctor_facts(const HostFiles& host, std::optional<uint32_t> pid) {
  DoctorFacts facts;
  facts.module_version_text = host.read("/proc/driver/nvidia/version");
  facts.device_nodes = device_nodes(host);
  gather_nvml(facts);
  facts.installed_cuda = installed_cuda(host);
  ContainerDetection container = detect_container(host);
  facts.in_container = container.detected;
  facts.container_evidence = container.how;
  facts.environment = relevant_environment();
  facts.daemon.runtime_dir = runtime_directory();
  gather_leases(facts, host);
  gather_daemon(facts);
  facts.mps_control = find_program(kMpsControlProgram);
  std::string controllers = host.read("/sys/fs/cgroup/cgroup.controllers").value_or("");
  std::ranges::replace(controllers, '\n', ' ');
  facts.dmem_controller = std::ranges::count(split(controllers, ' '), std::string("dmem")) > 0;
  if (pid) facts.process = gather_process(host, *pid);
  return facts;
}

}  // namespace gpupool::cli
