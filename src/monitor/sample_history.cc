#include "monitor/sample_history.h"

#include <algorithm>

namespace gpupool {

GpuSample sample_of(const Gpu& gpu, double time) {
  GpuSample sample;
  sample.time = time;
#define GPUPOOL_COPY_SAMPLED(type, field, fixture, json, sample_use, ...) \
  GPUPOOL_IF_SAMPLED(sample_use, sample.field = gpu.field;)
  GPUPOOL_GPU_READINGS(GPUPOOL_COPY_SAMPLED)
#undef GPUPOOL_COPY_SAMPLED
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
