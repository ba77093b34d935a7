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
  auto env = lease_environment({"PATH=/bin", "TF_FORCE_GPU_ALLOW_GROWTH=false", "CUDA_VISIBLE_DEVICES=7"}, m, {0, 1},
                               "12", 250);
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
  EXPECT_EQ(lease_environment({"PATH=/bin"}, m, {2}, "j", std::nullopt),
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

}  // namespace
}  // namespace gpupool
