#include "sched/trace.h"

#include "base/csv.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <unordered_map>

namespace gpupool {
namespace {

constexpr std::array<std::string_view, 8> kColumns = {
    "id", "submit_s", "duration_s", "gpus", "gpu_mem_mib", "user", "priority", "time_limit_s"};
constexpr size_t kRequiredColumns = 4;

// A finite, non-negative time in seconds (positive when `positive`).
Result<double> parse_seconds(std::string_view column, std::string_view text, bool positive) {
  std::optional<double> value = parse_number<double>(text);
  if (!value || !std::isfinite(*value) || *value < 0 || (positive && *value == 0)) {
    return fail("{}: expected a {} number of seconds, got '{}'", column,
                positive ? "positive" : "non-negative", text);
  }
  return *value;
}

Result<TraceJob> parse_row(const std::vector<std::string_view>& fields) {
  // Absent trailing columns read as empty ones.
  auto field = [&](size_t column) { return column < fields.size() ? fields[column] : ""; };
  TraceJob job;
  job.id = std::string(field(0));
  if (job.id.empty()) return fail("id: must not be empty");
  TRY_ASSIGN(job.submit_s, parse_seconds("submit_s", field(1), false));
  TRY_ASSIGN(job.duration_s, parse_seconds("duration_s", field(2), false));
  std::optional<unsigned> gpus = parse_number<unsigned>(field(3));
  if (!gpus || *gpus > kMaxTraceGpus) {
    return fail("gpus: expected an integer from 0 to {}, got '{}'", kMaxTraceGpus, field(3));
  }
  job.gpus = *gpus;
  if (!field(4).empty()) {
    job.gpu_mem_mib = parse_number<uint64_t>(field(4));
    if (!job.gpu_mem_mib || *job.gpu_mem_mib == 0) {
      return fail("gpu_mem_mib: expected a positive number of MiB or nothing, got '{}'", field(4));
    }
  }
  job.user = std::string(field(5));
  if (!field(6).empty()) {
    std::optional<int> priority = parse_number<int>(field(6));
    if (!priority) return fail("priority: expected an integer or nothing, got '{}'", field(6));
    job.priority = *priority;
  }
  if (!field(7).empty()) {
    TRY_ASSIGN(job.time_limit_s, parse_seconds("time_limit_s", field(7), true));
  }
  return job;
}

Result<size_t> parse_header(std::string_view line) {
  std::vector<std::string_view> names = csv_fields(line);
  bool prefix = names.size() >= kRequiredColumns && names.size() <= kColumns.size();
  for (size_t i = 0; prefix && i < names.size(); ++i) prefix = names[i] == kColumns[i];
  if (!prefix) {
    return fail(
        "line 1: expected the header '{}' (the last four columns may be left out), got '{}'",
        fmt::join(kColumns, ","), trim_field(line));
  }
  return names.size();
}

// One line of the trace: the header (line 1, which sets `columns`) or a job.
Result<void> read_line(size_t line_number, std::string_view line, size_t& columns,
                       std::vector<TraceJob>& jobs,
                       std::unordered_map<std::string, size_t>& line_of_id) {
  if (line_number == 1) {
    TRY_ASSIGN(columns, parse_header(line));
    return {};
  }
  if (trim_field(line).empty()) return {};
  std::vector<std::string_view> fields = csv_fields(line);
  if (fields.size() < kRequiredColumns || fields.size() > columns) {
    return fail("line {}: expected {} to {} fields, got {}", line_number, kRequiredColumns, columns,
                fields.size());
  }
  Result<TraceJob> job = parse_row(fields);
  if (!job) return fail("line {}: {}", line_number, job.error().message);
  auto [previous, inserted] = line_of_id.try_emplace(job->id, line_number);
  if (!inserted) {
    return fail("line {}: id '{}' is already used on line {}", line_number, job->id,
                previous->second);
  }
  if (job->gpus > 0) jobs.push_back(std::move(*job));
  return {};
}

}  // namespace

Result<std::vector<TraceJob>> parse_trace(std::string_view csv) {
  std::vector<TraceJob> jobs;
  std::unordered_map<std::string, size_t> line_of_id;
  size_t columns = 0;
  size_t lines = 0;
  Result<void> outcome;
  for_each_line(csv, [&](size_t line_number, std::string_view line) {
    lines = line_number;
    outcome = read_line(line_number, line, columns, jobs, line_of_id);
    return static_cast<bool>(outcome);
  });
  TRY(outcome);
  if (lines == 0) return fail("the trace is empty: expected a header line");
  return jobs;
}

}  // namespace gpupool
