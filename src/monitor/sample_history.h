// The daemon's memory of what the GPUs did: one sample per GPU per sampling tick, kept in a
// ring buffer of fixed size (an hour at one tick a second by default), oldest overwritten.
// Not thread-safe: the monitor guards it with its lock.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "machine/gpu.h"

namespace gpupool {

// The measurements of one GPU at one moment; a field the GPU does not report stays empty.
struct GpuSample {
  double time = 0;  // Unix seconds
  std::optional<unsigned> utilization_gpu;     // percent
  std::optional<unsigned> utilization_memory;  // percent (memory copy engine)
  std::optional<uint64_t> memory_used_mib;
  std::optional<uint64_t> memory_free_mib;
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> memory_clock_mhz;
  std::optional<double> power_w;
};

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
