#include "sim/fixture_capture.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "machine/gpu_json.h"
#include "sim/fixture_dirs_testing.h"

namespace gpupool::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using testing_support::kFixtureDir;
using testing_support::kTestFixtureDir;

Machine fixture_machine(const std::string& name) {
  auto path = locate_fixture(name, {kFixtureDir, kTestFixtureDir});
  EXPECT_TRUE(path.ok()) << path.error().message;
  auto fixture = load_fixture(*path);
  EXPECT_TRUE(fixture.ok()) << fixture.error().message;
  return machine_from_fixture(*fixture);
}

Machine read_back(const CapturedFixture& captured) {
  auto parsed = parse_fixture(format_fixture(captured.fixture), "captured");
  EXPECT_TRUE(parsed.ok()) << parsed.error().message;
  return parsed.ok() ? machine_from_fixture(*parsed) : Machine{};
}

// Machines built by hand: n GPUs of one kind, every pair at `level`, no NVLink.
Machine plain_machine(size_t n, PcieLevel level) {
  Machine machine;
  for (size_t i = 0; i < n; ++i) {
    Gpu gpu;
    gpu.index = static_cast<unsigned>(i);
    gpu.uuid = fmt::format("GPU-00000000-0000-0000-0000-00000000000{}", i);
    gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + i);
    gpu.name = "NVIDIA H200";
    gpu.memory_total_mib = 1000;
    gpu.memory_used_mib = 0;
    gpu.memory_free_mib = 1000;
    gpu.compute_capability = ComputeCapability{9, 0};
    gpu.multiprocessors = 132;
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(n, std::vector<Link>(n));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) machine.links[i][j].pcie = level;
  return machine;
}

void set_link(Machine& machine, size_t i, size_t j, Link link) {
  machine.links[i][j] = link;
  machine.links[j][i] = link;
}

class CaptureEveryFixture : public ::testing::TestWithParam<std::string> {};

// Every machine we simulate, captured and read back, is the same machine: each GPU's fields and
// every link, whatever the tree, the NUMA numbering or the NVSwitch fabric.
TEST_P(CaptureEveryFixture, ReadsBackAsTheSameMachine) {
  Machine machine = fixture_machine(GetParam());
  auto captured = capture_fixture(machine, "copy", "captured in a test");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  EXPECT_TRUE(captured->approximations.empty()) << captured->approximations.front();
  Machine again = read_back(*captured);
  ASSERT_EQ(again.gpus.size(), machine.gpus.size());
  for (size_t i = 0; i < machine.gpus.size(); ++i)
    EXPECT_EQ(to_json(again.gpus[i]).dump(1), to_json(machine.gpus[i]).dump(1)) << "GPU " << i;
  EXPECT_EQ(topology_json(again).dump(1), topology_json(machine).dump(1));
  EXPECT_EQ(to_json(again.driver), to_json(machine.driver));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CaptureEveryFixture,
                         ::testing::Values("dgx1-v100", "dgx-a100", "hgx-h200", "pcie-4gpu", "mixed-workstation",
                                           "h200-1", "dgx-a100-mig", "hgx-h200-mig", "a100-mig-mixed", "lost-gpu",
                                           "old-driver", "hgx-h200-renumbered"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(CaptureFixture, WritesTheDocumentedKeysInOrder) {
  auto captured = capture_fixture(fixture_machine("h200-1"), "box", "our box");
  ASSERT_TRUE(captured.ok());
  std::string text = format_fixture(captured->fixture);
  EXPECT_THAT(text, StartsWith("{\n  \"name\": \"box\",\n  \"description\": \"our box\",\n"
                               "  \"nvml_library\": \"current\",\n  \"driver\": {"));
  EXPECT_THAT(text, HasSubstr("\"uuid\": \"GPU-16fb8516-9f03-8d84-eb33-9dfbc4d69c74\",\n"
                              "      \"pci_bus_id\": \"00000000:00:06.0\""));
}

// Two switches under one upstream switch (PXB between them), two GPUs per switch (PIX), and a
// GPU straight on the host bridge (PHB): a two-level tree.
TEST(CaptureFixture, RebuildsNestedSwitches) {
  Machine machine = plain_machine(5, PcieLevel::MultipleSwitches);
  set_link(machine, 0, 1, Link{0, false, PcieLevel::SingleSwitch});
  set_link(machine, 2, 3, Link{0, false, PcieLevel::SingleSwitch});
  for (size_t i = 0; i < 4; ++i) set_link(machine, i, 4, Link{0, false, PcieLevel::HostBridge});
  auto captured = capture_fixture(machine, "tree", "");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  EXPECT_EQ(captured->fixture.gpus[0].pcie.switches,
            (std::vector<std::string>{"switch0", "switch0.0"}));
  EXPECT_EQ(captured->fixture.gpus[3].pcie.switches,
            (std::vector<std::string>{"switch0", "switch0.2"}));
  EXPECT_TRUE(captured->fixture.gpus[4].pcie.switches.empty());
  EXPECT_EQ(topology_json(read_back(*captured)), topology_json(machine));
}

TEST(CaptureFixture, KeepsTheDriversNumaNodesAndNumbersTheUnknownOnes) {
  Machine machine = plain_machine(3, PcieLevel::System);
  machine.gpus[0].numa_node = 1;
  machine.gpus[1].numa_node = std::nullopt;
  machine.gpus[2].numa_node = 0;
  machine.gpus[2].cpu_affinity = "0-7";
  auto captured = capture_fixture(machine, "sockets", "");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  EXPECT_EQ(captured->fixture.gpus[0].pcie.numa_node, 1);
  EXPECT_EQ(captured->fixture.gpus[1].pcie.numa_node, 2);
  EXPECT_EQ(captured->fixture.gpus[2].pcie.numa_node, 0);
  EXPECT_EQ(captured->fixture.numa_cpus, (std::map<int, std::string>{{0, "0-7"}}));
}

TEST(CaptureFixture, DirectNvLinksAndAFabricBecomePeersAndFabricLinks) {
  Machine machine = plain_machine(4, PcieLevel::System);
  set_link(machine, 0, 1, Link{2, false, PcieLevel::System});
  set_link(machine, 2, 3, Link{12, true, PcieLevel::System});
  auto captured = capture_fixture(machine, "links", "");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  ASSERT_EQ(captured->fixture.gpus[0].nvlinks.size(), 1u);
  EXPECT_EQ(captured->fixture.gpus[0].nvlinks[0].links, 2u);
  EXPECT_EQ(captured->fixture.gpus[2].nvswitch_links, 12u);
  EXPECT_EQ(captured->fixture.gpus[0].nvswitch_links, 0u);
  EXPECT_EQ(topology_json(read_back(*captured)), topology_json(machine));
}

// PIX is a shared last switch, so 0–1 and 1–2 at PIX put 0 and 2 on one switch as well.
TEST(CaptureFixture, RefusesLinksNoPcieTreeGives) {
  Machine machine = plain_machine(3, PcieLevel::SingleSwitch);
  set_link(machine, 0, 2, Link{0, false, PcieLevel::HostBridge});
  auto captured = capture_fixture(machine, "impossible", "");
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.error().message,
            "GPU 0 and GPU 2 are linked by PHB but no fixture's PCIe tree gives that with the "
            "other links (the fixture would say PIX)");
}

TEST(CaptureFixture, RefusesAPairTheDriverWouldNotPlace) {
  Machine machine = plain_machine(2, PcieLevel::HostBridge);
  set_link(machine, 0, 1, Link{});
  auto captured = capture_fixture(machine, "unknown", "");
  ASSERT_FALSE(captured.ok());
  EXPECT_THAT(captured.error().message, HasSubstr("GPU 0 and GPU 1 are linked by n/a"));
}

TEST(CaptureFixture, SaysWhichFieldsItCannotCarry) {
  Machine machine = plain_machine(1, PcieLevel::HostBridge);
  machine.gpus[0].compute_capability = ComputeCapability{99, 0};  // no core count known for it
  machine.gpus[0].utilization_gpu = 40;           // without utilization_memory
  auto captured = capture_fixture(machine, "odd", "");
  ASSERT_TRUE(captured.ok()) << captured.error().message;
  EXPECT_THAT(captured->approximations,
              ::testing::UnorderedElementsAre(
                  "GPU 0: multiprocessors is 132 but the fixture gives null",
                  "GPU 0: utilization_gpu is 40 but the fixture gives null"));
}

TEST(CaptureFixture, RefusesAMachineWithoutGpus) {
  auto captured = capture_fixture(Machine{}, "empty", "");
  ASSERT_FALSE(captured.ok());
  EXPECT_EQ(captured.error().message, "there are no GPUs to capture");
}

}  // namespace
}  // namespace gpupool::sim
