// open_pool_backend: the machine, or inside a Slurm allocation the allocation's part of it.
#include <map>
#include <string>

#include "core/slurm_allocation.h"
#include "gpu/gpu_backend.h"
#include "os/environment.h"

namespace gpupool {
namespace {

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

 private:
  std::unique_ptr<GpuBackend> machine_;
  SlurmAllocation allocation_;
};

}  // namespace

Result<std::unique_ptr<GpuBackend>> open_pool_backend() {
  TRY_ASSIGN(std::unique_ptr<GpuBackend> backend, open_gpu_backend());
  EnvironmentMap environment = own_environment();
  if (!environment.contains("SLURM_JOB_ID")) return backend;
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{.links = false, .processes = false}));
  TRY_ASSIGN(std::optional<SlurmAllocation> allocation, slurm_allocation(environment, machine));
  return std::unique_ptr<GpuBackend>(std::make_unique<AllocationBackend>(std::move(backend), std::move(*allocation)));
}

}  // namespace gpupool
