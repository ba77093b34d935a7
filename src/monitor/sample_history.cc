#include "monitor/sample_history.h"

#include <algorithm>

namespace gpupool {

GpuSample sample_of(const Gpu& gpu, double time) {
  GpuSample sample;
  sample.time = time;
  sample.utilization_gpu = gpu.utilization_gpu;
  sample.utilization_memory = gpu.utilization_memory;
  sample.memory_used_mib = gpu.memory_used_mib;
  sample.memory_free_mib = gpu.memory_free_mib;
  sample.temperature_c = gpu.temperature_c;
  sample.sm_clock_mhz = gpu.sm_clock_mhz;
  sample.memory_clock_mhz = gpu.memory_clock_mhz;
  sample.power_w = gpu.power_w;
  return sample;
}

SampleHistory::SampleHistory(size_t gpus, size_t ticks)
    : gpus_(gpus), capacity_(std::max<size_t>(ticks, 1)), slots_(gpus_ * capacity_) {}

void SampleHistory::add(const std::vector<GpuSample>& tick) {
  double time = tick.empty() ? 0 : tick.front().time;
  for (size_t gpu = 0; gpu < gpus_; ++gpu) {
    GpuSample& slot = slots_[next_ * gpus_ + gpu];
    if (gpu < tick.size()) {
      slot = tick[gpu];
    } else {
      slot = GpuSample{};
      slot.time = time;
    }
  }
  next_ = (next_ + 1) % capacity_;
  count_ = std::min(count_ + 1, capacity_);
}

const GpuSample& SampleHistory::at(size_t age, size_t gpu) const {
  size_t slot = (next_ + capacity_ - 1 - age) % capacity_;
  return slots_[slot * gpus_ + gpu];
}

std::vector<GpuSample> SampleHistory::after(size_t gpu, double after) const {
  std::vector<GpuSample> samples;
  if (gpu >= gpus_) return samples;
  // Ticks are in time order: walk back from the newest to the first one too old.
  size_t newer = 0;
  while (newer < count_ && at(newer, gpu).time > after) ++newer;
  samples.reserve(newer);
  for (size_t age = newer; age-- > 0;) samples.push_back(at(age, gpu));
  return samples;
}

std::optional<GpuSample> SampleHistory::latest(size_t gpu) const {
  if (count_ == 0 || gpu >= gpus_) return std::nullopt;
  return at(0, gpu);
}

}  // namespace gpupool
