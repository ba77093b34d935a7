#include "lease/gpu_pool.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "os/environment.h"

namespace gpupool {
namespace {

// True when `pid` is a lease holder or descends from one: its GPU use is gpupool's.
bool started_by_gpupool(uint32_t pid, const std::set<uint32_t>& holders, const HostFiles& host) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    if (holders.count(pid) > 0) return true;
    auto parent = host.parent_pid(pid);
    if (!parent) return false;
    pid = *parent;
  }
  return false;
}

std::string describe_process(const GpuProcess& p) {
  if (!p.command) return fmt::format("pid {} {}", p.pid, process_user_text(p));
  std::string program = *p.command;
  if (auto space = program.find(' '); space != std::string::npos) program.resize(space);
  return fmt::format("pid {} {} {}", p.pid, process_user_text(p), program);
}

}  // namespace

uint64_t busy_memory_threshold_mib() {
  std::optional<std::string> text = environment_variable("GPUPOOL_BUSY_MEMORY_MIB");
  if (!text || text->empty()) return kDefaultBusyMemoryMib;
  auto parsed = parse_memory_mib(*text);
  return parsed ? *parsed : kDefaultBusyMemoryMib;
}

uint64_t unexplained_memory_mib(uint64_t used_mib, uint64_t listed_mib, uint64_t gpupool_listed_mib,
                                uint64_t unseen_listed_mib, uint64_t leased_mib) {
  uint64_t unaccounted = (used_mib > listed_mib ? used_mib - listed_mib : 0) + unseen_listed_mib;
  uint64_t leases_room = leased_mib > gpupool_listed_mib ? leased_mib - gpupool_listed_mib : 0;
  return unaccounted > leases_room ? unaccounted - leases_room : 0;
}

Result<std::vector<GpuAvailability>> survey_pool(const Machine& machine, const LeaseDirectory& leases,
                                                 const HostFiles& host, uint64_t busy_memory_mib) {
  TRY_ASSIGN(std::vector<LeaseRecord> records, leases.list());
  std::set<uint32_t> holder_pids;
  for (const LeaseRecord& r : records) holder_pids.insert(static_cast<uint32_t>(r.holder.pid));

  std::vector<GpuAvailability> out(machine.gpus.size());
  for (const Gpu& gpu : machine.gpus) {
    GpuAvailability& a = out.at(gpu.index);
    std::vector<std::string> who;
    if (gpu.fault || gpu.uuid.empty()) {
      a.usable = false;
      a.holders = gpu.fault.value_or("no UUID");
      continue;
    }
    TRY_ASSIGN(GpuHold hold, leases.hold(gpu.uuid, gpu.memory_total_mib.value_or(0)));
    a.exclusive_held = hold.exclusive;
    a.shared_mib = hold.shared_mib;
    for (const MigDevice& device : gpu.mig_devices) {
      // A MIG device's lease is its own lock file, held whole.
      TRY_ASSIGN(GpuHold device_hold, leases.hold(device.uuid, 0));
      if (device_hold.exclusive) a.mig_taken.push_back(device.uuid);
    }
    for (const LeaseRecord& r : records) {
      const MigDevice* device = mig_device_with_uuid(gpu, r.uuid);
      if (r.uuid != gpu.uuid && device == nullptr) continue;
      std::string slice = r.slice_mib          ? fmt::format(", {} MiB", *r.slice_mib)
                          : device != nullptr ? fmt::format(", MIG {}:{}", gpu.index, device->index)
                                              : "";
      who.push_back(fmt::format("{} ({}{})", r.holder.user, r.holder.job, slice));
    }
    uint64_t leased_mib = hold.exclusive ? gpu.memory_total_mib.value_or(0) : hold.shared_mib;
    for (const MigDevice& device : gpu.mig_devices) {
      if (std::ranges::find(a.mig_taken, device.uuid) != a.mig_taken.end()) leased_mib += device.memory_mib;
    }
    uint64_t listed_mib = 0, gpupool_listed_mib = 0, unseen_listed_mib = 0;
    for (const GpuProcess& p : gpu.processes) {
      uint64_t memory = p.used_memory_mib.value_or(0);
      listed_mib += memory;
      if (started_by_gpupool(p.pid, holder_pids, host)) {
        gpupool_listed_mib += memory;
        continue;
      }
      if (leased_mib > 0 && !host.process_start_ticks(p.pid)) {
        // Not in our PID namespace: on a leased GPU most likely a job's process seen from another
        // namespace; weighed against the leases below.
        unseen_listed_mib += memory;
        continue;
      }
      a.external_busy = true;
      a.external_mib += memory;
      who.push_back(describe_process(p));
      if (p.mps_client.value_or(false) && p.user) a.mps_client_user = *p.user;
      // On a GPU in MIG mode, the MIG devices of its GPU instance are taken.
      for (const MigDevice& device : gpu.mig_devices) {
        if (p.gpu_instance_id == device.gpu_instance_id && std::ranges::find(a.mig_taken, device.uuid) == a.mig_taken.end()) {
          a.mig_taken.push_back(device.uuid);
        }
      }
    }
    uint64_t unexplained = unexplained_memory_mib(gpu.memory_used_mib.value_or(0), listed_mib, gpupool_listed_mib,
                                                  unseen_listed_mib, leased_mib);
    if (unexplained > busy_memory_mib) {
      // Memory held by processes we cannot see (another container or PID namespace).
      a.external_busy = true;
      a.external_mib += unexplained;
      who.push_back(fmt::format("{} MiB used by processes not visible here", unexplained));
    }
    a.holders = fmt::format("{}", fmt::join(who, ", "));
  }
  return out;
}

std::vector<LeaseClaim> claims_for(const Machine& machine, const LeasedDevices& leased) {
  std::vector<LeaseClaim> claims;
  for (unsigned index : leased.gpus) {
    const Gpu& gpu = machine.gpus.at(index);
    if (!leased.mig_uuid.empty()) {
      claims.push_back({leased.mig_uuid, gpu.index, 0, std::nullopt});
    } else {
      claims.push_back({gpu.uuid, gpu.index, gpu.memory_total_mib.value_or(0), leased.slice_mib});
    }
  }
  return claims;
}

}  // namespace gpupool
