// Capturing a machine as a topology fixture: the inverse of machine_from_fixture. What NVML
// reports (pairwise PCIe levels, NVLink counts) is turned back into the fixture's PCIe tree and
// NVLink peers, so `gpupool sim capture` can save a real machine for placement questions, trace
// replays and bug reports on machines without its GPUs.
#pragma once

#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "sim/fixture.h"

namespace gpupool::sim {

struct CapturedFixture {
  Fixture fixture;
  // One line per GPU field the fixture format cannot carry exactly (e.g. a core count for an
  // architecture gpupool does not know); the links always round-trip or the capture fails.
  std::vector<std::string> approximations;
};

// A fixture from which the simulated NVML reports `machine` again. Fails with one line when the
// links admit no PCIe tree (e.g. the driver would not say how two GPUs connect).
Result<CapturedFixture> capture_fixture(const Machine& machine, const std::string& name,
                                        const std::string& description);

// The fixture as JSON text in the documented format, keys in the documented order.
std::string format_fixture(const Fixture& fixture);

}  // namespace gpupool::sim
