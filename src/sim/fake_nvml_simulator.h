// The state behind the simulated libnvidia-ml.so.1 (fake_nvml.cc): the fixture it answers
// from, the live overlay it re-reads, and the handles it hands out, behind one lock.
#pragma once

#include <sys/types.h>

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "base/result.h"
#include "nvml/nvml_api.h"
#include "sim/fixture.h"

// The opaque handle NVML hands out; ours remembers which GPU it stands for.
struct nvmlDevice_st {
  unsigned index;
};

namespace gpupool::sim {

// Identity calls still answer for a GPU that fell off the bus; everything else fails.
enum class Needs { Identity, Health };

struct Query {
  const Fixture& machine;
  unsigned index;
  const FixtureGpu& gpu;
};

// What identifies one version of the overlay file; an atomic rename changes the inode.
using FileStamp = std::tuple<dev_t, ino_t, off_t, long long, long long>;

class Simulator {
 public:
  nvmlReturn_t init();
  nvmlReturn_t shutdown();

  template <typename Answer>
  nvmlReturn_t system(Answer&& answer) {
    std::lock_guard lock(mutex_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    return answer(current_);
  }

  nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t* device);

  template <typename Answer>
  nvmlReturn_t device(nvmlDevice_t device, Needs needs, Answer&& answer) {
    std::lock_guard lock(mutex_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    auto index = index_of(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_overlay();
    const FixtureGpu& gpu = current_.gpus[*index];
    if (needs == Needs::Health && gpu.fault) return NVML_ERROR_GPU_IS_LOST;
    return answer(Query{current_, *index, gpu});
  }

  template <typename Answer>
  nvmlReturn_t pair(nvmlDevice_t first, nvmlDevice_t second, Answer&& answer) {
    std::lock_guard lock(mutex_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    auto i = index_of(first);
    auto j = index_of(second);
    if (!i || !j) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_overlay();
    if (current_.gpus[*i].fault || current_.gpus[*j].fault) return NVML_ERROR_GPU_IS_LOST;
    return answer(current_.gpus[*i], current_.gpus[*j]);
  }

 private:
  Result<void> load();
  std::optional<unsigned> index_of(nvmlDevice_t device) const;

  // Re-reads the overlay whenever its file changes; a file that does not parse keeps the last good
  // state.
  void refresh_overlay();

  std::mutex mutex_;
  unsigned init_count_ = 0;
  std::string label_;
  std::string fixture_text_;
  Fixture base_;
  Fixture current_;
  std::string overlay_path_;
  std::optional<FileStamp> overlay_stamp_;
  std::deque<nvmlDevice_st> handles_;
};

// The process's one simulator, as NVML's state is one per process.
Simulator& simulator();

}  // namespace gpupool::sim
