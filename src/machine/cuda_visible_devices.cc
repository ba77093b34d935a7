#include "machine/cuda_visible_devices.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace gpupool {

namespace {

constexpr std::size_t kUuidHexDigits = 32;           // a UUID's 128 bits; the driver reads no more
constexpr std::size_t kFragileUuidPrefixDigits = 8;  // shorter prefixes may fit another card
constexpr std::string_view kInvalidDevice = "CUDA_ERROR_INVALID_DEVICE";

bool is_c_space(char c) {  // isspace() in the C locale, which strtoul skips
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
char to_lower_ascii(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool is_blank(std::string_view text) { return std::all_of(text.begin(), text.end(), is_c_space); }

std::string_view skip_c_space(std::string_view text) {
  while (!text.empty() && is_c_space(text.front())) text.remove_prefix(1);
  return text;
}

// Entries may hold tabs, newlines or any byte: show them escaped, in quotes.
std::string in_quotes(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A GPU's or MIG device's UUID as the driver compares it: the hex digits after "GPU-" or "MIG-",
// lower case.
std::string uuid_hex(std::string_view uuid) {
  if (uuid.starts_with("GPU-") || uuid.starts_with("MIG-")) uuid.remove_prefix(4);
  std::string hex;
  for (char c : uuid) {
    if (is_hex_digit(c)) hex += to_lower_ascii(c);
  }
  return hex;
}

// An index entry as strtoul sees it: leading white space, an optional sign, decimal digits, and a
// rest the driver ignores.
struct NumberText {
  bool negative = false;
  bool has_sign = false;
  std::string_view digits;  // empty: no number at all
  std::string_view rest;
};

NumberText read_number_text(std::string_view entry) {
  NumberText number;
  std::string_view text = skip_c_space(entry);
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    number.has_sign = true;
    number.negative = text.front() == '-';
    text.remove_prefix(1);
  }
  std::size_t digit_count = 0;
  while (digit_count < text.size() && is_digit(text[digit_count])) ++digit_count;
  number.digits = text.substr(0, digit_count);
  number.rest = text.substr(digit_count);
  return number;
}

// Whether the driver's 32-bit value differs from the number as written ("4294967296" is 0).
bool wrapped(const NumberText& number, int32_t value) {
  std::string_view significant = number.digits;
  while (significant.size() > 1 && significant.front() == '0') significant.remove_prefix(1);
  const std::string written = (number.negative && significant != "0" ? "-" : "") +
                              std::string(significant);
  return written != std::to_string(value);
}

// The hex digits of a GPU-/MIG- entry, as far as the driver reads them.
struct UuidText {
  std::string hex;        // lower case, at most 32 digits
  std::string_view rest;  // after the 32nd digit (never compared), or from the stray character on
  bool stray = false;     // a character the driver does not accept came before the 32nd digit
  bool white_space_inside = false;  // white space stood for the hex digit after it
};

// Observed (driver 580.159.04): '-' is skipped anywhere; an entry that ends early is matched as a
// prefix; after 32 digits reading stops and the rest is ignored. Before the 32nd digit any other
// character makes the entry invalid ("GPU-c24ag", "GPU-c24a332c -84cc-..."), except white space
// right before a hex digit: the driver reads each digit like sscanf("%1x"), which skips white
// space, yet steps on by one character, so the digit after white space is read twice
// ("...809a\nf" matches a UUID ending in "af", "...809\naf" does not).
UuidText read_uuid_text(std::string_view after_prefix) {
  UuidText uuid;
  std::size_t i = 0;
  while (i < after_prefix.size() && uuid.hex.size() < kUuidHexDigits) {
    if (after_prefix[i] == '-') {
      ++i;
      continue;
    }
    std::size_t digit = i;
    while (digit < after_prefix.size() && is_c_space(after_prefix[digit])) ++digit;
    if (digit == after_prefix.size() || !is_hex_digit(after_prefix[digit])) {
      uuid.stray = true;
      break;
    }
    uuid.white_space_inside = uuid.white_space_inside || digit != i;
    uuid.hex += to_lower_ascii(after_prefix[digit]);
    ++i;
  }
  uuid.rest = after_prefix.substr(i);
  return uuid;
}

// Whether the FASTEST_FIRST model has what it sorts by.
bool speeds_known(std::span<const Gpu> gpus) {
  return std::all_of(gpus.begin(), gpus.end(), [](const Gpu& gpu) {
    return gpu.compute_capability && gpu.multiprocessors;
  });
}

// Model, unverified: a UUID prefix that fits several GPUs names none of them, so the entry is
// invalid. Returns the one matching GPU, if there is exactly one.
std::optional<std::size_t> pick_uuid_match(const std::vector<std::size_t>& matches) {
  if (matches.size() == 1) return matches.front();
  return std::nullopt;
}

struct EntryMeaning {
  std::optional<std::size_t> gpu;  // position in the GPU list; nullopt: the entry is invalid
  std::string how;                 // how it was read, or why it is invalid
  std::optional<std::size_t> mig = std::nullopt;  // position in the GPU's MIG devices when it names one
};

// A MIG device: the position of its GPU and its position among the GPU's MIG devices.
using MigPosition = std::pair<std::size_t, std::size_t>;

class Resolver {
 public:
  Resolver(std::span<const Gpu> gpus, DeviceOrder order, VisibleDevicesResolution& out)
      : gpus_(gpus), order_(order), enumeration_(cuda_enumeration_order(gpus, order)), out_(out) {
    for (const Gpu& gpu : gpus) hex_uuids_.push_back(uuid_hex(gpu.uuid));
  }

  void warn_about_machine(bool visible_devices_set) {
    if (order_ != DeviceOrder::FastestFirst || gpus_.size() < 2) return;
    if (!speeds_known(gpus_) && !all_same_model()) {
      warn("CUDA's default FASTEST_FIRST order cannot be told here because a GPU's compute "
           "capability or multiprocessor count is unknown, so nvidia-smi's order is assumed; set "
           "CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure");
    }
    if (!visible_devices_set && enumeration_differs_from_nvidia_smi()) {
      const Gpu& first = gpus_[enumeration_.front()];
      warn("CUDA numbers these GPUs fastest first, unlike nvidia-smi: the program's device 0 is "
           "nvidia-smi's GPU {} ({}); set CUDA_DEVICE_ORDER=PCI_BUS_ID to make the numbers agree",
           first.index, first.name);
    }
  }

  void show_all() {
    for (std::size_t position : enumeration_) add_device(position, std::nullopt);
  }

  // CUDA shows a GPU in MIG mode as its MIG devices, which gpupool models only where a MIG UUID
  // names one; and it enumerates one MIG device at most (kCudaEnumeratesOneMigDevice).
  void apply_mig_rules() {
    for (const VisibleDevice& device : out_.devices) {
      const Gpu& gpu =
          *std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& g) { return g.index == device.nvml_index; });
      if (!device.mig_index && gpu.mig_enabled.value_or(false)) {
        warn(
            "GPU {} has MIG enabled: CUDA shows its MIG devices instead, which gpupool models only "
            "for a MIG device named by its UUID (MIG-..., `gpupool list` shows them), so this answer may "
            "be wrong for it",
            gpu.index);
      }
    }
    auto first_mig = std::find_if(out_.devices.begin(), out_.devices.end(),
                                  [](const VisibleDevice& device) { return device.mig_index.has_value(); });
    if (!kCudaEnumeratesOneMigDevice || first_mig == out_.devices.end() || out_.devices.size() == 1) return;
    std::vector<std::string> hidden;
    for (const VisibleDevice& device : out_.devices) {
      if (&device == &*first_mig) continue;
      hidden.push_back(device.mig_index ? fmt::format("MIG device {}:{}", device.nvml_index, *device.mig_index)
                                        : fmt::format("GPU {}", device.nvml_index));
    }
    warn(
        "a CUDA program enumerates only one MIG device, and no other GPU beside it (NVIDIA's MIG user guide; "
        "not probed here): it sees MIG device {}:{} alone, not {}; run one process per MIG device",
        first_mig->nvml_index, *first_mig->mig_index, fmt::join(hidden, ", "));
    VisibleDevice only = *first_mig;
    only.cuda_index = 0;
    out_.devices = {only};
  }

  void read_list(const std::string& value) {
    split_entries(value);
    uuid_list_ = is_uuid_entry(out_.entries.front().text);
    std::vector<std::optional<std::size_t>> listed_by(gpus_.size());  // entry that named each GPU
    std::map<MigPosition, std::size_t> mig_listed_by;                 // entry that named each MIG device
    std::optional<std::size_t> invalid_entry;
    std::string invalid_reason;
    for (std::size_t i = 0; i < out_.entries.size(); ++i) {
      VisibleDevicesEntry& entry = out_.entries[i];
      if (invalid_entry) {
        entry.reading = EntryReading::IgnoredAfterInvalid;
        entry.explanation = fmt::format("comes after the invalid entry {}",
                                        *invalid_entry + 1);
        continue;
      }
      const EntryMeaning meaning = read_entry(i);
      if (!meaning.gpu) {
        invalid_entry = i;
        invalid_reason = meaning.how;
        entry.reading = EntryReading::Invalid;
        entry.explanation = fmt::format("{}; it and all later entries are ignored",
                                        meaning.how);
        continue;
      }
      const std::size_t gpu = *meaning.gpu;
      entry.nvml_index = gpus_[gpu].index;
      std::optional<std::size_t>* first = &listed_by[gpu];
      std::optional<std::size_t> mig_first;
      if (meaning.mig) {
        if (auto it = mig_listed_by.find({gpu, *meaning.mig}); it != mig_listed_by.end()) mig_first = it->second;
        first = &mig_first;
      }
      if (*first) {
        note_duplicate(**first, i, meaning.how);
      } else {
        entry.reading = uuid_list_ ? EntryReading::UuidPrefix : EntryReading::Index;
        entry.explanation = meaning.how;
        if (meaning.mig) {
          mig_listed_by[{gpu, *meaning.mig}] = i;
        } else {
          listed_by[gpu] = i;
        }
        add_device(gpu, meaning.mig);
      }
    }
    if (!renumbered_entries_.empty()) {
      warn("CUDA numbers these GPUs fastest first, unlike nvidia-smi, so {}: set "
           "CUDA_DEVICE_ORDER=PCI_BUS_ID or use UUIDs so the numbers agree",
           fmt::join(renumbered_entries_, ", "));
    }
    if (invalid_entry) warn_about_invalid_entry(*invalid_entry, invalid_reason);
    if (out_.error) out_.devices.clear();
  }

  // A MIG UUID (or a prefix of one) names a MIG device when it fits exactly one.
  std::optional<EntryMeaning> read_mig_uuid(std::size_t i, const UuidText& uuid) {
    std::vector<MigPosition> matches;
    for (std::size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
      for (std::size_t mig = 0; mig < gpus_[gpu].mig_devices.size(); ++mig) {
        if (uuid_hex(gpus_[gpu].mig_devices[mig].uuid).starts_with(uuid.hex)) matches.emplace_back(gpu, mig);
      }
    }
    if (matches.size() != 1) return std::nullopt;
    const auto [gpu, mig] = matches.front();
    const MigDevice& device = gpus_[gpu].mig_devices[mig];
    if (uuid.hex.size() < kFragileUuidPrefixDigits) {
      warn("{} names MIG device {} by only {} hex digit(s) of its UUID: write the full UUID", entry_name(i),
           device.uuid, uuid.hex.size());
    }
    return EntryMeaning{gpu,
                        fmt::format("MIG UUID{} -> MIG device {}:{} ({}, GPU instance {}, compute instance {}) of {}",
                                    uuid.hex.size() == kUuidHexDigits ? "" : " prefix", gpus_[gpu].index, device.index,
                                    device.profile, device.gpu_instance_id, device.compute_instance_id, gpu_name(gpu)),
                        mig};
  }

 private:
  template <typename... Args>
  void warn(fmt::format_string<Args...> format, Args&&... args) {
    out_.warnings.push_back(fmt::format(format, std::forward<Args>(args)...));
  }

  std::string entry_name(std::size_t i) const {
    return fmt::format("entry {} {}", i + 1, in_quotes(out_.entries[i].text));
  }

  std::string gpu_name(std::size_t position) const {
    return fmt::format("GPU {} ({})", gpus_[position].index, gpus_[position].uuid);
  }

  bool all_same_model() const {
    return std::all_of(gpus_.begin(), gpus_.end(),
                       [&](const Gpu& gpu) { return gpu.name == gpus_.front().name; });
  }

  bool enumeration_differs_from_nvidia_smi() const {
    for (std::size_t i = 0; i < enumeration_.size(); ++i) {
      if (gpus_[enumeration_[i]].index != i) return true;
    }
    return false;
  }

  static bool is_uuid_entry(std::string_view text) {
    return text.starts_with("GPU-") || text.starts_with("MIG-");
  }

  void add_device(std::size_t position, std::optional<std::size_t> mig) {
    std::optional<unsigned> mig_index;
    if (mig) mig_index = gpus_[position].mig_devices[*mig].index;
    out_.devices.push_back({static_cast<unsigned>(out_.devices.size()), gpus_[position].index, mig_index});
  }

  void split_entries(const std::string& value) {
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = value.find(',', start);
      out_.entries.push_back({value.substr(start, comma - start), EntryReading::Invalid, {}, {}});
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }

  // Observed on one GPU (driver 580.159.04): "GPU-...,0,GPU-..." and "0,GPU-...,0" show the GPU
  // once, while "0,0" and "GPU-...,GPU-..." fail. Model, unverified with several GPUs (for
  // "0,<UUID of GPU 1>"): the first entry decides how every entry is read, so an entry of the
  // other kind is invalid and ends the list. On one GPU this cannot be told apart from "an entry
  // of the other kind naming an already-listed card ends the list".
  EntryMeaning read_entry(std::size_t i) {
    const std::string_view text = out_.entries[i].text;
    if (is_uuid_entry(text) == uuid_list_) {
      return uuid_list_ ? read_uuid_entry(i) : read_index_entry(i);
    }
    if (!uuid_list_) {
      other_kind_entry_ = i;
      return {std::nullopt, "a UUID in a list that began with an index: the driver reads every "
                            "entry as a number, so this ends the list"};
    }
    if (read_number_text(text).digits.empty()) return {std::nullopt, why_not_a_number(text)};
    other_kind_entry_ = i;
    return {std::nullopt, "an index in a list that began with a UUID: the driver reads every "
                          "entry as a UUID, so this ends the list"};
  }

  EntryMeaning read_index_entry(std::size_t i) {
    const std::string_view text = out_.entries[i].text;
    const NumberText number = read_number_text(text);
    const int32_t value = driver_index_from_digits(number.negative, number.digits);
    std::optional<std::string> invalid;
    if (number.digits.empty()) {
      invalid = why_not_a_number(text);
    } else if (value < 0) {
      invalid = wrapped(number, value)
                    ? fmt::format("read as {} (only the low 32 bits count): negative", value)
                    : fmt::format("negative index {}", value);
    } else if (static_cast<std::size_t>(value) >= gpus_.size()) {
      invalid = gpus_.empty()
                    ? fmt::format("index {}, but CUDA sees no GPU", value)
                    : fmt::format("index {} is out of range: CUDA sees {} GPU(s), 0 to {}", value,
                                  gpus_.size(), gpus_.size() - 1);
    }
    if (invalid) {
      warn_if_bare_uuid(i);
      return {std::nullopt, *invalid};
    }
    const std::size_t gpu = enumeration_[static_cast<std::size_t>(value)];
    warn_about_number_spelling(i, number, value);
    const bool renumbered =
        order_ == DeviceOrder::FastestFirst && gpus_[gpu].index != static_cast<unsigned>(value);
    if (renumbered) {
      renumbered_entries_.push_back(fmt::format("{} is nvidia-smi's GPU {} ({})", entry_name(i),
                                                gpus_[gpu].index, gpus_[gpu].name));
    }
    return {gpu, fmt::format("index {}{} -> {}", value, renumbered ? " in FASTEST_FIRST order" : "",
                             gpu_name(gpu))};
  }

  static std::string why_not_a_number(std::string_view text) {
    if (text.empty()) return "empty entry";
    if (is_blank(text)) return "blank entry";
    const std::string_view trimmed = skip_c_space(text);
    std::string lower;
    for (char c : trimmed.substr(0, 3)) lower += to_lower_ascii(c);
    if (lower == "gpu" || lower == "mig") {
      return "neither a number nor a UUID: a UUID must start with exactly 'GPU-' or 'MIG-' "
             "(upper case, a dash, no space before)";
    }
    return "neither a number nor a UUID starting with 'GPU-' or 'MIG-'";
  }

  // "16fb8516-..." without "GPU-" is read as the number 16: say what was probably meant.
  void warn_if_bare_uuid(std::size_t i) {
    const std::string hex = uuid_hex(skip_c_space(out_.entries[i].text));
    if (hex.size() < kFragileUuidPrefixDigits) return;
    for (std::size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
      if (hex_uuids_[gpu].starts_with(hex)) {
        warn("{} looks like the UUID of {} without the 'GPU-' prefix, but the driver reads it as "
             "a number: write GPU-{}", entry_name(i), gpu_name(gpu), hex);
        return;
      }
    }
  }

  // Entries that work, but not for the reason the writer thinks.
  void warn_about_number_spelling(std::size_t i, const NumberText& number, int32_t value) {
    const std::string name = entry_name(i);
    const std::string_view rest = number.rest;
    if (!is_blank(rest)) {
      const char next = rest.front();
      if (next == '.') {
        warn("{} is read as index {}: the driver stops at the '.', it is not a fraction", name,
             value);
      } else if (next == 'x' || next == 'X') {
        warn("{} is read as index {}: hexadecimal is not understood, the driver stops at the '{}'",
             name, value, next);
      } else if (is_c_space(next) || next == ';' || next == ':' || next == '|' || next == '/') {
        warn("{} is read as the single index {}: only ',' separates entries, so {} is ignored",
             name, value, in_quotes(rest));
      } else {
        warn("{} is read as index {}: the driver ignores the trailing {}", name, value,
             in_quotes(rest));
      }
    }
    if (wrapped(number, value)) {
      warn("{} is read as index {}: the driver keeps only the low 32 bits of the number", name,
           value);
    } else if (number.has_sign || (number.digits.size() > 1 && number.digits.front() == '0')) {
      warn("{} is read as index {}: write it plainly as {} so repeats are easy to see", name,
           value, value);
    }
  }

  EntryMeaning read_uuid_entry(std::size_t i) {
    const std::string_view text = out_.entries[i].text;
    const bool mig = text.starts_with("MIG-");
    const UuidText uuid = read_uuid_text(text.substr(4));
    if (uuid.hex.empty()) {
      if (text.substr(4).starts_with("GPU-")) return {std::nullopt, explain_legacy_mig_name(text)};
      return {std::nullopt, fmt::format("{} is not followed by a hex digit", text.substr(0, 4))};
    }
    if (uuid.stray) {
      return {std::nullopt,
              fmt::format("{} after {} hex digit(s) of the UUID: before the 32nd digit the driver "
                          "accepts only hex digits and '-' (and white space right before a hex "
                          "digit)", in_quotes(uuid.rest.substr(0, 1)), uuid.hex.size())};
    }
    if (mig) {
      if (std::optional<EntryMeaning> meaning = read_mig_uuid(i, uuid)) return *meaning;
    }
    std::vector<std::size_t> matches;
    for (std::size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
      if (hex_uuids_[gpu].starts_with(uuid.hex)) matches.push_back(gpu);
    }
    const std::optional<std::size_t> gpu = pick_uuid_match(matches);
    if (!gpu) {
      if (matches.empty()) {
        return {std::nullopt, fmt::format("no GPU's UUID starts with {}", uuid.hex)};
      }
      std::vector<unsigned> indices;
      for (std::size_t match : matches) indices.push_back(gpus_[match].index);
      warn("{} fits the UUIDs of GPUs {}: gpupool assumes (unverified) the driver then accepts "
           "none of them; write more of the UUID", entry_name(i), fmt::join(indices, ", "));
      return {std::nullopt, fmt::format("UUID prefix {} fits GPUs {} (model, unverified)", uuid.hex,
                                        fmt::join(indices, ", "))};
    }
    warn_about_uuid_spelling(i, uuid, mig, *gpu);
    if (uuid.hex.size() == kUuidHexDigits) return {*gpu, fmt::format("UUID -> {}", gpu_name(*gpu))};
    return {*gpu, fmt::format("UUID prefix {} ({} hex digit{}) -> {}", uuid.hex, uuid.hex.size(),
                              uuid.hex.size() == 1 ? "" : "s", gpu_name(*gpu))};
  }

  // "MIG-GPU-<GPU UUID>/<GPU instance>/<compute instance>" named MIG devices for drivers before
  // R470; the driver rejects it (observed, 580.159.04), so say which MIG UUID is meant.
  std::string explain_legacy_mig_name(std::string_view text) const {
    std::string why = "'MIG-GPU-...' is the old MIG name (drivers before R470), which the driver rejects";
    const std::string_view name = text.substr(4);
    const std::size_t slash = name.find('/');
    const std::size_t second = slash == std::string_view::npos ? slash : name.find('/', slash + 1);
    unsigned gi = 0, ci = 0;
    const auto number = [](std::string_view digits, unsigned& value) {
      auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      return error == std::errc() && end == digits.data() + digits.size();
    };
    if (second == std::string_view::npos || !number(name.substr(slash + 1, second - slash - 1), gi) ||
        !number(name.substr(second + 1), ci)) {
      return why;
    }
    const std::string gpu_hex = uuid_hex(name.substr(0, slash));
    for (const Gpu& gpu : gpus_) {
      if (uuid_hex(gpu.uuid) != gpu_hex) continue;
      for (const MigDevice& mig : gpu.mig_devices) {
        if (mig.gpu_instance_id == gi && mig.compute_instance_id == ci) {
          return fmt::format("{}: write {} (MIG device {}:{}, {})", why, mig.uuid, gpu.index, mig.index, mig.profile);
        }
      }
    }
    return why;
  }

  void warn_about_uuid_spelling(std::size_t i, const UuidText& uuid, bool mig, std::size_t gpu) {
    const std::string name = entry_name(i);
    if (uuid.hex.size() < kFragileUuidPrefixDigits) {
      warn("{} names {} by only {} hex digit{} of its UUID, which may fit another card later or "
           "elsewhere: write the full UUID", name, gpu_name(gpu), uuid.hex.size(),
           uuid.hex.size() == 1 ? "" : "s");
    }
    if (uuid.white_space_inside) {
      warn("{} has white space inside its UUID: the driver skips it but then reads the hex digit "
           "after it twice, so the entry names {} only by accident; remove the white space", name,
           gpu_name(gpu));
    }
    if (!is_blank(uuid.rest)) {
      warn("{} has {} after the full UUID, which the driver ignores", name, in_quotes(uuid.rest));
    }
    if (mig && !gpus_[gpu].mig_enabled.value_or(false)) {
      warn("{} uses the 'MIG-' prefix for {}, which has no MIG instances: the driver accepts it, "
           "but write 'GPU-'", name, gpu_name(gpu));
    }
  }

  void note_duplicate(std::size_t first, std::size_t i, const std::string& how) {
    VisibleDevicesEntry& entry = out_.entries[i];
    entry.reading = EntryReading::Duplicate;
    entry.explanation = fmt::format("{}, already listed by entry {}; the driver refuses a card "
                                    "listed twice", how, first + 1);
    warn("{} and {} both name GPU {}: the driver refuses a card listed twice, so cuInit fails and "
         "the program sees no GPU", entry_name(first), entry_name(i), *entry.nvml_index);
    if (!out_.error) {
      out_.error = fmt::format("{}: GPU {} is listed twice (entries {} and {})", kInvalidDevice,
                               *entry.nvml_index, first + 1, i + 1);
    }
  }

  void warn_about_invalid_entry(std::size_t invalid, const std::string& why) {
    const auto& entries = out_.entries;
    const bool nothing_listed = std::all_of(entries.begin(), entries.end(),
                                            [](const auto& entry) { return is_blank(entry.text); });
    if (nothing_listed) {
      warn("CUDA_VISIBLE_DEVICES is set but lists nothing, which hides every GPU: unset it to see "
           "all GPUs (empty is not the same as unset)");
      return;
    }
    std::vector<std::string> dropped;
    for (std::size_t i = invalid + 1; i < entries.size(); ++i) {
      if (!is_blank(entries[i].text)) dropped.push_back(in_quotes(entries[i].text));
    }
    if (other_kind_entry_ == invalid) {
      dropped.insert(dropped.begin(), in_quotes(entries[invalid].text));
      warn("mixing indices and UUIDs: everything after the first entry of the other kind is "
           "ignored, that entry included, because the driver reads every entry like entry 1; it "
           "silently ignores {} (observed on one GPU, modelled for several): use one kind only",
           fmt::join(dropped, ", "));
    } else if (is_blank(entries[invalid].text)) {
      if (dropped.empty()) return;  // trailing commas are harmless
      warn("{} is blank, so the driver stops reading there and silently ignores {}",
           entry_name(invalid), fmt::join(dropped, ", "));
    } else if (dropped.empty()) {
      warn("{} is silently ignored by the driver ({})", entry_name(invalid),
           why);
    } else {
      warn("{} is invalid ({}), so the driver stops reading there and silently ignores it and {}",
           entry_name(invalid), why, fmt::join(dropped, ", "));
    }
  }

  std::span<const Gpu> gpus_;
  DeviceOrder order_;
  std::vector<std::size_t> enumeration_;  // CUDA's numbering: positions in gpus_
  std::vector<std::string> hex_uuids_;
  std::vector<std::string> renumbered_entries_;  // index entries naming another nvidia-smi GPU
  bool uuid_list_ = false;  // the first entry is a UUID, so every entry is read as one
  std::optional<std::size_t> other_kind_entry_;  // the first entry not of the first entry's kind
  VisibleDevicesResolution& out_;
};

}  // namespace

const char* to_string(DeviceOrder order) {
  switch (order) {
    case DeviceOrder::FastestFirst: return "FASTEST_FIRST";
    case DeviceOrder::PciBusId: return "PCI_BUS_ID";
  }
  return "unknown";
}

const char* to_string(EntryReading reading) {
  switch (reading) {
    case EntryReading::Index: return "index";
    case EntryReading::UuidPrefix: return "uuid";
    case EntryReading::Duplicate: return "duplicate";
    case EntryReading::Invalid: return "invalid";
    case EntryReading::IgnoredAfterInvalid: return "ignored";
  }
  return "unknown";
}

const char* to_string(CudaInitStatus status) {
  switch (status) {
    case CudaInitStatus::Success: return "CUDA_SUCCESS";
    case CudaInitStatus::NoDevice: return "CUDA_ERROR_NO_DEVICE";
    case CudaInitStatus::InvalidDevice: return "CUDA_ERROR_INVALID_DEVICE";
  }
  return "unknown";
}

CudaInitStatus cuda_init_status(const VisibleDevicesResolution& resolution) {
  if (resolution.error) return CudaInitStatus::InvalidDevice;
  return resolution.devices.empty() ? CudaInitStatus::NoDevice : CudaInitStatus::Success;
}

Result<DeviceOrder> parse_device_order(const std::optional<std::string>& value) {
  if (!value || *value == "FASTEST_FIRST") return DeviceOrder::FastestFirst;
  if (*value == "PCI_BUS_ID") return DeviceOrder::PciBusId;
  return fail("CUDA_DEVICE_ORDER {} is neither FASTEST_FIRST nor PCI_BUS_ID", in_quotes(*value));
}

std::vector<std::size_t> cuda_enumeration_order(std::span<const Gpu> gpus, DeviceOrder order) {
  std::vector<std::size_t> positions(gpus.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = i;
  if (order == DeviceOrder::PciBusId || !speeds_known(gpus)) return positions;
  const auto speed = [&](std::size_t i) {
    return std::tuple(gpus[i].compute_capability->major, gpus[i].compute_capability->minor,
                      *gpus[i].multiprocessors);
  };
  std::stable_sort(positions.begin(), positions.end(),
                   [&](std::size_t a, std::size_t b) { return speed(a) > speed(b); });
  return positions;
}

int32_t driver_index_from_digits(bool negative, std::string_view digits, IntegerParse parse) {
  constexpr uint64_t kLongMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t magnitude = 0;
  bool overflow = false;
  for (char c : digits) {
    const auto digit = static_cast<uint64_t>(c - '0');
    if (magnitude > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      overflow = true;
      break;
    }
    magnitude = magnitude * 10 + digit;
  }
  uint64_t bits = 0;  // the C call's result, as the bits of a 64-bit long
  switch (parse) {
    case IntegerParse::Strtol:
      if (negative) {
        bits = overflow || magnitude > kLongMax + 1 ? kLongMax + 1 : 0 - magnitude;  // LONG_MIN
      } else {
        bits = overflow || magnitude > kLongMax ? kLongMax : magnitude;
      }
      break;
    case IntegerParse::Strtoul:
      if (overflow) {
        bits = std::numeric_limits<uint64_t>::max();
      } else {
        bits = negative ? 0 - magnitude : magnitude;
      }
      break;
  }
  return static_cast<int32_t>(static_cast<uint32_t>(bits));  // the driver stores it in an int
}

VisibleDevicesResolution resolve_visible_devices(std::span<const Gpu> gpus,
                                                 const std::optional<std::string>& visible_devices,
                                                 const std::optional<std::string>& device_order) {
  VisibleDevicesResolution out;
  Result<DeviceOrder> order = parse_device_order(device_order);
  if (!order) {
    out.error = fmt::format("{}: {}", kInvalidDevice, order.error().message);
    out.warnings.push_back(fmt::format(
        "CUDA_DEVICE_ORDER={} makes every CUDA program fail to initialise: the only valid values "
        "are FASTEST_FIRST and PCI_BUS_ID, exactly so written, or leave it unset",
        in_quotes(*device_order)));
    return out;
  }
  out.order = *order;
  Resolver resolver(gpus, *order, out);
  resolver.warn_about_machine(visible_devices.has_value());
  if (visible_devices) {
    resolver.read_list(*visible_devices);
  } else {
    resolver.show_all();
  }
  resolver.apply_mig_rules();
  return out;
}

}  // namespace gpupool
