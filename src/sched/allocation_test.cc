#include "sched/allocation.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Four GPUs of 1000 MiB: (0,1) and (2,3) are NVLinked pairs, across pairs only PCIe.
Machine four_gpus() {
  Machine m;
  for (unsigned i = 0; i < 4; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.uuid = "GPU-" + std::to_string(i);
    gpu.memory_total_mib = 1000;
    m.gpus.push_back(gpu);
  }
  m.links.assign(4, std::vector<Link>(4));
  for (unsigned i = 0; i < 4; ++i) {
    for (unsigned j = 0; j < 4; ++j) {
      m.links[i][j].pcie = PcieLevel::System;
      if (i / 2 == j / 2) m.links[i][j].nvlinks = 2;
    }
  }
  return m;
}

std::vector<unsigned> chosen(const Machine& m, const std::vector<GpuAvailability>& a, GpuRequest r) {
  auto result = choose_gpus(m, a, r);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result.ok() && *result ? **result : std::vector<unsigned>{};
}

TEST(Allocation, WholeGpusGoToTheBestConnectedFreeSet) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  a[0].exclusive_held = true;
  EXPECT_EQ(chosen(m, a, {2, std::nullopt, {}, {}}), (std::vector<unsigned>{2, 3}));
}

TEST(Allocation, BusyGpusMakeTheRequestWait) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  a[0].exclusive_held = true;
  a[1].external_busy = true;
  a[1].holders = "pid 7 bob python";
  a[2].shared_mib = 10;
  auto result = choose_gpus(m, a, {2, std::nullopt, {}, {}});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(*result);
  std::string why = describe_wait(m, a, {2, std::nullopt, {}, {}});
  EXPECT_EQ(why, "waiting for 2 GPUs: 3 busy (GPU 0,2: in use; GPU 1: pid 7 bob python)");
}

TEST(Allocation, SlicesPackOntoSharedGpusFirst) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  a[2].shared_mib = 500;
  a[3].shared_mib = 800;
  EXPECT_EQ(chosen(m, a, {1, 300, {}, {}}), (std::vector<unsigned>{2}));  // 3 has only 200 left
  EXPECT_EQ(chosen(m, a, {1, 150, {}, {}}), (std::vector<unsigned>{3}));  // the tightest fit
  a[2].exclusive_held = true;
  a[3].shared_mib = 1000;
  EXPECT_EQ(chosen(m, a, {1, 150, {}, {}}), (std::vector<unsigned>{0}));
}

TEST(Allocation, GivenRecentRequestsASliceLeavesRoomForThem) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  a[2].shared_mib = 500;  // 500 left: a 300 MiB slice leaves 200
  a[3].shared_mib = 300;  // 700 left: it leaves 400
  RequestMix recent(10);
  for (int i = 0; i < 3; ++i) recent.add(GpuRequest{.count = 1, .slice_mib = 400});
  EXPECT_EQ(chosen(m, a, {1, 300, {}, {}}), (std::vector<unsigned>{2}));  // best fit
  auto result = choose_gpus(m, a, {1, 300, {}, {}}, &recent);
  ASSERT_TRUE(result.ok() && *result);
  EXPECT_EQ(**result, (std::vector<unsigned>{3}));  // 400 MiB requests still fit beside it
  RequestMix none(10);  // no requests yet: best fit
  result = choose_gpus(m, a, {1, 300, {}, {}}, &none);
  ASSERT_TRUE(result.ok() && *result);
  EXPECT_EQ(**result, (std::vector<unsigned>{2}));
}

TEST(Allocation, ExternalMemoryCountsAgainstSlices) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  for (auto& g : a) g.external_mib = 900;
  auto result = choose_gpus(m, a, {1, 200, {}, {}});
  ASSERT_TRUE(result.ok());
  EXPECT_FALSE(*result);
}

TEST(Allocation, AllowedAndExcludedGpus) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  EXPECT_EQ(chosen(m, a, {1, std::nullopt, {3}, {}}), (std::vector<unsigned>{3}));
  EXPECT_EQ(chosen(m, a, {2, std::nullopt, {}, {0, 1}}), (std::vector<unsigned>{2, 3}));
}

TEST(Allocation, ImpossibleRequestsAreErrorsNotWaits) {
  Machine m = four_gpus();
  std::vector<GpuAvailability> a(4);
  EXPECT_EQ(choose_gpus(m, a, {5, std::nullopt, {}, {}}).error().message,
            "need 5 GPUs, but only 4 are allowed on this machine");
  EXPECT_FALSE(choose_gpus(m, a, {2, std::nullopt, {1}, {}}).ok());
  EXPECT_FALSE(choose_gpus(m, a, {1, 2000, {}, {}}).ok());
  EXPECT_FALSE(choose_gpus(m, a, {0, std::nullopt, {}, {}}).ok());
}

TEST(LeaseEnvironment, ASliceGetsTheFrameworksLimitsUnlessTheJobSetsThem) {
  Machine m = four_gpus();
  m.gpus[1].memory_total_mib = 800;  // the smaller card's share counts
  auto env = lease_environment({"PATH=/bin", "TF_FORCE_GPU_ALLOW_GROWTH=false", "CUDA_VISIBLE_DEVICES=7"}, m,
                               LeasedDevices{{0, 1}, 250}, "12");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "TF_FORCE_GPU_ALLOW_GROWTH=false",
                                           "CUDA_VISIBLE_DEVICES=GPU-0,GPU-1", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                                           "GPUPOOL_JOB=12", "GPUPOOL_GPUS=0,1", "GPUPOOL_GPU_UUIDS=GPU-0,GPU-1",
                                           "GPUPOOL_MEM_MIB=250", "XLA_PYTHON_CLIENT_MEM_FRACTION=0.3125",
                                           "XLA_PYTHON_CLIENT_PREALLOCATE=false",
                                           "CUPY_GPU_MEMORY_LIMIT=262144000"}));
}

TEST(LeaseEnvironment, WholeGpusGetNoMemoryLimits) {
  Machine m = four_gpus();
  EXPECT_TRUE(slice_memory_limits(m, {0}, std::nullopt).empty());
  EXPECT_EQ(lease_environment({"PATH=/bin"}, m, LeasedDevices{{2}}, "j"),
            (std::vector<std::string>{"PATH=/bin", "CUDA_VISIBLE_DEVICES=GPU-2", "CUDA_DEVICE_ORDER=PCI_BUS_ID",
                                      "GPUPOOL_JOB=j", "GPUPOOL_GPUS=2", "GPUPOOL_GPU_UUIDS=GPU-2"}));
}

TEST(LeaseEnvironment, TheFractionIsRoundedDownAndTheWholeCardAtMost) {
  Machine m = four_gpus();
  EXPECT_EQ(slice_memory_limits(m, {0}, 333).front(), "XLA_PYTHON_CLIENT_MEM_FRACTION=0.3330");
  EXPECT_EQ(slice_memory_limits(m, {0}, 1).front(), "XLA_PYTHON_CLIENT_MEM_FRACTION=0.0010");
  EXPECT_EQ(slice_memory_limits(m, {0}, 1000).front(), "XLA_PYTHON_CLIENT_MEM_FRACTION=1.0000");
  m.gpus[0].memory_total_mib.reset();  // unknown: no fraction, the rest still
  EXPECT_EQ(slice_memory_limits(m, {0}, 500).front(), "XLA_PYTHON_CLIENT_PREALLOCATE=false");
}

TEST(Allocation, ParsesMemorySizes) {
  EXPECT_EQ(*parse_memory_mib("20G"), 20480u);
  EXPECT_EQ(*parse_memory_mib("20GiB"), 20480u);
  EXPECT_EQ(*parse_memory_mib("512m"), 512u);
  EXPECT_EQ(*parse_memory_mib("1.5T"), 1572864u);
  EXPECT_EQ(*parse_memory_mib("300"), 300u);
  EXPECT_EQ(parse_memory_mib("20X").error().message, "invalid memory size '20X': unknown unit 'X' (use M, G or T)");
  EXPECT_FALSE(parse_memory_mib("").ok());
  EXPECT_FALSE(parse_memory_mib("-5G").ok());
  EXPECT_FALSE(parse_memory_mib("nan").ok());
}


// GPU 0 in MIG mode as 4g.71gb + 3g.71gb, GPU 1 as three 1g.18gb, GPUs 2 and 3 whole.
Machine machine_in_mig_mode() {
  Machine m = four_gpus();
  auto device = [](unsigned index, std::string uuid, unsigned slices, unsigned compute, uint64_t mib,
                   std::string profile) {
    return MigDevice{index, std::move(uuid), index + 1, 0, slices, compute, mib, 0, std::move(profile)};
  };
  for (unsigned gpu : {0u, 1u}) m.gpus[gpu].mig_enabled = true;
  m.gpus[0].mig_devices = {device(0, "MIG-a", 4, 4, 70656, "4g.71gb"), device(1, "MIG-b", 3, 3, 70656, "3g.71gb")};
  m.gpus[1].mig_devices = {device(0, "MIG-c", 1, 1, 16384, "1g.18gb"), device(1, "MIG-d", 1, 1, 16384, "1g.18gb"),
                           device(2, "MIG-e", 1, 1, 16384, "1g.18gb")};
  return m;
}

std::vector<GpuAvailability> mig_availability(const Machine& m) { return std::vector<GpuAvailability>(m.gpus.size()); }

GpuRequest mig_request(std::string profile, uint64_t min_mib = 0) {
  GpuRequest r;
  r.mig = MigRequest{std::move(profile), min_mib};
  return r;
}

TEST(MigAllocation, WholeGpusAndSlicesKeepOffGpusInMigMode) {
  Machine m = machine_in_mig_mode();
  auto a = mig_availability(m);
  EXPECT_EQ(chosen(m, a, {2, std::nullopt, {}, {}}), (std::vector<unsigned>{2, 3}));
  EXPECT_EQ(chosen(m, a, {1, 100, {}, {}}), (std::vector<unsigned>{2}));
  a[2].exclusive_held = a[3].exclusive_held = true;
  EXPECT_EQ(choose_gpus(m, a, {1, std::nullopt, {}, {}}).value(), std::nullopt);
  EXPECT_EQ(slice_room(m.gpus[0], a[0]), 0u);
  EXPECT_FALSE(whole_gpu_free(m.gpus[0], a[0]));
  auto named = choose_gpus(m, a, {1, std::nullopt, {0}, {}});
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.error().message,
            "need 1 GPU, but 1 of the allowed GPUs is in MIG mode (GPU 0), where CUDA runs only on MIG devices: "
            "ask for one with --mig PROFILE");
}

TEST(MigAllocation, AProfileGetsTheSmallestFreeDeviceOfIt) {
  Machine m = machine_in_mig_mode();
  auto a = mig_availability(m);
  GpuRequest r = mig_request("1g.18gb");
  for (const char* expected : {"MIG-c", "MIG-d", "MIG-e"}) {
    EXPECT_EQ(chosen(m, a, r), (std::vector<unsigned>{1}));
    LeasedDevices leased = devices_for(m, a, r, {1});
    EXPECT_EQ(leased.mig_uuid, expected);
    a[1].mig_taken.push_back(leased.mig_uuid);
  }
  EXPECT_EQ(choose_gpus(m, a, r).value(), std::nullopt);
  EXPECT_EQ(describe_wait(m, a, r), "waiting for a 1g.18gb MIG device: 3 of 3 taken (GPU 1: 3)");
  // One held outside the scheduler is as taken as one of its own.
  a[1].mig_taken = {"MIG-c", "MIG-d"};
  a[1].mig_external = {"MIG-e"};
  EXPECT_EQ(choose_gpus(m, a, r).value(), std::nullopt);
  a[1].mig_external.clear();
  EXPECT_EQ(devices_for(m, a, r, {1}).mig_uuid, "MIG-e");
}

TEST(MigAllocation, AnyProfileWithMemoryTakesTheSmallestThatHoldsIt) {
  Machine m = machine_in_mig_mode();
  auto a = mig_availability(m);
  EXPECT_EQ(devices_for(m, a, mig_request("", 10000), chosen(m, a, mig_request("", 10000))).mig_uuid, "MIG-c");
  // Two of 70656 MiB: the one with fewer compute slices goes first, the larger stays for larger requests.
  EXPECT_EQ(devices_for(m, a, mig_request("", 20000), chosen(m, a, mig_request("", 20000))).mig_uuid, "MIG-b");
  a[0].mig_taken = {"MIG-b"};
  EXPECT_EQ(devices_for(m, a, mig_request("", 20000), {0}).mig_uuid, "MIG-a");
  EXPECT_EQ(describe_mig_request(MigRequest{"", 20000}), "a MIG device of at least 20000 MiB");
}

TEST(MigAllocation, DevicesGoWhereFewestAreLeftFree) {
  Machine m = machine_in_mig_mode();
  m.gpus[2].mig_enabled = true;
  m.gpus[2].mig_devices = m.gpus[1].mig_devices;
  for (MigDevice& device : m.gpus[2].mig_devices) device.uuid += "2";
  auto a = mig_availability(m);
  a[2].mig_taken = {"MIG-c2"};
  EXPECT_EQ(chosen(m, a, mig_request("1g.18gb")), (std::vector<unsigned>{2}));
  a[1].mig_taken = {"MIG-c", "MIG-d"};
  EXPECT_EQ(chosen(m, a, mig_request("1g.18gb")), (std::vector<unsigned>{1}));
  // --gpus and --exclude apply to the GPUs the devices are on.
  GpuRequest kept = mig_request("1g.18gb");
  kept.excluded = {1};
  EXPECT_EQ(chosen(m, a, kept), (std::vector<unsigned>{2}));
}

TEST(MigAllocation, WhatCannotBeMetIsAnError) {
  Machine m = machine_in_mig_mode();
  auto a = mig_availability(m);
  auto unknown = choose_gpus(m, a, mig_request("2g.35gb"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "no allowed GPU has a 2g.35gb MIG device (MIG devices here: 1g.18gb x3, 3g.71gb x1, 4g.71gb x1)");
  GpuRequest elsewhere = mig_request("1g.18gb");
  elsewhere.allowed = {0, 2};
  ASSERT_FALSE(choose_gpus(m, a, elsewhere).ok());
  GpuRequest two = mig_request("1g.18gb");
  two.count = 2;
  ASSERT_FALSE(choose_gpus(m, a, two).ok());
  EXPECT_EQ(choose_gpus(m, a, two).error().message,
            "a job gets one MIG device: CUDA runs a process on one MIG device only");
  auto too_large = choose_gpus(m, a, mig_request("1g.18gb", 20000));
  ASSERT_FALSE(too_large.ok());
}

TEST(MigAllocation, ComputeInstancesOfOneGpuInstanceAreLeasedOneAtATime) {
  Machine m = machine_in_mig_mode();
  // GPU 0's GPU instance 1 as two compute instances, which share its memory.
  m.gpus[0].mig_devices = {MigDevice{0, "MIG-x", 1, 0, 3, 1, 40960, 14, "1c.3g.40gb"},
                           MigDevice{1, "MIG-y", 1, 1, 3, 2, 40960, 28, "2c.3g.40gb"},
                           MigDevice{2, "MIG-z", 2, 0, 4, 4, 40960, 56, "4g.40gb"}};
  auto a = mig_availability(m);
  a[0].mig_taken = {"MIG-x"};
  GpuRequest r = mig_request("", 30000);
  EXPECT_EQ(devices_for(m, a, r, {0}).mig_uuid, "MIG-z");
  a[0].mig_taken.push_back("MIG-z");
  EXPECT_EQ(choose_gpus(m, a, r).value(), std::nullopt);
  EXPECT_EQ(describe_wait(m, a, r), "waiting for a MIG device of at least 30000 MiB: 3 of 3 taken (GPU 0: 3)");
}

TEST(MigAllocation, AMigDeviceIsWhatCudaSees) {
  Machine m = machine_in_mig_mode();
  EXPECT_EQ(lease_environment({"PATH=/bin"}, m, LeasedDevices{{1}, std::nullopt, "MIG-d"}, "7"),
            (std::vector<std::string>{"PATH=/bin", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "GPUPOOL_JOB=7", "GPUPOOL_GPUS=1",
                                      "CUDA_VISIBLE_DEVICES=MIG-d", "GPUPOOL_GPU_UUIDS=GPU-1",
                                      "GPUPOOL_MIG_UUID=MIG-d", "GPUPOOL_MEM_MIB=16384"}));
  EXPECT_EQ(mig_environment(m, LeasedDevices{{1}, std::nullopt, "MIG-d"}),
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=MIG-d", "GPUPOOL_GPU_UUIDS=GPU-1",
                                      "GPUPOOL_MIG_UUID=MIG-d", "GPUPOOL_MEM_MIB=16384"}));
  EXPECT_TRUE(mig_environment(m, LeasedDevices{{2}}).empty());
}

}  // namespace
}  // namespace gpupool
