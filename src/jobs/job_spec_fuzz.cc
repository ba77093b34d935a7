// Fuzzes the parsers of the values a job spec is typed with (gpupool submit/run/launch/wait):
// durations (--time, --wait, --grace), memory slices (--mem), job ids (--after, cancel 7,8),
// job states and kinds (jobs --state), and GPU names (--gpus, --exclude: indices and UUID
// prefixes) on an 8-GPU machine. Each either gives a value in range or one error line.
// The whole JSON job spec the daemon receives is messages_fuzz's.
// Seeds: tests/fuzz/job_spec/.
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "base/duration.h"
#include "base/text.h"
#include "jobs/job.h"
#include "machine/gpu_selection.h"
#include "sched/allocation.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

template <typename T>
void check_error_line(const gpupool::Result<T>& result) {
  if (!result) check(!result.error().message.empty() && result.error().message.find('\n') == std::string::npos);
}

std::vector<gpupool::Gpu> eight_gpus() {
  std::vector<gpupool::Gpu> gpus(8);
  for (unsigned i = 0; i < gpus.size(); ++i) {
    gpus[i].index = i;
    // Shared prefixes ("GPU-1a2b..."), so that ambiguous prefixes are reachable.
    gpus[i].uuid = fmt::format("GPU-{:x}{:07x}-9f03-8d84-eb33-9dfbc4d69c7{}", i / 4 + 1, i * 0x1111, i);
  }
  return gpus;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto duration = gpupool::parse_duration_s(text);
  check_error_line(duration);
  if (duration) check(std::isfinite(*duration) && *duration >= 0 && *duration <= gpupool::kMaxDurationS);

  auto memory = gpupool::parse_memory_mib(text);
  check_error_line(memory);
  if (memory) check(*memory >= 1 && *memory <= 1'000'000'000'000ull);

  const std::vector<std::string> arguments = gpupool::split(text, ' ');
  auto ids = gpupool::parse_job_ids(arguments);
  check_error_line(ids);
  if (ids) {
    for (gpupool::JobId id : *ids) check(id >= 1 && id < 1'000'000'000'000'000'000ull);
  }

  auto state = gpupool::parse_job_state(text);
  check_error_line(state);
  if (state) check(text == gpupool::to_string(*state));
  auto kind = gpupool::parse_job_kind(text);
  check_error_line(kind);
  if (kind) check(text == gpupool::to_string(*kind));

  static const std::vector<gpupool::Gpu> gpus = eight_gpus();
  auto chosen = gpupool::find_gpus(gpus, gpupool::split(text, ','));
  check_error_line(chosen);
  if (chosen) {
    check(std::set<unsigned>(chosen->begin(), chosen->end()).size() == chosen->size());  // no GPU twice
    for (unsigned index : *chosen) check(index < gpus.size());
  }
  return 0;
}
