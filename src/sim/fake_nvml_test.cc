// The simulated libnvidia-ml.so.1, loaded the way gpupool loads the real one.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "gpu/gpu_backend.h"
#include "machine/gpu_json.h"
#include "nvml/nvml_api.h"
#include "os/signals.h"
#include "sim/fixture.h"
#include "sim/fixture_dirs_testing.h"
#include "sim/open_backend.h"

namespace gpupool::sim {
namespace {

const std::string kSimLibDir = GPUPOOL_TEST_SIM_LIBDIR;
using testing_support::kFixtureDir;
using testing_support::kTestFixtureDir;

// One generation of the simulated library, opened privately, as the NVML loader does.
class SimulatedNvml {
 public:
  explicit SimulatedNvml(const std::string& generation)
      : handle_(dlopen((kSimLibDir + "/" + generation + "/libnvidia-ml.so.1").c_str(),
                       RTLD_NOW | RTLD_LOCAL)) {}
  ~SimulatedNvml() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  SimulatedNvml(const SimulatedNvml&) = delete;
  SimulatedNvml& operator=(const SimulatedNvml&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  bool has(const char* name) const { return dlsym(handle_, name) != nullptr; }

  template <typename Fn>
  Fn get(const char* name) const {
    void* symbol = dlsym(handle_, name);
    EXPECT_NE(symbol, nullptr) << name;
    return reinterpret_cast<Fn>(symbol);
  }

  // As gpupool initialises NVML (gpu/nvml_library.cc): the library's threads, the simulated one
  // included, then take none of the signals other tests in this process wait for.
  nvmlReturn_t init() const {
    AllSignalsBlocked blocked;
    return get<nvml::InitFn>("nvmlInit")();
  }
  nvmlReturn_t shutdown() const { return get<nvml::ShutdownFn>("nvmlShutdown")(); }
  nvmlDevice_t device(unsigned index) const {
    nvmlDevice_t device = nullptr;
    EXPECT_EQ(get<nvml::DeviceGetHandleByIndexFn>("nvmlDeviceGetHandleByIndex")(index, &device),
              NVML_SUCCESS);
    return device;
  }

 private:
  void* handle_;
};

// Points the simulated library at a fixture for the length of a test.
// Replaces the overlay file atomically, as tests that drive the simulator should.
void write_overlay(const std::string& path, std::string_view text) {
  std::string temporary = path + ".new";
  std::ofstream(temporary) << text;
  std::filesystem::rename(temporary, path);
}

class FixtureNvml : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("GPUPOOL_SIM_STATE"); }
  void TearDown() override {
    unsetenv("GPUPOOL_SIM");
    unsetenv("GPUPOOL_SIM_STATE");
    if (!overlay_.empty()) std::filesystem::remove(overlay_);
  }
  static void use(const std::string& fixture_path) {
    setenv("GPUPOOL_SIM", fixture_path.c_str(), 1);
  }
  // Serves `fixture_path` with `overlay_json` as the live overlay, a file of the test's own that
  // goes with the test; returns its path, for the test to rewrite.
  std::string use_with_overlay(const std::string& fixture_path, std::string_view overlay_json) {
    overlay_ = ::testing::TempDir() + "gpupool-fake-nvml-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
    write_overlay(overlay_, overlay_json);
    setenv("GPUPOOL_SIM_STATE", overlay_.c_str(), 1);
    use(fixture_path);
    return overlay_;
  }

 private:
  std::string overlay_;
};

TEST_F(FixtureNvml, AnswersFromTheFixture) {
  use(kFixtureDir + "/dgx1-v100.json");
  SimulatedNvml nvml("current");
  ASSERT_TRUE(nvml.loaded()) << dlerror();
  unsigned count = 0;
  auto get_count = nvml.get<nvml::DeviceGetCountFn>("nvmlDeviceGetCount_v2");
  EXPECT_EQ(get_count(&count), NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(nvml.get<nvml::InitFn>("nvmlInit_v2")(), NVML_SUCCESS);
  ASSERT_EQ(get_count(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 8u);

  nvmlDevice_t device = nullptr;
  auto by_index = nvml.get<nvml::DeviceGetHandleByIndexFn>("nvmlDeviceGetHandleByIndex_v2");
  EXPECT_EQ(by_index(8, &device), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(by_index(0, &device), NVML_SUCCESS);

  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  auto get_name = nvml.get<nvml::DeviceGetStringFn>("nvmlDeviceGetName");
  EXPECT_EQ(get_name(device, name, 5), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(get_name(device, name, sizeof name), NVML_SUCCESS);
  EXPECT_STREQ(name, "Tesla V100-SXM2-32GB");

  nvmlPciInfo_t pci{};
  ASSERT_EQ(nvml.get<nvml::DeviceGetPciInfoFn>("nvmlDeviceGetPciInfo_v3")(device, &pci),
            NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:06:00.0");
  EXPECT_STREQ(pci.busIdLegacy, "0000:06:00.0");
  EXPECT_EQ(pci.bus, 6u);

  nvmlMemory_v2_t memory{};
  auto memory_v2 = nvml.get<nvml::DeviceGetMemoryInfoV2Fn>("nvmlDeviceGetMemoryInfo_v2");
  EXPECT_EQ(memory_v2(device, &memory), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  memory.version = nvmlMemory_v2;
  ASSERT_EQ(memory_v2(device, &memory), NVML_SUCCESS);
  constexpr unsigned long long kMiB = 1024 * 1024;
  EXPECT_EQ(memory.total, 32768 * kMiB);
  EXPECT_EQ(memory.reserved, 294 * kMiB);
  EXPECT_EQ(memory.used, 27214 * kMiB);
  EXPECT_EQ(memory.free, (32768 - 294 - 27214) * kMiB);
  nvmlMemory_t old_memory{};
  ASSERT_EQ(nvml.get<nvml::DeviceGetMemoryInfoFn>("nvmlDeviceGetMemoryInfo")(device, &old_memory),
            NVML_SUCCESS);
  EXPECT_EQ(old_memory.used, (27214 + 294) * kMiB);

  unsigned milliwatts = 0;
  ASSERT_EQ(nvml.get<nvml::DeviceGetUintFn>("nvmlDeviceGetEnforcedPowerLimit")(device, &milliwatts),
            NVML_SUCCESS);
  EXPECT_EQ(milliwatts, 300000u);

  std::vector<unsigned long> cpus(2, ~0UL);
  ASSERT_EQ(
      nvml.get<nvml::DeviceGetCpuAffinityFn>("nvmlDeviceGetCpuAffinity")(device, 2, cpus.data()),
      NVML_SUCCESS);
  EXPECT_EQ(cpus[0], 0x0FFFFF00000FFFFFUL);  // 0-19,40-59
  EXPECT_EQ(cpus[1], 0UL);

  nvmlGpuTopologyLevel_t level = 0;
  auto ancestor =
      nvml.get<nvml::DeviceGetTopologyCommonAncestorFn>("nvmlDeviceGetTopologyCommonAncestor");
  ASSERT_EQ(ancestor(device, nvml.device(1), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_SINGLE);
  ASSERT_EQ(ancestor(device, nvml.device(2), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_NODE);
  ASSERT_EQ(ancestor(device, nvml.device(5), &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_SYSTEM);

  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  EXPECT_EQ(get_count(&count), NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvml.shutdown(), NVML_ERROR_UNINITIALIZED);
}

TEST_F(FixtureNvml, InitIsReferenceCounted) {
  use(kFixtureDir + "/h200-1.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  unsigned count = 0;
  EXPECT_EQ(nvml.get<nvml::DeviceGetCountFn>("nvmlDeviceGetCount")(&count), NVML_SUCCESS);
  EXPECT_EQ(count, 1u);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  EXPECT_EQ(nvml.get<nvml::DeviceGetCountFn>("nvmlDeviceGetCount")(&count),
            NVML_ERROR_UNINITIALIZED);
}

TEST_F(FixtureNvml, ProcessListsGrowLikeNvml) {
  use(kFixtureDir + "/dgx1-v100.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto v3 = nvml.get<nvml::DeviceGetProcessesV2Fn>("nvmlDeviceGetComputeRunningProcesses_v3");
  unsigned count = 0;
  EXPECT_EQ(v3(nvml.device(5), &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  nvmlProcessInfo_v2_t records[2] = {};
  ASSERT_EQ(v3(nvml.device(5), &count, records), NVML_SUCCESS);
  EXPECT_EQ(records[0].pid, 51877u);
  EXPECT_EQ(records[0].usedGpuMemory, 9815ULL * 1024 * 1024);
  nvmlProcessInfo_v1_t old_records[4] = {};
  count = 4;
  ASSERT_EQ(nvml.get<nvml::DeviceGetProcessesV1Fn>("nvmlDeviceGetComputeRunningProcesses")(
                nvml.device(5), &count, old_records),
            NVML_SUCCESS);
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(old_records[1].pid, 52030u);
  count = 0;
  auto graphics =
      nvml.get<nvml::DeviceGetProcessesV2Fn>("nvmlDeviceGetGraphicsRunningProcesses_v3");
  EXPECT_EQ(graphics(nvml.device(5), &count, nullptr), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, NvLinksToPeersAndToTheNvSwitchFabric) {
  use(kFixtureDir + "/hgx-h200.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto state = nvml.get<nvml::DeviceGetNvLinkStateFn>("nvmlDeviceGetNvLinkState");
  auto remote_type =
      nvml.get<nvml::DeviceGetNvLinkRemoteDeviceTypeFn>("nvmlDeviceGetNvLinkRemoteDeviceType");
  auto remote_pci =
      nvml.get<nvml::DeviceGetNvLinkRemotePciInfoFn>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
  nvmlEnableState_t active = NVML_FEATURE_DISABLED;
  ASSERT_EQ(state(nvml.device(0), 17, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_ENABLED);
  EXPECT_EQ(state(nvml.device(0), 18, &active), NVML_ERROR_INVALID_ARGUMENT);
  nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_GPU;
  ASSERT_EQ(remote_type(nvml.device(0), 0, &type), NVML_SUCCESS);
  EXPECT_EQ(type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
  nvmlPciInfo_t pci{};
  ASSERT_EQ(remote_pci(nvml.device(0), 0, &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:FF:00.0");  // made up, and no GPU's
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);

  use(kFixtureDir + "/dgx1-v100.json");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  // GPU 0's links in fixture order: 1 to GPU 1, 1 to GPU 2, 2 to GPU 3, 2 to GPU 4.
  ASSERT_EQ(remote_pci(nvml.device(0), 2, &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:0B:00.0");
  ASSERT_EQ(remote_type(nvml.device(0), 5, &type), NVML_SUCCESS);
  EXPECT_EQ(type, NVML_NVLINK_DEVICE_TYPE_GPU);
  ASSERT_EQ(state(nvml.device(0), 6, &active), NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_DISABLED);
  EXPECT_EQ(remote_pci(nvml.device(0), 6, &pci), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);

  use(kFixtureDir + "/pcie-4gpu.json");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  EXPECT_EQ(state(nvml.device(0), 0, &active), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, LostGpuAnswersOnlyWhoItIs) {
  use(kTestFixtureDir + "/lost-gpu.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  nvmlDevice_t lost = nvml.device(2);
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(nvml.get<nvml::DeviceGetStringFn>("nvmlDeviceGetUUID")(lost, uuid, sizeof uuid),
            NVML_SUCCESS);
  unsigned minor = 0;
  EXPECT_EQ(nvml.get<nvml::DeviceGetUintFn>("nvmlDeviceGetMinorNumber")(lost, &minor),
            NVML_SUCCESS);
  nvmlUtilization_t utilization{};
  EXPECT_EQ(nvml.get<nvml::DeviceGetUtilizationRatesFn>("nvmlDeviceGetUtilizationRates")(
                lost, &utilization),
            NVML_ERROR_GPU_IS_LOST);
  nvmlGpuTopologyLevel_t level = 0;
  EXPECT_EQ(nvml.get<nvml::DeviceGetTopologyCommonAncestorFn>(
                "nvmlDeviceGetTopologyCommonAncestor")(nvml.device(3), lost, &level),
            NVML_ERROR_GPU_IS_LOST);
  // The bridge from GPU 3 to the lost GPU 2 is down.
  nvmlEnableState_t active = NVML_FEATURE_ENABLED;
  EXPECT_EQ(nvml.get<nvml::DeviceGetNvLinkStateFn>("nvmlDeviceGetNvLinkState")(nvml.device(3), 0,
                                                                               &active),
            NVML_SUCCESS);
  EXPECT_EQ(active, NVML_FEATURE_DISABLED);
  EXPECT_STREQ(nvml.get<nvml::ErrorStringFn>("nvmlErrorString")(NVML_ERROR_GPU_IS_LOST),
               "GPU is lost");
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, LegacyGenerationLacksTheNewerEntryPoints) {
  use(kTestFixtureDir + "/old-driver.json");
  SimulatedNvml legacy("legacy");
  ASSERT_TRUE(legacy.loaded()) << dlerror();
  for (const char* name :
       {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetMemoryAffinity",
        "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetMigMode",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemoteDeviceType",
        "nvmlDeviceGetNumGpuCores", "nvmlDeviceGetRemappedRows", "nvmlEventSetWait_v2",
        "nvmlDeviceGetCurrentClocksEventReasons"}) {
    EXPECT_FALSE(legacy.has(name)) << name;
  }
  EXPECT_TRUE(legacy.has("nvmlDeviceGetPciInfo_v2"));
  EXPECT_TRUE(legacy.has("nvmlDeviceGetClockInfo"));
  EXPECT_TRUE(legacy.has("nvmlEventSetWait"));
  EXPECT_TRUE(legacy.has("nvmlDeviceGetCurrentClocksThrottleReasons"));
  ASSERT_EQ(legacy.init(), NVML_SUCCESS);
  unsigned count = 0;
  nvmlProcessInfo_v1_t records[1] = {};
  count = 1;
  ASSERT_EQ(legacy.get<nvml::DeviceGetProcessesV1Fn>("nvmlDeviceGetComputeRunningProcesses")(
                legacy.device(0), &count, records),
            NVML_SUCCESS);
  EXPECT_EQ(records[0].usedGpuMemory, NVML_VALUE_NOT_AVAILABLE_ULL);
  unsigned milliwatts = 0;
  EXPECT_EQ(
      legacy.get<nvml::DeviceGetUintFn>("nvmlDeviceGetPowerUsage")(legacy.device(0), &milliwatts),
      NVML_ERROR_NOT_SUPPORTED);
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  ASSERT_EQ(
      legacy.get<nvml::SystemGetStringFn>("nvmlSystemGetDriverVersion")(version, sizeof version),
      NVML_SUCCESS);
  EXPECT_STREQ(version, "418.226.00");
  EXPECT_EQ(legacy.shutdown(), NVML_SUCCESS);

  SimulatedNvml current("current");
  EXPECT_TRUE(current.has("nvmlInit_v2"));
  EXPECT_TRUE(current.has("nvmlDeviceGetComputeRunningProcesses_v3"));
}

TEST_F(FixtureNvml, FindsFixturesByNameBesideTheLibraryAndRefusesBadOnes) {
  SimulatedNvml nvml("current");
  use("hgx-h200");  // the build tree keeps share/gpupool/fixtures where the install tree does
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  use(kTestFixtureDir + "/bad-type.json");
  EXPECT_EQ(nvml.init(), NVML_ERROR_DRIVER_NOT_LOADED);
  use("/nonexistent/machine.json");
  EXPECT_EQ(nvml.init(), NVML_ERROR_DRIVER_NOT_LOADED);
  unsetenv("GPUPOOL_SIM");
  EXPECT_EQ(nvml.init(), NVML_ERROR_DRIVER_NOT_LOADED);
}

TEST_F(FixtureNvml, MemoryRepairsAreOptional) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json",
                   R"({"gpus": {"0": {"retired_pages": 3, "retired_pages_pending": true},
                                      "1": {"remapped_rows": 2, "row_remapping_failed": true}}})");

  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto retired = nvml.get<nvml::DeviceGetRetiredPagesFn>("nvmlDeviceGetRetiredPages");
  unsigned count = 0;
  EXPECT_EQ(retired(nvml.device(0), NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 3u);
  unsigned long long addresses[4] = {};
  count = 4;
  EXPECT_EQ(retired(nvml.device(0), NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &count, addresses),
            NVML_SUCCESS);
  EXPECT_EQ(count, 3u);
  EXPECT_NE(addresses[2], 0u);
  count = 0;
  EXPECT_EQ(retired(nvml.device(2), NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &count, nullptr),
            NVML_ERROR_NOT_SUPPORTED);
  nvmlEnableState_t pending = 0;
  EXPECT_EQ(nvml.get<nvml::DeviceGetEnableStateFn>("nvmlDeviceGetRetiredPagesPendingStatus")(nvml.device(0), &pending),
            NVML_SUCCESS);
  EXPECT_EQ(pending, NVML_FEATURE_ENABLED);
  unsigned correctable = 9, uncorrectable = 0, remap_pending = 9, failed = 0;
  auto remapped = nvml.get<nvml::DeviceGetRemappedRowsFn>("nvmlDeviceGetRemappedRows");
  EXPECT_EQ(remapped(nvml.device(1), &correctable, &uncorrectable, &remap_pending, &failed), NVML_SUCCESS);
  EXPECT_EQ(correctable + uncorrectable, 2u);
  EXPECT_EQ(remap_pending, 0u);
  EXPECT_EQ(failed, 1u);
  // Absent from the fixture: NOT_SUPPORTED, which the backend shows as n/a (tests/e2e/test_doctor.py).
  EXPECT_EQ(remapped(nvml.device(0), &correctable, &uncorrectable, &remap_pending, &failed),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, HealthCountersComeFromTheFixture) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json",
                   R"({"gpus": {"1": {"ecc_corrected_aggregate": 12, "ecc_uncorrected_aggregate": 1,
                                            "clocks_event_reasons": 36, "pcie_replay_count": 7}}})");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto ecc = nvml.get<nvml::DeviceGetTotalEccErrorsFn>("nvmlDeviceGetTotalEccErrors");
  unsigned long long errors = 0;
  ASSERT_EQ(ecc(nvml.device(1), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, &errors), NVML_SUCCESS);
  EXPECT_EQ(errors, 12u);
  ASSERT_EQ(ecc(nvml.device(1), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &errors), NVML_SUCCESS);
  EXPECT_EQ(errors, 1u);
  ASSERT_EQ(ecc(nvml.device(1), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors), NVML_SUCCESS);
  EXPECT_EQ(errors, 0u);
  unsigned long long reasons = 0;
  ASSERT_EQ(nvml.get<nvml::DeviceGetUint64Fn>("nvmlDeviceGetCurrentClocksEventReasons")(nvml.device(1), &reasons),
            NVML_SUCCESS);
  EXPECT_EQ(reasons, 36u);
  unsigned replays = 0;
  ASSERT_EQ(nvml.get<nvml::DeviceGetUintFn>("nvmlDeviceGetPcieReplayCounter")(nvml.device(1), &replays), NVML_SUCCESS);
  EXPECT_EQ(replays, 7u);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, NvlinkErrorTotalsAreFieldValues) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json",
                   R"({"gpus": {"2": {"nvlink_replay_errors": 7, "nvlink_recovery_errors": 1}}})");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto get = nvml.get<nvml::DeviceGetFieldValuesFn>("nvmlDeviceGetFieldValues");
  nvmlFieldValue_t values[3] = {};
  values[0].fieldId = NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL;
  values[1].fieldId = NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL;
  values[2].fieldId = 1;  // ECC mode: a field the simulated driver does not answer
  ASSERT_EQ(get(nvml.device(2), 3, values), NVML_SUCCESS);
  EXPECT_EQ(values[0].nvmlReturn, NVML_SUCCESS);
  EXPECT_EQ(values[0].valueType, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
  EXPECT_EQ(values[0].value.ullVal, 7u);
  EXPECT_EQ(values[1].value.ullVal, 1u);
  EXPECT_EQ(values[2].nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(get(nvml.device(2), 1, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  unsetenv("GPUPOOL_SIM_STATE");

  // A GPU whose fixture has no NVLink counts refuses each field, and the call still succeeds.
  use(kFixtureDir + "/h200-1.json");
  SimulatedNvml single("current");
  ASSERT_EQ(single.init(), NVML_SUCCESS);
  nvmlFieldValue_t replay = {};
  replay.fieldId = NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL;
  ASSERT_EQ(single.get<nvml::DeviceGetFieldValuesFn>("nvmlDeviceGetFieldValues")(single.device(0), 1, &replay),
            NVML_SUCCESS);
  EXPECT_EQ(replay.nvmlReturn, NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(single.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, TheEnergyCounterIntegratesThePowerDrawFromVoltaOn) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json", R"({"gpus": {"0": {"power_w": 500}}})");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto energy = nvml.get<nvml::DeviceGetUint64Fn>("nvmlDeviceGetTotalEnergyConsumption");
  unsigned long long first = 0, second = 0;
  auto before = std::chrono::steady_clock::now();
  ASSERT_EQ(energy(nvml.device(0), &first), NVML_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(energy(nvml.device(0), &second), NVML_SUCCESS);
  double most_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  // 500 W for at least the 50 ms between the reads, at most the time the test took.
  EXPECT_GE(second - first, 500u * 50 - 1);
  EXPECT_LE(static_cast<double>(second - first), 500 * 1000 * most_s + 1);
  EXPECT_EQ(energy(nvml.device(0), nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  unsetenv("GPUPOOL_SIM_STATE");

  // Before Volta the driver keeps no such counter.
  use(kTestFixtureDir + "/old-driver.json");
  SimulatedNvml pascal("current");
  ASSERT_EQ(pascal.init(), NVML_SUCCESS);
  EXPECT_EQ(pascal.get<nvml::DeviceGetUint64Fn>("nvmlDeviceGetTotalEnergyConsumption")(pascal.device(0), &first),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(pascal.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, AnEventSetDeliversTheXidsAppendedAfterItRegistered) {
  std::string overlay = use_with_overlay(kFixtureDir + "/hgx-h200.json", R"({"gpus": {"2": {"xid_events": [48]}}})");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvml.get<nvml::EventSetCreateFn>("nvmlEventSetCreate")(&set), NVML_SUCCESS);
  auto enroll = nvml.get<nvml::DeviceRegisterEventsFn>("nvmlDeviceRegisterEvents");
  EXPECT_EQ(enroll(nvml.device(2), nvmlEventTypeXidCriticalError | 0x1, set), NVML_ERROR_NOT_SUPPORTED);
  for (unsigned gpu : {0u, 2u}) ASSERT_EQ(enroll(nvml.device(gpu), nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  auto wait = nvml.get<nvml::EventSetWaitFn>("nvmlEventSetWait_v2");
  nvmlEventData_t data{};
  EXPECT_EQ(wait(set, &data, 30), NVML_ERROR_TIMEOUT) << "the XID from before it registered is not delivered";

  write_overlay(overlay, R"({"gpus": {"2": {"xid_events": [48, 79]}, "0": {"xid_events": [13]}}})");
  std::vector<std::pair<nvmlDevice_t, unsigned long long>> seen;
  while (wait(set, &data, 1000) == NVML_SUCCESS) {
    EXPECT_EQ(data.eventType, nvmlEventTypeXidCriticalError);
    seen.emplace_back(data.device, data.eventData);
    if (seen.size() == 2) break;
  }
  std::ranges::sort(seen, {}, &std::pair<nvmlDevice_t, unsigned long long>::second);
  EXPECT_EQ(seen, (std::vector<std::pair<nvmlDevice_t, unsigned long long>>{{nvml.device(0), 13}, {nvml.device(2), 79}}));
  EXPECT_EQ(wait(set, &data, 0), NVML_ERROR_TIMEOUT) << "each event once";
  EXPECT_EQ(nvml.get<nvml::EventSetFreeFn>("nvmlEventSetFree")(set), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, ClocksAnswerSmAndMemoryOnly) {
  use(kFixtureDir + "/dgx-a100.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto clock = nvml.get<nvml::DeviceGetClockInfoFn>("nvmlDeviceGetClockInfo");
  unsigned mhz = 0;
  ASSERT_EQ(clock(nvml.device(0), NVML_CLOCK_SM, &mhz), NVML_SUCCESS);
  EXPECT_EQ(mhz, 1410u);  // busy
  ASSERT_EQ(clock(nvml.device(2), NVML_CLOCK_SM, &mhz), NVML_SUCCESS);
  EXPECT_EQ(mhz, 210u);  // idle
  ASSERT_EQ(clock(nvml.device(0), NVML_CLOCK_MEM, &mhz), NVML_SUCCESS);
  EXPECT_EQ(mhz, 1593u);
  constexpr nvmlClockType_t kGraphicsClock = 0;  // NVML_CLOCK_GRAPHICS: not modelled
  EXPECT_EQ(clock(nvml.device(0), kGraphicsClock, &mhz), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(clock(nvml.device(0), NVML_CLOCK_SM, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);

  use(kFixtureDir + "/mixed-workstation.json");  // no clock readings: n/a, never 0
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  EXPECT_EQ(clock(nvml.device(0), NVML_CLOCK_SM, &mhz), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(clock(nvml.device(1), NVML_CLOCK_MEM, &mhz), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, LiveOverlayIsReadWhenItChanges) {
  std::string overlay = ::testing::TempDir() + "gpupool-fake-nvml-overlay.json";
  std::filesystem::remove(overlay);
  setenv("GPUPOOL_SIM_STATE", overlay.c_str(), 1);
  use(kFixtureDir + "/hgx-h200.json");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto utilization_of = [&](unsigned index) {
    nvmlUtilization_t rates{};
    nvmlReturn_t rc = nvml.get<nvml::DeviceGetUtilizationRatesFn>("nvmlDeviceGetUtilizationRates")(
        nvml.device(index), &rates);
    return rc == NVML_SUCCESS ? static_cast<int>(rates.gpu) : -rc;
  };
  EXPECT_EQ(utilization_of(0), 0);  // no overlay file yet

  write_overlay(overlay, R"({"gpus": {"0": {"utilization_gpu": 97, "memory_used_mib": 500,
      "processes": [{"pid": 123, "used_memory_mib": 500, "kind": "compute"}]},
      "3": {"fault": "lost"}}})");
  EXPECT_EQ(utilization_of(0), 97);
  EXPECT_EQ(utilization_of(3), -NVML_ERROR_GPU_IS_LOST);
  unsigned count = 0;
  EXPECT_EQ(nvml.get<nvml::DeviceGetProcessesV2Fn>("nvmlDeviceGetComputeRunningProcesses_v3")(
                nvml.device(0), &count, nullptr),
            NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 1u);

  write_overlay(overlay, R"({"gpus": {"0": {"utilization_gpu": "busy"}}})");
  EXPECT_EQ(utilization_of(0), 97);  // malformed: the last good overlay stays

  write_overlay(overlay, R"({"gpus": {"0": {"utilization_gpu": 12}}})");
  EXPECT_EQ(utilization_of(0), 12);
  EXPECT_EQ(utilization_of(3), 0);

  std::filesystem::remove(overlay);
  EXPECT_EQ(utilization_of(0), 0);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, GpmOnHopperOnlyFromTwoSamplesInNvmlUnits) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json",
                   R"({"gpus": {"0": {"sm_active": 0.85, "nvlink_tx_bytes_per_s": 2097152}}})");
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto support = nvml.get<nvml::GpmQueryDeviceSupportFn>("nvmlGpmQueryDeviceSupport");
  auto alloc = nvml.get<nvml::GpmSampleAllocFn>("nvmlGpmSampleAlloc");
  auto release = nvml.get<nvml::GpmSampleFreeFn>("nvmlGpmSampleFree");
  auto sample = nvml.get<nvml::GpmSampleGetFn>("nvmlGpmSampleGet");
  auto metrics = nvml.get<nvml::GpmMetricsGetFn>("nvmlGpmMetricsGet");
  nvmlGpmSupport_t supported{NVML_GPM_SUPPORT_VERSION, 0};
  ASSERT_EQ(support(nvml.device(0), &supported), NVML_SUCCESS);
  EXPECT_EQ(supported.isSupportedDevice, 1u);
  nvmlGpmSample_t earlier = nullptr, later = nullptr;
  ASSERT_EQ(alloc(&earlier), NVML_SUCCESS);
  ASSERT_EQ(alloc(&later), NVML_SUCCESS);
  nvmlGpmMetricsGet_t request{};
  request.version = NVML_GPM_METRICS_GET_VERSION;
  request.numMetrics = 2;
  request.sample1 = earlier;
  request.sample2 = later;
  request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
  request.metrics[1].metricId = NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC;
  EXPECT_EQ(metrics(&request), NVML_ERROR_INVALID_ARGUMENT);  // nothing sampled yet
  ASSERT_EQ(sample(nvml.device(0), earlier), NVML_SUCCESS);
  ASSERT_EQ(sample(nvml.device(0), later), NVML_SUCCESS);
  ASSERT_EQ(metrics(&request), NVML_SUCCESS);
  EXPECT_EQ(request.metrics[0].nvmlReturn, NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(request.metrics[0].value, 85);  // percent
  EXPECT_DOUBLE_EQ(request.metrics[1].value, 2);   // MiB/s
  request.version = 2;
  EXPECT_EQ(metrics(&request), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(release(earlier), NVML_SUCCESS);
  EXPECT_EQ(release(later), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);

  unsetenv("GPUPOOL_SIM_STATE");
  use(kFixtureDir + "/dgx-a100.json");  // Ampere: no GPM
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  ASSERT_EQ(support(nvml.device(0), &supported), NVML_SUCCESS);
  EXPECT_EQ(supported.isSupportedDevice, 0u);
  ASSERT_EQ(alloc(&earlier), NVML_SUCCESS);
  EXPECT_EQ(sample(nvml.device(0), earlier), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(release(earlier), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
  EXPECT_FALSE(SimulatedNvml("legacy").has("nvmlGpmSampleGet"));  // an old driver
}

TEST_F(FixtureNvml, GpmPerGpuInstanceOfAMigGpu) {
  use(kFixtureDir + "/hgx-h200-mig.json");  // GPU 0: GPU instances 1 and 2
  SimulatedNvml nvml("current");
  ASSERT_EQ(nvml.init(), NVML_SUCCESS);
  auto alloc = nvml.get<nvml::GpmSampleAllocFn>("nvmlGpmSampleAlloc");
  auto release = nvml.get<nvml::GpmSampleFreeFn>("nvmlGpmSampleFree");
  auto whole = nvml.get<nvml::GpmSampleGetFn>("nvmlGpmSampleGet");
  auto instance = nvml.get<nvml::GpmMigSampleGetFn>("nvmlGpmMigSampleGet");
  auto metrics = nvml.get<nvml::GpmMetricsGetFn>("nvmlGpmMetricsGet");
  nvmlGpmSample_t earlier = nullptr, later = nullptr;
  ASSERT_EQ(alloc(&earlier), NVML_SUCCESS);
  ASSERT_EQ(alloc(&later), NVML_SUCCESS);
  nvmlGpmMetricsGet_t request{};
  request.version = NVML_GPM_METRICS_GET_VERSION;
  request.numMetrics = 1;
  request.sample1 = earlier;
  request.sample2 = later;
  request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL;
  ASSERT_EQ(instance(nvml.device(0), 2, earlier), NVML_SUCCESS);
  ASSERT_EQ(instance(nvml.device(0), 2, later), NVML_SUCCESS);
  ASSERT_EQ(metrics(&request), NVML_SUCCESS);
  EXPECT_EQ(request.metrics[0].nvmlReturn, NVML_SUCCESS);
  EXPECT_DOUBLE_EQ(request.metrics[0].value, 0);  // idle where the fixture says nothing
  // Two samples of different instances, or of an instance and the whole GPU, measure nothing.
  ASSERT_EQ(instance(nvml.device(0), 1, later), NVML_SUCCESS);
  EXPECT_EQ(metrics(&request), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(whole(nvml.device(0), later), NVML_SUCCESS);
  EXPECT_EQ(metrics(&request), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(instance(nvml.device(0), 5, later), NVML_ERROR_NOT_FOUND);  // no such GPU instance
  EXPECT_EQ(instance(nvml.device(1), 1, later), NVML_ERROR_NOT_FOUND);  // GPU 1 is not in MIG mode
  EXPECT_EQ(release(earlier), NVML_SUCCESS);
  EXPECT_EQ(release(later), NVML_SUCCESS);
  EXPECT_EQ(nvml.shutdown(), NVML_SUCCESS);
}

TEST_F(FixtureNvml, TheBackendMeasuresActivityFromItsSecondSnapshot) {
  use_with_overlay(kFixtureDir + "/hgx-h200.json",
                   R"({"gpus": {"0": {"sm_active": 0.5, "pcie_rx_bytes_per_s": 1048576}}})");
  unsetenv("GPUPOOL_NVML_LIBRARY");
  auto backend = open_gpu_backend();
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  DiscoveryScope scope{.links = false, .processes = false, .activity = true};
  auto first = (*backend)->discover(scope);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_FALSE(first->gpus[0].sm_active);  // one sample measures nothing
  // A snapshot within NVML's 100 ms refresh repeats the last activity; wait it out.
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  auto second = (*backend)->discover(scope);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_DOUBLE_EQ(*second->gpus[0].sm_active, 0.5);
  EXPECT_DOUBLE_EQ(*second->gpus[0].pcie_rx_bytes_per_s, 1048576);
  EXPECT_DOUBLE_EQ(*second->gpus[1].tensor_active, 0);  // idle, and reported
  auto without = (*backend)->discover(DiscoveryScope{});
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->gpus[0].sm_active);  // not asked
}

TEST_F(FixtureNvml, TheBackendReadsHealthCountersOnlyWhenAsked) {
  // No overlay: the process keeps NVML loaded from the first backend on, with that one's overlay.
  use(kFixtureDir + "/hgx-h200.json");
  unsetenv("GPUPOOL_NVML_LIBRARY");
  auto backend = open_gpu_backend();
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto with = (*backend)->discover(DiscoveryScope{.links = false, .processes = false});
  ASSERT_TRUE(with.ok()) << with.error().message;
  const Gpu& full = with->gpus[0];
  EXPECT_TRUE(full.ecc_corrected_aggregate && full.pcie_replay_count && full.nvlink_replay_errors &&
              full.clocks_event_reasons && full.energy_mj);
  // As `gpupool list` asks: what it shows (volatile ECC among it), none of the rest.
  auto without = (*backend)->discover(DiscoveryScope{.links = false, .processes = false, .health = false});
  ASSERT_TRUE(without.ok()) << without.error().message;
  const Gpu& listed = without->gpus[0];
  EXPECT_EQ(listed.ecc_corrected_volatile, full.ecc_corrected_volatile);
  EXPECT_EQ(listed.temperature_c, full.temperature_c);
  EXPECT_FALSE(listed.ecc_corrected_aggregate || listed.pcie_replay_count || listed.nvlink_replay_errors ||
               listed.clocks_event_reasons || listed.energy_mj || listed.row_remapping_pending ||
               listed.remapped_rows);
}

// The NVML backend, driven through the simulated library, must discover exactly the machine
// the fixture describes.
class FixtureCrossCheck : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    unsetenv("GPUPOOL_SIM");
    unsetenv("GPUPOOL_HOST_ROOT");
  }
};

TEST_P(FixtureCrossCheck, NvmlBackendDiscoversTheFixtureMachine) {
  auto path = locate_fixture(GetParam(), {kFixtureDir, kTestFixtureDir});
  ASSERT_TRUE(path.ok()) << path.error().message;
  auto fixture = load_fixture(*path);
  ASSERT_TRUE(fixture.ok()) << fixture.error().message;
  setenv("GPUPOOL_SIM", path->c_str(), 1);
  unsetenv("GPUPOOL_NVML_LIBRARY");
  unsetenv("GPUPOOL_SIM_STATE");
  // No /proc or /sys to fall back on: only what NVML says counts.
  setenv("GPUPOOL_HOST_ROOT", "/nonexistent-gpupool-host-root", 1);
  auto backend = open_gpu_backend();
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto discovered = (*backend)->discover(DiscoveryScope{});
  ASSERT_TRUE(discovered.ok()) << discovered.error().message;
  Machine expected = machine_from_fixture(*fixture);
  EXPECT_EQ(to_json(discovered->driver).dump(1), to_json(expected.driver).dump(1));
  ASSERT_EQ(discovered->gpus.size(), expected.gpus.size());
  for (size_t i = 0; i < expected.gpus.size(); ++i) {
    EXPECT_EQ(to_json(discovered->gpus[i]).dump(1), to_json(expected.gpus[i]).dump(1))
        << "GPU " << i;
  }
  EXPECT_EQ(topology_json(*discovered).dump(1), topology_json(expected).dump(1));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureCrossCheck,
                         ::testing::Values("dgx1-v100", "dgx-a100", "hgx-h200", "pcie-4gpu", "mixed-workstation",
                                           "h200-1", "dgx-a100-mig", "hgx-h200-mig", "a100-mig-mixed", "lost-gpu",
                                           "old-driver"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace gpupool::sim
