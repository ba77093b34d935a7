// Fuzzes the fixture parser (the simulated machines GPUPOOL_SIM names, and the live overlay the
// simulated NVML merges in): any input either parses into a fixture whose machine can be built
// (every GPU named, a symmetric link matrix) or yields one error line naming the fixture.
// An input with a line "---" is a fixture and an overlay.
// Seeds: tests/fuzz/fixture/.
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/fixture.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

void check_parsed(const gpupool::Result<gpupool::sim::Fixture>& fixture) {
  if (!fixture) {
    const std::string& message = fixture.error().message;
    check(message.starts_with("fixture fuzz"));
    check(message.find('\n') == std::string::npos);
    return;
  }
  gpupool::Machine machine = gpupool::sim::machine_from_fixture(*fixture);
  check(machine.gpus.size() == fixture->gpus.size());
  for (const gpupool::Gpu& gpu : machine.gpus) check(!gpu.uuid.empty());
  // A square link matrix, the same both ways.
  check(machine.links.size() == machine.gpus.size());
  for (size_t i = 0; i < machine.links.size(); ++i) {
    check(machine.links[i].size() == machine.gpus.size());
    for (size_t j = 0; j < i; ++j) {
      check(machine.links[i][j].nvlinks == machine.links[j][i].nvlinks);
      check(machine.links[i][j].pcie == machine.links[j][i].pcie);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSeparator = "\n---\n";
  if (auto split = input.find(kSeparator); split != std::string_view::npos) {
    check_parsed(gpupool::sim::parse_fixture_with_overlay(input.substr(0, split),
                                                          input.substr(split + kSeparator.size()), "fuzz"));
  } else {
    check_parsed(gpupool::sim::parse_fixture(input, "fuzz"));
  }
  return 0;
}
