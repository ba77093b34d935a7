#include "sim/fake_nvml_simulator.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

namespace gpupool::sim {
namespace {

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) return std::nullopt;
  return FileStamp{info.st_dev, info.st_ino, info.st_size, info.st_mtim.tv_sec, info.st_mtim.tv_nsec};
}

// share/gpupool/fixtures of the tree this library sits in (lib/gpupool/sim/<generation>/).
std::string fixture_dir_beside_library() {
  static const int anchor = 0;
  Dl_info info{};
  if (dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr) return "";
  std::filesystem::path library(info.dli_fname);
  return (library.parent_path() / "../../../../share/gpupool/fixtures").lexically_normal().string();
}

Result<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fail("{} is not set", name);
  return std::string(value);
}

// The real library starts threads of its own on its first initialisation, with the signal mask
// of the thread that called it; the simulation does the same, so that the simulated machines
// show what a thread that takes gpupool's signals does (see nvml_library.cc).
void start_background_thread() {
  static std::once_flag started;
  std::call_once(started, [] {
    std::thread([] {
      for (;;) pause();
    }).detach();
  });
}

}  // namespace

nvmlReturn_t Simulator::init() {
  std::lock_guard lock(mutex_);
  // gpupool never shuts NVML down, and the library stays loaded: a process that names another
  // machine (GPUPOOL_SIM) before it initialises again, as the tests do, gets that machine.
  const char* asked = std::getenv("GPUPOOL_SIM");
  const bool another_machine = init_count_ > 0 && (asked == nullptr || asked != loaded_sim_);
  if (init_count_ == 0 || another_machine) {
    if (auto loaded = load(); !loaded) {
      // NVML itself cannot say more than DRIVER_NOT_LOADED; leave the reason where a person
      // looks.
      std::fprintf(stderr, "gpupool simulated NVML: %s\n", loaded.error().message.c_str());
      return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (init_count_ == 0) start_background_thread();
  }
  ++init_count_;
  return NVML_SUCCESS;
}

nvmlReturn_t Simulator::shutdown() {
  std::lock_guard lock(mutex_);
  if (init_count_ == 0) return NVML_ERROR_UNINITIALIZED;
  --init_count_;
  return NVML_SUCCESS;
}

nvmlReturn_t Simulator::handle_by_index(unsigned index, nvmlDevice_t* device) {
  return system([&](const Fixture& machine) {
    if (device == nullptr || index >= machine.gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles_[index];
    return NVML_SUCCESS;
  });
}

nvmlReturn_t Simulator::mig_handle_by_index(nvmlDevice_t device, unsigned mig_index, nvmlDevice_t* mig) {
  return this->device(device, Needs::Health, [&](const Query& query) {
    if (mig == nullptr || mig_index >= kMaxMigDevices) return NVML_ERROR_INVALID_ARGUMENT;
    if (!query.gpu.mig_enabled.value_or(false)) return NVML_ERROR_NOT_SUPPORTED;
    if (mig_index >= query.gpu.mig_devices.size()) return NVML_ERROR_NOT_FOUND;
    auto same = [&](const nvmlDevice_st& handle) {
      return handle.index == query.index && handle.mig_index == mig_index;
    };
    auto found = std::find_if(mig_handles_.begin(), mig_handles_.end(), same);
    if (found == mig_handles_.end()) found = mig_handles_.insert(mig_handles_.end(), {query.index, mig_index});
    *mig = &*found;
    return NVML_SUCCESS;
  });
}

Result<void> Simulator::load() {
  TRY_ASSIGN(std::string name_or_path, environment("GPUPOOL_SIM"));
  loaded_sim_ = name_or_path;
  // The same search as gpupool's (sim/open_backend): GPUPOOL_FIXTURE_DIR, then beside us.
  std::vector<std::string> dirs;
  if (const char* dir = std::getenv("GPUPOOL_FIXTURE_DIR"); dir != nullptr && *dir != '\0') dirs.push_back(dir);
  dirs.push_back(fixture_dir_beside_library());
  TRY_ASSIGN(std::string path, locate_fixture(name_or_path, dirs));
  TRY_ASSIGN(std::string text, read_text_file(path));
  TRY_ASSIGN(Fixture fixture, parse_fixture(text, path));
  label_ = path;
  fixture_text_ = std::move(text);
  base_ = std::move(fixture);
  current_ = base_;
  energy_.assign(base_.gpus.size(), std::nullopt);
  const char* overlay = std::getenv("GPUPOOL_SIM_STATE");
  overlay_path_ = overlay != nullptr ? overlay : "";
  overlay_stamp_.reset();
  // Handles never move, so one handed out before a shutdown stays a valid pointer.
  while (handles_.size() < base_.gpus.size()) handles_.push_back({static_cast<unsigned>(handles_.size())});
  refresh_overlay();
  return {};
}

uint64_t Simulator::energy_mj(unsigned index, double power_w) {
  auto now = std::chrono::steady_clock::now();
  if (index >= energy_.size()) energy_.resize(index + 1);
  std::optional<EnergyMeter>& meter = energy_[index];
  if (!meter) meter = EnergyMeter{now, 0};
  meter->mj += std::max(0.0, power_w) * 1000 * std::chrono::duration<double>(now - meter->read_at).count();
  meter->read_at = now;
  return static_cast<uint64_t>(meter->mj);
}

bool Simulator::is_known_mig_handle(nvmlDevice_t device) const {
  bool known = std::any_of(mig_handles_.begin(), mig_handles_.end(),
                           [&](const nvmlDevice_st& handle) { return &handle == device; });
  return known && device->index < current_.gpus.size();
}

std::optional<unsigned> Simulator::index_of(nvmlDevice_t device) const {
  for (unsigned i = 0; i < current_.gpus.size(); ++i) {
    if (&handles_[i] == device) return i;
  }
  return std::nullopt;
}

void Simulator::refresh_overlay() {
  if (overlay_path_.empty()) return;
  std::optional<FileStamp> stamp = stamp_of(overlay_path_);
  if (stamp == overlay_stamp_) return;
  overlay_stamp_ = stamp;
  if (!stamp) {
    current_ = base_;
    return;
  }
  auto text = read_text_file(overlay_path_);
  if (!text) return;
  auto merged = parse_fixture_with_overlay(fixture_text_, *text, label_);
  if (merged) current_ = std::move(*merged);
}

Simulator& simulator() {
  static Simulator instance;
  return instance;
}

}  // namespace gpupool::sim
