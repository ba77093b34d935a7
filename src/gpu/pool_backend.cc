// restrict_to_slurm_allocation: the machine, or inside a Slurm allocation the allocation's part of it.
#include <algorithm>
#include <map>
#include <string>

#include "gpu/gpu_backend.h"
#include "os/environment.h"
#include "slurm/slurm_allocation.h"

namespace gpupool {
namespace {

// The allocation's GPUs' events only.
class AllocationXidWatch : public XidWatch {
 public:
  AllocationXidWatch(std::unique_ptr<XidWatch> whole, std::vector<std::string> uuids)
      : whole_(std::move(whole)), uuids_(std::move(uuids)) {}
  Result<std::vector<XidEvent>> wait(std::chrono::milliseconds timeout) override {
    TRY_ASSIGN(std::vector<XidEvent> events, whole_->wait(timeout));
    std::erase_if(events, [&](const XidEvent& event) { return std::ranges::find(uuids_, event.gpu_uuid) == uuids_.end(); });
    return events;
  }
  size_t gpus_watched() const override { return std::min(whole_->gpus_watched(), uuids_.size()); }

 private:
  std::unique_ptr<XidWatch> whole_;
  std::vector<std::string> uuids_;
};

// Every snapshot cut down to the allocation's GPUs, so that every index the daemon, the
// scheduler and the leases use means the same GPU.
class AllocationBackend : public GpuBackend {
 public:
  AllocationBackend(std::unique_ptr<GpuBackend> machine, SlurmAllocation allocation)
      : machine_(std::move(machine)), allocation_(std::move(allocation)) {}

  Result<Machine> discover(DiscoveryScope scope) override {
    TRY_ASSIGN(Machine whole, machine_->discover(scope));
    return machine_restricted_to(whole, allocation_.uuids);
  }
  std::string description() const override {
    size_t count = allocation_.uuids.size();
    return fmt::format("{}; Slurm job {}'s {} GPU{} ({})", machine_->description(), allocation_.job_id, count,
                       count == 1 ? "" : "s", allocation_.source);
  }
  std::string simulated_machine() const override { return machine_->simulated_machine(); }
  Result<std::unique_ptr<XidWatch>> watch_xid_events() override {
    TRY_ASSIGN(std::unique_ptr<XidWatch> whole, machine_->watch_xid_events());
    return std::unique_ptr<XidWatch>(std::make_unique<AllocationXidWatch>(std::move(whole), allocation_.uuids));
  }

 private:
  std::unique_ptr<GpuBackend> machine_;
  SlurmAllocation allocation_;
};

}  // namespace

Result<std::unique_ptr<GpuBackend>> restrict_to_slurm_allocation(std::unique_ptr<GpuBackend> backend,
                                                                 const EnvironmentMap& environment) {
  if (!environment.contains("SLURM_JOB_ID")) return backend;
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  TRY_ASSIGN(std::optional<SlurmAllocation> allocation, slurm_allocation(environment, machine));
  // SLURM_JOB_ID set but empty is no allocation.
  if (!allocation) return backend;
  return std::unique_ptr<GpuBackend>(std::make_unique<AllocationBackend>(std::move(backend), std::move(*allocation)));
}

}  // namespace gpupool
