#include "machine/numbering.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

Gpu make_gpu(unsigned index, std::string uuid, int major, unsigned multiprocessors) {
  Gpu gpu;
  gpu.index = index;
  gpu.uuid = std::move(uuid);
  gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", index + 1);
  gpu.name = fmt::format("GPU model {}", major);
  gpu.minor_number = index;
  gpu.compute_capability = ComputeCapability{major, 0};
  gpu.multiprocessors = multiprocessors;
  return gpu;
}

// GPU 1 is the faster, so CUDA's default order puts it first.
std::vector<Gpu> two_gpus() {
  return {make_gpu(0, "GPU-aaaa1111-0000-0000-0000-000000000000", 8, 80),
          make_gpu(1, "GPU-aaaa2222-0000-0000-0000-000000000000", 9, 132)};
}

std::vector<std::optional<unsigned>> column(const NumberingMap& map,
                                            std::optional<unsigned> NumberingRow::*field) {
  std::vector<std::optional<unsigned>> out;
  for (const NumberingRow& row : map.rows) out.push_back(row.*field);
  return out;
}

std::string all_warnings(const NumberingMap& map) {
  return fmt::format("{}", fmt::join(map.warnings, "\n"));
}

TEST(NumberingMap, OutsideAContainerTheHostIndexIsNvmls) {
  NumberingInputs inputs;
  inputs.environment.cuda_device_order = "PCI_BUS_ID";
  const NumberingMap map = build_numbering_map(two_gpus(), inputs);
  EXPECT_THAT(column(map, &NumberingRow::host_index), ElementsAre(0u, 1u));
  EXPECT_THAT(column(map, &NumberingRow::cuda_index), ElementsAre(0u, 1u));
  EXPECT_EQ(map.rows[1].container_index, 1u);
  EXPECT_EQ(map.rows[1].minor_number, 1u);
  EXPECT_EQ(map.error, std::nullopt);
  EXPECT_THAT(map.warnings, IsEmpty());
}

TEST(NumberingMap, CudaIndexFollowsTheResolver) {
  NumberingInputs inputs;
  inputs.environment.cuda_visible_devices = "0";  // CUDA's device 0 is the faster GPU 1
  NumberingMap map = build_numbering_map(two_gpus(), inputs);
  EXPECT_THAT(column(map, &NumberingRow::cuda_index), ElementsAre(std::nullopt, 0u));
  EXPECT_THAT(all_warnings(map), HasSubstr("fastest first"));
  inputs.environment.cuda_visible_devices = "1,1";
  map = build_numbering_map(two_gpus(), inputs);
  EXPECT_THAT(map.error.value_or(""), HasSubstr("CUDA_ERROR_INVALID_DEVICE"));
  EXPECT_THAT(column(map, &NumberingRow::cuda_index), ElementsAre(std::nullopt, std::nullopt));
}

TEST(NumberingMap, InsideAContainerWithoutInventoryTheHostIndexIsUnknown) {
  NumberingInputs inputs;
  inputs.in_container = true;
  const NumberingMap map = build_numbering_map(two_gpus(), inputs);
  EXPECT_THAT(column(map, &NumberingRow::host_index), ElementsAre(std::nullopt, std::nullopt));
  EXPECT_THAT(all_warnings(map), HasSubstr("GPUPOOL_HOST_INVENTORY"));
}

TEST(NumberingMap, InsideAContainerTheInventoryIsMatchedByUuidOnly) {
  NumberingInputs inputs;
  inputs.in_container = true;
  inputs.host_inventory_source = "host.json";
  // The host's GPU 1 has container GPU 0's UUID; host GPU 0 has an unrelated one.
  inputs.host_inventory = {{{0, "GPU-ffff0000-0000-0000-0000-000000000000"},
                            {1, "GPU-AAAA1111-0000-0000-0000-000000000000"}}};
  const NumberingMap map = build_numbering_map(two_gpus(), inputs);
  EXPECT_THAT(column(map, &NumberingRow::host_index), ElementsAre(1u, std::nullopt));
  EXPECT_THAT(all_warnings(map), HasSubstr("GPU 1 (GPU-aaaa2222-0000-0000-0000-000000000000) is "
                                           "not in the host inventory host.json"));
  EXPECT_THAT(all_warnings(map), Not(HasSubstr("GPUPOOL_HOST_INVENTORY")));
}

TEST(NumberingMap, RuntimeVariableWithoutDetectedContainerWarns) {
  NumberingInputs inputs;
  inputs.environment.cuda_device_order = "PCI_BUS_ID";
  inputs.environment.nvidia_visible_devices = "all";
  EXPECT_THAT(all_warnings(build_numbering_map(two_gpus(), inputs)), HasSubstr("no container"));
  inputs.environment.nvidia_visible_devices = "void";
  EXPECT_THAT(build_numbering_map(two_gpus(), inputs).warnings, IsEmpty());
}

TEST(NumberingEnvironment, PicksTheThreeVariables) {
  const GpuEnvironment env = gpu_environment_from(
      {{"CUDA_VISIBLE_DEVICES", ""}, {"NVIDIA_VISIBLE_DEVICES", "all"}, {"X", "1"}});
  EXPECT_EQ(env.cuda_visible_devices, "");
  EXPECT_EQ(env.cuda_device_order, std::nullopt);
  EXPECT_EQ(env.nvidia_visible_devices, "all");
}

TEST(NumberingEnvironment, DescribesNvidiaVisibleDevices) {
  EXPECT_THAT(describe_nvidia_visible_devices(std::nullopt), HasSubstr("unset"));
  EXPECT_THAT(describe_nvidia_visible_devices("all"), HasSubstr("every GPU"));
  EXPECT_THAT(describe_nvidia_visible_devices("none"), HasSubstr("driver's libraries"));
  EXPECT_THAT(describe_nvidia_visible_devices("void"), HasSubstr("no driver"));
  EXPECT_THAT(describe_nvidia_visible_devices(""), HasSubstr("no driver"));
  EXPECT_EQ(
      describe_nvidia_visible_devices("1,GPU-ab,0:1,x"),
      "host GPU 1, GPU-ab, MIG device 0:1 (GPU:instance), 'x' (not understood by the runtime) "
      "(host indices are nvidia-smi's on the host)");
}

TEST(NumberingInventory, ParsesListJson) {
  auto gpus = parse_host_inventory(R"([{"index": 3, "uuid": "GPU-x", "name": "n"}])");
  ASSERT_TRUE(gpus.ok());
  ASSERT_EQ(gpus->size(), 1u);
  EXPECT_EQ((*gpus)[0].index, 3u);
  EXPECT_EQ((*gpus)[0].uuid, "GPU-x");
  EXPECT_EQ(parse_host_inventory("{").error().message, "it is not JSON");
  EXPECT_THAT(parse_host_inventory("{}").error().message, HasSubstr("not the array"));
  EXPECT_THAT(parse_host_inventory(R"([{"index": -1, "uuid": "GPU-x"}])").error().message,
              HasSubstr("lacks"));
  EXPECT_THAT(parse_host_inventory(R"([{"index": 1}])").error().message, HasSubstr("lacks"));
}

TEST(NumberingSelect, IndicesAndUuidPrefixesGiveFullUuidsInOrder) {
  const std::vector<Gpu> gpus = two_gpus();
  const std::vector<std::string> names{"1", "gpu-AAAA1"};
  EXPECT_THAT(select_gpu_uuids(gpus, names).value(), ElementsAre(gpus[1].uuid, gpus[0].uuid));
}

TEST(NumberingSelect, UsesTheIndexNotThePosition) {
  std::vector<Gpu> gpus = two_gpus();
  gpus.erase(gpus.begin());  // only GPU 1 left, at position 0
  const std::vector<std::string> one{"1"};
  EXPECT_THAT(select_gpu_uuids(gpus, one).value(), ElementsAre(gpus[0].uuid));
  EXPECT_EQ(find_gpu_by_index(gpus, 0), nullptr);
  EXPECT_EQ(find_gpu_by_index(gpus, 1), &gpus[0]);
}

TEST(NumberingSelect, BadNamesAreOneClearError) {
  const std::vector<Gpu> gpus = two_gpus();
  const auto error = [&](std::vector<std::string> names) {
    return select_gpu_uuids(gpus, names).error().message;
  };
  EXPECT_EQ(error({"2"}), "no GPU 2 here: the GPU indices are 0, 1");
  EXPECT_EQ(error({"99999999999"}), "no GPU 99999999999 here: the GPU indices are 0, 1");
  EXPECT_EQ(error({"GPU-aaaa"}), "'GPU-aaaa' fits the UUIDs of GPUs 0, 1: give more of the UUID");
  EXPECT_EQ(error({"GPU-b"}), "no GPU here has a UUID starting with 'GPU-b'");
  EXPECT_EQ(error({"GPU-"}), "'GPU-' is neither a GPU index nor a GPU UUID (GPU-...)");
  EXPECT_EQ(error({"-1"}), "'-1' is neither a GPU index nor a GPU UUID (GPU-...)");
  EXPECT_EQ(error({"0", "GPU-aaaa1"}), "GPU 0 is named twice ('0' and 'GPU-aaaa1')");
}

TEST(NumberingSelect, MigDevicesByUuidPrefixOrGpuColonDevice) {
  std::vector<Gpu> gpus = two_gpus();
  gpus[1].mig_enabled = true;
  gpus[1].mig_devices = {MigDevice{0, "MIG-cccc1111-0000-1111-2222-333333333333", 1, 0, 4, 4, 40320, 64, "4g.40gb"},
                         MigDevice{2, "MIG-cccc2222-0000-1111-2222-333333333333", 2, 0, 3, 3, 40320, 60, "3g.40gb"}};
  const std::vector<std::string> names{"mig-CCCC2", "0", "1:0"};
  EXPECT_THAT(select_gpu_uuids(gpus, names).value(),
              ElementsAre(gpus[1].mig_devices[1].uuid, gpus[0].uuid, gpus[1].mig_devices[0].uuid));
  const auto error = [&](std::vector<std::string> bad) { return select_gpu_uuids(gpus, bad).error().message; };
  EXPECT_EQ(error({"1:1"}), "GPU 1 has no MIG device 1: its MIG devices are 0, 2");
  EXPECT_EQ(error({"0:0"}), "GPU 0 has no MIG devices");
  EXPECT_EQ(error({"2:0"}), "no GPU 2 here: the GPU indices are 0, 1");
  EXPECT_EQ(error({"MIG-cccc"}), "'MIG-cccc' fits the UUIDs of 2 MIG devices: give more of the UUID");
  EXPECT_EQ(error({"MIG-dd"}), "no MIG device here has a UUID starting with 'MIG-dd'");
  EXPECT_EQ(error({"MIG-"}), "'MIG-' is not followed by a UUID");
  EXPECT_EQ(error({"1:2", "MIG-cccc2222"}),
            "MIG device MIG-cccc2222-0000-1111-2222-333333333333 is named twice ('1:2' and 'MIG-cccc2222')");
}

TEST(NumberingDocker, SpellingsOfTheRequest) {
  const std::vector<std::string> uuids{"GPU-a", "GPU-b"};
  EXPECT_EQ(docker_gpus_argument(uuids), R"(--gpus '"device=GPU-a,GPU-b"')");
  EXPECT_EQ(docker_gpus_words(uuids), R"(--gpus "device=GPU-a,GPU-b")");
  const nlohmann::json device =
      compose_gpu_reservation(uuids)["deploy"]["resources"]["reservations"]["devices"].at(0);
  EXPECT_EQ(device["driver"], "nvidia");
  EXPECT_EQ(device["device_ids"], nlohmann::json({"GPU-a", "GPU-b"}));
  EXPECT_EQ(device["capabilities"], nlohmann::json::array({"gpu"}));
  EXPECT_THAT(compose_gpu_reservation_yaml(uuids),
              HasSubstr("          device_ids: [\"GPU-a\", \"GPU-b\"]\n"
                        "          capabilities: [gpu]\n"));
}

}  // namespace
}  // namespace gpupool
