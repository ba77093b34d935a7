#include "gpu/gpm_metrics.h"

#include <gtest/gtest.h>

#include "machine/gpu.h"

namespace gpupool {
namespace {

nvmlGpmMetric_t* find_metric(nvmlGpmMetricsGet_t& request, nvmlGpmMetricId_t id) {
  for (unsigned i = 0; i < request.numMetrics; ++i) {
    if (request.metrics[i].metricId == static_cast<unsigned>(id)) return &request.metrics[i];
  }
  return nullptr;
}

TEST(GpmMetrics, PercentBecomesARatioAndMibPerSecondBytes) {
  EXPECT_DOUBLE_EQ(reading_from_gpm(85, GpmUnit::Percent), 0.85);
  EXPECT_DOUBLE_EQ(reading_from_gpm(0, GpmUnit::Percent), 0);
  EXPECT_DOUBLE_EQ(reading_from_gpm(1.5, GpmUnit::MiBPerSecond), 1.5 * 1048576);
  EXPECT_DOUBLE_EQ(gpm_from_reading(0.25, GpmUnit::Percent), 25);
  EXPECT_DOUBLE_EQ(gpm_from_reading(2097152, GpmUnit::MiBPerSecond), 2);
}

TEST(GpmMetrics, ARatioStaysBetweenZeroAndOne) {
  // Counters read a little apart can compute to just over 100 %, or below 0 after a wrap.
  EXPECT_DOUBLE_EQ(reading_from_gpm(100.4, GpmUnit::Percent), 1);
  EXPECT_DOUBLE_EQ(reading_from_gpm(-0.1, GpmUnit::Percent), 0);
  EXPECT_DOUBLE_EQ(reading_from_gpm(250000, GpmUnit::MiBPerSecond), 250000.0 * 1048576);
}

TEST(GpmMetrics, TheRequestAsksEveryMetricOnce) {
  nvmlGpmMetricsGet_t request = gpm_request(nullptr, nullptr);
  EXPECT_EQ(request.version, NVML_GPM_METRICS_GET_VERSION);
  EXPECT_EQ(request.numMetrics, kGpmMetricCount);
  for (nvmlGpmMetricId_t id : {NVML_GPM_METRIC_GRAPHICS_UTIL, NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY,
                               NVML_GPM_METRIC_ANY_TENSOR_UTIL, NVML_GPM_METRIC_DRAM_BW_UTIL, NVML_GPM_METRIC_FP64_UTIL,
                               NVML_GPM_METRIC_FP32_UTIL, NVML_GPM_METRIC_FP16_UTIL, NVML_GPM_METRIC_PCIE_TX_PER_SEC,
                               NVML_GPM_METRIC_PCIE_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
                               NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC}) {
    EXPECT_NE(find_metric(request, id), nullptr) << id;
  }
}

TEST(GpmMetrics, AnswersFillTheReadingsAndFailuresLeaveThemEmpty) {
  nvmlGpmMetricsGet_t answer = gpm_request(nullptr, nullptr);
  for (unsigned i = 0; i < answer.numMetrics; ++i) answer.metrics[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
  nvmlGpmMetric_t* sm = find_metric(answer, NVML_GPM_METRIC_SM_UTIL);
  *sm = {.metricId = static_cast<unsigned>(NVML_GPM_METRIC_SM_UTIL), .nvmlReturn = NVML_SUCCESS, .value = 92.5,
         .metricInfo = {}};
  nvmlGpmMetric_t* tensor = find_metric(answer, NVML_GPM_METRIC_ANY_TENSOR_UTIL);
  tensor->nvmlReturn = NVML_SUCCESS;
  tensor->value = 61;
  nvmlGpmMetric_t* nvlink_tx = find_metric(answer, NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC);
  nvlink_tx->nvmlReturn = NVML_SUCCESS;
  nvlink_tx->value = 1000;
  Gpu gpu;
  set_gpm_readings(answer, gpu);
  EXPECT_DOUBLE_EQ(*gpu.sm_active, 0.925);
  EXPECT_DOUBLE_EQ(*gpu.tensor_active, 0.61);
  EXPECT_DOUBLE_EQ(*gpu.nvlink_tx_bytes_per_s, 1000.0 * 1048576);
  EXPECT_FALSE(gpu.nvlink_rx_bytes_per_s);
  EXPECT_FALSE(gpu.dram_active);
  EXPECT_FALSE(gpu.gr_engine_active);
}

}  // namespace
}  // namespace gpupool
