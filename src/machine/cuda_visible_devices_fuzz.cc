// Fuzzes the CUDA_VISIBLE_DEVICES resolver on a synthetic 8-GPU machine whose CUDA order differs
// from nvidia-smi's and where two UUIDs share a prefix.
// Input: one flags byte (bit 0: CUDA_VISIBLE_DEVICES is set, bit 1: CUDA_DEVICE_ORDER is set),
// then the value, a NUL byte, and the order (environment values cannot hold NUL).
// Seeds: tests/fuzz/cuda_visible_devices/, written by
//   scripts/cvd-corpus.py --fuzz-seeds tests/fuzz/cuda_visible_devices <the 8 kUuids below>
#include <cstdlib>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "machine/cuda_visible_devices.h"

namespace {

// GPUs 0 and 1 share the prefix "aaaa", so "GPU-aaaa" is ambiguous.
constexpr const char* kUuids[] = {
    "GPU-aaaa0000-1111-2222-3333-444444444440", "GPU-aaaa1111-1111-2222-3333-444444444441",
    "GPU-30000000-1111-2222-3333-444444444442", "GPU-40000000-1111-2222-3333-444444444443",
    "GPU-50000000-1111-2222-3333-444444444444", "GPU-60000000-1111-2222-3333-444444444445",
    "GPU-70000000-1111-2222-3333-444444444446", "GPU-80000000-1111-2222-3333-444444444447"};

std::vector<gpupool::Gpu> fuzz_machine() {
  struct Model {
    const char* name;
    int major, minor;
    unsigned multiprocessors;
  };
  const Model models[] = {{"NVIDIA A100-SXM4-80GB", 8, 0, 108},
                          {"NVIDIA H100 80GB HBM3", 9, 0, 132},
                          {"NVIDIA GeForce RTX 3090", 8, 6, 82},
                          {"NVIDIA H100 PCIe", 9, 0, 114}};
  std::vector<gpupool::Gpu> gpus;
  for (unsigned i = 0; i < std::size(kUuids); ++i) {
    gpupool::Gpu gpu;
    gpu.index = i;
    gpu.uuid = kUuids[i];
    gpu.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + i);
    const Model& model = models[i % 4];
    gpu.name = model.name;
    gpu.compute_capability = gpupool::ComputeCapability{model.major, model.minor};
    gpu.multiprocessors = model.multiprocessors;
    gpu.mig_enabled = i == 7;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<gpupool::Gpu> gpus = fuzz_machine();
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::size_t nul = text.find('\0');
  std::optional<std::string> value;
  std::optional<std::string> order;
  if (data[0] & 1) value = text.substr(0, nul);
  if ((data[0] & 2) && nul != std::string::npos) order = text.substr(nul + 1);

  const gpupool::VisibleDevicesResolution resolution =
      gpupool::resolve_visible_devices(gpus, value, order);

  std::set<unsigned> seen;
  for (std::size_t i = 0; i < resolution.devices.size(); ++i) {
    check(resolution.devices[i].cuda_index == i);
    check(resolution.devices[i].nvml_index < gpus.size());
    check(seen.insert(resolution.devices[i].nvml_index).second);
  }
  check(!resolution.error || resolution.devices.empty());
  for (const std::string& warning : resolution.warnings) {
    check(!warning.empty() && warning.find('\n') == std::string::npos);
  }
  return 0;
}
