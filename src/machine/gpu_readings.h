// The table of GPU readings: every value NVML reports about a GPU beyond its identity, one line
// each. The machine model (Gpu), the fixture's GPU (sim::FixtureGpu), the monitor's samples
// (GpuSample), the JSON of `gpupool list --json` and the daemon's API, fixture reading and
// writing, and /metrics are all generated from it, so a new reading is a line here plus its
// NVML calls (gpu/nvml_backend.cc, sim/fake_nvml.cc). docs/architecture.md says how.
//
// R(type, field, fixture, json, sample, metric, help):
//   type     the value: Gpu holds std::optional<type>, empty when the driver does not report it
//   field    the C++ member, and the key in JSON and in fixtures; its suffix names the unit
//            (_mib, _c, _w, _mhz, _bytes_per_s; utilizations are percent, the
//            profiling activities (`_active`, `_occupancy`) ratios from 0 to 1 as DCGM's)
//   fixture  how a fixture gives it (FixtureKey): Required (null: not supported), Zero (absent:
//            0 or false), Null (absent: not supported), ZeroNotNull (absent: 0 or false, never
//            null), ByHand (sim/fixture.cc reads it: its default comes from other keys), Derived
//            (no key: the simulated library computes it from others)
//   json     InJson or NotInJson: whether the GPU's JSON carries it
//   sample   NotSampled; Sampled: in every monitor sample, its history, the API and /metrics;
//            SampledForMetrics: sampled for /metrics only
//   metric   for sampled readings, dcgm-exporter's metric name and its help text; else ""
//
// Sampled readings come in the order /metrics lists them.
#pragma once

#define GPUPOOL_GPU_READINGS(R)                                                                   \
  R(unsigned, minor_number, ByHand, InJson, NotSampled, "", "")                                   \
  R(uint64_t, memory_total_mib, Required, InJson, NotSampled, "", "")                             \
  R(unsigned, utilization_gpu, Zero, InJson, Sampled, "DCGM_FI_DEV_GPU_UTIL",                     \
    "GPU utilization (in %).")                                                                    \
  R(unsigned, utilization_memory, Zero, InJson, Sampled, "DCGM_FI_DEV_MEM_COPY_UTIL",             \
    "Memory utilization (in %).")                                                                 \
  R(uint64_t, memory_used_mib, ZeroNotNull, InJson, Sampled, "DCGM_FI_DEV_FB_USED",               \
    "Framebuffer memory used (in MiB).")                                                          \
  R(uint64_t, memory_free_mib, Derived, InJson, Sampled, "DCGM_FI_DEV_FB_FREE",                   \
    "Framebuffer memory free (in MiB).")                                                          \
  R(unsigned, temperature_c, Required, InJson, Sampled, "DCGM_FI_DEV_GPU_TEMP",                   \
    "GPU temperature (in C).")                                                                    \
  R(double, power_w, Required, InJson, Sampled, "DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")  \
  /* A counter since the driver loaded (Volta on); the simulated GPU integrates its power draw. */ \
  R(uint64_t, energy_mj, Derived, NotInJson, SampledForMetrics, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", \
    "Total energy consumption since boot (in mJ).")                                               \
  R(unsigned, sm_clock_mhz, Null, InJson, SampledForMetrics, "DCGM_FI_DEV_SM_CLOCK",              \
    "SM clock frequency (in MHz).")                                                               \
  R(unsigned, memory_clock_mhz, Null, InJson, SampledForMetrics, "DCGM_FI_DEV_MEM_CLOCK",         \
    "Memory clock frequency (in MHz).")                                                           \
  /* Profiling activity (NVML's GPM, Hopper on), in dcgm-exporter's units: ratios 0-1 and bytes \
     per second, averaged between two monitor samples. Absent where GPM is not supported, and  \
     in a one-off snapshot (it takes two samples). */                                           \
  R(double, gr_engine_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_GR_ENGINE_ACTIVE",   \
    "Ratio of time the graphics engine is active.")                                               \
  R(double, sm_active, ByHand, InJson, Sampled, "DCGM_FI_PROF_SM_ACTIVE",                           \
    "The ratio of cycles an SM has at least 1 warp assigned.")                                    \
  R(double, sm_occupancy, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_SM_OCCUPANCY",        \
    "The ratio of number of warps resident on an SM.")                                            \
  R(double, tensor_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", \
    "Ratio of cycles the tensor (HMMA) pipe is active.")                                          \
  R(double, dram_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_DRAM_ACTIVE",          \
    "Ratio of cycles the device memory interface is active sending or receiving data.")           \
  R(double, fp64_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PIPE_FP64_ACTIVE",     \
    "Ratio of cycles the fp64 pipes are active.")                                                 \
  R(double, fp32_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PIPE_FP32_ACTIVE",     \
    "Ratio of cycles the fp32 pipes are active.")                                                 \
  R(double, fp16_active, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PIPE_FP16_ACTIVE",     \
    "Ratio of cycles the fp16 pipes are active.")                                                 \
  R(double, pcie_tx_bytes_per_s, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PCIE_TX_BYTES", \
    "PCIe data transmitted, headers included (in B/s).") \
  R(double, pcie_rx_bytes_per_s, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_PCIE_RX_BYTES", \
    "PCIe data received, headers included (in B/s).") \
  R(double, nvlink_tx_bytes_per_s, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_NVLINK_TX_BYTES", \
    "NVLink data transmitted (in B/s).") \
  R(double, nvlink_rx_bytes_per_s, ByHand, NotInJson, SampledForMetrics, "DCGM_FI_PROF_NVLINK_RX_BYTES", \
    "NVLink data received (in B/s).") \
  R(double, power_limit_w, Required, InJson, NotSampled, "", "")                                  \
  R(bool, persistence_mode, Required, InJson, NotSampled, "", "")                                 \
  R(ComputeMode, compute_mode, Required, InJson, NotSampled, "", "")                              \
  R(bool, mig_enabled, Required, InJson, NotSampled, "", "")                                      \
  /* Health, for /metrics (dcgm-exporter's names) and doctor; the quarantine reads them too.   \
     ECC counts: volatile since the driver loaded, aggregate over the GPU's life. */              \
  R(uint64_t, ecc_corrected_volatile, Zero, InJson, SampledForMetrics, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", \
    "Total number of single-bit volatile ECC errors.")                                           \
  R(uint64_t, ecc_uncorrected_volatile, Zero, InJson, SampledForMetrics, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", \
    "Total number of double-bit volatile ECC errors.")                                           \
  R(uint64_t, ecc_corrected_aggregate, Zero, NotInJson, SampledForMetrics, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", \
    "Total number of single-bit persistent ECC errors.")                                         \
  R(uint64_t, ecc_uncorrected_aggregate, Zero, NotInJson, SampledForMetrics, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", \
    "Total number of double-bit persistent ECC errors.")                                         \
  /* Memory repairs: pages retired after ECC errors (before Ampere), rows remapped (Ampere on). \
     A pending repair takes effect at the next GPU reset or driver load; a failed remap needs  \
     service. */                                                                                  \
  R(unsigned, retired_pages, Null, NotInJson, NotSampled, "", "")                                 \
  R(bool, retired_pages_pending, ZeroNotNull, NotInJson, NotSampled, "", "")                      \
  R(unsigned, remapped_rows, Null, NotInJson, NotSampled, "", "")                                 \
  R(bool, row_remapping_pending, ZeroNotNull, NotInJson, SampledForMetrics, "DCGM_FI_DEV_ROW_REMAP_PENDING", \
    "Whether remapping of rows is pending (the GPU needs a reset).")                              \
  R(bool, row_remapping_failed, ZeroNotNull, NotInJson, SampledForMetrics, "DCGM_FI_DEV_ROW_REMAP_FAILURE", \
    "Whether remapping of rows has failed.")                                                      \
  /* Why the clocks are held below their maximum: a bitmask of NVML's clocks event reasons     \
     (0x1 idle, 0x4 power cap, 0x8 hardware slowdown, 0x20 thermal, ...). */                    \
  R(uint64_t, clocks_event_reasons, Zero, NotInJson, SampledForMetrics, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", \
    "Current clock throttle reasons.")                                                            \
  R(unsigned, pcie_replay_count, Zero, NotInJson, SampledForMetrics, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", \
    "Total number of PCIe retries.")                                                              \
  /* NVLink errors summed over the GPU's links since the driver loaded; absent without NVLink. */ \
  R(uint64_t, nvlink_crc_flit_errors, Null, NotInJson, SampledForMetrics,                         \
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.") \
  R(uint64_t, nvlink_crc_data_errors, Null, NotInJson, SampledForMetrics,                         \
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.")   \
  R(uint64_t, nvlink_replay_errors, Null, NotInJson, SampledForMetrics,                           \
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.")            \
  R(uint64_t, nvlink_recovery_errors, Null, NotInJson, SampledForMetrics,                         \
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.")  \
  R(int, numa_node, ByHand, InJson, NotSampled, "", "")                                           \
  /* A CPU list, as in /sys: "0-15,32-47". */                                                     \
  R(std::string, cpu_affinity, ByHand, InJson, NotSampled, "", "")                                \
  R(ComputeCapability, compute_capability, Required, InJson, NotSampled, "", "")                  \
  /* A fixture gives the CUDA cores instead, as NVML does. */                                     \
  R(unsigned, multiprocessors, Derived, InJson, NotSampled, "", "")

// `__VA_ARGS__` where a reading with this `sample` value is sampled, nothing where it is not.
#define GPUPOOL_IF_SAMPLED(sample, ...) GPUPOOL_IF_SAMPLED_##sample(__VA_ARGS__)
#define GPUPOOL_IF_SAMPLED_NotSampled(...)
#define GPUPOOL_IF_SAMPLED_Sampled(...) __VA_ARGS__
#define GPUPOOL_IF_SAMPLED_SampledForMetrics(...) __VA_ARGS__

// `__VA_ARGS__` where a reading with this `fixture` value has a fixture key.
#define GPUPOOL_IF_IN_FIXTURE(fixture, ...) GPUPOOL_IF_IN_FIXTURE_##fixture(__VA_ARGS__)
#define GPUPOOL_IF_IN_FIXTURE_Required(...) __VA_ARGS__
#define GPUPOOL_IF_IN_FIXTURE_Zero(...) __VA_ARGS__
#define GPUPOOL_IF_IN_FIXTURE_Null(...) __VA_ARGS__
#define GPUPOOL_IF_IN_FIXTURE_ZeroNotNull(...) __VA_ARGS__
#define GPUPOOL_IF_IN_FIXTURE_ByHand(...) __VA_ARGS__
#define GPUPOOL_IF_IN_FIXTURE_Derived(...)

namespace gpupool {

enum class FixtureKey { Required, Zero, Null, ZeroNotNull, ByHand, Derived };
enum class JsonUse { InJson, NotInJson };
enum class SampleUse { NotSampled, Sampled, SampledForMetrics };

// One line of the table, as the code that handles readings alike sees it.
struct ReadingInfo {
  const char* key;
  FixtureKey fixture;
  JsonUse json;
  SampleUse sample;
  const char* metric;
  const char* help;
};

}  // namespace gpupool

#define GPUPOOL_READING_INFO(type, field, fixture, json, sample, metric, help)               \
  ::gpupool::ReadingInfo {                                                                    \
    #field, ::gpupool::FixtureKey::fixture, ::gpupool::JsonUse::json,                         \
        ::gpupool::SampleUse::sample, metric, help                                            \
  }
