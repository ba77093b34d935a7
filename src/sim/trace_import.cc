#include "sim/trace_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

#include "base/csv.h"

namespace gpupool::sim {
namespace {

// The columns a CSV trace must have, found by name in its header.
class CsvColumns {
 public:
  static Result<CsvColumns> find(std::string_view header, std::vector<std::string_view> wanted) {
    std::vector<std::string_view> names = csv_fields(header);
    CsvColumns columns;
    for (std::string_view name : wanted) {
      auto found = std::find(names.begin(), names.end(), name);
      if (found == names.end()) {
        return fail("line 1: the header has no column '{}' (expected {})", name,
                    fmt::join(wanted, ", "));
      }
      columns.positions_.push_back(static_cast<size_t>(found - names.begin()));
    }
    return columns;
  }
  // The i-th wanted column of a record; "" where the record is short.
  std::string_view get(const std::vector<std::string_view>& fields, size_t i) const {
    return positions_[i] < fields.size() ? fields[positions_[i]] : "";
  }

 private:
  std::vector<size_t> positions_;
};

template <typename Number>
Result<Number> number_field(std::string_view column, std::string_view text) {
  std::optional<Number> value = parse_number<Number>(text);
  if (!value || (std::is_floating_point_v<Number> && !std::isfinite(static_cast<double>(*value))))
    return fail("{}: expected a number, got '{}'", column, text);
  return *value;
}

// "2017-10-07 01:12:09" (UTC, as the traces give it) as seconds since 1970.
Result<double> parse_timestamp(std::string_view column, std::string_view text) {
  auto bad = [&] { return fail("{}: expected a time as YYYY-MM-DD HH:MM:SS, got '{}'", column, text); };
  if (text.size() != 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':' ||
      text[16] != ':')
    return bad();
  auto part = [&](size_t at, size_t length) { return parse_number<int>(text.substr(at, length)); };
  std::optional<int> year = part(0, 4), month = part(5, 2), day = part(8, 2), hour = part(11, 2),
                     minute = part(14, 2), second = part(17, 2);
  if (!year || !month || !day || !hour || !minute || !second || *hour > 23 || *minute > 59 ||
      *second > 60)
    return bad();
  std::chrono::year_month_day date{std::chrono::year(*year),
                                   std::chrono::month(static_cast<unsigned>(*month)),
                                   std::chrono::day(static_cast<unsigned>(*day))};
  if (!date.ok()) return bad();
  auto days = std::chrono::sys_days(date).time_since_epoch().count();
  return static_cast<double>(days) * 86400 + *hour * 3600 + *minute * 60 + *second;
}

// Reads each record of a CSV trace with `read_record(fields, columns, trace)`; errors carry the
// line.
template <typename ReadRecord>
Result<RecordedTrace> read_csv_trace(std::string_view text, std::vector<std::string_view> wanted,
                                     ReadRecord read_record) {
  RecordedTrace trace;
  std::optional<CsvColumns> columns;
  Result<void> outcome;
  for_each_line(text, [&](size_t line_number, std::string_view line) {
    if (line_number == 1) {
      Result<CsvColumns> found = CsvColumns::find(line, wanted);
      if (!found) outcome = found.error();
      else columns = std::move(*found);
      return static_cast<bool>(outcome);
    }
    if (trim_field(line).empty()) return true;
    Result<void> record = read_record(csv_fields(line), *columns, trace);
    if (!record) outcome = fail("line {}: {}", line_number, record.error().message);
    return static_cast<bool>(outcome);
  });
  TRY(outcome);
  if (!columns) return fail("the trace is empty: expected a header line");
  return trace;
}

// cluster-trace-gpu-v2023's openb_pod_list_*.csv: one Kubernetes pod per row, times in seconds.
// A pod never scheduled (no scheduled_time) did not run. gpu_milli below 1000 on a 1-GPU pod is
// the share of the GPU it asked for.
Result<RecordedTrace> read_alibaba_gpu(std::string_view text) {
  return read_csv_trace(
      text, {"name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"},
      [](const std::vector<std::string_view>& fields, const CsvColumns& columns,
         RecordedTrace& trace) -> Result<void> {
        RecordedJob job;
        job.id = std::string(columns.get(fields, 0));
        TRY_ASSIGN(job.gpus, number_field<unsigned>("num_gpu", columns.get(fields, 1)));
        TRY_ASSIGN(unsigned milli, number_field<unsigned>("gpu_milli", columns.get(fields, 2)));
        TRY_ASSIGN(job.submit_s, number_field<double>("creation_time", columns.get(fields, 3)));
        std::string_view scheduled = columns.get(fields, 5), deleted = columns.get(fields, 4);
        if (scheduled.empty() || deleted.empty()) {
          ++trace.unusable;
          return {};
        }
        TRY_ASSIGN(double start, number_field<double>("scheduled_time", scheduled));
        TRY_ASSIGN(double end, number_field<double>("deletion_time", deleted));
        job.duration_s = end - start;
        if (job.gpus == 1 && milli > 0 && milli < 1000) job.gpu_fraction = milli / 1000.0;
        if (job.duration_s <= 0) ++trace.unusable;
        else trace.jobs.push_back(std::move(job));
        return {};
      });
}

// Helios' cluster_log.csv: one Slurm job per row; duration is end_time - start_time.
Result<RecordedTrace> read_helios(std::string_view text) {
  return read_csv_trace(
      text, {"job_id", "user", "gpu_num", "submit_time", "duration"},
      [](const std::vector<std::string_view>& fields, const CsvColumns& columns,
         RecordedTrace& trace) -> Result<void> {
        RecordedJob job;
        job.id = std::string(columns.get(fields, 0));
        job.user = std::string(columns.get(fields, 1));
        TRY_ASSIGN(job.gpus, number_field<unsigned>("gpu_num", columns.get(fields, 2)));
        TRY_ASSIGN(job.submit_s, parse_timestamp("submit_time", columns.get(fields, 3)));
        std::string_view duration = columns.get(fields, 4);
        if (!duration.empty()) {
          TRY_ASSIGN(job.duration_s, number_field<double>("duration", duration));
        }
        if (job.duration_s <= 0) ++trace.unusable;
        else trace.jobs.push_back(std::move(job));
        return {};
      });
}

// A Philly time, or nullopt where the log has none (null, "None" or "": logging gaps).
Result<std::optional<double>> philly_time(const nlohmann::json& entry, const char* key) {
  auto found = entry.find(key);
  if (found == entry.end() || found->is_null()) return std::optional<double>();
  if (!found->is_string()) return fail("{}: expected a time or null", key);
  const std::string& text = found->get_ref<const std::string&>();
  if (text.empty() || text == "None") return std::optional<double>();
  TRY_ASSIGN(double seconds, parse_timestamp(key, text));
  return std::optional<double>(seconds);
}

// One Philly job: the GPUs of its last attempt (every server's), the run time of all its
// attempts. A job without a complete attempt, or still running, is unusable.
Result<void> read_philly_job(const nlohmann::json& entry, RecordedTrace& trace) {
  if (!entry.is_object()) return fail("expected an object");
  RecordedJob job;
  if (auto id = entry.find("jobid"); id != entry.end() && id->is_string()) job.id = *id;
  if (auto user = entry.find("user"); user != entry.end() && user->is_string()) job.user = *user;
  TRY_ASSIGN(std::optional<double> submitted, philly_time(entry, "submitted_time"));
  auto attempts = entry.find("attempts");
  if (attempts != entry.end() && !attempts->is_array()) return fail("attempts: expected a list");
  if (!submitted || attempts == entry.end() || attempts->empty()) {
    ++trace.unusable;
    return {};
  }
  job.submit_s = *submitted;
  bool complete = true;
  for (const nlohmann::json& attempt : *attempts) {
    if (!attempt.is_object()) return fail("attempts: expected objects");
    TRY_ASSIGN(std::optional<double> start, philly_time(attempt, "start_time"));
    TRY_ASSIGN(std::optional<double> end, philly_time(attempt, "end_time"));
    complete = start && end;
    if (complete) job.duration_s += std::max(0.0, *end - *start);
    job.gpus = 0;
    if (auto detail = attempt.find("detail"); detail != attempt.end() && detail->is_array()) {
      for (const nlohmann::json& server : *detail) {
        if (auto gpus = server.find("gpus"); server.is_object() && gpus != server.end() &&
                                             gpus->is_array())
          job.gpus += static_cast<unsigned>(gpus->size());
      }
    }
  }
  if (!complete || job.duration_s <= 0) ++trace.unusable;
  else trace.jobs.push_back(std::move(job));
  return {};
}

Result<RecordedTrace> read_philly(std::string_view text) {
  nlohmann::json log = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (log.is_discarded()) return fail("not valid JSON (expected Philly's cluster_job_log)");
  if (!log.is_array()) return fail("expected a JSON list of jobs (Philly's cluster_job_log)");
  RecordedTrace trace;
  for (size_t i = 0; i < log.size(); ++i) {
    Result<void> job = read_philly_job(log[i], trace);
    if (!job) return fail("job {} of the list: {}", i + 1, job.error().message);
  }
  return trace;
}

double gpu_weight(const RecordedJob& job) { return job.gpu_fraction.value_or(job.gpus); }

}  // namespace

Result<TraceFormat> parse_trace_format(std::string_view name) {
  if (name == "alibaba-gpu") return TraceFormat::AlibabaGpu;
  if (name == "helios") return TraceFormat::Helios;
  if (name == "philly") return TraceFormat::Philly;
  return fail("unknown trace format '{}': expected alibaba-gpu, helios or philly", name);
}

Result<RecordedTrace> read_recorded_trace(TraceFormat format, std::string_view text) {
  switch (format) {
    case TraceFormat::AlibabaGpu: return read_alibaba_gpu(text);
    case TraceFormat::Helios: return read_helios(text);
    case TraceFormat::Philly: return read_philly(text);
  }
  return fail("unknown trace format");
}

Result<FittedTrace> fit_to_machine(std::vector<RecordedJob> jobs, const FitOptions& options) {
  if (options.machine_gpus == 0 || options.gpu_memory_mib == 0)
    return fail("the machine has no GPUs with known memory to fit the trace to");
  if (!(options.target_load > 0)) return fail("the target load must be above 0");
  FittedTrace fitted;
  std::erase_if(jobs, [&](const RecordedJob& job) {
    if (job.gpus == 0) ++fitted.cpu_only;
    else if (job.gpus > options.machine_gpus) ++fitted.too_wide;
    return job.gpus == 0 || job.gpus > options.machine_gpus;
  });
  std::stable_sort(jobs.begin(), jobs.end(), [](const RecordedJob& a, const RecordedJob& b) {
    return a.submit_s < b.submit_s;
  });
  size_t first = std::min(options.offset, jobs.size());
  size_t last = options.count ? std::min(jobs.size(), first + *options.count) : jobs.size();
  if (last - first < 2) return fail("fewer than two jobs are left to replay");
  auto begin = jobs.begin() + static_cast<std::ptrdiff_t>(first);
  auto end = jobs.begin() + static_cast<std::ptrdiff_t>(last);
  double origin = begin->submit_s;
  double span = std::prev(end)->submit_s - origin;
  if (span <= 0) return fail("every job arrives at the same time: no load to scale");
  double gpu_seconds = 0;
  for (auto job = begin; job != end; ++job) gpu_seconds += gpu_weight(*job) * job->duration_s;
  fitted.offered_load = gpu_seconds / (options.machine_gpus * span);
  fitted.arrival_scale = fitted.offered_load / options.target_load;
  for (auto job = begin; job != end; ++job) {
    TraceJob out;
    out.id = job->id.empty() ? fmt::format("job{}", job - jobs.begin()) : job->id;
    out.submit_s = std::round((job->submit_s - origin) * fitted.arrival_scale);
    out.duration_s = job->duration_s;
    out.gpus = job->gpus;
    if (job->gpu_fraction) {
      out.gpu_mem_mib = std::max<uint64_t>(
          1, static_cast<uint64_t>(std::llround(*job->gpu_fraction *
                                                static_cast<double>(options.gpu_memory_mib))));
    }
    out.user = job->user;
    fitted.jobs.push_back(std::move(out));
  }
  return fitted;
}

std::string format_trace(const std::vector<TraceJob>& jobs) {
  std::string out = "id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s\n";
  for (const TraceJob& job : jobs) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{},{},{}\n", job.id, job.submit_s,
                   job.duration_s, job.gpus,
                   job.gpu_mem_mib ? fmt::to_string(*job.gpu_mem_mib) : "", job.user,
                   job.priority != 0 ? fmt::to_string(job.priority) : "",
                   job.time_limit_s ? fmt::format("{}", *job.time_limit_s) : "");
  }
  return out;
}

}  // namespace gpupool::sim
