// The state behind the simulated libnvidia-ml.so.1 (fake_nvml.cc): the fixture it answers
// from, the live overlay it re-reads, and the handles it hands out, behind one lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/result.h"
#include "nvml/nvml_api.h"
#include "sim/fixture.h"

// The opaque handle NVML hands out; ours remembers which GPU it stands for, and for a MIG device
// handle which of the GPU's MIG devices.
struct nvmlDevice_st {
  unsigned index;
  unsigned mig_index = kNotMig;
  static constexpr unsigned kNotMig = ~0u;
};

namespace gpupool::sim {

// Identity calls still answer for a GPU that fell off the bus; everything else fails.
enum class Needs { Identity, Health };

struct Query {
  const Fixture& machine;
  unsigned index;
  const FixtureGpu& gpu;
};

struct MigQuery {
  const FixtureGpu& gpu;
  const FixtureMigDevice& mig;
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

  // The handle of the GPU's MIG device `mig_index`: NOT_FOUND where the GPU has none there.
  nvmlReturn_t mig_handle_by_index(nvmlDevice_t device, unsigned mig_index, nvmlDevice_t* mig);

  bool is_mig_handle(nvmlDevice_t device) const {
    return device != nullptr && device->mig_index != nvmlDevice_st::kNotMig;
  }

  // Answers a call on a MIG device handle (one from mig_handle_by_index).
  template <typename Answer>
  nvmlReturn_t mig_device(nvmlDevice_t device, Answer&& answer) {
    std::lock_guard lock(mutex_);
    if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
    if (!is_mig_handle(device) || !is_known_mig_handle(device)) return NVML_ERROR_INVALID_ARGUMENT;
    refresh_overlay();
    const FixtureGpu& gpu = current_.gpus[device->index];
    if (gpu.fault) return NVML_ERROR_GPU_IS_LOST;
    // A MIG device the overlay took away leaves a stale handle, as a destroyed instance does.
    if (device->mig_index >= gpu.mig_devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
    return answer(MigQuery{gpu, gpu.mig_devices[device->mig_index]});
  }

  // GPU `index`'s energy counter in mJ: its power draw integrated from the first time asked, as
  // the driver's counts from its load. Called from within an answer, under the simulator's lock.
  uint64_t energy_mj(unsigned index, double power_w);

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
  bool is_known_mig_handle(nvmlDevice_t device) const;

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
  std::string loaded_sim_;  // GPUPOOL_SIM as it was when the fixture was loaded
  std::optional<FileStamp> overlay_stamp_;
  std::deque<nvmlDevice_st> handles_;
  std::deque<nvmlDevice_st> mig_handles_;  // handed out on demand, never moved
  struct EnergyMeter {
    std::chrono::steady_clock::time_point read_at;
    double mj = 0;
  };
  std::vector<std::optional<EnergyMeter>> energy_;  // by GPU index, from its first reading
};

// The process's one simulator, as NVML's state is one per process.
Simulator& simulator();

}  // namespace gpupool::sim
