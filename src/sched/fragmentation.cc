#include "sched/fragmentation.h"

namespace gpupool {

void RequestMix::add(const GpuRequest& request) {
  if (request.mig || window_ == 0) return;
  uint64_t size = request.slice_mib.value_or(kWholeGpu);
  recent_.push_back(size);
  ++counts_[size];
  if (recent_.size() > window_) {
    auto oldest = counts_.find(recent_.front());
    if (--oldest->second == 0) counts_.erase(oldest);
    recent_.pop_front();
  }
}

double RequestMix::unusable_mib(uint64_t room_mib, bool whole_free) const {
  if (recent_.empty() || room_mib == 0) return 0;
  size_t cannot_use = 0;
  for (const auto& [size, count] : counts_) {
    bool fits = size == kWholeGpu ? whole_free : size <= room_mib;
    if (!fits) cannot_use += count;
  }
  return static_cast<double>(room_mib) * static_cast<double>(cannot_use) / static_cast<double>(recent_.size());
}

double fragmentation_growth(const RequestMix& mix, uint64_t room_mib, bool whole_free, uint64_t slice_mib) {
  uint64_t left = room_mib > slice_mib ? room_mib - slice_mib : 0;
  return mix.unusable_mib(left, false) - mix.unusable_mib(room_mib, whole_free);
}

}  // namespace gpupool
