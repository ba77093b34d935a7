// Fragmentation-aware placement of memory slices, after FGD (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23): a slice goes to the GPU where it least increases the memory
// that the requests still to come could not use, judged from the sizes of the recent requests.
// Best fit alone leaves, say, 8 GiB on a card when most requests ask for 20; this leaves the
// 20 GiB a likely next request fits in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

#include "jobs/job.h"

namespace gpupool {

// The GPU requests of the last `window` submitted jobs: a whole-GPU request, or a slice of so
// many MiB. MIG requests take no part (they never share memory with slices).
class RequestMix {
 public:
  explicit RequestMix(size_t window) : window_(window) {}

  void add(const GpuRequest& request);
  bool empty() const { return recent_.empty(); }

  // The MiB of a GPU with `room_mib` free for slices that a request drawn from the mix could not
  // use, on average: all of it for a slice larger than the room, and for a whole-GPU request
  // unless the GPU is free (`whole_free`). FGD's expected fragmentation of one GPU.
  double unusable_mib(uint64_t room_mib, bool whole_free) const;

 private:
  static constexpr uint64_t kWholeGpu = 0;
  size_t window_;
  std::deque<uint64_t> recent_;         // slice MiB, or kWholeGpu; oldest first
  std::map<uint64_t, size_t> counts_;   // how many of each in `recent_`
};

// How much placing a `slice_mib` slice on a GPU with `room_mib` free changes unusable_mib: the
// slice goes where this is least (it is negative where the slice fills room others could not use).
double fragmentation_growth(const RequestMix& mix, uint64_t room_mib, bool whole_free, uint64_t slice_mib);

}  // namespace gpupool
