#include "daemon/fair_share_keeper.h"

#include <chrono>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "os/clock.h"

namespace gpupool {
namespace {

// The scheduler's decayed usage per user, in the settings table as JSON: {"as_of": unix
// seconds, "usage": {"alice": GPU-seconds, ...}}.
constexpr const char* kFairShareSetting = "fair_share_usage";
constexpr auto kFairShareSaveEvery = std::chrono::seconds(60);

std::string encode_fair_share(const FairShareUsage& saved) {
  return nlohmann::json{{"as_of", saved.as_of_s}, {"usage", saved.usage}}.dump();
}

Result<FairShareUsage> decode_fair_share(const std::string& text) {
  nlohmann::json saved_json = nlohmann::json::parse(text, nullptr, false);
  auto as_of = saved_json.is_object() ? saved_json.find("as_of") : saved_json.end();
  auto usage = saved_json.is_object() ? saved_json.find("usage") : saved_json.end();
  if (as_of == saved_json.end() || !as_of->is_number() || usage == saved_json.end() || !usage->is_object()) {
    return fail("expected {{\"as_of\": seconds, \"usage\": {{user: GPU-seconds}}}}");
  }
  FairShareUsage saved{as_of->get<double>(), {}};
  for (const auto& [user, value] : usage->items()) {
    if (!value.is_number()) return fail("the usage of {} is not a number", user);
    saved.usage[user] = value.get<double>();
  }
  return saved;
}

}  // namespace

FairShareKeeper::FairShareKeeper(asio::io_context& io, JobStore& store, Scheduler& scheduler)
    : store_(store), scheduler_(scheduler), timer_(io) {}

void FairShareKeeper::restore() {
  auto saved = store_.setting(kFairShareSetting);
  if (!saved || !*saved) {
    if (!saved) fmt::print(stderr, "gpupoold: cannot read the saved fair-share usage: {}\n", saved.error().message);
    return;
  }
  auto decoded = decode_fair_share(**saved);
  Result<void> restored = decoded ? scheduler_.import_fair_share(*decoded, unix_now()) : Result<void>(decoded.error());
  if (!restored) fmt::print(stderr, "gpupoold: ignoring the saved fair-share usage: {}\n", restored.error().message);
}

void FairShareKeeper::save() {
  std::string encoded = encode_fair_share(scheduler_.export_fair_share(unix_now()));
  if (auto stored = store_.set_setting(kFairShareSetting, encoded); !stored) {
    fmt::print(stderr, "gpupoold: cannot save the fair-share usage: {}\n", stored.error().message);
  }
}

void FairShareKeeper::save_periodically() {
  timer_.expires_after(kFairShareSaveEvery);
  timer_.async_wait([this](const asio::error_code& error) {
    if (error) return;
    save();
    save_periodically();
  });
}

}  // namespace gpupool
