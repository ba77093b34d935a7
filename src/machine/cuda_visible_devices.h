// Answers "which physical cards will a CUDA program use?" from CUDA_VISIBLE_DEVICES and
// CUDA_DEVICE_ORDER, the way the CUDA driver reads them at cuInit. The rules were learnt by
// probing the real driver (tests/data/cvd-probe-*.jsonl, tests/data/cvd-differential-*.jsonl);
// where a rule could not be observed the model's choice is one named function or constant below,
// so one probe can settle it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"

namespace gpupool {

// How CUDA numbers the GPUs before CUDA_VISIBLE_DEVICES picks from them.
enum class DeviceOrder {
  FastestFirst,  // the default: the driver's own order, fastest GPU first
  PciBusId,      // nvidia-smi's order
};

const char* to_string(DeviceOrder order);

// CUDA_DEVICE_ORDER as the driver reads it: unset means FASTEST_FIRST; anything but the two exact
// names (case, spaces and empty included) is an error that makes cuInit fail.
Result<DeviceOrder> parse_device_order(const std::optional<std::string>& value);

// Indices into `gpus` (given in nvidia-smi / PCI order) in CUDA's enumeration order. FASTEST_FIRST
// is modelled (unverified on mixed machines) as a stable sort by compute capability, then
// multiprocessor count, both descending; when a GPU lacks either, PCI order is kept.
std::vector<std::size_t> cuda_enumeration_order(std::span<const Gpu> gpus, DeviceOrder order);

// The C library call the driver uses on an index entry. Observed (driver 580.159.04): strtoul,
// since "9223372036854775808" (2^63) selects GPU 0 and "-99999999999999999999" is invalid; strtol
// would give the opposite answers. The two agree everywhere below 2^63.
enum class IntegerParse { Strtol, Strtoul };
inline constexpr IntegerParse kDriverIntegerParse = IntegerParse::Strtoul;

// The int the driver ends up with for an optional '-' and a run of decimal digits: the C call's
// 64-bit result (saturated on overflow), truncated to 32 bits ("4294967297" is 1).
int32_t driver_index_from_digits(bool negative, std::string_view digits,
                                 IntegerParse parse = kDriverIntegerParse);

// One device the program will see: a GPU, or one MIG device of a GPU.
struct VisibleDevice {
  unsigned cuda_index = 0;  // what the program calls it: cudaSetDevice(cuda_index), cuda:N
  unsigned nvml_index = 0;  // nvidia-smi's index of the same card (Gpu::index)
  std::optional<unsigned> mig_index = std::nullopt;  // the MIG device (MigDevice::index) when it is one
};

// NVIDIA's MIG user guide: a CUDA process enumerates a single MIG device (CUDA 11/R450 and CUDA
// 12/R525 at least), and no GPU that is not in MIG mode once it enumerates a MIG device. Not yet
// probed here; with several MIG devices named, the model keeps the first.
inline constexpr bool kCudaEnumeratesOneMigDevice = true;

// How one comma-separated entry of CUDA_VISIBLE_DEVICES was read. The first entry decides how
// all are read: as UUIDs if it starts with "GPU-" or "MIG-", else as numbers; an entry of the other
// kind is therefore invalid. "MIG-" followed by (a prefix of) a MIG device's UUID names that MIG
// device.
enum class EntryReading {
  Index,                // a CUDA device number
  UuidPrefix,           // GPU-/MIG- followed by (a prefix of) a GPU's UUID
  Duplicate,            // names a card an earlier entry already named: cuInit fails
  Invalid,              // the first invalid entry: it and everything after it are ignored
  IgnoredAfterInvalid,  // after the first invalid entry, never read
};

const char* to_string(EntryReading reading);

struct VisibleDevicesEntry {
  std::string text;  // exactly as written between the commas
  EntryReading reading = EntryReading::Invalid;
  std::optional<unsigned> nvml_index;  // the card the entry names, when it names one
  std::string explanation;             // one line for the user
};

struct VisibleDevicesResolution {
  DeviceOrder order = DeviceOrder::FastestFirst;  // meaningless when CUDA_DEVICE_ORDER is invalid
  std::vector<VisibleDevice> devices;  // empty: the program sees no GPU
  // Set when cuInit fails ("CUDA_ERROR_INVALID_DEVICE: ..."); seeing no device is not an error.
  std::optional<std::string> error;
  std::vector<std::string> warnings;           // one sentence each
  std::vector<VisibleDevicesEntry> entries;    // empty when CUDA_VISIBLE_DEVICES is unset
};

// The CUDA status cuInit returns for a resolution, by the driver's names.
enum class CudaInitStatus { Success, NoDevice, InvalidDevice };
CudaInitStatus cuda_init_status(const VisibleDevicesResolution& resolution);
const char* to_string(CudaInitStatus status);  // "CUDA_SUCCESS", "CUDA_ERROR_NO_DEVICE", ...

// `gpus` are the machine's GPUs in nvidia-smi order; nullopt means the variable is unset.
VisibleDevicesResolution resolve_visible_devices(std::span<const Gpu> gpus,
                                                 const std::optional<std::string>& visible_devices,
                                                 const std::optional<std::string>& device_order);

}  // namespace gpupool
