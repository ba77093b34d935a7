#include "machine/gpu_json.h"

#include <gtest/gtest.h>

namespace gpupool {
namespace {

using nlohmann::json;

// A GPU that reports every reading (each its type's zero value).
Gpu gpu_reporting_everything() {
  Gpu gpu;
  for_each_reading(gpu, [](const ReadingInfo&, auto& value) { value.emplace(); });
  return gpu;
}

TEST(GpuJson, CarriesTheReadingsTheTableMarksInJsonUnderTheirKeys) {
  Gpu gpu = gpu_reporting_everything();
  json out = to_json(gpu);
  for_each_reading(gpu, [&](const ReadingInfo& reading, const auto&) {
    bool in_json = reading.json == JsonUse::InJson;
    EXPECT_EQ(out.contains(reading.key), in_json) << reading.key;
    if (in_json) {
      EXPECT_FALSE(out[reading.key].is_null()) << reading.key;
    }
  });
}

TEST(GpuJson, AReadingNotReportedIsNull) {
  Gpu gpu;
  json out = to_json(gpu);
  for_each_reading(gpu, [&](const ReadingInfo& reading, const auto&) {
    if (reading.json == JsonUse::InJson) {
      EXPECT_TRUE(out[reading.key].is_null()) << reading.key;
    }
  });
}

TEST(GpuJson, EccCountsAreSpelledAsInFixtures) {
  Gpu gpu;
  gpu.ecc_corrected_volatile = 3;
  gpu.ecc_uncorrected_volatile = 1;
  json out = to_json(gpu);
  EXPECT_EQ(out["ecc_corrected_volatile"], 3);
  EXPECT_EQ(out["ecc_uncorrected_volatile"], 1);
  EXPECT_FALSE(out.contains("ecc_errors_corrected_volatile"));
}

TEST(GpuJson, WattsHaveTwoDecimalsAndNamedValuesAreText) {
  Gpu gpu;
  gpu.power_w = 512.3456;
  gpu.compute_mode = ComputeMode::ExclusiveProcess;
  gpu.compute_capability = ComputeCapability{9, 0};
  json out = to_json(gpu);
  EXPECT_DOUBLE_EQ(out["power_w"].get<double>(), 512.35);
  EXPECT_EQ(out["compute_mode"], "exclusive_process");
  EXPECT_EQ(out["compute_capability"], "9.0");
}

}  // namespace
}  // namespace gpupool
