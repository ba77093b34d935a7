// The GPM metrics gpupool reads (NVML's profiling counters, Hopper on) and the readings they fill
// (machine/gpu_readings.h). NVML gives utilisations in percent and rates in MiB per second;
// the readings, like dcgm-exporter, ratios from 0 to 1 and bytes per second. Header-only: the
// simulated NVML answers from the same table in the other direction.
#pragma once

#include <optional>

#include "nvml/nvml_api.h"

namespace gpupool {

enum class GpmUnit { Percent, MiBPerSecond };

// M(NVML metric id, reading, NVML's unit)
#define GPUPOOL_GPM_METRICS(M)                                              \
  M(NVML_GPM_METRIC_GRAPHICS_UTIL, gr_engine_active, Percent)               \
  M(NVML_GPM_METRIC_SM_UTIL, sm_active, Percent)                            \
  M(NVML_GPM_METRIC_SM_OCCUPANCY, sm_occupancy, Percent)                    \
  M(NVML_GPM_METRIC_ANY_TENSOR_UTIL, tensor_active, Percent)                \
  M(NVML_GPM_METRIC_DRAM_BW_UTIL, dram_active, Percent)                     \
  M(NVML_GPM_METRIC_FP64_UTIL, fp64_active, Percent)                        \
  M(NVML_GPM_METRIC_FP32_UTIL, fp32_active, Percent)                        \
  M(NVML_GPM_METRIC_FP16_UTIL, fp16_active, Percent)                        \
  M(NVML_GPM_METRIC_PCIE_TX_PER_SEC, pcie_tx_bytes_per_s, MiBPerSecond)     \
  M(NVML_GPM_METRIC_PCIE_RX_PER_SEC, pcie_rx_bytes_per_s, MiBPerSecond)     \
  M(NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, nvlink_tx_bytes_per_s, MiBPerSecond) \
  M(NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, nvlink_rx_bytes_per_s, MiBPerSecond)

#define GPUPOOL_COUNT_GPM_METRIC(...) +1
constexpr unsigned kGpmMetricCount = 0 GPUPOOL_GPM_METRICS(GPUPOOL_COUNT_GPM_METRIC);
#undef GPUPOOL_COUNT_GPM_METRIC
static_assert(kGpmMetricCount <= kGpmMetricsAsked, "nvmlGpmMetricsGet_t has room for every metric");

// How many of the reading's units one of NVML's is.
constexpr double gpm_scale(GpmUnit unit) { return unit == GpmUnit::Percent ? 0.01 : 1024.0 * 1024.0; }

// NVML's value in the reading's unit. A percentage NVML rounds past 100 is still a ratio of at most 1.
constexpr double reading_from_gpm(double value, GpmUnit unit) {
  double reading = value * gpm_scale(unit);
  if (reading < 0) return 0;
  return unit == GpmUnit::Percent && reading > 1 ? 1 : reading;
}

constexpr double gpm_from_reading(double reading, GpmUnit unit) { return reading / gpm_scale(unit); }

// Asks for every metric of the table between two samples.
inline nvmlGpmMetricsGet_t gpm_request(nvmlGpmSample_t earlier, nvmlGpmSample_t later) {
  nvmlGpmMetricsGet_t request{};
  request.version = NVML_GPM_METRICS_GET_VERSION;
  request.sample1 = earlier;
  request.sample2 = later;
#define GPUPOOL_ASK_GPM_METRIC(id, field, unit) request.metrics[request.numMetrics++].metricId = id;
  GPUPOOL_GPM_METRICS(GPUPOOL_ASK_GPM_METRIC)
#undef GPUPOOL_ASK_GPM_METRIC
  return request;
}

// Fills the readings of `gpu` (a Gpu) from NVML's answer to gpm_request; a metric NVML did not
// compute stays empty.
template <typename G>
void set_gpm_readings(const nvmlGpmMetricsGet_t& answer, G& gpu) {
  for (unsigned i = 0; i < answer.numMetrics && i < kGpmMetricsAsked; ++i) {
    const nvmlGpmMetric_t& metric = answer.metrics[i];
    if (metric.nvmlReturn != NVML_SUCCESS) continue;
#define GPUPOOL_SET_GPM_READING(id, field, unit) \
  if (metric.metricId == id) gpu.field = reading_from_gpm(metric.value, GpmUnit::unit);
    GPUPOOL_GPM_METRICS(GPUPOOL_SET_GPM_READING)
#undef GPUPOOL_SET_GPM_READING
  }
}

// Copies the GPM readings of `from` into `to` (of any types with the readings' members).
template <typename From, typename To>
void copy_gpm_readings(const From& from, To& to) {
#define GPUPOOL_COPY_GPM_READING(id, field, unit) to.field = from.field;
  GPUPOOL_GPM_METRICS(GPUPOOL_COPY_GPM_READING)
#undef GPUPOOL_COPY_GPM_READING
}

}  // namespace gpupool
