#include "sim/fixture.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "machine/cuda_arch.h"
#include "sim/fixture_dirs_testing.h"

namespace gpupool::sim {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

using testing_support::kFixtureDir;
using testing_support::kTestFixtureDir;

Fixture load(const std::string& path) {
  auto fixture = load_fixture(path);
  EXPECT_TRUE(fixture.ok()) << (fixture.ok() ? "" : fixture.error().message);
  return fixture.ok() ? *fixture : Fixture{};
}

Fixture shipped(const std::string& name) { return load(kFixtureDir + "/" + name + ".json"); }

// A small valid machine that each error test breaks in one place.
json minimal_fixture() {
  json gpu = {{"uuid", "GPU-00000000-0000-0000-0000-000000000000"},
              {"pci_bus_id", "00000000:17:00.0"},
              {"name", "NVIDIA A100-PCIE-40GB"},
              {"memory_total_mib", 40960},
              {"temperature_c", 30},
              {"power_w", 35.5},
              {"power_limit_w", 250},
              {"persistence_mode", true},
              {"compute_mode", "default"},
              {"mig_enabled", false},
              {"compute_capability", "8.0"},
              {"cuda_cores", 6912},
              {"pcie", {{"numa_node", 0}, {"host_bridge", 0}, {"switches", {"plx-0"}}}}};
  json second = gpu;
  second["uuid"] = "GPU-00000000-0000-0000-0000-000000000001";
  second["pci_bus_id"] = "00000000:65:00.0";
  return {{"name", "minimal"},
          {"driver",
           {{"driver_version", "550.90.07"},
            {"nvml_version", "12.550.90.07"},
            {"cuda_driver_version", 12040}}},
          {"numa_cpus", {{"0", "0-7"}}},
          {"gpus", {gpu, second}}};
}

std::string parse_error(const json& document) {
  auto fixture = parse_fixture(document.dump(), "t.json");
  return fixture.ok() ? "(parsed)" : fixture.error().message;
}

std::string parse_error(const std::function<void(json&)>& breakage) {
  json document = minimal_fixture();
  breakage(document);
  return parse_error(document);
}

TEST(ReadTextFile, SaysWhyAFileCannotBeRead) {
  auto missing = read_text_file("/nonexistent/trace.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "cannot read /nonexistent/trace.csv: No such file or directory");
  auto directory = read_text_file(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.error().message, ::testing::EndsWith(": it is a directory"));
}

TEST(FixtureParse, MinimalFixtureParsesWithDefaults) {
  auto fixture = parse_fixture(minimal_fixture().dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_EQ(fixture->nvml_library, "current");
  EXPECT_EQ(fixture->description, "");
  ASSERT_EQ(fixture->gpus.size(), 2u);
  const FixtureGpu& gpu = fixture->gpus[1];
  EXPECT_EQ(gpu.minor_number, 1u);  // defaults to the index
  EXPECT_EQ(gpu.memory_used_mib, 0u);
  EXPECT_EQ(gpu.memory_reserved_mib, 0u);
  EXPECT_EQ(gpu.utilization_gpu, 0u);
  EXPECT_EQ(gpu.ecc_uncorrected_volatile, 0u);
  EXPECT_EQ(gpu.numa_node, 0);         // from pcie.numa_node
  EXPECT_EQ(gpu.cpu_affinity, "0-7");  // from numa_cpus
  EXPECT_EQ(gpu.compute_capability->major, 8);
  EXPECT_EQ(gpu.compute_mode, ComputeMode::Default);
  EXPECT_FALSE(gpu.fault.has_value());
  EXPECT_TRUE(gpu.nvlinks.empty());
  EXPECT_EQ(gpu.nvswitch_links, 0u);
}

TEST(FixtureParse, NullMeansNotSupported) {
  json document = minimal_fixture();
  for (const char* key :
       {"minor_number", "memory_total_mib", "utilization_gpu", "utilization_memory",
        "temperature_c", "power_w", "power_limit_w", "persistence_mode", "compute_mode",
        "mig_enabled", "ecc_corrected_volatile", "ecc_uncorrected_volatile", "numa_node",
        "cpu_affinity", "compute_capability", "cuda_cores"}) {
    document["gpus"][0][key] = nullptr;
  }
  auto fixture = parse_fixture(document.dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  const FixtureGpu& gpu = fixture->gpus[0];
  EXPECT_FALSE(gpu.minor_number || gpu.memory_total_mib || gpu.utilization_gpu ||
               gpu.temperature_c || gpu.power_w || gpu.power_limit_w || gpu.persistence_mode ||
               gpu.compute_mode || gpu.mig_enabled || gpu.ecc_corrected_volatile ||
               gpu.ecc_uncorrected_volatile || gpu.numa_node || gpu.cpu_affinity ||
               gpu.compute_capability || gpu.cuda_cores);
}

template <typename T>
bool is_empty(const std::optional<T>& value) {
  return !value;
}
template <typename T>
bool is_empty(const T&) {
  return false;
}
template <typename T>
bool is_zero(const std::optional<T>& value) {
  return value == T{};
}
template <typename T>
bool is_zero(const T& value) {
  return value == T{};
}

// Each reading the table reads generically: left out, it is what its FixtureKey says.
TEST(FixtureParse, AReadingLeftOutReadsAsTheTableSays) {
  for_each_fixture_reading(FixtureGpu{}, [](const ReadingInfo& reading, const auto&) {
    json document = minimal_fixture();
    document["gpus"][0].erase(reading.key);
    auto fixture = parse_fixture(document.dump(), "t.json");
    if (reading.fixture == FixtureKey::Required) {
      EXPECT_EQ(fixture.ok() ? "(parsed)" : fixture.error().message,
                fmt::format("fixture t.json: gpus[0].{}: missing", reading.key));
      return;
    }
    ASSERT_TRUE(fixture.ok()) << reading.key << ": " << fixture.error().message;
    for_each_fixture_reading(fixture->gpus[0], [&](const ReadingInfo& parsed, const auto& value) {
      if (std::string_view(parsed.key) != reading.key) return;
      switch (reading.fixture) {
        case FixtureKey::Zero:
        case FixtureKey::ZeroNotNull: EXPECT_TRUE(is_zero(value)) << reading.key; break;
        case FixtureKey::Null: EXPECT_TRUE(is_empty(value)) << reading.key; break;
        case FixtureKey::Required:
        case FixtureKey::ByHand:
        case FixtureKey::Derived: break;
      }
    });
  });
}

TEST(FixtureParse, MemoryRepairsDefaultToNotSupported) {
  json document = minimal_fixture();
  document["gpus"][1]["retired_pages"] = 4;
  document["gpus"][1]["retired_pages_pending"] = true;
  document["gpus"][1]["remapped_rows"] = 1;
  document["gpus"][1]["row_remapping_failed"] = true;
  auto fixture = parse_fixture(document.dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_FALSE(fixture->gpus[0].retired_pages || fixture->gpus[0].remapped_rows);
  Machine machine = machine_from_fixture(*fixture);
  EXPECT_FALSE(machine.gpus[0].retired_pages || machine.gpus[0].retired_pages_pending ||
               machine.gpus[0].remapped_rows || machine.gpus[0].row_remapping_failed);
  EXPECT_EQ(machine.gpus[1].retired_pages, 4u);
  EXPECT_EQ(machine.gpus[1].retired_pages_pending, true);
  EXPECT_EQ(machine.gpus[1].remapped_rows, 1u);
  EXPECT_EQ(machine.gpus[1].row_remapping_pending, false);
  EXPECT_EQ(machine.gpus[1].row_remapping_failed, true);
  EXPECT_EQ(parse_error([&] {
              json d = minimal_fixture();
              d["gpus"][0]["remapped_rows"] = "two";
              return d;
            }()),
            "fixture t.json: gpus[0].remapped_rows: expected a number");
}

TEST(FixtureParse, ClocksDefaultToNotSupported) {
  json document = minimal_fixture();
  document["gpus"][1]["sm_clock_mhz"] = 1410;
  document["gpus"][1]["memory_clock_mhz"] = 1215;
  auto fixture = parse_fixture(document.dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_FALSE(fixture->gpus[0].sm_clock_mhz || fixture->gpus[0].memory_clock_mhz);
  Machine machine = machine_from_fixture(*fixture);
  EXPECT_FALSE(machine.gpus[0].sm_clock_mhz || machine.gpus[0].memory_clock_mhz);
  EXPECT_EQ(machine.gpus[1].sm_clock_mhz, 1410u);
  EXPECT_EQ(machine.gpus[1].memory_clock_mhz, 1215u);
  document["gpus"][1]["sm_clock_mhz"] = nullptr;
  fixture = parse_fixture(document.dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_FALSE(fixture->gpus[1].sm_clock_mhz.has_value());
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["sm_clock_mhz"] = -1; }),
            "fixture t.json: gpus[0].sm_clock_mhz: expected a non-negative integer");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["memory_clock_mhz"] = "3201 MHz"; }),
            "fixture t.json: gpus[0].memory_clock_mhz: expected a number");
}

TEST(FixtureParse, CpuListsAreNormalised) {
  json document = minimal_fixture();
  document["numa_cpus"]["0"] = "3,0-2,4";
  document["gpus"][1]["cpu_affinity"] = "8,9,10";
  auto fixture = parse_fixture(document.dump(), "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_EQ(fixture->numa_cpus.at(0), "0-4");
  EXPECT_EQ(fixture->gpus[0].cpu_affinity, "0-4");
  EXPECT_EQ(fixture->gpus[1].cpu_affinity, "8-10");
}

TEST(FixtureParse, DocumentErrors) {
  EXPECT_EQ(parse_fixture("{\"name\": ", "t.json").error().message,
            "fixture t.json: not valid JSON");
  EXPECT_EQ(parse_fixture("[]", "t.json").error().message,
            "fixture t.json: document: expected an object");
  EXPECT_EQ(parse_error([](json& d) { d.erase("name"); }), "fixture t.json: name: missing");
  EXPECT_EQ(parse_error([](json& d) { d["nvml_libary"] = "legacy"; }),
            "fixture t.json: nvml_libary: unknown key");
  EXPECT_EQ(parse_error([](json& d) { d["nvml_library"] = "modern"; }),
            "fixture t.json: nvml_library: 'modern' is not one of: current, legacy");
  EXPECT_EQ(parse_error([](json& d) { d["driver"]["cuda_driver_version"] = "13.0"; }),
            "fixture t.json: driver.cuda_driver_version: expected a number");
  EXPECT_EQ(parse_error([](json& d) { d["driver"].erase("nvml_version"); }),
            "fixture t.json: driver.nvml_version: missing");
  EXPECT_EQ(parse_error([](json& d) { d["driver"] = "580"; }),
            "fixture t.json: driver: expected an object");
  EXPECT_EQ(parse_error([](json& d) { d["numa_cpus"]["zero"] = "0"; }),
            "fixture t.json: numa_cpus.zero: 'zero' is not a NUMA node number");
  EXPECT_EQ(parse_error([](json& d) { d["numa_cpus"]["0"] = "0-x"; }),
            "fixture t.json: numa_cpus.0: invalid CPU list '0-x': 'x' is not a CPU number");
  EXPECT_EQ(parse_error([](json& d) { d["numa_cpus"]["0"] = ""; }),
            "fixture t.json: numa_cpus.0: empty CPU list");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"] = json::array(); }),
            "fixture t.json: gpus: a machine needs at least one GPU");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"] = json::object(); }),
            "fixture t.json: gpus: expected an array");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1] = 7; }),
            "fixture t.json: gpus[1]: expected an object");
}

TEST(FixtureParse, ValueErrors) {
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["memory_total_mib"] = "80GB"; }),
            "fixture t.json: gpus[1].memory_total_mib: expected a number");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["memory_total_mib"] = -5; }),
            "fixture t.json: gpus[1].memory_total_mib: expected a non-negative integer");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["minor_number"] = 1.5; }),
            "fixture t.json: gpus[0].minor_number: expected a non-negative integer");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["temperature_c"] = 5000000000; }),
            "fixture t.json: gpus[0].temperature_c: 5000000000 is too large");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["pcie"]["numa_node"] = 1.5; }),
            "fixture t.json: gpus[0].pcie.numa_node: expected an integer");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["power_w"] = "35 W"; }),
            "fixture t.json: gpus[0].power_w: expected a number");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["persistence_mode"] = "yes"; }),
            "fixture t.json: gpus[0].persistence_mode: expected true or false");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["name"] = 100; }),
            "fixture t.json: gpus[0].name: expected a string");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0].erase("uuid"); }),
            "fixture t.json: gpus[0].uuid: missing");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["utilisation_gpu"] = 5; }),
            "fixture t.json: gpus[0].utilisation_gpu: unknown key");
  EXPECT_EQ(
      parse_error([](json& d) { d["gpus"][0]["compute_mode"] = "shared"; }),
      "fixture t.json: gpus[0].compute_mode: 'shared' is not one of: default, exclusive_thread, "
      "prohibited, exclusive_process");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["fault"] = "hot"; }),
            "fixture t.json: gpus[0].fault: 'hot' is not one of: lost");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["memory_used_mib"] = 40000;
              d["gpus"][0]["memory_reserved_mib"] = 1000;
            }),
            "fixture t.json: gpus[0].memory_used_mib: 40000 MiB used plus 1000 MiB reserved exceed "
            "memory_total_mib (40960 MiB)");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["utilization_gpu"] = nullptr; }),
            "fixture t.json: gpus[0].utilization_memory: must be null exactly when utilization_gpu "
            "is null "
            "(NVML reports both at once)");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["utilization_gpu"] = 101; }),
            "fixture t.json: gpus[0].utilization_gpu: 101 is not a percentage");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["compute_capability"] = "9"; }),
            "fixture t.json: gpus[0].compute_capability: '9' is not of the form MAJOR.MINOR");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["compute_capability"] = "9.x"; }),
            "fixture t.json: gpus[0].compute_capability: '9.x' is not of the form MAJOR.MINOR");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["cpu_affinity"] = "a"; }),
            "fixture t.json: gpus[0].cpu_affinity: invalid CPU list 'a': 'a' is not a CPU number");
  EXPECT_EQ(
      parse_error([](json& d) { d["gpus"][0]["pcie"]["numa_node"] = 3; }),
      "fixture t.json: gpus[0].cpu_affinity: missing, and numa_cpus has no entry for NUMA node 3");
}

TEST(FixtureParse, NestedObjectErrors) {
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0].erase("pcie"); }),
            "fixture t.json: gpus[0].pcie: missing");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["pcie"]["switches"] = "plx-0"; }),
            "fixture t.json: gpus[0].pcie.switches: expected an array");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["pcie"]["switches"] = {1}; }),
            "fixture t.json: gpus[0].pcie.switches[0]: expected a string");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["pcie"]["slot"] = 3; }),
            "fixture t.json: gpus[0].pcie.slot: unknown key");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["processes"] = {{{"pid", 1}, {"used_memory_mib", 5}, {"kind", "cuda"}}};
            }),
            "fixture t.json: gpus[0].processes[0].kind: 'cuda' is not one of: compute, graphics, "
            "compute+graphics");
  EXPECT_EQ(
      parse_error([](json& d) {
        d["gpus"][0]["processes"] = {{{"pid", -1}, {"used_memory_mib", 5}, {"kind", "compute"}}};
      }),
      "fixture t.json: gpus[0].processes[0].pid: expected a non-negative integer");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["processes"] = {{{"pid", 1}, {"kind", "compute"}}};
            }),
            "fixture t.json: gpus[0].processes[0].used_memory_mib: missing");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["processes"] = {
                  {{"pid", 1}, {"used_memory_mib", nullptr}, {"kind", "compute"}, {"user", "x"}}};
            }),
            "fixture t.json: gpus[0].processes[0].user: unknown key");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["processes"] = json::object(); }),
            "fixture t.json: gpus[0].processes: expected an array");
}

TEST(FixtureParse, IdentityErrors) {
  EXPECT_EQ(
      parse_error(
          [](json& d) { d["gpus"][0]["uuid"] = "GPU-ABCDEF00-0000-0000-0000-000000000000"; }),
      "fixture t.json: gpus[0].uuid: 'GPU-ABCDEF00-0000-0000-0000-000000000000' is not of the form "
      "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lowercase hex)");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["uuid"] = d["gpus"][0]["uuid"]; }),
            "fixture t.json: gpus[1].uuid: duplicate of gpus[0]");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][0]["pci_bus_id"] = "0000:17:00.0"; }),
            "fixture t.json: gpus[0].pci_bus_id: '0000:17:00.0' is not of the form "
            "00000000:BB:DD.F (uppercase hex)");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["pci_bus_id"] = "00000000:3b:00.0"; }),
            "fixture t.json: gpus[1].pci_bus_id: '00000000:3b:00.0' is not of the form "
            "00000000:BB:DD.F (uppercase hex)");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["pci_bus_id"] = d["gpus"][0]["pci_bus_id"]; }),
            "fixture t.json: gpus[1].pci_bus_id: duplicate of gpus[0]");
  EXPECT_EQ(parse_error([](json& d) { d["gpus"][1]["pci_bus_id"] = "00000000:0A:00.0"; }),
            "fixture t.json: gpus[1].pci_bus_id: 00000000:0A:00.0 sorts before 00000000:17:00.0 of "
            "gpus[0]; "
            "NVML numbers GPUs in PCI bus order");
}

void link_pair(json& d, unsigned links_0_to_1, unsigned links_1_to_0) {
  d["gpus"][0]["nvlinks"] = {{{"peer", 1}, {"links", links_0_to_1}}};
  d["gpus"][1]["nvlinks"] = {{{"peer", 0}, {"links", links_1_to_0}}};
}

TEST(FixtureParse, NvLinkErrors) {
  EXPECT_EQ(parse_error([](json& d) { link_pair(d, 2, 2); }), "(parsed)");
  EXPECT_EQ(parse_error([](json& d) { link_pair(d, 2, 1); }),
            "fixture t.json: gpus[0].nvlinks[0]: GPU 1 does not list GPU 0 with 2 links in return");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["nvlinks"] = {{{"peer", 1}, {"links", 2}}};
            }),
            "fixture t.json: gpus[0].nvlinks[0]: GPU 1 does not list GPU 0 with 2 links in return");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["nvlinks"] = {{{"peer", 5}, {"links", 2}}};
            }),
            "fixture t.json: gpus[0].nvlinks[0].peer: no GPU 5");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["nvlinks"] = {{{"peer", 0}, {"links", 2}}};
            }),
            "fixture t.json: gpus[0].nvlinks[0].peer: a GPU cannot link to itself");
  EXPECT_EQ(parse_error([](json& d) {
              link_pair(d, 2, 2);
              d["gpus"][0]["nvlinks"].push_back({{"peer", 1}, {"links", 2}});
            }),
            "fixture t.json: gpus[0].nvlinks[1].peer: GPU 1 listed twice");
  EXPECT_EQ(parse_error([](json& d) { link_pair(d, 0, 0); }),
            "fixture t.json: gpus[0].nvlinks[0].links: must be at least 1");
  EXPECT_EQ(parse_error([](json& d) {
              d["gpus"][0]["nvlinks"] = {{{"peer", 1}}};
            }),
            "fixture t.json: gpus[0].nvlinks[0].links: missing");
  EXPECT_EQ(
      parse_error([](json& d) {
        link_pair(d, 4, 4);
        d["gpus"][0]["nvswitch_links"] = 16;
      }),
      "fixture t.json: gpus[0]: 20 NVLinks (peers plus nvswitch_links) exceed the 18 a GPU has");
}

// GPU 0 in MIG mode as one 1g.5gb MIG device, which each MIG error test breaks in one place.
std::string mig_error(const std::function<void(json&)>& breakage) {
  return parse_error([&](json& d) {
    d["gpus"][0]["mig_enabled"] = true;
    d["gpus"][0]["mig_devices"] = {{{"uuid", "MIG-00000000-0000-0000-0000-0000000000aa"},
                                    {"gpu_instance_id", 7},
                                    {"compute_instance_id", 0},
                                    {"gpu_slices", 1},
                                    {"memory_mib", 4864},
                                    {"multiprocessors", 14}}};
    breakage(d["gpus"][0]);
  });
}

TEST(FixtureParse, MigDeviceErrors) {
  EXPECT_EQ(mig_error([](json&) {}), "(parsed)");
  EXPECT_EQ(mig_error([](json& g) { g["mig_enabled"] = false; }),
            "fixture t.json: gpus[0].mig_devices: only a GPU with mig_enabled true has MIG devices");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["uuid"] = "GPU-00000000-0000-0000-0000-0000000000aa"; }),
            "fixture t.json: gpus[0].mig_devices[0].uuid: 'GPU-00000000-0000-0000-0000-0000000000aa' is not of the "
            "form MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lowercase hex)");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["sm_active"] = 1.5; }),
            "fixture t.json: gpus[0].mig_devices[0].sm_active: 1.5 is not a ratio from 0 to 1");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["tensor_active"] = 0.25; }), "(parsed)");
  EXPECT_EQ(mig_error([](json& g) {
              json second = g["mig_devices"][0];
              second["compute_instance_id"] = 1;
              second["sm_active"] = 0.5;
              g["mig_devices"].push_back(second);
            }),
            "fixture t.json: gpus[0].mig_devices[1]: GPU instance 7 has another activity in gpus[0].mig_devices[0]");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["gpu_slices"] = 8; }),
            "fixture t.json: gpus[0].mig_devices[0].gpu_slices: 8 is not between 1 and 7");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["compute_slices"] = 2; }),
            "fixture t.json: gpus[0].mig_devices[0].compute_slices: 2 is not between 1 and gpu_slices (1)");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"][0]["memory_mib"] = 50000; }),
            "fixture t.json: gpus[0].mig_devices[0].memory_mib: 50000 MiB exceed the GPU's memory_total_mib "
            "(40960 MiB)");
  EXPECT_EQ(mig_error([](json& g) { g["mig_devices"].push_back(g["mig_devices"][0]); }),
            "fixture t.json: gpus[0].mig_devices[1]: GPU instance 7 compute instance 0 is also "
            "gpus[0].mig_devices[0]");
  EXPECT_EQ(mig_error([](json& g) {
              json second = g["mig_devices"][0];
              second["compute_instance_id"] = 1;
              second["gpu_slices"] = 2;
              g["mig_devices"].push_back(second);
            }),
            "fixture t.json: gpus[0].mig_devices[1].gpu_slices: GPU instance 7 has 1 slices in another entry");
  EXPECT_EQ(mig_error([](json& g) {
              json big = g["mig_devices"][0];
              big["uuid"] = "MIG-00000000-0000-0000-0000-0000000000bb";
              big["gpu_instance_id"] = 1;
              big["gpu_slices"] = 7;
              g["mig_devices"].push_back(big);
            }),
            "fixture t.json: gpus[0].mig_devices: the GPU instances take 8 slices; a GPU has 7");
  auto process_in = [](json instance) {
    return [instance](json& g) {
      g["processes"] = {{{"pid", 42}, {"used_memory_mib", 100}, {"kind", "compute"}, {"gpu_instance_id", instance}}};
    };
  };
  EXPECT_EQ(mig_error(process_in(7)), "(parsed)");
  EXPECT_EQ(mig_error(process_in(nullptr)), "(parsed)");
  EXPECT_EQ(mig_error(process_in(3)),
            "fixture t.json: gpus[0].processes[0].gpu_instance_id: 3 is not a GPU instance of this GPU's MIG devices");
  EXPECT_EQ(parse_error([](json& d) {
              for (json& gpu : d["gpus"]) {
                gpu["mig_enabled"] = true;
                gpu["mig_devices"] = {{{"uuid", "MIG-00000000-0000-0000-0000-0000000000aa"},
                                       {"gpu_instance_id", 7},
                                       {"compute_instance_id", 0},
                                       {"gpu_slices", 1},
                                       {"memory_mib", 4864},
                                       {"multiprocessors", 14}}};
              }
            }),
            "fixture t.json: gpus[1].mig_devices[0].uuid: duplicate of gpus[0].mig_devices[0]");
}

TEST(FixtureParse, BadFixtureFilesNameTheFileAndField) {
  auto error = [](const std::string& name) {
    auto fixture = load_fixture(kTestFixtureDir + "/" + name);
    return fixture.ok() ? "(parsed)" : fixture.error().message;
  };
  std::string dir = kTestFixtureDir + "/";
  EXPECT_EQ(error("bad-json.json"), "fixture " + dir + "bad-json.json: not valid JSON");
  EXPECT_EQ(error("bad-type.json"),
            "fixture " + dir + "bad-type.json: gpus[3].memory_total_mib: expected a number");
  EXPECT_EQ(error("bad-unknown-key.json"),
            "fixture " + dir + "bad-unknown-key.json: gpus[0].utilisation_gpu: unknown key");
  EXPECT_EQ(error("bad-pci-order.json"),
            "fixture " + dir +
                "bad-pci-order.json: gpus[1].pci_bus_id: 00000000:07:00.0 sorts before "
                "00000000:85:00.0 of gpus[0]; NVML numbers GPUs in PCI bus order");
  EXPECT_EQ(error("bad-nvlink.json"),
            "fixture " + dir +
                "bad-nvlink.json: gpus[0].nvlinks[0]: GPU 1 does not list GPU 0 with "
                "4 links in return");
  EXPECT_EQ(error("no-such.json"), "cannot read " + dir + "no-such.json: No such file or directory");
}

TEST(FixtureShipped, EveryFixtureParsesAndIsNamedAfterItsFile) {
  std::vector<std::string> names = fixture_names({kFixtureDir});
  EXPECT_THAT(names, ElementsAre("a100-mig-mixed", "dgx-a100", "dgx-a100-mig", "dgx1-v100", "h200-1", "hgx-h200",
                                 "hgx-h200-mig", "mixed-workstation", "pcie-4gpu"));
  for (const auto& name : names) {
    Fixture fixture = shipped(name);
    EXPECT_EQ(fixture.name, name);
    EXPECT_EQ(fixture.nvml_library, "current");
    EXPECT_FALSE(fixture.description.empty()) << name;
    for (const FixtureGpu& gpu : fixture.gpus) {
      ASSERT_TRUE(gpu.compute_capability && gpu.cuda_cores) << name;
      EXPECT_GT(
          cores_per_multiprocessor(gpu.compute_capability->major, gpu.compute_capability->minor),
          0u);
    }
  }
  for (const auto& name : fixture_names({kTestFixtureDir})) {
    if (!name.starts_with("bad-")) {
      EXPECT_EQ(load(kTestFixtureDir + "/" + name + ".json").name, name);
    }
  }
}

TEST(FixtureShipped, H200MatchesTheRealMachine) {
  Fixture fixture = shipped("h200-1");
  EXPECT_EQ(fixture.driver.driver_version, "580.159.04");
  EXPECT_EQ(fixture.driver.cuda_driver_version, 13000);
  ASSERT_EQ(fixture.gpus.size(), 1u);
  Machine machine = machine_from_fixture(fixture);
  const Gpu& gpu = machine.gpus[0];
  EXPECT_EQ(gpu.name, "NVIDIA H200");
  EXPECT_EQ(gpu.uuid, "GPU-16fb8516-9f03-8d84-eb33-9dfbc4d69c74");
  EXPECT_EQ(gpu.pci_bus_id, "00000000:00:06.0");
  EXPECT_EQ(gpu.memory_total_mib, 143771u);
  EXPECT_EQ(gpu.memory_used_mib, 0u);
  EXPECT_EQ(gpu.memory_free_mib, 143771u - 616u);
  EXPECT_EQ(gpu.persistence_mode, true);
  EXPECT_EQ(gpu.compute_mode, ComputeMode::Default);
  EXPECT_EQ(gpu.mig_enabled, false);
  EXPECT_EQ(gpu.ecc_corrected_volatile, 0u);
  EXPECT_EQ(gpu.ecc_uncorrected_volatile, 0u);
  EXPECT_EQ(gpu.power_limit_w, 700.0);
  EXPECT_EQ(gpu.temperature_c, 34u);
  EXPECT_EQ(gpu.sm_clock_mhz, 345u);  // idle
  EXPECT_EQ(gpu.memory_clock_mhz, 3201u);
  EXPECT_FALSE(gpu.numa_node.has_value());
  EXPECT_EQ(gpu.cpu_affinity, "0-15");
  EXPECT_EQ(gpu.compute_capability, (ComputeCapability{9, 0}));
  EXPECT_EQ(gpu.multiprocessors, 132u);
  EXPECT_TRUE(gpu.processes.empty());
  EXPECT_TRUE(fixture.gpus[0].nvlinks.empty());
  EXPECT_EQ(fixture.gpus[0].nvswitch_links, 0u);
}

TEST(FixtureLocate, ByNameByPathAndUnknown) {
  std::vector<std::string> dirs = {kFixtureDir};
  auto by_name = locate_fixture("dgx-a100", dirs);
  ASSERT_TRUE(by_name.ok()) << by_name.error().message;
  EXPECT_TRUE(std::filesystem::path(*by_name).is_absolute());
  EXPECT_TRUE(std::filesystem::equivalent(*by_name, kFixtureDir + "/dgx-a100.json"));

  auto by_path = locate_fixture(kTestFixtureDir + "/lost-gpu.json", dirs);
  ASSERT_TRUE(by_path.ok()) << by_path.error().message;
  EXPECT_TRUE(std::filesystem::equivalent(*by_path, kTestFixtureDir + "/lost-gpu.json"));

  EXPECT_EQ(locate_fixture("nowhere/x.json", dirs).error().message,
            "simulated machine file 'nowhere/x.json' does not exist");
  EXPECT_EQ(locate_fixture("x.json", dirs).error().message,
            "simulated machine file 'x.json' does not exist");
  EXPECT_EQ(locate_fixture("foo", dirs).error().message,
            "unknown simulated machine 'foo' (known: a100-mig-mixed, dgx-a100, dgx-a100-mig, dgx1-v100, h200-1, "
            "hgx-h200, hgx-h200-mig, mixed-workstation, pcie-4gpu)");
  EXPECT_EQ(locate_fixture("foo", {"/nonexistent"}).error().message,
            "unknown simulated machine 'foo' (no fixtures in /nonexistent)");
}

TEST(FixtureLocate, SearchesDirectoriesInOrder) {
  auto found = locate_fixture("lost-gpu", {"/nonexistent", kFixtureDir, kTestFixtureDir});
  ASSERT_TRUE(found.ok()) << found.error().message;
  EXPECT_TRUE(std::filesystem::equivalent(*found, kTestFixtureDir + "/lost-gpu.json"));
  std::vector<std::string> names = fixture_names({kFixtureDir, kTestFixtureDir, kFixtureDir});
  EXPECT_EQ(std::count(names.begin(), names.end(), "h200-1"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "old-driver"), 1);
}

TEST(FixturePcie, CommonAncestorRules) {
  auto at = [](int numa, int bridge, std::vector<std::string> switches,
               std::optional<std::string> board = {}) {
    return PcieLocation{numa, bridge, std::move(switches), std::move(board)};
  };
  EXPECT_EQ(pcie_level(at(0, 0, {"a"}), at(1, 0, {"a"})), PcieLevel::System);
  EXPECT_EQ(pcie_level(at(0, 0, {"a"}), at(0, 1, {"a"})), PcieLevel::NumaNode);
  EXPECT_EQ(pcie_level(at(0, 0, {"a"}, "k80"), at(0, 0, {"a"}, "k80")), PcieLevel::Board);
  EXPECT_EQ(pcie_level(at(0, 0, {}, ""), at(0, 0, {}, "")), PcieLevel::HostBridge);
  EXPECT_EQ(pcie_level(at(0, 0, {"a"}), at(0, 0, {"b"})), PcieLevel::HostBridge);
  EXPECT_EQ(pcie_level(at(0, 0, {}), at(0, 0, {})), PcieLevel::HostBridge);
  EXPECT_EQ(pcie_level(at(0, 0, {"a"}), at(0, 0, {"a"})), PcieLevel::SingleSwitch);
  EXPECT_EQ(pcie_level(at(0, 0, {"a", "b"}), at(0, 0, {"a", "b"})), PcieLevel::SingleSwitch);
  EXPECT_EQ(pcie_level(at(0, 0, {"a", "b"}), at(0, 0, {"a", "c"})), PcieLevel::MultipleSwitches);
  EXPECT_EQ(pcie_level(at(0, 0, {"a", "b"}), at(0, 0, {"a"})), PcieLevel::MultipleSwitches);
}

TEST(FixtureMachine, Dgx1HybridCubeMesh) {
  const unsigned mesh[8][8] = {{0, 1, 1, 2, 2, 0, 0, 0}, {1, 0, 2, 1, 0, 2, 0, 0},
                               {1, 2, 0, 2, 0, 0, 1, 0}, {2, 1, 2, 0, 0, 0, 0, 1},
                               {2, 0, 0, 0, 0, 1, 1, 2}, {0, 2, 0, 0, 1, 0, 2, 1},
                               {0, 0, 1, 0, 1, 2, 0, 2}, {0, 0, 0, 1, 2, 1, 2, 0}};
  Machine machine = machine_from_fixture(shipped("dgx1-v100"));
  ASSERT_EQ(machine.gpus.size(), 8u);
  ASSERT_EQ(machine.links.size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    EXPECT_EQ(machine.gpus[i].index, i);
    EXPECT_EQ(machine.gpus[i].name, "Tesla V100-SXM2-32GB");
    EXPECT_EQ(machine.gpus[i].multiprocessors, 80u);
    for (unsigned j = 0; j < 8; ++j) {
      if (i == j) continue;
      const Link& link = machine.links[i][j];
      EXPECT_EQ(link.nvlinks, mesh[i][j]) << i << "-" << j;
      EXPECT_FALSE(link.via_nvswitch);
      PcieLevel expected = i / 4 != j / 4   ? PcieLevel::System
                           : i / 2 != j / 2 ? PcieLevel::NumaNode
                                            : PcieLevel::SingleSwitch;
      EXPECT_EQ(link.pcie, expected) << i << "-" << j;
    }
  }
  EXPECT_EQ(topo_label(machine.links[0][3]), "NV2");
  EXPECT_EQ(topo_label(machine.links[0][1]), "NV1");
  EXPECT_EQ(topo_label(machine.links[0][5]), "SYS");
  EXPECT_EQ(topo_label(machine.links[1][7]), "SYS");
  // The demo load: a job on GPUs 0-3, two small ones on GPU 5.
  EXPECT_GT(machine.gpus[0].utilization_gpu.value_or(0), 0u);
  ASSERT_EQ(machine.gpus[5].processes.size(), 2u);
  EXPECT_TRUE(machine.gpus[7].processes.empty());
}

TEST(FixtureMachine, HgxH200IsFullyConnectedThroughNvSwitch) {
  Machine machine = machine_from_fixture(shipped("hgx-h200"));
  ASSERT_EQ(machine.gpus.size(), 8u);
  for (unsigned i = 0; i < 8; ++i) {
    const Gpu& gpu = machine.gpus[i];
    EXPECT_EQ(gpu.memory_total_mib, 143771u);
    EXPECT_EQ(gpu.memory_free_mib, 143771u - 616u);
    EXPECT_EQ(gpu.utilization_gpu, 0u);
    EXPECT_TRUE(gpu.processes.empty());
    for (unsigned j = 0; j < 8; ++j) {
      if (i == j) continue;
      EXPECT_EQ(machine.links[i][j].nvlinks, 18u);
      EXPECT_TRUE(machine.links[i][j].via_nvswitch);
      EXPECT_EQ(topo_label(machine.links[i][j]), "NV18");
    }
  }
  EXPECT_EQ(machine.links[0][1].pcie, PcieLevel::SingleSwitch);
  EXPECT_EQ(machine.links[0][7].pcie, PcieLevel::System);
}

TEST(FixtureMachine, DgxA100AndPcieBox) {
  Machine a100 = machine_from_fixture(shipped("dgx-a100"));
  EXPECT_EQ(topo_label(a100.links[2][5]), "NV12");
  EXPECT_EQ(a100.gpus[0].multiprocessors, 108u);

  Machine pcie = machine_from_fixture(shipped("pcie-4gpu"));
  ASSERT_EQ(pcie.gpus.size(), 4u);
  EXPECT_EQ(topo_label(pcie.links[0][1]), "PIX");
  EXPECT_EQ(topo_label(pcie.links[2][3]), "PIX");
  EXPECT_EQ(topo_label(pcie.links[0][2]), "SYS");
  EXPECT_EQ(pcie.gpus[2].numa_node, 1);
  EXPECT_EQ(pcie.gpus[2].cpu_affinity, "24-47,72-95");
  EXPECT_EQ(pcie.gpus[0].multiprocessors, 84u);
}

TEST(FixtureMachine, MixedWorkstationFastestIsNotFirst) {
  Machine machine = machine_from_fixture(shipped("mixed-workstation"));
  ASSERT_EQ(machine.gpus.size(), 2u);
  EXPECT_EQ(machine.gpus[0].name, "NVIDIA GeForce RTX 3060");
  EXPECT_EQ(machine.gpus[0].pci_bus_id, "00000000:01:00.0");
  EXPECT_EQ(machine.gpus[0].multiprocessors, 28u);
  EXPECT_EQ(machine.gpus[1].name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(machine.gpus[1].pci_bus_id, "00000000:02:00.0");
  EXPECT_EQ(machine.gpus[1].multiprocessors, 128u);
  ASSERT_FALSE(machine.gpus[0].processes.empty());
  EXPECT_EQ(machine.gpus[0].processes[0].kind, ProcessKind::Graphics);
  EXPECT_FALSE(machine.gpus[0].ecc_corrected_volatile.has_value());
  EXPECT_EQ(topo_label(machine.links[0][1]), "PHB");
}

TEST(FixtureMachine, MigDevicesCarryTheirProfileNames) {
  Machine mixed = machine_from_fixture(shipped("a100-mig-mixed"));
  std::vector<std::string> profiles;
  for (const MigDevice& mig : mixed.gpus[0].mig_devices) profiles.push_back(mig.profile);
  EXPECT_THAT(profiles, ElementsAre("1c.3g.40gb", "2c.3g.40gb", "2g.20gb", "1g.10gb"));
  EXPECT_EQ(mixed.gpus[0].mig_devices[1].index, 1u);
  EXPECT_EQ(mixed.gpus[0].mig_devices[1].compute_instance_id, 1u);
  EXPECT_TRUE(mixed.gpus[1].mig_enabled.value_or(false));
  EXPECT_TRUE(mixed.gpus[1].mig_devices.empty());
  EXPECT_TRUE(mixed.gpus[2].mig_devices.empty());

  Machine h200 = machine_from_fixture(shipped("hgx-h200-mig"));
  ASSERT_EQ(h200.gpus[0].mig_devices.size(), 2u);
  EXPECT_EQ(h200.gpus[0].mig_devices[0].profile, "4g.71gb");
  EXPECT_EQ(h200.gpus[0].mig_devices[1].profile, "3g.71gb");
  EXPECT_FALSE(h200.gpus[1].mig_enabled.value_or(true));

  Machine a100 = machine_from_fixture(shipped("dgx-a100-mig"));
  for (const Gpu& gpu : a100.gpus) {
    ASSERT_EQ(gpu.mig_devices.size(), 7u);
    for (const MigDevice& mig : gpu.mig_devices) EXPECT_EQ(mig.profile, "1g.10gb");
  }
}

TEST(FixtureMachine, LostGpuKeepsItsIdentityOnly) {
  Machine machine = machine_from_fixture(load(kTestFixtureDir + "/lost-gpu.json"));
  ASSERT_EQ(machine.gpus.size(), 4u);
  const Gpu& lost = machine.gpus[2];
  EXPECT_EQ(lost.fault, kLostGpuFault);
  EXPECT_FALSE(lost.uuid.empty());
  EXPECT_EQ(lost.minor_number, 2u);
  EXPECT_FALSE(lost.memory_total_mib || lost.utilization_gpu || lost.temperature_c ||
               lost.cpu_affinity);
  EXPECT_FALSE(machine.gpus[3].fault.has_value());
  EXPECT_EQ(topo_label(machine.links[0][1]), "NV12");
  EXPECT_EQ(machine.links[2][3].nvlinks, 0u);
  EXPECT_FALSE(machine.links[2][3].pcie.has_value());
  EXPECT_FALSE(machine.links[3][2].pcie.has_value());
}

TEST(FixtureMachine, LegacyLibraryCannotTellNewerFields) {
  Fixture fixture = load(kTestFixtureDir + "/old-driver.json");
  EXPECT_EQ(fixture.nvml_library, "legacy");
  fixture.gpus[0].memory_reserved_mib = 100;
  Machine machine = machine_from_fixture(fixture);
  const Gpu& gpu = machine.gpus[0];
  EXPECT_EQ(gpu.memory_used_mib, 2042u + 100u);  // the v1 call counts reserved memory as used
  EXPECT_EQ(gpu.memory_free_mib, 16280u - 2042u - 100u);
  EXPECT_FALSE(gpu.mig_enabled || gpu.numa_node || gpu.multiprocessors || gpu.power_w);
  ASSERT_EQ(gpu.processes.size(), 1u);
  EXPECT_FALSE(gpu.processes[0].used_memory_mib.has_value());
  EXPECT_FALSE(machine.gpus[1].temperature_c.has_value());
  EXPECT_EQ(gpu.sm_clock_mhz, 405u);  // an old call: legacy drivers answer it
  EXPECT_FALSE(machine.gpus[1].sm_clock_mhz.has_value());
}

TEST(FixtureOverlay, ReplacesTheNamedValues) {
  std::string base = minimal_fixture().dump();
  auto fixture = parse_fixture_with_overlay(
      base,
      R"({"gpus": {"1": {"processes": [{"pid": 123, "used_memory_mib": 500, "kind": "compute"}],
                         "utilization_gpu": 97, "memory_used_mib": 500}, "0": {"fault": "lost"}}})",
      "t.json");
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  EXPECT_EQ(fixture->gpus[0].fault, "lost");
  EXPECT_EQ(fixture->gpus[1].utilization_gpu, 97u);
  EXPECT_EQ(fixture->gpus[1].memory_used_mib, 500u);
  ASSERT_EQ(fixture->gpus[1].processes.size(), 1u);
  EXPECT_EQ(fixture->gpus[1].processes[0].pid, 123u);
  EXPECT_TRUE(parse_fixture_with_overlay(base, "{}", "t.json").ok());
}

TEST(FixtureOverlay, Errors) {
  std::string base = minimal_fixture().dump();
  auto error = [&](std::string_view overlay) {
    auto fixture = parse_fixture_with_overlay(base, overlay, "t.json");
    return fixture.ok() ? "(parsed)" : fixture.error().message;
  };
  EXPECT_EQ(error("{"), "fixture t.json: overlay: not valid JSON");
  EXPECT_EQ(error(R"({"gpu": {}})"), "fixture t.json: overlay.gpu: unknown key");
  EXPECT_EQ(error(R"({"gpus": []})"), "fixture t.json: overlay.gpus: expected an object");
  EXPECT_EQ(error(R"({"gpus": {"2": {}}})"), "fixture t.json: overlay.gpus.2: no such GPU");
  EXPECT_EQ(error(R"({"gpus": {"one": {}}})"), "fixture t.json: overlay.gpus.one: no such GPU");
  EXPECT_EQ(error(R"({"gpus": {"0": 5}})"), "fixture t.json: overlay.gpus.0: expected an object");
  EXPECT_EQ(error(R"({"gpus": {"0": {"utilization_gpu": "high"}}})"),
            "fixture t.json: gpus[0].utilization_gpu: expected a number");
}

}  // namespace
}  // namespace gpupool::sim
