// Fuzzes the trace parser: any input either parses into jobs that satisfy the format's rules or
// yields one error line that names a line number.
// Seeds: tests/fuzz/trace/.
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "sched/trace.h"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto trace = gpupool::parse_trace(text);
  if (!trace) {
    const std::string& message = trace.error().message;
    check(!message.empty() && message.find('\n') == std::string::npos);
    check(message.starts_with("line ") || message.starts_with("the trace is empty"));
    return 0;
  }
  for (const gpupool::TraceJob& job : *trace) {
    check(!job.id.empty());
    check(job.gpus >= 1 && job.gpus <= gpupool::kMaxTraceGpus);
    check(std::isfinite(job.submit_s) && job.submit_s >= 0);
    check(std::isfinite(job.duration_s) && job.duration_s >= 0);
    check(!job.gpu_mem_mib || *job.gpu_mem_mib > 0);
    check(!job.time_limit_s || (std::isfinite(*job.time_limit_s) && *job.time_limit_s > 0));
  }
  return 0;
}
