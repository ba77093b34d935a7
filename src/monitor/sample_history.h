// The daemon's memory of what the GPUs did: one sample per GPU per sampling tick, kept in a
// ring buffer of fixed size (an hour at one tick a second by default), oldest overwritten.
// Not thread-safe: the monitor guards it with its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "machine/gpu.h"

namespace gpupool {

// The sampled readings (machine/gpu_readings.h) of one GPU at one moment; a reading the GPU does
// not report stays empty.
struct GpuSample {
  double time = 0;  // Unix seconds
#define GPUPOOL_SAMPLE_FIELD(type, field, fixture, json, sample, ...) \
  GPUPOOL_IF_SAMPLED(sample, std::optional<type> field;)
  GPUPOOL_GPU_READINGS(GPUPOOL_SAMPLE_FIELD)
#undef GPUPOOL_SAMPLE_FIELD
};

// Calls visit(info, value) for each reading of `sample` (any GpuSample), in the
// table's order; value is the std::optional member.
template <typename S, typename Visit>
void for_each_sampled_reading(S&& sample, Visit&& visit) {
#define GPUPOOL_VISIT_SAMPLED(type, field, fixture, json, sample_use, metric, help) \
  GPUPOOL_IF_SAMPLED(sample_use,                                                 \
                     visit(GPUPOOL_READING_INFO(type, field, fixture, json, sample_use, metric, help), sample.field);)
  GPUPOOL_GPU_READINGS(GPUPOOL_VISIT_SAMPLED)
#undef GPUPOOL_VISIT_SAMPLED
}

GpuSample sample_of(const Gpu& gpu, double time);

class SampleHistory {
 public:
  // Room for `ticks` ticks of `gpus` GPUs each.
  SampleHistory(size_t gpus, size_t ticks);

  // One tick: a sample for every GPU, in index order (missing ones count as empty samples).
  void add(const std::vector<GpuSample>& tick);
  // GPU `gpu`'s samples taken after `after`, oldest first.
  std::vector<GpuSample> after(size_t gpu, double after) const;
  // The newest sample of GPU `gpu`, if any tick was recorded.
  std::optional<GpuSample> latest(size_t gpu) const;

  size_t gpus() const { return gpus_; }
  size_t ticks() const { return count_; }
  size_t capacity() const { return capacity_; }

 private:
  const GpuSample& at(size_t age, size_t gpu) const;  // age 0: the newest tick

  size_t gpus_;
  size_t capacity_;
  std::vector<GpuSample> slots_;  // capacity_ ticks of gpus_ samples
  size_t next_ = 0;               // the tick slot written next
  size_t count_ = 0;
};

}  // namespace gpupool
