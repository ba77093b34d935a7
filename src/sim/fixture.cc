#include "sim/fixture.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/cpu_list.h"
#include "base/quote.h"
#include "gpu/gpm_metrics.h"
#include "machine/cuda_arch.h"
#include "machine/mig_profile.h"

namespace gpupool::sim {
namespace {

using nlohmann::json;

constexpr unsigned kMaxNvLinksPerGpu = 18;  // NVML_NVLINK_MAX_LINKS
constexpr size_t kMaxErrorBytes = 1000;     // of an error line, with the file's keys and values in it

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

Result<std::string> one_of(const std::string& value, const std::vector<std::string>& allowed,
                           const std::string& where) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  return fail("{}: '{}' is not one of: {}", where, value, join(allowed));
}

// Maps a JSON string onto an enum through the enum's to_string spelling.
template <typename Enum>
Result<Enum> parse_enum(const std::string& value, std::initializer_list<Enum> values,
                        const std::string& where) {
  std::vector<std::string> names;
  for (Enum candidate : values) names.emplace_back(to_string(candidate));
  TRY_ASSIGN(std::string chosen, one_of(value, names, where));
  auto position = std::find(names.begin(), names.end(), chosen) - names.begin();
  return *(values.begin() + position);
}

Result<ComputeCapability> parse_compute_capability(const std::string& text,
                                                   const std::string& where) {
  auto number = [](std::string_view digits, int& out) {
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    return !digits.empty() && std::isdigit(static_cast<unsigned char>(digits.front())) &&
           error == std::errc() && end == digits.data() + digits.size();
  };
  ComputeCapability cc;
  size_t dot = text.find('.');
  std::string_view view = text;
  if (dot == std::string::npos || !number(view.substr(0, dot), cc.major) ||
      !number(view.substr(dot + 1), cc.minor)) {
    return fail("{}: '{}' is not of the form MAJOR.MINOR", where, text);
  }
  return cc;
}

// Converts one JSON value, naming `where` in the error line.
template <typename T>
Result<T> convert(const json& value, const std::string& where) {
  if constexpr (std::is_same_v<T, ComputeMode>) {
    TRY_ASSIGN(std::string mode, convert<std::string>(value, where));
    return parse_enum(mode,
                      {ComputeMode::Default, ComputeMode::ExclusiveThread, ComputeMode::Prohibited,
                       ComputeMode::ExclusiveProcess},
                      where);
  } else if constexpr (std::is_same_v<T, ComputeCapability>) {
    TRY_ASSIGN(std::string capability, convert<std::string>(value, where));
    return parse_compute_capability(capability, where);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return fail("{}: expected a string", where);
    return value.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return fail("{}: expected true or false", where);
    return value.get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) return fail("{}: expected a number", where);
    return value.get<T>();
  } else if constexpr (std::is_unsigned_v<T>) {
    if (!value.is_number()) return fail("{}: expected a number", where);
    if (!value.is_number_unsigned()) return fail("{}: expected a non-negative integer", where);
    auto number = value.get<uint64_t>();
    if (number > std::numeric_limits<T>::max()) return fail("{}: {} is too large", where, number);
    return static_cast<T>(number);
  } else {
    static_assert(std::is_signed_v<T>);
    if (!value.is_number()) return fail("{}: expected a number", where);
    if (!value.is_number_integer()) return fail("{}: expected an integer", where);
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > uint64_t{std::numeric_limits<T>::max()}) {
      return fail("{}: {} is too large", where, value.get<uint64_t>());
    }
    auto number = value.get<int64_t>();
    if (number < std::numeric_limits<T>::min() || number > std::numeric_limits<T>::max()) {
      return fail("{}: {} is out of range", where, number);
    }
    return static_cast<T>(number);
  }
}

// Reads the keys of one JSON object, remembering which were read so that any
// other key (a typo) is reported by finish().
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path) : object_(object), path_(std::move(path)) {}

  static Result<ObjectReader> open(const json& value, std::string path) {
    if (!value.is_object()) return fail("{}: expected an object", path.empty() ? "document" : path);
    return ObjectReader(value, std::move(path));
  }

  std::string where(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

  // The value of `key`, or nullptr when absent.
  const json* find(const std::string& key) {
    seen_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

  Result<const json*> find_required(const std::string& key) {
    const json* value = find(key);
    if (value == nullptr) return fail("{}: missing", where(key));
    return value;
  }

  template <typename T>
  Result<T> required(const std::string& key) {
    TRY_ASSIGN(const json* value, find_required(key));
    return convert<T>(*value, where(key));
  }

  // Required key whose null means "not supported".
  template <typename T>
  Result<std::optional<T>> required_nullable(const std::string& key) {
    TRY_ASSIGN(const json* value, find_required(key));
    return nullable<T>(*value, where(key));
  }

  template <typename T>
  Result<T> optional(const std::string& key, T fallback) {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    return convert<T>(*value, where(key));
  }

  // Optional key: absent gives the fallback, null gives nullopt.
  template <typename T>
  Result<std::optional<T>> optional_nullable(const std::string& key, std::optional<T> fallback) {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    return nullable<T>(*value, where(key));
  }

  Result<void> finish() const {
    for (const auto& [key, value] : object_.items()) {
      if (!seen_.contains(key)) return fail("{}: unknown key", where(key));
    }
    return {};
  }

 private:
  template <typename T>
  static Result<std::optional<T>> nullable(const json& value, const std::string& where) {
    if (value.is_null()) return std::optional<T>();
    TRY_ASSIGN(T converted, convert<T>(value, where));
    return std::optional<T>(std::move(converted));
  }

  const json& object_;
  std::string path_;
  std::set<std::string, std::less<>> seen_;
};

// Reads an array of objects, one reader per element named "path[i]".
template <typename T, typename ParseElement>
Result<std::vector<T>> parse_array(const json* value, const std::string& path,
                                   ParseElement parse_element) {
  std::vector<T> out;
  if (value == nullptr) return out;
  if (!value->is_array()) return fail("{}: expected an array", path);
  for (size_t i = 0; i < value->size(); ++i) {
    TRY_ASSIGN(ObjectReader reader,
               ObjectReader::open((*value)[i], fmt::format("{}[{}]", path, i)));
    TRY_ASSIGN(T element, parse_element(reader));
    TRY(reader.finish());
    out.push_back(std::move(element));
  }
  return out;
}

Result<std::string> canonical_cpu_list(const std::string& text, const std::string& where) {
  auto cpus = parse_cpu_list(text);
  if (!cpus) return fail("{}: {}", where, cpus.error().message);
  if (cpus->empty()) return fail("{}: empty CPU list", where);
  return format_cpu_list(*cpus);
}

bool is_hex(char c, bool upper) {
  if (std::isdigit(static_cast<unsigned char>(c))) return true;
  return upper ? (c >= 'A' && c <= 'F') : (c >= 'a' && c <= 'f');
}

// True when `text` matches `pattern`, where 'x' stands for one hex digit of the given case.
bool matches_hex_pattern(std::string_view text, std::string_view pattern, bool upper) {
  if (text.size() != pattern.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (pattern[i] == 'x' ? !is_hex(text[i], upper) : text[i] != pattern[i]) return false;
  }
  return true;
}

constexpr std::string_view kUuidPattern = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
constexpr std::string_view kBusIdPattern = "xxxxxxxx:xx:xx.x";

Result<DriverInfo> parse_driver(ObjectReader& reader) {
  DriverInfo driver;
  TRY_ASSIGN(driver.driver_version, reader.required_nullable<std::string>("driver_version"));
  TRY_ASSIGN(driver.nvml_version, reader.required_nullable<std::string>("nvml_version"));
  TRY_ASSIGN(driver.cuda_driver_version, reader.required_nullable<int>("cuda_driver_version"));
  return driver;
}

Result<std::map<int, std::string>> parse_numa_cpus(const json* value) {
  if (value == nullptr) return fail("numa_cpus: missing");
  if (!value->is_object()) return fail("numa_cpus: expected an object");
  std::map<int, std::string> nodes;
  for (const auto& [key, cpus] : value->items()) {
    std::string where = fmt::format("numa_cpus.{}", key);
    bool numeric = !key.empty() && key.size() < 6 &&
                   std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!numeric) return fail("{}: '{}' is not a NUMA node number", where, key);
    TRY_ASSIGN(std::string text, convert<std::string>(cpus, where));
    TRY_ASSIGN(nodes[std::stoi(key)], canonical_cpu_list(text, where));
  }
  return nodes;
}

Result<PcieLocation> parse_pcie(ObjectReader& reader) {
  PcieLocation pcie;
  TRY_ASSIGN(pcie.numa_node, reader.required<int>("numa_node"));
  TRY_ASSIGN(pcie.host_bridge, reader.required<int>("host_bridge"));
  if (const json* switches = reader.find("switches")) {
    if (!switches->is_array()) return fail("{}: expected an array", reader.where("switches"));
    for (size_t i = 0; i < switches->size(); ++i) {
      TRY_ASSIGN(
          std::string name,
          convert<std::string>((*switches)[i], fmt::format("{}[{}]", reader.where("switches"), i)));
      pcie.switches.push_back(std::move(name));
    }
  }
  TRY_ASSIGN(pcie.board, reader.optional_nullable<std::string>("board", std::nullopt));
  return pcie;
}

Result<FixtureProcess> parse_process(ObjectReader& reader) {
  FixtureProcess process;
  TRY_ASSIGN(process.pid, reader.required<uint32_t>("pid"));
  TRY_ASSIGN(process.used_memory_mib, reader.required_nullable<uint64_t>("used_memory_mib"));
  TRY_ASSIGN(std::string kind, reader.required<std::string>("kind"));
  TRY_ASSIGN(process.kind, parse_enum(kind,
                                      {ProcessKind::Compute, ProcessKind::Graphics,
                                       ProcessKind::ComputeAndGraphics},
                                      reader.where("kind")));
  TRY_ASSIGN(process.mps_client, reader.optional<bool>("mps_client", false));
  TRY_ASSIGN(process.gpu_instance_id, reader.optional_nullable<unsigned>("gpu_instance_id", std::nullopt));
  TRY_ASSIGN(process.sm_utilization, reader.optional<unsigned>("sm_utilization", 0u));
  if (process.sm_utilization > 100) return fail("{}: must be a percentage from 0 to 100", reader.where("sm_utilization"));
  return process;
}

// The profiling activity (GPM) of a GPU or a MIG device's GPU instance (any `target` with the
// readings' members), each absent as `absent` says.
template <typename Target>
Result<void> parse_activity(ObjectReader& reader, Target& target, std::optional<double> absent) {
  Result<void> result;
  auto parse = [&](const char* key, std::optional<double>& value, bool ratio) {
    if (!result) return;
    auto parsed = reader.optional_nullable<double>(key, absent);
    if (!parsed) {
      result = fail("{}", parsed.error().message);
      return;
    }
    value = *parsed;
    if (value && (*value < 0 || (ratio && *value > 1))) {
      result = fail("{}: {} is not {}", reader.where(key), *value, ratio ? "a ratio from 0 to 1" : "a rate (>= 0)");
    }
  };
#define GPUPOOL_PARSE_ACTIVITY(id, field, unit) parse(#field, target.field, GpmUnit::unit == GpmUnit::Percent);
  GPUPOOL_GPM_METRICS(GPUPOOL_PARSE_ACTIVITY)
#undef GPUPOOL_PARSE_ACTIVITY
  return result;
}

Result<FixtureMigDevice> parse_mig_device(ObjectReader& reader) {
  FixtureMigDevice device;
  TRY_ASSIGN(device.uuid, reader.required<std::string>("uuid"));
  TRY_ASSIGN(device.gpu_instance_id, reader.required<unsigned>("gpu_instance_id"));
  TRY_ASSIGN(device.compute_instance_id, reader.required<unsigned>("compute_instance_id"));
  TRY_ASSIGN(device.gpu_slices, reader.required<unsigned>("gpu_slices"));
  TRY_ASSIGN(device.compute_slices, reader.optional<unsigned>("compute_slices", device.gpu_slices));
  TRY_ASSIGN(device.memory_mib, reader.required<uint64_t>("memory_mib"));
  TRY_ASSIGN(device.multiprocessors, reader.required<unsigned>("multiprocessors"));
  TRY(parse_activity(reader, device.activity, std::nullopt));
  if (device.gpu_slices == 0 || device.gpu_slices > kMaxMigDevices) {
    return fail("{}: {} is not between 1 and {}", reader.where("gpu_slices"), device.gpu_slices, kMaxMigDevices);
  }
  if (device.compute_slices == 0 || device.compute_slices > device.gpu_slices) {
    return fail("{}: {} is not between 1 and gpu_slices ({})", reader.where("compute_slices"), device.compute_slices,
                device.gpu_slices);
  }
  return device;
}

Result<NvLinkPeer> parse_nvlink(ObjectReader& reader) {
  NvLinkPeer link;
  TRY_ASSIGN(link.peer, reader.required<unsigned>("peer"));
  TRY_ASSIGN(link.links, reader.required<unsigned>("links"));
  if (link.links == 0) return fail("{}: must be at least 1", reader.where("links"));
  return link;
}

// A reading of the table, read as its FixtureKey says.
template <typename T>
Result<void> parse_reading(ObjectReader& reader, const ReadingInfo& reading, std::optional<T>& value) {
  switch (reading.fixture) {
    case FixtureKey::Required: {
      TRY_ASSIGN(value, reader.required_nullable<T>(reading.key));
      break;
    }
    case FixtureKey::Zero: {
      TRY_ASSIGN(value, reader.optional_nullable<T>(reading.key, T{}));
      break;
    }
    case FixtureKey::Null: {
      TRY_ASSIGN(value, reader.optional_nullable<T>(reading.key, std::nullopt));
      break;
    }
    case FixtureKey::ZeroNotNull:  // a plain value, below
    case FixtureKey::ByHand:       // parse_gpu reads it
    case FixtureKey::Derived: break;
  }
  return {};
}

template <typename T>
Result<void> parse_reading(ObjectReader& reader, const ReadingInfo& reading, T& value) {
  TRY_ASSIGN(value, reader.optional<T>(reading.key, T{}));
  return {};
}

Result<void> parse_readings(ObjectReader& reader, FixtureGpu& gpu) {
  Result<void> result;
  for_each_fixture_reading(gpu, [&](const ReadingInfo& reading, auto& value) {
    if (result) result = parse_reading(reader, reading, value);
  });
  return result;
}

constexpr std::string_view kMigUuidPattern = "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";

// A GPU's MIG devices as a driver could report them: only in MIG mode, at most seven, each
// within the GPU's memory, and the GPU instances (each counted once) within its seven slices.
Result<void> validate_mig_devices(const FixtureGpu& gpu, const std::string& where) {
  if (gpu.mig_devices.empty()) return {};
  if (!gpu.mig_enabled.value_or(false)) return fail("{}: only a GPU with mig_enabled true has MIG devices", where);
  if (gpu.mig_devices.size() > kMaxMigDevices) {
    return fail("{}: {} MIG devices; a GPU has at most {}", where, gpu.mig_devices.size(), kMaxMigDevices);
  }
  std::map<unsigned, unsigned> gpu_instance_slices;
  for (size_t i = 0; i < gpu.mig_devices.size(); ++i) {
    const FixtureMigDevice& device = gpu.mig_devices[i];
    std::string path = fmt::format("{}[{}]", where, i);
    if (!matches_hex_pattern(device.uuid, kMigUuidPattern, false)) {
      return fail("{}.uuid: '{}' is not of the form {} (lowercase hex)", path, device.uuid, kMigUuidPattern);
    }
    if (gpu.memory_total_mib && device.memory_mib > *gpu.memory_total_mib) {
      return fail("{}.memory_mib: {} MiB exceed the GPU's memory_total_mib ({} MiB)", path, device.memory_mib,
                  *gpu.memory_total_mib);
    }
    for (size_t j = 0; j < i; ++j) {
      const FixtureMigDevice& earlier = gpu.mig_devices[j];
      if (earlier.gpu_instance_id == device.gpu_instance_id &&
          earlier.compute_instance_id == device.compute_instance_id) {
        return fail("{}: GPU instance {} compute instance {} is also {}[{}]", path, device.gpu_instance_id,
                    device.compute_instance_id, where, j);
      }
      // GPM measures the GPU instance: its compute instances cannot tell two stories.
      if (earlier.gpu_instance_id == device.gpu_instance_id && !(earlier.activity == device.activity)) {
        return fail("{}: GPU instance {} has another activity in {}[{}]", path, device.gpu_instance_id, where, j);
      }
    }
    auto [slices, inserted] = gpu_instance_slices.try_emplace(device.gpu_instance_id, device.gpu_slices);
    if (!inserted && slices->second != device.gpu_slices) {
      return fail("{}.gpu_slices: GPU instance {} has {} slices in another entry", path, device.gpu_instance_id,
                  slices->second);
    }
  }
  unsigned total = 0;
  for (const auto& [id, slices] : gpu_instance_slices) total += slices;
  if (total > kMaxMigDevices) {
    return fail("{}: the GPU instances take {} slices; a GPU has {}", where, total, kMaxMigDevices);
  }
  return {};
}

Result<FixtureGpu> parse_gpu(ObjectReader& reader, unsigned index,
                             const std::map<int, std::string>& numa_cpus) {
  FixtureGpu gpu;
  TRY_ASSIGN(gpu.uuid, reader.required<std::string>("uuid"));
  TRY_ASSIGN(gpu.pci_bus_id, reader.required<std::string>("pci_bus_id"));
  TRY_ASSIGN(gpu.name, reader.required<std::string>("name"));
  TRY_ASSIGN(auto fault, reader.optional_nullable<std::string>("fault", std::nullopt));
  if (fault) {
    TRY_ASSIGN(gpu.fault, one_of(*fault, {"lost"}, reader.where("fault")));
  }

  TRY(parse_readings(reader, gpu));
  TRY_ASSIGN(gpu.minor_number, reader.optional_nullable<unsigned>("minor_number", index));
  TRY_ASSIGN(gpu.memory_reserved_mib, reader.optional<uint64_t>("memory_reserved_mib", 0));
  if (gpu.memory_total_mib &&
      gpu.memory_reserved_mib + gpu.memory_used_mib > *gpu.memory_total_mib) {
    return fail("{}: {} MiB used plus {} MiB reserved exceed memory_total_mib ({} MiB)",
                reader.where("memory_used_mib"), gpu.memory_used_mib, gpu.memory_reserved_mib,
                *gpu.memory_total_mib);
  }
  if (gpu.utilization_gpu.has_value() != gpu.utilization_memory.has_value()) {
    return fail("{}: must be null exactly when utilization_gpu is null (NVML reports both at once)",
                reader.where("utilization_memory"));
  }
  for (auto [key, value] : {std::pair{"utilization_gpu", gpu.utilization_gpu},
                            std::pair{"utilization_memory", gpu.utilization_memory}}) {
    if (value && *value > 100) return fail("{}: {} is not a percentage", reader.where(key), *value);
  }
  TRY_ASSIGN(gpu.cuda_cores, reader.required_nullable<unsigned>("cuda_cores"));
  // Hopper and later GPUs report it (idle by default), older ones do not (null).
  const bool has_gpm = gpu.compute_capability && gpu.compute_capability->major >= 9;
  TRY(parse_activity(reader, gpu, has_gpm ? std::optional<double>(0) : std::nullopt));

  TRY_ASSIGN(const json* pcie_value, reader.find_required("pcie"));
  TRY_ASSIGN(ObjectReader pcie_reader, ObjectReader::open(*pcie_value, reader.where("pcie")));
  TRY_ASSIGN(gpu.pcie, parse_pcie(pcie_reader));
  TRY(pcie_reader.finish());

  // NVML's NUMA node and CPU affinity default to what the PCIe placement implies.
  TRY_ASSIGN(gpu.numa_node, reader.optional_nullable<int>("numa_node", gpu.pcie.numa_node));
  auto node_cpus = numa_cpus.find(gpu.pcie.numa_node);
  if (reader.find("cpu_affinity") == nullptr && node_cpus == numa_cpus.end()) {
    return fail("{}: missing, and numa_cpus has no entry for NUMA node {}",
                reader.where("cpu_affinity"), gpu.pcie.numa_node);
  }
  TRY_ASSIGN(auto affinity,
             reader.optional_nullable<std::string>(
                 "cpu_affinity", node_cpus == numa_cpus.end() ? "" : node_cpus->second));
  if (affinity) {
    TRY_ASSIGN(gpu.cpu_affinity, canonical_cpu_list(*affinity, reader.where("cpu_affinity")));
  }

  TRY_ASSIGN(gpu.nvlinks, parse_array<NvLinkPeer>(reader.find("nvlinks"), reader.where("nvlinks"),
                                                  parse_nvlink));
  TRY_ASSIGN(gpu.nvswitch_links, reader.optional<unsigned>("nvswitch_links", 0));
  TRY_ASSIGN(gpu.processes, parse_array<FixtureProcess>(reader.find("processes"),
                                                        reader.where("processes"), parse_process));
  TRY_ASSIGN(gpu.mig_devices,
             parse_array<FixtureMigDevice>(reader.find("mig_devices"), reader.where("mig_devices"), parse_mig_device));
  TRY(validate_mig_devices(gpu, reader.where("mig_devices")));
  if (const json* xids = reader.find("xid_events")) {
    if (!xids->is_array()) return fail("{}: expected an array of XIDs", reader.where("xid_events"));
    for (size_t i = 0; i < xids->size(); ++i) {
      TRY_ASSIGN(unsigned xid, convert<unsigned>((*xids)[i], fmt::format("{}[{}]", reader.where("xid_events"), i)));
      gpu.xid_events.push_back(xid);
    }
  }
  for (size_t i = 0; i < gpu.processes.size(); ++i) {
    std::optional<unsigned> instance = gpu.processes[i].gpu_instance_id;
    if (instance && std::ranges::none_of(gpu.mig_devices, [&](auto& d) { return d.gpu_instance_id == *instance; })) {
      return fail("{}[{}].gpu_instance_id: {} is not a GPU instance of this GPU's MIG devices",
                  reader.where("processes"), i, *instance);
    }
  }
  return gpu;
}

std::string gpu_path(size_t index) { return fmt::format("gpus[{}]", index); }

Result<void> validate_identities(const std::vector<FixtureGpu>& gpus) {
  std::map<std::string, std::string> mig_uuids;  // MIG UUID -> where it was first seen
  for (size_t i = 0; i < gpus.size(); ++i) {
    const FixtureGpu& gpu = gpus[i];
    if (!matches_hex_pattern(gpu.uuid, kUuidPattern, false)) {
      return fail("{}.uuid: '{}' is not of the form {} (lowercase hex)", gpu_path(i), gpu.uuid,
                  kUuidPattern);
    }
    if (!matches_hex_pattern(gpu.pci_bus_id, kBusIdPattern, true)) {
      return fail("{}.pci_bus_id: '{}' is not of the form 00000000:BB:DD.F (uppercase hex)",
                  gpu_path(i), gpu.pci_bus_id);
    }
    for (size_t k = 0; k < gpu.mig_devices.size(); ++k) {
      std::string path = fmt::format("{}.mig_devices[{}]", gpu_path(i), k);
      auto [earlier, inserted] = mig_uuids.try_emplace(gpu.mig_devices[k].uuid, path);
      if (!inserted) return fail("{}.uuid: duplicate of {}", path, earlier->second);
    }
    for (size_t j = 0; j < i; ++j) {
      if (gpus[j].uuid == gpu.uuid)
        return fail("{}.uuid: duplicate of {}", gpu_path(i), gpu_path(j));
      if (gpus[j].pci_bus_id == gpu.pci_bus_id) {
        return fail("{}.pci_bus_id: duplicate of {}", gpu_path(i), gpu_path(j));
      }
    }
    // Same-length uppercase hex compares like the numbers it spells.
    if (i > 0 && gpu.pci_bus_id < gpus[i - 1].pci_bus_id) {
      return fail("{}.pci_bus_id: {} sorts before {} of {}; NVML numbers GPUs in PCI bus order",
                  gpu_path(i), gpu.pci_bus_id, gpus[i - 1].pci_bus_id, gpu_path(i - 1));
    }
  }
  return {};
}

Result<void> validate_nvlinks(const std::vector<FixtureGpu>& gpus) {
  for (size_t i = 0; i < gpus.size(); ++i) {
    unsigned total = gpus[i].nvswitch_links;
    for (size_t k = 0; k < gpus[i].nvlinks.size(); ++k) {
      const NvLinkPeer& link = gpus[i].nvlinks[k];
      std::string where = fmt::format("{}.nvlinks[{}]", gpu_path(i), k);
      if (link.peer >= gpus.size()) return fail("{}.peer: no GPU {}", where, link.peer);
      if (link.peer == i) return fail("{}.peer: a GPU cannot link to itself", where);
      for (size_t earlier = 0; earlier < k; ++earlier) {
        if (gpus[i].nvlinks[earlier].peer == link.peer)
          return fail("{}.peer: GPU {} listed twice", where, link.peer);
      }
      const auto& back = gpus[link.peer].nvlinks;
      bool symmetric = std::any_of(back.begin(), back.end(), [&](const NvLinkPeer& other) {
        return other.peer == i && other.links == link.links;
      });
      if (!symmetric) {
        return fail("{}: GPU {} does not list GPU {} with {} links in return", where, link.peer, i,
                    link.links);
      }
      total += link.links;
    }
    if (total > kMaxNvLinksPerGpu) {
      return fail("{}: {} NVLinks (peers plus nvswitch_links) exceed the {} a GPU has", gpu_path(i),
                  total, kMaxNvLinksPerGpu);
    }
  }
  return {};
}

Result<Fixture> parse_fixture_json(const json& document) {
  TRY_ASSIGN(ObjectReader reader, ObjectReader::open(document, ""));
  Fixture fixture;
  TRY_ASSIGN(fixture.name, reader.required<std::string>("name"));
  TRY_ASSIGN(fixture.description, reader.optional<std::string>("description", ""));
  TRY_ASSIGN(std::string library, reader.optional<std::string>("nvml_library", "current"));
  TRY_ASSIGN(fixture.nvml_library, one_of(library, {"current", "legacy"}, "nvml_library"));
  TRY_ASSIGN(const json* driver_value, reader.find_required("driver"));
  TRY_ASSIGN(ObjectReader driver_reader, ObjectReader::open(*driver_value, "driver"));
  TRY_ASSIGN(fixture.driver, parse_driver(driver_reader));
  TRY(driver_reader.finish());
  TRY_ASSIGN(fixture.numa_cpus, parse_numa_cpus(reader.find("numa_cpus")));

  TRY_ASSIGN(const json* gpus, reader.find_required("gpus"));
  if (!gpus->is_array()) return fail("gpus: expected an array");
  if (gpus->empty()) return fail("gpus: a machine needs at least one GPU");
  for (size_t i = 0; i < gpus->size(); ++i) {
    TRY_ASSIGN(ObjectReader gpu_reader, ObjectReader::open((*gpus)[i], gpu_path(i)));
    TRY_ASSIGN(FixtureGpu gpu, parse_gpu(gpu_reader, static_cast<unsigned>(i), fixture.numa_cpus));
    TRY(gpu_reader.finish());
    fixture.gpus.push_back(std::move(gpu));
  }
  TRY(reader.finish());
  TRY(validate_identities(fixture.gpus));
  TRY(validate_nvlinks(fixture.gpus));
  return fixture;
}

// Every error line names the fixture it came from.
Result<Fixture> labelled(Result<Fixture> result, std::string_view label) {
  // Keys and values from the file appear in the messages: keep them to one line.
  if (!result) return fail("fixture {}: {}", label, printable(result.error().message, kMaxErrorBytes));
  return result;
}

// `what` prefixes the error: "" for the fixture itself, "overlay: " for an overlay.
Result<json> parse_json(std::string_view text, std::string_view what) {
  json document = json::parse(text, nullptr, false);
  if (document.is_discarded()) return fail("{}not valid JSON", what);
  return document;
}

Result<void> merge_overlay(json& fixture, const json& overlay) {
  TRY_ASSIGN(ObjectReader reader, ObjectReader::open(overlay, "overlay"));
  const json* gpus = reader.find("gpus");
  TRY(reader.finish());
  if (gpus == nullptr) return {};
  if (!gpus->is_object()) return fail("overlay.gpus: expected an object");
  if (!fixture.contains("gpus") || !fixture["gpus"].is_array())
    return fail("gpus: expected an array");
  json& targets = fixture["gpus"];
  for (const auto& [key, values] : gpus->items()) {
    std::string where = fmt::format("overlay.gpus.{}", key);
    size_t index = 0;
    bool numeric = !key.empty() && key.size() < 6 &&
                   std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric) index = std::stoul(key);
    if (!numeric || index >= targets.size()) return fail("{}: no such GPU", where);
    if (!values.is_object()) return fail("{}: expected an object", where);
    if (!targets[index].is_object()) return fail("{}: expected an object", gpu_path(index));
    for (const auto& [field, value] : values.items()) targets[index][field] = value;
  }
  return {};
}

}  // namespace

Result<Fixture> parse_fixture(std::string_view json_text, std::string_view label) {
  auto document = parse_json(json_text, "");
  if (!document) return labelled(document.error(), label);
  return labelled(parse_fixture_json(*document), label);
}

Result<Fixture> parse_fixture_with_overlay(std::string_view json_text,
                                           std::string_view overlay_text, std::string_view label) {
  auto document = parse_json(json_text, "");
  if (!document) return labelled(document.error(), label);
  auto overlay = parse_json(overlay_text, "overlay: ");
  if (!overlay) return labelled(overlay.error(), label);
  if (auto merged = merge_overlay(*document, *overlay); !merged)
    return labelled(merged.error(), label);
  return labelled(parse_fixture_json(*document), label);
}

Result<std::string> read_text_file(const std::string& path) {
  // The reason (no such file, permission denied) is what the reader needs to fix it.
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) return fail("cannot read {}: it is a directory", path);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("cannot read {}: {}", path, errno != 0 ? std::strerror(errno) : "cannot open it");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return fail("cannot read {}: {}", path, errno != 0 ? std::strerror(errno) : "a read failed");
  return text.str();
}

Result<Fixture> load_fixture(const std::string& path) {
  TRY_ASSIGN(std::string text, read_text_file(path));
  return parse_fixture(text, path);
}

namespace {

bool is_path(const std::string& name_or_path) {
  return name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json");
}

std::string absolute_path(const std::filesystem::path& path) {
  std::error_code error;
  auto absolute = std::filesystem::absolute(path, error);
  return (error ? path : absolute).lexically_normal().string();
}

}  // namespace

Result<std::string> locate_fixture(const std::string& name_or_path,
                                   const std::vector<std::string>& dirs) {
  std::error_code error;
  if (is_path(name_or_path)) {
    if (!std::filesystem::is_regular_file(name_or_path, error)) {
      return fail("simulated machine file {} does not exist", quote(name_or_path));
    }
    return absolute_path(name_or_path);
  }
  for (const auto& dir : dirs) {
    std::filesystem::path candidate = std::filesystem::path(dir) / (name_or_path + ".json");
    if (std::filesystem::is_regular_file(candidate, error)) return absolute_path(candidate);
  }
  std::vector<std::string> known = fixture_names(dirs);
  if (known.empty())
    return fail("unknown simulated machine {} (no fixtures in {})", quote(name_or_path), join(dirs));
  return fail("unknown simulated machine {} (known: {})", quote(name_or_path), join(known));
}

std::vector<std::string> fixture_names(const std::vector<std::string>& dirs) {
  std::set<std::string> names;
  for (const auto& dir : dirs) {
    std::error_code error;
    for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end;
         it.increment(error)) {
      const auto& path = it->path();
      if (path.extension() == ".json" && it->is_regular_file(error))
        names.insert(path.stem().string());
    }
  }
  return {names.begin(), names.end()};
}

PcieLevel pcie_level(const PcieLocation& a, const PcieLocation& b) {
  if (a.numa_node != b.numa_node) return PcieLevel::System;
  if (a.host_bridge != b.host_bridge) return PcieLevel::NumaNode;
  if (a.board && b.board && !a.board->empty() && a.board == b.board) return PcieLevel::Board;
  auto [a_end, b_end] =
      std::mismatch(a.switches.begin(), a.switches.end(), b.switches.begin(), b.switches.end());
  auto common = static_cast<size_t>(a_end - a.switches.begin());
  if (common == 0) return PcieLevel::HostBridge;
  if (a.switches.size() == common && b.switches.size() == common) return PcieLevel::SingleSwitch;
  return PcieLevel::MultipleSwitches;
}

Link fixture_link(const Fixture& fixture, size_t i, size_t j) {
  const FixtureGpu& a = fixture.gpus[i];
  const FixtureGpu& b = fixture.gpus[j];
  Link link;
  // A lost GPU answers no topology or NVLink call, so nothing is known about its links.
  if (a.fault || b.fault) return link;
  for (const NvLinkPeer& peer : a.nvlinks) {
    if (peer.peer == j) link.nvlinks = peer.links;
  }
  if (a.nvswitch_links > 0 && b.nvswitch_links > 0) {
    link.nvlinks += std::min(a.nvswitch_links, b.nvswitch_links);
    link.via_nvswitch = true;
  }
  link.pcie = pcie_level(a.pcie, b.pcie);
  return link;
}

namespace {

// `legacy`: what a library of the legacy generation can tell (it lacks the newer calls).
Gpu gpu_from_fixture(const FixtureGpu& source, unsigned index, bool legacy) {
  Gpu gpu;
  gpu.index = index;
  gpu.uuid = source.uuid;
  gpu.pci_bus_id = source.pci_bus_id;
  gpu.name = source.name;
  if (source.fault) {
    gpu.minor_number = source.minor_number;  // an identity call: a lost GPU answers it
    gpu.fault = kLostGpuFault;
    return gpu;
  }
#define GPUPOOL_COPY_FIXTURE_READING(type, field, fixture, ...) \
  GPUPOOL_IF_IN_FIXTURE(fixture, gpu.field = source.field;)
  GPUPOOL_GPU_READINGS(GPUPOOL_COPY_FIXTURE_READING)
#undef GPUPOOL_COPY_FIXTURE_READING

  // What NVML's calls derive, or do not answer, beyond the plain copy above.
  if (source.memory_total_mib) {
    // Without the v2 memory call the driver's reserved memory counts as used.
    if (legacy) gpu.memory_used_mib = source.memory_used_mib + source.memory_reserved_mib;
    gpu.memory_free_mib =
        *source.memory_total_mib - source.memory_reserved_mib - source.memory_used_mib;
  } else {
    gpu.memory_used_mib.reset();
  }
  // Activity is measured between two samples; a snapshot has none.
  copy_gpm_readings(Gpu{}, gpu);
  if (!source.retired_pages) gpu.retired_pages_pending.reset();
  if (legacy || !source.remapped_rows) {  // row remapping came with Ampere's drivers
    gpu.remapped_rows.reset();
    gpu.row_remapping_pending.reset();
    gpu.row_remapping_failed.reset();
  }
  if (legacy) {
    gpu.mig_enabled.reset();
    gpu.numa_node.reset();
  }
  if (!legacy && source.cuda_cores && source.compute_capability) {
    unsigned per_multiprocessor = cores_per_multiprocessor(source.compute_capability->major,
                                                           source.compute_capability->minor);
    if (per_multiprocessor > 0) gpu.multiprocessors = *source.cuda_cores / per_multiprocessor;
  }
  for (const FixtureProcess& process : source.processes) {
    gpu.processes.push_back(
        GpuProcess{process.pid, process.kind, process.used_memory_mib, {}, {}, process.mps_client,
                   process.gpu_instance_id,
                   // Not on a GPU in MIG mode, where NVML gives no process utilisation.
                   gpu.mig_enabled.value_or(false) ? std::nullopt : std::optional(process.sm_utilization)});
  }
  std::sort(gpu.processes.begin(), gpu.processes.end(),
            [](const GpuProcess& a, const GpuProcess& b) { return a.pid < b.pid; });
  if (!legacy) {  // the MIG calls came after the legacy generation's driver
    for (size_t i = 0; i < source.mig_devices.size(); ++i) {
      const FixtureMigDevice& mig = source.mig_devices[i];
      gpu.mig_devices.push_back(MigDevice{
          static_cast<unsigned>(i), mig.uuid, mig.gpu_instance_id, mig.compute_instance_id, mig.gpu_slices,
          mig.compute_slices, mig.memory_mib, mig.multiprocessors,
          mig_profile_name(mig.gpu_slices, mig.compute_slices, mig.memory_mib, source.memory_total_mib.value_or(0)),
          {}});
    }
  }
  return gpu;
}

}  // namespace

Machine machine_from_fixture(const Fixture& fixture) {
  Machine machine;
  machine.driver = fixture.driver;
  const size_t n = fixture.gpus.size();
  for (size_t i = 0; i < n; ++i)
    machine.gpus.push_back(gpu_from_fixture(fixture.gpus[i], static_cast<unsigned>(i),
                                            fixture.nvml_library == "legacy"));
  machine.links.assign(n, std::vector<Link>(n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) machine.links[i][j] = fixture_link(fixture, i, j);
    }
  }
  return machine;
}

}  // namespace gpupool::sim
