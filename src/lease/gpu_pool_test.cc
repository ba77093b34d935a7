#include "lease/gpu_pool.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

namespace gpupool {
namespace {

TEST(UnexplainedMemory, MemoryNobodyListsIsTheLeasesUpToWhatTheyHold) {
  // A 20 GiB slice whose process NVML does not list (another PID namespace): 18 GiB in use.
  EXPECT_EQ(unexplained_memory_mib(18432, 0, 0, 0, 20480), 0u);
  // 30 GiB in use on it: 10 GiB is someone else's.
  EXPECT_EQ(unexplained_memory_mib(30720, 0, 0, 0, 20480), 10240u);
  // No lease: all of it is someone else's.
  EXPECT_EQ(unexplained_memory_mib(18432, 0, 0, 0, 0), 18432u);
}

TEST(UnexplainedMemory, ListedProcessesWeCannotSeeCountAgainstTheLeasesToo) {
  // Listed with 18 GiB but not in our /proc, beside a 20 GiB slice.
  EXPECT_EQ(unexplained_memory_mib(18432, 18432, 0, 18432, 20480), 0u);
  // Two slices of 20 GiB, one's process visible (15 GiB), the other's not (25 GiB): 5 GiB over.
  EXPECT_EQ(unexplained_memory_mib(40960, 40960, 15360, 25600, 40960), 0u);
  EXPECT_EQ(unexplained_memory_mib(46080, 40960, 15360, 25600, 40960), 5120u);
}

TEST(UnexplainedMemory, VisibleProcessesOfTheLeasesUseUpTheirRoom) {
  // The slice's own process is listed and uses 20 GiB: 8 GiB more, unlisted, is not the slice's.
  EXPECT_EQ(unexplained_memory_mib(28672, 20480, 20480, 0, 20480), 8192u);
  // Listed processes explain everything: nothing is unexplained, whatever the leases.
  EXPECT_EQ(unexplained_memory_mib(4096, 4096, 0, 0, 0), 0u);
  EXPECT_EQ(unexplained_memory_mib(4096, 8192, 0, 0, 0), 0u);  // the lists can outrun the total
}

TEST(UnexplainedMemory, AnExclusiveLeaseExplainsTheWholeGpu) {
  EXPECT_EQ(unexplained_memory_mib(143771, 0, 0, 0, 143771), 0u);
}

// GPU 0 in MIG mode as two MIG devices, GPU 1 whole.
Machine machine_with_mig_devices() {
  Machine machine;
  for (unsigned index : {0u, 1u}) {
    Gpu gpu;
    gpu.index = index;
    gpu.uuid = "GPU-" + std::to_string(index);
    gpu.memory_total_mib = 1000;
    machine.gpus.push_back(gpu);
  }
  machine.gpus[0].mig_enabled = true;
  machine.gpus[0].mig_devices = {MigDevice{0, "MIG-a", 1, 0, 4, 4, 500, 0, "4g.500mb"},
                                 MigDevice{1, "MIG-b", 2, 0, 3, 3, 500, 0, "3g.500mb"}};
  return machine;
}

TEST(SurveyPool, AMigDeviceIsLeasedOnItsOwnLockFile) {
  char pattern[] = "/tmp/gpupool-pool-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  {
    auto leases = LeaseDirectory::open(root + "/run");
    ASSERT_TRUE(leases.ok()) << leases.error().message;
    Machine machine = machine_with_mig_devices();
    std::vector<LeaseClaim> claims = claims_for(machine, LeasedDevices{{0}, std::nullopt, "MIG-b"});
    ASSERT_EQ(claims.size(), 1u);
    EXPECT_EQ(claims[0].uuid, "MIG-b");
    EXPECT_FALSE(claims[0].slice_mib);
    auto held = leases->try_acquire(claims, LeaseHolder{getpid(), "", "train", 100});
    ASSERT_TRUE(held.ok() && *held);
    // The same device again is refused by the kernel; its neighbour is free.
    EXPECT_FALSE(*leases->try_acquire(claims, LeaseHolder{getpid(), "", "again", 100}));
    auto pool = survey_pool(machine, *leases, HostFiles(root), 1024);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    EXPECT_EQ((*pool)[0].mig_taken, std::vector<std::string>{"MIG-b"});
    EXPECT_FALSE(std::filesystem::exists(root + "/run/locks/MIG-a.lock"))
        << "a survey makes no lock file for a device nobody leased";
    EXPECT_TRUE(std::filesystem::exists(root + "/run/locks/MIG-b.lock"));
    EXPECT_FALSE((*pool)[0].exclusive_held);
    EXPECT_NE((*pool)[0].holders.find("(train, MIG 0:1)"), std::string::npos) << (*pool)[0].holders;
    EXPECT_TRUE((*pool)[1].mig_taken.empty());
    (*held)->release();
    pool = survey_pool(machine, *leases, HostFiles(root), 1024);
    ASSERT_TRUE(pool.ok());
    EXPECT_TRUE((*pool)[0].mig_taken.empty());
  }
  std::filesystem::remove_all(root);
}

TEST(SurveyPool, MpsClientsOutsideGpupoolsJobsNameTheirUser) {
  char pattern[] = "/tmp/gpupool-pool-test-XXXXXX";
  std::string root = mkdtemp(pattern);
  {
    auto leases = LeaseDirectory::open(root + "/run");
    ASSERT_TRUE(leases.ok()) << leases.error().message;
    Machine machine;
    for (unsigned index : {0u, 1u}) {
      Gpu gpu;
      gpu.index = index;
      gpu.uuid = "GPU-" + std::to_string(index);
      gpu.memory_total_mib = 81920;
      GpuProcess process;
      process.pid = 4242 + index;
      process.used_memory_mib = 500;
      process.user = index == 0 ? "bob" : "carol";
      process.mps_client = index == 0;
      gpu.processes = {process};
      machine.gpus.push_back(gpu);
    }
    auto pool = survey_pool(machine, *leases, HostFiles(root), 1024);
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    EXPECT_EQ((*pool)[0].mps_client_user, "bob");
    EXPECT_EQ((*pool)[1].mps_client_user, "");  // not an MPS client
  }
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace gpupool
