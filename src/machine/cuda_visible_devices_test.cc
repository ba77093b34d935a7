#include "machine/cuda_visible_devices.h"

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck/gtest.h>

namespace gpupool {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// The GPUs the driver was probed on: driver 580.159.04, CUDA 13.0, one NVIDIA H200 each.
constexpr const char* kH200Uuid = "GPU-16fb8516-9f03-8d84-eb33-9dfbc4d69c74";
constexpr const char* kProbeFile = GPUPOOL_TEST_DATA_DIR "/cvd-probe-h200-driver-580.159.04.jsonl";
constexpr const char* kDifferentialH200Uuid = "GPU-c24a332c-84cc-4fde-424b-6ed7939809af";
constexpr const char* kDifferentialFile =
    GPUPOOL_TEST_DATA_DIR "/cvd-differential-h200-driver-580.jsonl";

Gpu make_gpu(unsigned index, std::string uuid, std::string name, int major, int minor,
             unsigned multiprocessors) {
  Gpu gpu;
  gpu.index = index;
  gpu.uuid = std::move(uuid);
  gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + index);
  gpu.name = std::move(name);
  gpu.compute_capability = ComputeCapability{major, minor};
  gpu.multiprocessors = multiprocessors;
  return gpu;
}

std::vector<Gpu> h200_machine(const char* uuid = kH200Uuid) {
  std::vector<Gpu> gpus{make_gpu(0, uuid, "NVIDIA H200", 9, 0, 132)};
  gpus[0].pci_bus_id = "00000000:00:06.0";
  return gpus;
}

// n identical GPUs; GPU i's UUID starts with the hex digit i+1, so "GPU-<i+1>" names it.
std::string synthetic_uuid(unsigned i) {
  return fmt::format("GPU-{:x}{:07x}-1234-5678-9abc-def0{:08x}", i + 1, i * 0x1111, i);
}

std::vector<Gpu> identical_machine(unsigned count) {
  std::vector<Gpu> gpus;
  for (unsigned i = 0; i < count; ++i) {
    gpus.push_back(make_gpu(i, synthetic_uuid(i), "NVIDIA H100 80GB HBM3", 9, 0, 132));
  }
  return gpus;
}

// FASTEST_FIRST order: H100 SXM (1), H100 PCIe (3), RTX 3090 (0), A100 (2).
std::vector<Gpu> mixed_machine() {
  return {make_gpu(0, synthetic_uuid(0), "NVIDIA GeForce RTX 3090", 8, 6, 82),
          make_gpu(1, synthetic_uuid(1), "NVIDIA H100 80GB HBM3", 9, 0, 132),
          make_gpu(2, synthetic_uuid(2), "NVIDIA A100-SXM4-80GB", 8, 0, 108),
          make_gpu(3, synthetic_uuid(3), "NVIDIA H100 PCIe", 9, 0, 114)};
}

using Env = std::optional<std::string>;

VisibleDevicesResolution resolve(const std::vector<Gpu>& gpus, Env value, Env order = {}) {
  return resolve_visible_devices(gpus, value, order);
}

// nvidia-smi indices of the devices, in CUDA's order.
std::vector<unsigned> nvml_indices(const VisibleDevicesResolution& resolution) {
  std::vector<unsigned> indices;
  for (const VisibleDevice& device : resolution.devices) indices.push_back(device.nvml_index);
  return indices;
}

std::string all_warnings(const VisibleDevicesResolution& resolution) {
  return fmt::format("{}", fmt::join(resolution.warnings, "\n"));
}

std::vector<EntryReading> readings(const VisibleDevicesResolution& resolution) {
  std::vector<EntryReading> out;
  for (const VisibleDevicesEntry& entry : resolution.entries) out.push_back(entry.reading);
  return out;
}

void expect_devices(const std::vector<Gpu>& gpus, Env value, std::vector<unsigned> expected,
                    Env order = {}) {
  const VisibleDevicesResolution resolution = resolve(gpus, value, order);
  EXPECT_EQ(resolution.error, std::nullopt) << "CUDA_VISIBLE_DEVICES=" << value.value_or("<unset>");
  EXPECT_EQ(nvml_indices(resolution), expected)
      << "CUDA_VISIBLE_DEVICES=" << value.value_or("<unset>");
}

void expect_init_fails(const std::vector<Gpu>& gpus, Env value, Env order = {}) {
  const VisibleDevicesResolution resolution = resolve(gpus, value, order);
  EXPECT_EQ(cuda_init_status(resolution), CudaInitStatus::InvalidDevice)
      << "CUDA_VISIBLE_DEVICES=" << value.value_or("<unset>");
  EXPECT_THAT(resolution.error.value_or(""), StartsWith("CUDA_ERROR_INVALID_DEVICE: "));
  EXPECT_THAT(resolution.devices, IsEmpty());
}

// What the driver answered for one value: cuInit's status and the UUIDs in CUDA order.
struct DriverAnswer {
  std::string init;
  std::vector<std::string> uuids;
};

// Replays every line of a probe file on `gpus`, comparing the model's answer with the driver's;
// returns the number of lines read.
std::size_t replay(const char* path, const std::vector<Gpu>& gpus,
                   DriverAnswer (*answer)(const nlohmann::json&)) {
  std::ifstream file(path);
  EXPECT_TRUE(file) << path;
  std::size_t lines = 0;
  for (std::string line; std::getline(file, line);) {
    if (line.empty()) continue;
    ++lines;
    const nlohmann::json observation = nlohmann::json::parse(line);
    const auto env = [&](const char* key) -> Env {
      if (observation[key].is_null()) return std::nullopt;
      return observation[key].get<std::string>();
    };
    const VisibleDevicesResolution resolution = resolve(gpus, env("value"), env("order"));
    std::vector<std::string> uuids;
    for (const VisibleDevice& device : resolution.devices) {
      uuids.push_back(gpus[device.nvml_index].uuid);
    }
    const DriverAnswer expected = answer(observation);
    SCOPED_TRACE(line);
    EXPECT_EQ(to_string(cuda_init_status(resolution)), expected.init);
    EXPECT_EQ(uuids, expected.uuids);
  }
  return lines;
}

// (a) Every observation of the real driver: driver 580.159.04, CUDA 13.0, one NVIDIA H200.
TEST(CudaVisibleDevicesProbe, ReplaysEveryObservationOfDriver580_159_04Cuda13H200) {
  const auto answer = [](const nlohmann::json& observation) {
    DriverAnswer driver{observation["result"]["init"].get<std::string>(), {}};
    for (const auto& device : observation["result"]["devices"]) {
      driver.uuids.push_back(device["uuid"].get<std::string>());
    }
    return driver;
  };
  EXPECT_EQ(replay(kProbeFile, h200_machine(), answer), 189u);
}

// Observed on driver 580.159.04, CUDA 13.0: a generated corpus of 5,420 values run on another
// H200; every line must agree.
TEST(CudaVisibleDevicesProbe, ReplaysDifferentialCorpusOfDriver580_159_04Cuda13H200) {
  const auto answer = [](const nlohmann::json& observation) {
    return DriverAnswer{observation["init"].get<std::string>(),
                        observation["uuids"].get<std::vector<std::string>>()};
  };
  EXPECT_EQ(replay(kDifferentialFile, h200_machine(kDifferentialH200Uuid), answer), 5420u);
}

// (b) One test per rule.

// Observed on driver 580.159.04: unset shows every GPU.
TEST(CudaVisibleDevicesRules, UnsetShowsAllGpus) {
  expect_devices(h200_machine(), std::nullopt, {0});
  expect_devices(identical_machine(4), std::nullopt, {0, 1, 2, 3});
  const VisibleDevicesResolution resolution = resolve(identical_machine(8), std::nullopt);
  EXPECT_THAT(resolution.entries, IsEmpty());
  EXPECT_THAT(resolution.warnings, IsEmpty());
  EXPECT_EQ(resolution.devices.size(), 8u);
}

// Observed on driver 580.159.04: set but empty or blank hides every GPU, without an error.
TEST(CudaVisibleDevicesRules, SetButEmptyHidesAllGpus) {
  for (const char* value : {"", " ", "  ", "\t", ",", ",,"}) {
    const VisibleDevicesResolution resolution = resolve(identical_machine(4), value);
    EXPECT_EQ(cuda_init_status(resolution), CudaInitStatus::NoDevice) << value;
    EXPECT_EQ(resolution.error, std::nullopt);
    EXPECT_THAT(all_warnings(resolution), HasSubstr("set but lists nothing"));
  }
}

// Observed on driver 580.159.04: a leading empty entry hides every GPU.
TEST(CudaVisibleDevicesRules, LeadingEmptyEntryHidesAllGpus) {
  for (const char* value : {",0", " , 0", ",0,"}) {
    const VisibleDevicesResolution resolution = resolve(h200_machine(), value);
    EXPECT_EQ(cuda_init_status(resolution), CudaInitStatus::NoDevice) << value;
    EXPECT_THAT(all_warnings(resolution), HasSubstr("silently ignores"));
  }
}

// Observed on driver 580.159.04 (1 GPU); the 4-GPU cases are the model.
TEST(CudaVisibleDevicesRules, FirstInvalidEntryEndsTheList) {
  expect_devices(h200_machine(), "0,,0", {0});
  expect_devices(h200_machine(), "0,a,1", {0});
  expect_devices(h200_machine(), "1,0", {});
  expect_devices(identical_machine(4), "2,1,9,0", {2, 1});
  const VisibleDevicesResolution resolution = resolve(identical_machine(4), "2,1,9,0,x");
  EXPECT_THAT(readings(resolution),
              ElementsAre(EntryReading::Index, EntryReading::Index, EntryReading::Invalid,
                          EntryReading::IgnoredAfterInvalid, EntryReading::IgnoredAfterInvalid));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("entry 3 '9' is invalid"));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("'0', 'x'"));
  // Trailing commas are harmless: no warning.
  EXPECT_THAT(resolve(h200_machine(), "0,,").warnings, IsEmpty());
}

// Observed on driver 580.159.04: numbers are read like strtoul, the rest ignored.
TEST(CudaVisibleDevicesRules, IndexIsReadLikeStrtoul) {
  for (const char* value : {"0a", "0x1", "0X0", "0.5", "0e0", "0 1", "0:1", "0;1", "0|1", "0/0",
                            " 0", "\t0", "0 ", "0\n", "+0", "-0", "00", "000"}) {
    expect_devices(h200_machine(), value, {0});
  }
  for (const char* value : {"a", "a0", "zero", "none", "all", "NoDevFiles", "-1"}) {
    expect_devices(h200_machine(), value, {});
  }
  expect_devices(identical_machine(4), "3junk", {3});
}

// Observed on driver 580.159.04: an index keeps only its low 32 bits.
TEST(CudaVisibleDevicesRules, IndexWrapsTo32Bits) {
  expect_devices(h200_machine(), "4294967296", {0});
  expect_devices(h200_machine(), "4294967297", {});
  expect_devices(identical_machine(4), "4294967297", {1});
  for (const char* value : {"2147483648", "-2147483648", "-1", "18446744073709551616",
                            "99999999999999999999"}) {
    expect_devices(identical_machine(8), value, {});
  }
  // Past 63 bits strtoul, not strtol: 2^63 keeps its low 32 bits (0); a negative number past 64
  // bits saturates to ULONG_MAX, which is -1 as an int.
  expect_devices(h200_machine(), "9223372036854775808", {0});
  expect_devices(h200_machine(), "-99999999999999999999", {});
  expect_devices(h200_machine(), "-9223372036854775809", {});
  EXPECT_THAT(all_warnings(resolve(h200_machine(), "4294967296")), HasSubstr("low 32 bits"));
}

// Observed on driver 580.159.04: the driver parses with strtoul, which differs from strtol only
// past 2^63 (strtol's answers are kept here to show what the observation ruled out).
TEST(CudaVisibleDevicesRules, DriverParsesIndicesWithStrtoul) {
  EXPECT_EQ(kDriverIntegerParse, IntegerParse::Strtoul);
  for (IntegerParse parse : {IntegerParse::Strtol, IntegerParse::Strtoul}) {
    EXPECT_EQ(driver_index_from_digits(false, "4294967297", parse), 1);
    EXPECT_EQ(driver_index_from_digits(true, "1", parse), -1);
    EXPECT_EQ(driver_index_from_digits(false, "18446744073709551616", parse), -1);
    EXPECT_EQ(driver_index_from_digits(true, "4294967296", parse), 0);
  }
  EXPECT_EQ(driver_index_from_digits(true, "99999999999999999999", IntegerParse::Strtol), 0);
  EXPECT_EQ(driver_index_from_digits(true, "99999999999999999999", IntegerParse::Strtoul), -1);
  EXPECT_EQ(driver_index_from_digits(false, "9223372036854775808", IntegerParse::Strtol), -1);
  EXPECT_EQ(driver_index_from_digits(false, "9223372036854775808", IntegerParse::Strtoul), 0);
  EXPECT_EQ(driver_index_from_digits(true, "9223372036854775809"), -1);
}

// Observed on driver 580.159.04: warnings for entries that only work by accident are ours.
TEST(CudaVisibleDevicesRules, AccidentalSpellingsWarn) {
  const auto warning_for = [](const char* value) {
    return all_warnings(resolve(identical_machine(4), value));
  };
  EXPECT_THAT(warning_for("0 1"), HasSubstr("single index 0: only ',' separates entries"));
  EXPECT_THAT(warning_for("0;1"), HasSubstr("single index 0"));
  EXPECT_THAT(warning_for("0.5"), HasSubstr("not a fraction"));
  EXPECT_THAT(warning_for("0x1"), HasSubstr("hexadecimal is not understood"));
  EXPECT_THAT(warning_for("0a"), HasSubstr("ignores the trailing 'a'"));
  EXPECT_THAT(warning_for("+1"), HasSubstr("write it plainly as 1"));
  EXPECT_THAT(warning_for("01"), HasSubstr("write it plainly as 1"));
  EXPECT_THAT(warning_for("-0"), HasSubstr("write it plainly as 0"));
  EXPECT_THAT(warning_for("0, 1,2 "), IsEmpty());
}

// Observed on driver 580.159.04: GPU-/MIG- plus a case-insensitive hex prefix, dashes ignored.
TEST(CudaVisibleDevicesRules, UuidPrefixMatches) {
  const std::string uuid = kH200Uuid;
  const std::string hex = uuid.substr(4);
  std::string upper = uuid;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string dashless = "GPU-";
  for (char c : hex) {
    if (c != '-') dashless += c;
  }
  for (const std::string& value :
       {uuid, upper, dashless, "GPU--" + hex, std::string("GPU-1"), std::string("GPU-16F"),
        std::string("GPU-16fb8516-"), uuid + " ", uuid + "x", uuid + "0", uuid + "/0/0",
        uuid + ":0", uuid + " 0", uuid + ";0", uuid + ","}) {
    expect_devices(h200_machine(), value, {0});
  }
  for (const std::string& value :
       {"gpu-" + hex, "Gpu-" + hex, "GPU" + hex, "GPU " + hex, " " + uuid, hex,
        hex.substr(0, 8), std::string("GPU-"), std::string("GPU-0"), std::string("GPU-ffffffff"),
        std::string("GPU"), std::string("MIG-"), std::string("MIG-0")}) {
    expect_devices(h200_machine(), value, {});
  }
  expect_devices(identical_machine(8), "GPU-7,GPU-2", {6, 1});
  EXPECT_THAT(all_warnings(resolve(h200_machine(), uuid + "/0/0")),
              HasSubstr("'/0/0' after the full UUID"));
}

// Observed on driver 580.159.04: MIG-<GPU hex> names a GPU without MIG; MIG-GPU-... fails.
TEST(CudaVisibleDevicesRules, MigPrefixOnNonMigGpu) {
  const std::string hex = std::string(kH200Uuid).substr(4);
  const VisibleDevicesResolution resolution = resolve(h200_machine(), "MIG-" + hex);
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(0u));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("'MIG-' prefix"));
  const VisibleDevicesResolution old_name =
      resolve(h200_machine(), "MIG-" + std::string(kH200Uuid));
  EXPECT_THAT(old_name.devices, IsEmpty());
  EXPECT_THAT(old_name.entries.at(0).explanation, HasSubstr("old MIG name"));
}

// Model, unverified: a MIG-enabled GPU shows its instances, which gpupool does not model.
TEST(CudaVisibleDevicesRules, MigEnabledGpuWarns) {
  std::vector<Gpu> gpus = identical_machine(2);
  gpus[1].mig_enabled = true;
  EXPECT_THAT(all_warnings(resolve(gpus, std::nullopt)), HasSubstr("GPU 1 has MIG enabled"));
}

// GPU 1 of two in MIG mode as two MIG devices.
std::vector<Gpu> mig_machine() {
  std::vector<Gpu> gpus = identical_machine(2);
  gpus[1].mig_enabled = true;
  gpus[1].mig_devices = {MigDevice{0, "MIG-aaaaaaaa-0000-1111-2222-333333333333", 1, 0, 4, 4, 40320, 64, "4g.40gb"},
                         MigDevice{1, "MIG-bbbbbbbb-0000-1111-2222-333333333333", 2, 0, 3, 3, 40320, 60, "3g.40gb"}};
  return gpus;
}

TEST(CudaVisibleDevicesMig, AMigUuidOrItsPrefixNamesTheMigDevice) {
  for (const char* value : {"MIG-bbbbbbbb-0000-1111-2222-333333333333", "MIG-bbbbbbbb"}) {
    const VisibleDevicesResolution resolution = resolve(mig_machine(), value);
    ASSERT_EQ(resolution.devices.size(), 1u) << value;
    EXPECT_EQ(resolution.devices[0].nvml_index, 1u);
    EXPECT_EQ(resolution.devices[0].mig_index, std::optional<unsigned>(1));
    EXPECT_THAT(resolution.entries[0].explanation, HasSubstr("MIG device 1:1 (3g.40gb, GPU instance 2"));
    EXPECT_THAT(resolution.warnings, IsEmpty()) << value;
  }
}

TEST(CudaVisibleDevicesMig, OnlyTheFirstMigDeviceIsEnumeratedAndNoWholeGpuBesideIt) {
  const VisibleDevicesResolution resolution = resolve(mig_machine(), "MIG-bbbbbbbb,MIG-aaaaaaaa," + synthetic_uuid(0));
  ASSERT_EQ(resolution.devices.size(), 1u);
  EXPECT_EQ(resolution.devices[0].cuda_index, 0u);
  EXPECT_EQ(resolution.devices[0].mig_index, std::optional<unsigned>(1));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("not MIG device 1:0, GPU 0"));
}

TEST(CudaVisibleDevicesMig, AMigDeviceListedTwiceFails) {
  const VisibleDevicesResolution resolution = resolve(mig_machine(), "MIG-aaaaaaaa,MIG-aaaaaaaa-0000");
  EXPECT_TRUE(resolution.error.has_value());
  EXPECT_EQ(resolution.entries[1].reading, EntryReading::Duplicate);
}

TEST(CudaVisibleDevicesMig, TheOldNameOfAMigDeviceSuggestsItsUuid) {
  const VisibleDevicesResolution resolution = resolve(mig_machine(), "MIG-" + synthetic_uuid(1) + "/2/0");
  EXPECT_THAT(resolution.devices, IsEmpty());
  EXPECT_THAT(resolution.entries[0].explanation,
              HasSubstr("old MIG name (drivers before R470), which the driver rejects: write "
                        "MIG-bbbbbbbb-0000-1111-2222-333333333333 (MIG device 1:1, 3g.40gb)"));
}

TEST(CudaVisibleDevicesMig, AWholeGpuInMigModeStillWarns) {
  EXPECT_THAT(all_warnings(resolve(mig_machine(), "1")), HasSubstr("GPU 1 has MIG enabled"));
  EXPECT_THAT(resolve(mig_machine(), "0").warnings, IsEmpty());
}

// Observed on driver 580.159.04: prefixes as short as one hex digit match; the warning is ours.
TEST(CudaVisibleDevicesRules, ShortUuidPrefixWarns) {
  EXPECT_THAT(all_warnings(resolve(h200_machine(), "GPU-16fb")), HasSubstr("only 4 hex digit"));
  EXPECT_THAT(resolve(h200_machine(), "GPU-16fb8516").warnings, IsEmpty());
}

// Observed on driver 580.159.04: before the 32nd hex digit only hex digits and '-' may appear;
// any other character makes the entry invalid. Ending early is still a prefix match.
TEST(CudaVisibleDevicesRules, StrayCharacterInsideUuidIsInvalid) {
  const std::vector<Gpu> gpus = h200_machine(kDifferentialH200Uuid);
  for (const char* value : {"GPU-c24a332c -84cc-4fde-424b-6ed7939809af",
                            "GPU-c24a332cx-84cc-4fde-424b-6ed7939809af", "GPU-c24ag",
                            "GPU-c:24a332c-84cc-4fde-424b-6ed7939809af", "GPU-c24a \t"}) {
    const VisibleDevicesResolution resolution = resolve(gpus, value);
    EXPECT_EQ(cuda_init_status(resolution), CudaInitStatus::NoDevice) << value;
    EXPECT_THAT(resolution.entries.at(0).explanation,
                HasSubstr("the driver accepts only hex digits and '-'"));
  }
  // White space right before a hex digit stands for that digit, which is then read again:
  // "...809a\nf" is read as "...809af" (observed to match), "...809\naf" as "...809aa" (observed
  // not to match). "GPU-c24a 3" is read as "c24a33" (modelled from the same rule).
  for (const char* value : {"GPU-c24a332c-84cc-4fde-424b-6ed7939809a\nf", "GPU-c24a 3"}) {
    const VisibleDevicesResolution resolution = resolve(gpus, value);
    EXPECT_THAT(nvml_indices(resolution), ElementsAre(0u)) << value;
    EXPECT_THAT(all_warnings(resolution), HasSubstr("reads the hex digit after it twice"));
  }
  for (const char* value : {"GPU-c24a332c-84cc-4fde-424b-6ed7939809\naf",
                            "GPU-c24a332c-84cc-4fde-424b-6ed7939809a 1f"}) {
    expect_devices(gpus, value, {});
  }
  for (const char* value : {"GPU-c24a", "GPU-c24a332c-",
                            "GPU-c24a332c-84cc-4fde-424b-6ed7939809afx",
                            "GPU-c24a332c-84cc-4fde-424b-6ed7939809af 0",
                            "GPU-c24a332c-84cc-4fde-424b-6ed7939809af/0/0"}) {
    expect_devices(gpus, value, {0});
  }
  EXPECT_THAT(resolve(identical_machine(4), "GPU-3000 zz").entries.at(0).explanation,
              HasSubstr("' ' after 4 hex digit(s)"));
}

// Model, unverified: a prefix that fits several GPUs is an invalid entry.
TEST(CudaVisibleDevicesRules, AmbiguousUuidPrefixModel) {
  std::vector<Gpu> gpus = identical_machine(3);
  gpus[0].uuid = "GPU-abcd1111-0000-0000-0000-000000000000";
  gpus[1].uuid = "GPU-abcd2222-0000-0000-0000-000000000000";
  const VisibleDevicesResolution resolution = resolve(gpus, "GPU-3,GPU-abcd,GPU-abcd2");
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(2u));
  EXPECT_THAT(readings(resolution), ElementsAre(EntryReading::UuidPrefix, EntryReading::Invalid,
                                                EntryReading::IgnoredAfterInvalid));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("fits the UUIDs of GPUs 0, 1"));
  expect_devices(gpus, "GPU-abcd2", {1});
}

// Observed on driver 580.159.04: the same card twice by index makes cuInit fail.
TEST(CudaVisibleDevicesRules, DuplicateIndexFailsInit) {
  for (const char* value : {"0,0", "0,00", "00,0", "0,-0", "0,+0", "0, 0"}) {
    expect_init_fails(h200_machine(), value);
  }
  const VisibleDevicesResolution resolution = resolve(identical_machine(4), "1,2,1");
  EXPECT_EQ(resolution.error, "CUDA_ERROR_INVALID_DEVICE: GPU 1 is listed twice (entries 1 and 3)");
  EXPECT_THAT(all_warnings(resolution), HasSubstr("refuses a card listed twice"));
  EXPECT_EQ(resolution.entries.at(2).reading, EntryReading::Duplicate);
}

// Observed on driver 580.159.04: the same card twice by UUID (any case, any prefix) fails too.
TEST(CudaVisibleDevicesRules, DuplicateUuidFailsInit) {
  const std::string uuid = kH200Uuid;
  expect_init_fails(h200_machine(), uuid + "," + uuid);
  expect_init_fails(h200_machine(), "GPU-16fb," + uuid);
  expect_init_fails(h200_machine(), "GPU-16FB8516-9F03-8D84-EB33-9DFBC4D69C74," + uuid);
  expect_init_fails(identical_machine(8), "GPU-3,GPU-5,GPU-30");
}

// Observed on driver 580.159.04, one GPU: "U,0,U", "0,U,0" and "U,0,0" show the GPU once, while
// "0,0" and "U,U" fail. Modelled, unverified with several GPUs: the first entry decides how all
// are read (UUIDs after "GPU-"/"MIG-", else numbers), so an entry of the other kind is invalid
// and ends the list. On one GPU this cannot be told apart from "an entry of the other kind naming
// an already-listed card ends the list"; "0,<UUID of GPU 1>" would tell.
TEST(CudaVisibleDevicesRules, FirstEntryDecidesHowEveryEntryIsRead) {
  const std::string uuid = kH200Uuid;
  for (const std::string& value : {uuid + ",0", "0," + uuid, std::string("GPU-16fb85,0"),
                                   uuid + ",0," + uuid, "0," + uuid + ",0", uuid + ",0,0"}) {
    const VisibleDevicesResolution resolution = resolve(h200_machine(), value);
    EXPECT_EQ(resolution.error, std::nullopt) << value;
    EXPECT_THAT(nvml_indices(resolution), ElementsAre(0u));
    EXPECT_EQ(resolution.entries.at(1).reading, EntryReading::Invalid);
    EXPECT_THAT(all_warnings(resolution), HasSubstr("mixing indices and UUIDs"));
  }
  EXPECT_THAT(resolve(h200_machine(), "0," + uuid).entries.at(1).explanation,
              HasSubstr("a UUID in a list that began with an index"));
  EXPECT_THAT(resolve(h200_machine(), uuid + ",0").entries.at(1).explanation,
              HasSubstr("an index in a list that began with a UUID"));
  // Modelled on several GPUs: entries of the other kind end the list even for another card.
  expect_devices(identical_machine(4), "1,GPU-1,0", {1});
  expect_devices(identical_machine(4), "GPU-2,0,GPU-3", {1});
}

// Observed on driver 580.159.04: duplicates after the first invalid entry are never read.
TEST(CudaVisibleDevicesRules, DuplicatesAfterInvalidEntryDoNotCount) {
  expect_devices(h200_machine(), "0,,0", {0});
  expect_devices(identical_machine(4), "3,a,3", {3});
}

// Observed on driver 580.159.04: CUDA_DEVICE_ORDER must be exactly FASTEST_FIRST or PCI_BUS_ID.
TEST(CudaVisibleDevicesRules, InvalidDeviceOrderFailsInit) {
  for (const char* order : {"pci_bus_id", "bogus", "", " PCI_BUS_ID", "PCI_BUS_ID "}) {
    for (const Env& value : {Env{}, Env{""}, Env{"0"}, Env{kH200Uuid}}) {
      expect_init_fails(h200_machine(), value, order);
    }
    EXPECT_THAT(all_warnings(resolve(h200_machine(), "0", order)),
                HasSubstr("FASTEST_FIRST and PCI_BUS_ID"));
  }
  expect_devices(h200_machine(), std::nullopt, {0}, "PCI_BUS_ID");
  expect_devices(h200_machine(), "0", {0}, "FASTEST_FIRST");
  EXPECT_EQ(parse_device_order(std::nullopt).value(), DeviceOrder::FastestFirst);
}

// Model, unverified on mixed machines: FASTEST_FIRST sorts by compute capability, then SM count.
TEST(CudaVisibleDevicesRules, FastestFirstOrderModel) {
  const std::vector<Gpu> gpus = mixed_machine();
  EXPECT_THAT(cuda_enumeration_order(gpus, DeviceOrder::FastestFirst), ElementsAre(1, 3, 0, 2));
  EXPECT_THAT(cuda_enumeration_order(gpus, DeviceOrder::PciBusId), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(cuda_enumeration_order(identical_machine(8), DeviceOrder::FastestFirst),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
}

// Model: on a mixed machine index entries follow CUDA's order, not nvidia-smi's.
TEST(CudaVisibleDevicesRules, IndexMeansADifferentCardThanInNvidiaSmi) {
  const std::vector<Gpu> gpus = mixed_machine();
  const VisibleDevicesResolution resolution = resolve(gpus, "0,2");
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(1u, 0u));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("entry 1 '0' is nvidia-smi's GPU 1"));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  const VisibleDevicesResolution by_pci = resolve(gpus, "0,2", "PCI_BUS_ID");
  EXPECT_THAT(nvml_indices(by_pci), ElementsAre(0u, 2u));
  EXPECT_THAT(by_pci.warnings, IsEmpty());
  expect_devices(gpus, "GPU-1,GPU-3", {0, 2});  // UUIDs mean the same card in any order
  EXPECT_THAT(resolve(identical_machine(4), "3,0").warnings, IsEmpty());
}

// Model: the default order differs from nvidia-smi's even with CUDA_VISIBLE_DEVICES unset.
TEST(CudaVisibleDevicesRules, DefaultOrderDiffersFromNvidiaSmiWhenUnset) {
  const VisibleDevicesResolution resolution = resolve(mixed_machine(), std::nullopt);
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(1u, 3u, 0u, 2u));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("device 0 is nvidia-smi's GPU 1"));
  EXPECT_THAT(resolve(mixed_machine(), std::nullopt, "PCI_BUS_ID").warnings, IsEmpty());
}

// Model: without capabilities FASTEST_FIRST cannot be told; PCI order is assumed, with a warning.
TEST(CudaVisibleDevicesRules, UnknownSpeedsAssumePciOrder) {
  std::vector<Gpu> gpus = mixed_machine();
  gpus[2].multiprocessors.reset();
  const VisibleDevicesResolution resolution = resolve(gpus, std::nullopt);
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(0u, 1u, 2u, 3u));
  EXPECT_THAT(all_warnings(resolution), HasSubstr("cannot be told"));
  std::vector<Gpu> same = identical_machine(2);
  same[0].compute_capability.reset();
  EXPECT_THAT(resolve(same, std::nullopt).warnings, IsEmpty());
}

// Modelled (well known and documented): the list reorders; device 0 is the first entry.
TEST(CudaVisibleDevicesRules, ListOrderIsCudaOrder) {
  const VisibleDevicesResolution resolution = resolve(identical_machine(8), "7,0,3");
  ASSERT_EQ(resolution.devices.size(), 3u);
  for (unsigned i = 0; i < 3; ++i) EXPECT_EQ(resolution.devices[i].cuda_index, i);
  EXPECT_THAT(nvml_indices(resolution), ElementsAre(7u, 0u, 3u));
  EXPECT_THAT(resolution.warnings, IsEmpty());
  expect_devices(identical_machine(8), "GPU-8,GPU-1,GPU-4", {7, 0, 3});
}

// Observed on driver 580.159.04: a UUID without "GPU-" is read as a number; the hint is ours.
TEST(CudaVisibleDevicesRules, BareUuidWithoutPrefixIsExplained) {
  const std::string hex = std::string(kH200Uuid).substr(4);
  EXPECT_THAT(all_warnings(resolve(h200_machine(), hex)), HasSubstr("without the 'GPU-' prefix"));
  EXPECT_THAT(all_warnings(resolve(h200_machine(), "gpu-" + hex)), HasSubstr("exactly 'GPU-'"));
}

// Modelled: how each entry was read, for the user (4 GPUs).
TEST(CudaVisibleDevicesRules, EntriesAreExplained) {
  const VisibleDevicesResolution resolution = resolve(identical_machine(4), "1,2,\t7,0");
  ASSERT_EQ(resolution.entries.size(), 4u);
  EXPECT_EQ(resolution.entries[0].explanation, "index 1 -> GPU 1 (" + synthetic_uuid(1) + ")");
  EXPECT_EQ(resolution.entries[1].reading, EntryReading::Index);
  EXPECT_THAT(resolution.entries[2].explanation, HasSubstr("out of range: CUDA sees 4 GPU(s)"));
  EXPECT_EQ(resolution.entries[3].reading, EntryReading::IgnoredAfterInvalid);
  EXPECT_THAT(all_warnings(resolution), HasSubstr("entry 3 '\\t7' is invalid"));
  EXPECT_EQ(resolution.entries[1].nvml_index, 2u);
  EXPECT_EQ(resolution.entries[3].nvml_index, std::nullopt);
}

// (c) Property: whatever the input, the answer is well formed. More cases:
// RC_PARAMS="max_success=20000" gpupool_unit_tests --gtest_filter='CudaVisibleDevicesProperty*'.

// One piece of a CUDA_VISIBLE_DEVICES value: an index, a UUID form, junk or a separator.
rc::Gen<std::string> value_piece(const std::vector<Gpu>& gpus) {
  std::vector<std::string> uuids{kH200Uuid, synthetic_uuid(5)};
  for (const Gpu& gpu : gpus) uuids.push_back(gpu.uuid);
  const rc::Gen<std::string> index = rc::gen::oneOf(
      rc::gen::elementOf(std::vector<std::string>{"0", "1", "3", "7", "9", "00", "4294967297",
                                                  "99999999999999999999"}),
      rc::gen::map(rc::gen::inRange(-3, 12), [](int i) { return std::to_string(i); }));
  // A GPU's UUID cut anywhere, under any of the prefixes the driver does or does not take.
  const rc::Gen<std::string> uuid_form =
      rc::gen::mapcat(rc::gen::elementOf(uuids), [](std::string uuid) {
        return rc::gen::apply(
            [uuid](std::size_t length, std::string prefix) {
              return prefix + uuid.substr(4, length);
            },
            rc::gen::inRange<std::size_t>(0, uuid.size() - 3),
            rc::gen::elementOf(std::vector<std::string>{"GPU-", "MIG-", "gpu-", "GPU", ""}));
      });
  const rc::Gen<std::string> junk = rc::gen::oneOf(
      rc::gen::elementOf(std::vector<std::string>{"+", "-", " ", "\t", "a", "x", ".", ";", "/", "f",
                                                  "\xff", std::string(1, '\0')}),
      rc::gen::map(rc::gen::character<char>(), [](char c) { return std::string(1, c); }));
  return rc::gen::weightedOneOf<std::string>(
      {{3, index}, {3, uuid_form}, {2, junk}, {3, rc::gen::just(std::string(","))}});
}

RC_GTEST_PROP(CudaVisibleDevicesProperty, RandomValuesGiveWellFormedAnswers, ()) {
  const std::vector<Gpu> gpus = *rc::gen::elementOf(std::vector<std::vector<Gpu>>{
      {}, h200_machine(), identical_machine(4), identical_machine(8), mixed_machine()});
  Env value;
  if (*rc::gen::inRange(0, 8) != 0) {  // unset one time in eight
    const auto pieces = *rc::gen::container<std::vector<std::string>>(value_piece(gpus));
    value = fmt::format("{}", fmt::join(pieces, ""));
  }
  const Env order = *rc::gen::elementOf(
      std::vector<Env>{Env{}, Env{"PCI_BUS_ID"}, Env{"FASTEST_FIRST"}, Env{"x"}});
  const VisibleDevicesResolution resolution = resolve(gpus, value, order);

  std::set<unsigned> seen;
  for (std::size_t i = 0; i < resolution.devices.size(); ++i) {
    RC_ASSERT(resolution.devices[i].cuda_index == i);
    RC_ASSERT(resolution.devices[i].nvml_index < gpus.size());
    RC_ASSERT(seen.insert(resolution.devices[i].nvml_index).second);
  }
  if (resolution.error) {
    RC_ASSERT(resolution.error->rfind("CUDA_ERROR_INVALID_DEVICE: ", 0) == 0);
    RC_ASSERT(resolution.devices.empty());
  }
  if (value && parse_device_order(order).ok()) {
    RC_ASSERT(resolution.entries.size() ==
              static_cast<std::size_t>(std::count(value->begin(), value->end(), ',')) + 1);
  } else {
    RC_ASSERT(resolution.entries.empty());
  }
  for (const std::string& warning : resolution.warnings) {
    RC_ASSERT(!warning.empty());
    RC_ASSERT(warning.find('\n') == std::string::npos);
  }
}

}  // namespace
}  // namespace gpupool
