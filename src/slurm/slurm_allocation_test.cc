#include "slurm/slurm_allocation.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

// Four GPUs whose minor numbers are not their nvidia-smi indices (as on machines where the
// driver probed them in another order than PCI bus order), with a link matrix that tells
// every pair apart: links[i][j].nvlinks = 10 * i + j.
Machine four_gpu_machine() {
  Machine machine;
  const unsigned minors[] = {2, 0, 3, 1};
  for (unsigned i = 0; i < 4; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.minor_number = minors[i];
    gpu.uuid = "GPU-0000000" + std::to_string(i) + "-aaaa-bbbb-cccc-dddddddddddd";
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(4, std::vector<Link>(4));
  for (unsigned i = 0; i < 4; ++i) {
    for (unsigned j = 0; j < 4; ++j) machine.links[i][j].nvlinks = 10 * i + j;
  }
  return machine;
}

std::vector<std::string> uuids_of(const Machine& machine, std::initializer_list<unsigned> indices) {
  std::vector<std::string> uuids;
  for (unsigned i : indices) uuids.push_back(machine.gpus[i].uuid);
  return uuids;
}

TEST(SlurmAllocation, OutsideAnAllocationThereIsNone) {
  auto allocation = slurm_allocation({{"SLURM_JOB_GPUS", "0"}}, four_gpu_machine());
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_FALSE(allocation->has_value());
}

TEST(SlurmAllocation, SlurmNumbersAreDeviceMinorNumbersNotNvidiaSmiIndices) {
  Machine machine = four_gpu_machine();
  auto allocation = slurm_allocation({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_GPUS", "0,1"}}, machine);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  ASSERT_TRUE(allocation->has_value());
  EXPECT_EQ((*allocation)->job_id, "42");
  // /dev/nvidia0 is nvidia-smi's GPU 1 and /dev/nvidia1 its GPU 3; listed in nvidia-smi order.
  EXPECT_EQ((*allocation)->uuids, uuids_of(machine, {1, 3}));
  EXPECT_EQ((*allocation)->source, "SLURM_JOB_GPUS=0,1");
}

TEST(SlurmAllocation, AStepsOwnGpusComeBeforeTheJobs) {
  Machine machine = four_gpu_machine();
  auto allocation = slurm_allocation(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "0,1,2,3"}, {"SLURM_STEP_GPUS", "3"}}, machine);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)->uuids, uuids_of(machine, {2}));
  EXPECT_EQ((*allocation)->source, "SLURM_STEP_GPUS=3");
}

TEST(SlurmAllocation, UuidsFromEnvUuidAreMatchedWhole) {
  Machine machine = four_gpu_machine();
  std::string value = machine.gpus[3].uuid + "," + machine.gpus[0].uuid;
  auto allocation = slurm_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", value}}, machine);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)->uuids, uuids_of(machine, {0, 3}));
}

TEST(SlurmAllocation, CudaVisibleDevicesIsReadAsCudaReadsIt) {
  Machine machine = four_gpu_machine();
  auto allocation = slurm_allocation(
      {{"SLURM_JOB_ID", "7"}, {"CUDA_VISIBLE_DEVICES", "2,0"}, {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}, machine);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)->uuids, uuids_of(machine, {0, 2}));
  EXPECT_EQ((*allocation)->source, "CUDA_VISIBLE_DEVICES=2,0");
}

TEST(SlurmAllocation, MissingMinorNumbersFallBackToTheIndex) {
  Machine machine = four_gpu_machine();
  for (Gpu& gpu : machine.gpus) gpu.minor_number.reset();
  auto allocation = slurm_allocation({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_GPUS", "2"}}, machine);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message;
  EXPECT_EQ((*allocation)->uuids, uuids_of(machine, {2}));
}

TEST(SlurmAllocation, BadListsAreOneLineErrors) {
  Machine machine = four_gpu_machine();
  auto error_of = [&](std::map<std::string, std::string> environment) {
    environment["SLURM_JOB_ID"] = "9";
    auto allocation = slurm_allocation(environment, machine);
    EXPECT_FALSE(allocation.ok());
    return allocation.ok() ? std::string() : allocation.error().message;
  };
  EXPECT_EQ(error_of({{"SLURM_JOB_GPUS", "0,7"}}), "SLURM_JOB_GPUS=0,7: no GPU here is /dev/nvidia7");
  EXPECT_EQ(error_of({{"SLURM_JOB_GPUS", "gpu:1"}}),
            "SLURM_JOB_GPUS=gpu:1: 'gpu:1' is neither a device number nor a GPU UUID");
  EXPECT_EQ(error_of({{"SLURM_STEP_GPUS", "GPU-ffff"}}), "SLURM_STEP_GPUS=GPU-ffff: no GPU here has the UUID GPU-ffff");
  EXPECT_EQ(error_of({{"SLURM_JOB_GPUS", "MIG-1234"}}),
            "SLURM_JOB_GPUS=MIG-1234: MIG devices cannot make a pool yet; ask Slurm for whole GPUs");
  EXPECT_EQ(error_of({}), "Slurm job 9 has no GPUs (SLURM_JOB_GPUS is not set): ask for them with --gres=gpu:N or --gpus=N");
  EXPECT_EQ(error_of({{"CUDA_VISIBLE_DEVICES", ""}}),
            "Slurm job 9 has no GPUs (CUDA_VISIBLE_DEVICES=): ask for them with --gres=gpu:N or --gpus=N");
  EXPECT_NE(error_of({{"CUDA_VISIBLE_DEVICES", "0,0"}}).find("CUDA_VISIBLE_DEVICES=0,0: "), std::string::npos);
}

TEST(SlurmAllocation, RestrictedMachineRenumbersAndKeepsTheLinksBetweenItsGpus) {
  Machine machine = four_gpu_machine();
  auto restricted = machine_restricted_to(machine, uuids_of(machine, {3, 1}));
  ASSERT_TRUE(restricted.ok()) << restricted.error().message;
  ASSERT_EQ(restricted->gpus.size(), 2u);
  EXPECT_EQ(restricted->gpus[0].uuid, machine.gpus[1].uuid);
  EXPECT_EQ(restricted->gpus[0].index, 0u);
  EXPECT_EQ(restricted->gpus[1].uuid, machine.gpus[3].uuid);
  EXPECT_EQ(restricted->gpus[1].index, 1u);
  EXPECT_EQ(restricted->gpus[1].minor_number, 1u);  // the device node does not change
  ASSERT_EQ(restricted->links.size(), 2u);
  EXPECT_EQ(restricted->links[0][1].nvlinks, 13u);
  EXPECT_EQ(restricted->links[1][0].nvlinks, 31u);
}

TEST(SlurmAllocation, RestrictingWithoutLinksLeavesNone) {
  Machine machine = four_gpu_machine();
  machine.links.clear();
  auto restricted = machine_restricted_to(machine, uuids_of(machine, {2}));
  ASSERT_TRUE(restricted.ok());
  EXPECT_TRUE(restricted->links.empty());
  EXPECT_FALSE(machine_restricted_to(machine, {"GPU-nope"}).ok());
}

}  // namespace
}  // namespace gpupool
