#include "health/quarantine.h"

#include <algorithm>
#include <array>
#include <regex>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace gpupool {
namespace {

using nlohmann::json;

constexpr std::string_view kReset = "reset the GPU (`nvidia-smi -r -i N`) once its jobs are off it";

// The XIDs gpupool explains. The hardware ones quarantine; the others are a program's doing.
constexpr std::array kXids = {
    XidMeaning{13, "a program's kernel raised an exception", "look at the program (an out-of-range access)", false},
    XidMeaning{31, "a program's GPU memory page fault", "look at the program (an illegal address)", false},
    XidMeaning{43, "the GPU stopped a program's work", "look at the program; the GPU is usable", false},
    XidMeaning{45, "the driver cleaned up after a program's error", "nothing, if no other XID came with it", false},
    XidMeaning{48, "an uncorrectable (double-bit) ECC error", kReset, true},
    XidMeaning{61, "an internal micro-controller breakpoint", kReset, true},
    XidMeaning{62, "an internal micro-controller halt", kReset, true},
    XidMeaning{63, "a row remap or page retirement was recorded", kReset, true},
    XidMeaning{64, "a row remap or page retirement could not be recorded", "have the GPU serviced", true},
    XidMeaning{74, "an NVLink error", "reset the GPU; if it repeats, have the NVLink serviced", true},
    XidMeaning{79, "the GPU fell off the bus", "reboot the machine; if it repeats, have the GPU reseated or replaced",
               true},
    XidMeaning{92, "a high rate of single-bit ECC errors", kReset, true},
    XidMeaning{94, "a contained ECC error (its program was ended)", kReset, true},
    XidMeaning{95, "an uncontained ECC error", kReset, true},
    XidMeaning{119, "the GPU's firmware (GSP) did not answer", kReset, true},
    XidMeaning{120, "the GPU's firmware (GSP) failed", kReset, true},
    XidMeaning{140, "an unrecovered ECC error", kReset, true},
};

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : "; ") + part;
  return out;
}

}  // namespace

const XidMeaning* xid_meaning(uint64_t xid) {
  auto found = std::ranges::find(kXids, xid, &XidMeaning::xid);
  return found == kXids.end() ? nullptr : &*found;
}

std::string describe_xid(uint64_t xid) {
  const XidMeaning* meaning = xid_meaning(xid);
  return meaning ? fmt::format("XID {} ({})", xid, meaning->what) : fmt::format("XID {}", xid);
}

std::optional<uint64_t> unattributed_memory_mib(const Gpu& gpu) {
  if (!gpu.memory_used_mib || gpu.mig_enabled.value_or(false)) return std::nullopt;
  uint64_t held = 0;
  for (const GpuProcess& process : gpu.processes) {
    if (!process.used_memory_mib) return std::nullopt;
    held += *process.used_memory_mib;
  }
  return *gpu.memory_used_mib > held ? *gpu.memory_used_mib - held : 0;
}

std::vector<std::string> reading_faults(const Gpu& gpu) {
  std::vector<std::string> faults;
  if (gpu.fault) faults.push_back(fmt::format("NVML cannot read it ({})", *gpu.fault));
  if (gpu.ecc_uncorrected_volatile.value_or(0) > 0) {
    faults.push_back(fmt::format("{} uncorrectable ECC errors since the driver loaded", *gpu.ecc_uncorrected_volatile));
  }
  if (gpu.row_remapping_failed.value_or(false)) faults.push_back("a row remap failed");
  if (gpu.row_remapping_pending.value_or(false)) faults.push_back("a row remap is pending (a reset applies it)");
  if (gpu.retired_pages_pending.value_or(false)) faults.push_back("a page retirement is pending (a reset applies it)");
  return faults;
}

std::string quarantine_key(const Gpu& gpu) {
  return gpu.uuid.empty() ? fmt::format("index {}", gpu.index) : gpu.uuid;
}

std::vector<QuarantineChange> observe_health(QuarantineState& state, const Machine& reading,
                                             const std::vector<XidEvent>& xids, double now,
                                             const QuarantinePolicy& policy) {
  std::vector<QuarantineChange> changes;
  auto release = [&](std::map<std::string, QuarantineNote>::iterator held, std::string why) {
    changes.push_back({held->second.index, held->first, false, std::move(why)});
    return state.gpus.erase(held);
  };
  if (!policy.enabled) {
    for (auto held = state.gpus.begin(); held != state.gpus.end();) held = release(held, "quarantine is off");
    return changes;
  }
  // A card no longer where its entry says (replaced, or the GPUs numbered anew) is not the one
  // that failed: its entry goes. A GPU that cannot be read keeps its place: that is a fault.
  std::set<std::string> keys;
  for (const Gpu& gpu : reading.gpus) keys.insert(quarantine_key(gpu));
  for (auto held = state.gpus.begin(); held != state.gpus.end();) {
    if (keys.contains(held->first)) {
      ++held;
    } else if (held->second.index < reading.gpus.size()) {
      held = release(held, fmt::format("another card is GPU {} now", held->second.index));
    } else {
      ++held;  // fewer GPUs than before: it may be the one missing
    }
  }
  std::erase_if(state.accepted, [&](const auto& entry) { return !keys.contains(entry.first); });

  for (const Gpu& gpu : reading.gpus) {
    const std::string key = quarantine_key(gpu);
    std::vector<std::string> faults = reading_faults(gpu);
    // Accepted faults last only as long as they are seen: one that comes back is new.
    if (auto accepted = state.accepted.find(key); accepted != state.accepted.end()) {
      std::erase_if(accepted->second, [&](const std::string& f) { return std::ranges::find(faults, f) == faults.end(); });
      std::erase_if(faults, [&](const std::string& f) { return accepted->second.contains(f); });
      if (accepted->second.empty()) state.accepted.erase(accepted);
    }
    for (const XidEvent& event : xids) {
      const XidMeaning* meaning = xid_meaning(event.xid);
      if (event.gpu_uuid == gpu.uuid && meaning && meaning->hardware) faults.push_back(describe_xid(event.xid));
    }
    auto held = state.gpus.find(key);
    if (held != state.gpus.end()) held->second.index = gpu.index;
    if (!faults.empty()) {
      if (held == state.gpus.end()) {
        std::string why = join(faults);
        state.gpus[key] = QuarantineNote{gpu.index, why, now, now};
        changes.push_back({gpu.index, key, true, std::move(why)});
      } else {
        held->second.last_fault = now;
      }
    } else if (held != state.gpus.end() && now - held->second.last_fault >= policy.clean_window_s) {
      release(held, fmt::format("no fault for {:.0f} min", (now - held->second.last_fault) / 60));
    }
  }
  return changes;
}

bool release_from_quarantine(QuarantineState& state, const Gpu& reading) {
  const std::string key = quarantine_key(reading);
  std::vector<std::string> faults = reading_faults(reading);
  if (faults.empty()) {
    state.accepted.erase(key);
  } else {
    state.accepted[key] = std::set<std::string>(faults.begin(), faults.end());
  }
  // By its place too: an entry of a card that is no longer there must not outlive the release.
  return std::erase_if(state.gpus, [&](const auto& entry) {
           return entry.first == key || entry.second.index == reading.index;
         }) > 0;
}

std::string quarantine_advice(std::string_view reason) {
  std::vector<std::string> steps;
  auto add = [&](std::string_view step) {
    if (std::ranges::find(steps, step) == steps.end()) steps.emplace_back(step);
  };
  // The reasons are observe_health's own lines, so their words can be looked for.
  static const std::regex kXid(R"(XID (\d+))");
  std::string text(reason);
  for (auto match = std::sregex_iterator(text.begin(), text.end(), kXid); match != std::sregex_iterator(); ++match) {
    if (const XidMeaning* meaning = xid_meaning(std::stoull((*match)[1].str()))) add(meaning->action);
  }
  if (text.find("NVML cannot read it") != std::string::npos) add("reboot the machine; if it repeats, have the GPU reseated");
  if (text.find("a row remap failed") != std::string::npos) add("have the GPU serviced");
  if (text.find("ECC errors") != std::string::npos || text.find("pending") != std::string::npos) add(kReset);
  std::string advice;
  for (const std::string& step : steps) advice += (advice.empty() ? "" : "; ") + step;
  return advice;
}

std::string describe_quarantine(const QuarantineNote& note) { return "quarantined: " + note.reason; }

void mark_quarantined_gpus(const QuarantineState& state, std::vector<GpuAvailability>& gpus) {
  for (const auto& [uuid, note] : state.gpus) {
    if (note.index < gpus.size()) take_out_of_service(gpus[note.index], describe_quarantine(note));
  }
}

std::string encode(const QuarantineState& state) {
  json gpus = json::object();
  for (const auto& [uuid, note] : state.gpus) {
    gpus[uuid] = {{"index", note.index}, {"reason", note.reason}, {"since", note.since}, {"last_fault", note.last_fault}};
  }
  json accepted = json::object();
  for (const auto& [uuid, faults] : state.accepted) accepted[uuid] = faults;
  return json{{"gpus", std::move(gpus)}, {"accepted", std::move(accepted)}}.dump();
}

Result<QuarantineState> parse_quarantine_state(std::string_view text) {
  // The daemon wrote it; anything else is damage to the store, said as such.
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded() || !value.is_object()) return fail("the stored quarantine is not a JSON object");
  QuarantineState state;
  try {
    const json gpus = value.value("gpus", json::object());  // kept: items() does not own it
    const json accepted = value.value("accepted", json::object());
    for (const auto& [uuid, note] : gpus.items()) {
      state.gpus[uuid] = QuarantineNote{note.at("index").get<unsigned>(), note.at("reason").get<std::string>(),
                                        note.at("since").get<double>(), note.at("last_fault").get<double>()};
    }
    for (const auto& [uuid, faults] : accepted.items()) {
      state.accepted[uuid] = faults.get<std::set<std::string>>();
    }
  } catch (const std::exception& e) {  // a missing field, one of the wrong type
    return fail("the stored quarantine is damaged: {}", e.what());
  }
  return state;
}

}  // namespace gpupool
