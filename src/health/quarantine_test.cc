#include "health/quarantine.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

constexpr double kWindow = 1800;
const QuarantinePolicy kPolicy{true, kWindow};

Machine two_healthy_gpus() {
  Machine machine;
  for (unsigned index : {0u, 1u}) {
    Gpu gpu;
    gpu.index = index;
    gpu.uuid = fmt::format("GPU-{}", index);
    gpu.ecc_uncorrected_volatile = 0;
    gpu.row_remapping_pending = false;
    gpu.row_remapping_failed = false;
    machine.gpus.push_back(gpu);
  }
  return machine;
}

// The one change of a sample that returned the last quarantined GPU, for `why`.
void expect_the_last_released(const std::vector<QuarantineChange>& changes, const QuarantineState& state,
                              const std::string& why) {
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].quarantined);
  EXPECT_EQ(changes[0].why, why);
  EXPECT_TRUE(state.gpus.empty());
}

TEST(XidMeaningTest, HardwareXidsQuarantineAndProgramOnesDoNot) {
  ASSERT_NE(xid_meaning(79), nullptr);
  EXPECT_TRUE(xid_meaning(79)->hardware);
  EXPECT_TRUE(xid_meaning(48)->hardware);
  EXPECT_FALSE(xid_meaning(13)->hardware);
  EXPECT_FALSE(xid_meaning(31)->hardware);
  EXPECT_EQ(xid_meaning(9999), nullptr);
  EXPECT_EQ(describe_xid(79), "XID 79 (the GPU fell off the bus)");
  EXPECT_EQ(describe_xid(9999), "XID 9999");
}

TEST(UnattributedMemoryTest, IsWhatNoListedProcessHolds) {
  Gpu gpu = two_healthy_gpus().gpus[0];
  gpu.memory_used_mib = 30000;
  EXPECT_EQ(unattributed_memory_mib(gpu), 30000u) << "no process: all of it";
  gpu.processes.resize(1);
  gpu.processes[0].used_memory_mib = 29000;
  EXPECT_EQ(unattributed_memory_mib(gpu), 1000u);
  gpu.processes[0].used_memory_mib = 31000;  // read a moment apart: never below 0
  EXPECT_EQ(unattributed_memory_mib(gpu), 0u);
  gpu.processes.emplace_back();  // no figure
  EXPECT_EQ(unattributed_memory_mib(gpu), std::nullopt) << "a process without a figure";
  gpu.processes.clear();
  gpu.mig_enabled = true;
  EXPECT_EQ(unattributed_memory_mib(gpu), std::nullopt) << "MIG instances hold memory of their own";
  gpu.mig_enabled = false;
  gpu.memory_used_mib.reset();
  EXPECT_EQ(unattributed_memory_mib(gpu), std::nullopt);
}

TEST(ReadingFaultsTest, AHealthyGpuHasNone) { EXPECT_TRUE(reading_faults(two_healthy_gpus().gpus[0]).empty()); }

TEST(ReadingFaultsTest, NamesEachFault) {
  Gpu gpu = two_healthy_gpus().gpus[0];
  gpu.ecc_uncorrected_volatile = 2;
  gpu.row_remapping_pending = true;
  gpu.row_remapping_failed = true;
  gpu.fault = "GPU is lost";
  EXPECT_EQ(reading_faults(gpu),
            (std::vector<std::string>{"NVML cannot read it (GPU is lost)",
                                      "2 uncorrectable ECC errors since the driver loaded", "a row remap failed",
                                      "a row remap is pending (a reset applies it)"}));
}

TEST(QuarantineTest, AHardwareXidTakesItsGpuOutUntilTheWindowIsClean) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  auto changes = observe_health(state, machine, {{"GPU-1", 79}}, 1000, kPolicy);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].quarantined);
  EXPECT_EQ(changes[0].index, 1u);
  EXPECT_EQ(changes[0].why, "XID 79 (the GPU fell off the bus)");
  EXPECT_TRUE(state.gpus.contains("GPU-1"));
  EXPECT_FALSE(state.gpus.contains("GPU-0"));

  EXPECT_TRUE(observe_health(state, machine, {}, 1000 + kWindow - 1, kPolicy).empty());
  expect_the_last_released(observe_health(state, machine, {}, 1000 + kWindow, kPolicy), state, "no fault for 30 min");
}

TEST(QuarantineTest, AProgramsXidOrAnotherGpusLeavesItIn) {
  QuarantineState state;
  EXPECT_TRUE(observe_health(state, two_healthy_gpus(), {{"GPU-1", 13}, {"GPU-1", 31}, {"GPU-9", 79}}, 1, kPolicy)
                  .empty());
  EXPECT_TRUE(state.gpus.empty());
}

TEST(QuarantineTest, ALastingFaultKeepsTheWindowFromStarting) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  machine.gpus[0].row_remapping_pending = true;
  ASSERT_EQ(observe_health(state, machine, {}, 0, kPolicy).size(), 1u);
  EXPECT_TRUE(observe_health(state, machine, {}, 2 * kWindow, kPolicy).empty());
  EXPECT_TRUE(state.gpus.contains("GPU-0"));
  machine.gpus[0].row_remapping_pending = false;  // a reset applied it
  EXPECT_TRUE(observe_health(state, machine, {}, 2 * kWindow + 1, kPolicy).empty());
  EXPECT_EQ(observe_health(state, machine, {}, 3 * kWindow, kPolicy).size(), 1u);
  EXPECT_TRUE(state.gpus.empty());
}

TEST(QuarantineTest, ARepeatedXidRestartsTheWindow) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  observe_health(state, machine, {{"GPU-0", 48}}, 0, kPolicy);
  EXPECT_TRUE(observe_health(state, machine, {{"GPU-0", 48}}, kWindow - 10, kPolicy).empty());
  EXPECT_TRUE(observe_health(state, machine, {}, kWindow, kPolicy).empty());
  EXPECT_EQ(observe_health(state, machine, {}, 2 * kWindow - 10, kPolicy).size(), 1u);
}

TEST(QuarantineTest, AnAdministratorsReleaseAcceptsTheFaultsSeenNowButNotNewOnes) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  machine.gpus[0].ecc_uncorrected_volatile = 1;
  observe_health(state, machine, {}, 0, kPolicy);
  EXPECT_TRUE(release_from_quarantine(state, machine.gpus[0]));
  EXPECT_TRUE(observe_health(state, machine, {}, 1, kPolicy).empty()) << "the accepted fault quarantines no more";
  machine.gpus[0].ecc_uncorrected_volatile = 2;  // a new error
  auto changes = observe_health(state, machine, {}, 2, kPolicy);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].why, "2 uncorrectable ECC errors since the driver loaded");
  EXPECT_FALSE(release_from_quarantine(state, machine.gpus[1]));
}

TEST(QuarantineTest, AnAcceptedFaultThatGoesAndComesBackQuarantinesAgain) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  machine.gpus[1].row_remapping_pending = true;
  observe_health(state, machine, {}, 0, kPolicy);
  release_from_quarantine(state, machine.gpus[1]);
  machine.gpus[1].row_remapping_pending = false;
  observe_health(state, machine, {}, 1, kPolicy);
  EXPECT_TRUE(state.accepted.empty());
  machine.gpus[1].row_remapping_pending = true;
  EXPECT_EQ(observe_health(state, machine, {}, 2, kPolicy).size(), 1u);
}

TEST(QuarantineTest, TurnedOffItReleasesEveryGpuAndTakesNone) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  observe_health(state, machine, {{"GPU-0", 79}}, 0, kPolicy);
  expect_the_last_released(observe_health(state, machine, {{"GPU-1", 79}}, 1, QuarantinePolicy{false, kWindow}), state,
                           "quarantine is off");
}

TEST(QuarantineTest, AnotherCardAtTheIndexEndsTheEntry) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  observe_health(state, machine, {{"GPU-1", 79}}, 0, kPolicy);
  machine.gpus[1].uuid = "GPU-new";  // the card was replaced
  expect_the_last_released(observe_health(state, machine, {}, 1, kPolicy), state, "another card is GPU 1 now");
}

TEST(QuarantineTest, ACardThatMovedKeepsItsEntryAtItsNewIndex) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  observe_health(state, machine, {{"GPU-1", 79}}, 0, kPolicy);
  std::swap(machine.gpus[0].uuid, machine.gpus[1].uuid);  // numbered anew
  EXPECT_TRUE(observe_health(state, machine, {}, 1, kPolicy).empty());
  EXPECT_EQ(state.gpus.at("GPU-1").index, 0u);
}

TEST(QuarantineTest, UnreadableGpusAreKeptApartByIndex) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  for (Gpu& gpu : machine.gpus) {
    gpu.uuid.clear();
    gpu.fault = "GPU is lost";
  }
  EXPECT_EQ(observe_health(state, machine, {}, 0, kPolicy).size(), 2u);
  EXPECT_TRUE(state.gpus.contains("index 0"));
  EXPECT_TRUE(state.gpus.contains("index 1"));
  machine.gpus.pop_back();  // one no longer counted: kept, it may be the one missing
  EXPECT_TRUE(observe_health(state, machine, {}, 1, kPolicy).empty());
  EXPECT_EQ(state.gpus.size(), 2u);
}

TEST(QuarantineTest, AReleaseByIndexEndsTheEntryOfACardNoLongerThere) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  machine.gpus[0].uuid.clear();
  machine.gpus[0].fault = "GPU is lost";
  observe_health(state, machine, {}, 0, kPolicy);
  Gpu back = two_healthy_gpus().gpus[0];  // readable again, its UUID known
  EXPECT_TRUE(release_from_quarantine(state, back));
  EXPECT_TRUE(state.gpus.empty());
}

TEST(QuarantineTest, KeepsItsGpusFromTheSchedulerAndSaysWhy) {
  QuarantineState state;
  observe_health(state, two_healthy_gpus(), {{"GPU-1", 79}}, 0, kPolicy);
  std::vector<GpuAvailability> gpus(2);
  gpus[1].holders = "alice (train)";
  mark_quarantined_gpus(state, gpus);
  EXPECT_TRUE(gpus[0].usable);
  EXPECT_FALSE(gpus[1].usable);
  EXPECT_EQ(gpus[1].holders, "alice (train); quarantined: XID 79 (the GPU fell off the bus)");
}

TEST(QuarantineTest, StoredAndReadBackWhole) {
  QuarantineState state;
  Machine machine = two_healthy_gpus();
  machine.gpus[0].row_remapping_pending = true;
  observe_health(state, machine, {{"GPU-1", 95}}, 12.5, kPolicy);
  release_from_quarantine(state, machine.gpus[0]);
  auto back = parse_quarantine_state(encode(state));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, state);
  EXPECT_FALSE(parse_quarantine_state("[]"));
  auto damaged = parse_quarantine_state(R"({"gpus": {"GPU-1": {"index": "one"}}})");
  ASSERT_FALSE(damaged);
  EXPECT_NE(damaged.error().message.find("the stored quarantine is damaged"), std::string::npos);
}

TEST(QuarantineAdviceTest, SaysWhatToDoForEachFault) {
  EXPECT_EQ(quarantine_advice("XID 79 (the GPU fell off the bus)"),
            "reboot the machine; if it repeats, have the GPU reseated or replaced");
  EXPECT_EQ(quarantine_advice("XID 48 (an uncorrectable (double-bit) ECC error); XID 95 (an uncontained ECC error)"),
            "reset the GPU (`nvidia-smi -r -i N`) once its jobs are off it");
  EXPECT_EQ(quarantine_advice("a row remap failed; a row remap is pending (a reset applies it)"),
            "have the GPU serviced; reset the GPU (`nvidia-smi -r -i N`) once its jobs are off it");
  EXPECT_EQ(quarantine_advice("something else"), "");
}

}  // namespace
}  // namespace gpupool
