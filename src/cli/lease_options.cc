#include "cli/lease_options.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include <fmt/format.h>

#include "core/gpu_selection.h"
#include "core/text.h"

namespace gpupool::cli {

void add_lease_options(CLI::App& cmd, LeaseRequestOptions& options) {
  cmd.add_option("-g,--gpu-count", options.count, "How many GPUs (default 1)")->check(CLI::Range(1u, 1024u));
  cmd.add_option("--mem", options.memory,
                 "Share the GPUs: take this much of each one's memory (e.g. 20G) instead of whole GPUs");
  cmd.add_option("--gpus", options.gpus, "Only these GPUs (indices or UUIDs, comma-separated)");
  cmd.add_option("--exclude", options.exclude, "Never these GPUs (indices or UUIDs, comma-separated)");
  cmd.add_option("--wait", options.wait,
                 "Give up after this long (e.g. 30s, 10m, 0 = do not wait); default: wait until the GPUs are free")
      ->expected(0, 1);
  cmd.add_option("--name", options.name, "The job's name, shown in `gpupool leases` (default: run-PID)");
  cmd.add_flag("-q,--quiet", options.quiet, "Do not report waiting and the GPUs taken on stderr");
}

Result<std::chrono::milliseconds> parse_duration(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || value < 0) return fail("invalid duration '{}': expected e.g. 30s, 10m or 2h", text);
  std::string unit(end);
  double seconds = value;
  if (unit == "m" || unit == "min") {
    seconds *= 60;
  } else if (unit == "h") {
    seconds *= 3600;
  } else if (unit == "ms") {
    seconds /= 1000;
  } else if (!unit.empty() && unit != "s") {
    return fail("invalid duration '{}': unknown unit '{}' (use ms, s, m or h)", text, unit);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

Result<LeasedGpus> lease_gpus(const LeaseRequestOptions& options) {
  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open(LeaseDirectory::default_path()));
  HostFiles host = host_files_from_environment();
  AcquireOptions acquire;
  acquire.request.count = options.count;
  if (!options.memory.empty()) {
    TRY_ASSIGN(uint64_t slice, parse_memory_mib(options.memory));
    acquire.request.slice_mib = slice;
  }
  if (!options.gpus.empty() || !options.exclude.empty()) {
    TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
    if (!options.gpus.empty()) {
      TRY_ASSIGN(acquire.request.allowed, find_gpus(machine.gpus, split(options.gpus, ',')));
    }
    if (!options.exclude.empty()) {
      TRY_ASSIGN(acquire.request.excluded, find_gpus(machine.gpus, split(options.exclude, ',')));
    }
  }
  // --wait with no value keeps the default: wait as long as it takes.
  if (options.wait && !options.wait->empty()) {
    TRY_ASSIGN(auto timeout, parse_duration(*options.wait));
    acquire.timeout = timeout;
  }
  std::string job = options.name.empty() ? fmt::format("run-{}", getpid()) : options.name;
  acquire.holder = LeaseHolder{getpid(), "", job, static_cast<int64_t>(std::time(nullptr))};
  if (!options.quiet) acquire.on_wait = [](const std::string& why) { fmt::print(stderr, "gpupool: {}\n", why); };
  TRY_ASSIGN(Acquired acquired, acquire_gpus(*backend, leases, host, acquire));
  LeasedGpus leased{std::move(acquired), {}, job, acquire.request.slice_mib};
  leased.gpus = leased.acquired.gpus;
  if (!options.quiet) {
    std::vector<std::string> names;
    for (unsigned index : leased.gpus) names.push_back(fmt::format("{}", index));
    fmt::print(stderr, "gpupool: {} has GPU{} {}{}\n", job, leased.gpus.size() == 1 ? "" : "s",
               fmt::join(names, ","),
               leased.slice_mib ? fmt::format(" ({} MiB each, shared)", *leased.slice_mib) : "");
  }
  return leased;
}

std::vector<std::string> job_environment(const LeasedGpus& leased, const std::vector<unsigned>& gpus) {
  std::vector<std::string> uuids, indices;
  for (unsigned index : gpus) {
    uuids.push_back(leased.acquired.machine.gpus.at(index).uuid);
    indices.push_back(std::to_string(index));
  }
  std::vector<std::string> env = {
      // Full UUIDs: they name the same card under any CUDA_DEVICE_ORDER and inside containers.
      fmt::format("CUDA_VISIBLE_DEVICES={}", fmt::join(uuids, ",")),
      "CUDA_DEVICE_ORDER=PCI_BUS_ID",
      fmt::format("GPUPOOL_JOB={}", leased.job),
      fmt::format("GPUPOOL_GPUS={}", fmt::join(indices, ",")),
      fmt::format("GPUPOOL_GPU_UUIDS={}", fmt::join(uuids, ",")),
  };
  if (leased.slice_mib) env.push_back(fmt::format("GPUPOOL_MEM_MIB={}", *leased.slice_mib));
  return env;
}

}  // namespace gpupool::cli
