#include "daemon/drain_state.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace gpupool {
namespace {

using nlohmann::json;

json note_json(const DrainNote& note) { return {{"by", note.by}, {"at", note.at}, {"reason", note.reason}}; }

Result<DrainNote> note_from(const json& value) {
  if (!value.is_object()) return fail("a drain note must be an object");
  DrainNote note;
  note.by = value.value("by", std::string());
  note.at = value.value("at", 0.0);
  note.reason = value.value("reason", std::string());
  return note;
}

}  // namespace

std::string DrainState::describe(const DrainNote& note) {
  return fmt::format("drained by {}{}", note.by, note.reason.empty() ? "" : ": " + note.reason);
}

std::string encode(const DrainState& state) {
  json gpus = json::object();
  for (const auto& [index, note] : state.gpus) gpus[std::to_string(index)] = note_json(note);
  return json{{"queue", state.queue ? note_json(*state.queue) : json(nullptr)}, {"gpus", std::move(gpus)}}.dump();
}

Result<DrainState> parse_drain_state(std::string_view text) {
  // The daemon wrote it; anything else is damage to the store, said as such.
  json value = json::parse(text, nullptr, false);
  if (value.is_discarded() || !value.is_object()) return fail("the stored drain is not a JSON object");
  DrainState state;
  try {
    if (value.contains("queue") && !value["queue"].is_null()) {
      TRY_ASSIGN(state.queue, note_from(value["queue"]));
    }
    const json gpus = value.value("gpus", json::object());
    for (const auto& [key, note] : gpus.items()) {
      TRY_ASSIGN(DrainNote parsed, note_from(note));
      state.gpus[static_cast<unsigned>(std::stoul(key))] = std::move(parsed);
    }
  } catch (const std::exception& e) {  // a field of the wrong type, a key that is no number
    return fail("the stored drain is damaged: {}", e.what());
  }
  return state;
}

void mark_drained_gpus(const DrainState& state, std::vector<GpuAvailability>& gpus) {
  for (const auto& [index, note] : state.gpus) {
    if (index < gpus.size()) take_out_of_service(gpus[index], DrainState::describe(note));
  }
}

}  // namespace gpupool
