#include "daemon/attempt_record.h"

#include <fcntl.h>

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "os/fd.h"
#include "os/file_lock.h"
#include "os/files.h"

namespace gpupool {
namespace {

using nlohmann::json;

std::optional<double> number_field(const json& event, const char* key) {
  if (!event.contains(key) || !event[key].is_number()) return std::nullopt;
  return event[key].get<double>();
}

std::optional<int> integer_field(const json& event, const char* key) {
  if (!event.contains(key) || !event[key].is_number_integer()) return std::nullopt;
  return event[key].get<int>();
}

}  // namespace

JobId largest_recorded_id(const std::vector<std::string>& file_names) {
  JobId largest = 0;
  for (const std::string& name : file_names) {
    size_t dot = name.find('.');
    if (dot == std::string::npos || dot == 0) continue;
    JobId id = 0;
    auto [end, error] = std::from_chars(name.data(), name.data() + dot, id);
    if (error == std::errc() && end == name.data() + dot) largest = std::max(largest, id);
  }
  return largest;
}

Result<AttemptRecord> read_attempt_record(const std::string& record_path) {
  AttemptRecord record;
  TRY_ASSIGN(std::optional<Fd> opened, open_existing(record_path, O_RDONLY | O_NOFOLLOW));
  if (!opened) return record;  // NeverStarted
  const Fd& file = *opened;
  // The lock first: once it is free, no one writes the record any more, so what we read next is
  // final. (Read first, and a supervisor that wrote "exited" in between would look lost.)
  auto lock = find_range_lock(file.get(), ByteRange{0, kToEndOfFile});
  if (!lock) return fail("cannot test the lock of {}: {}", record_path, lock.error().message);
  const bool locked = lock->has_value();
  auto text = read_to_end(file.get());
  if (!text) return fail("cannot read {}: {}", record_path, text.error().message);

  bool started = false, exited = false;
  std::optional<double> stopped_at;  // when the time limit's clock last stopped
  size_t line_number = 0;
  for (size_t start = 0, end; (end = text->find('\n', start)) != std::string::npos; start = end + 1) {
    ++line_number;  // a last line without its newline is torn, and never reaches here
    json event = json::parse(text->substr(start, end - start), nullptr, false);
    if (!event.is_object() || !event.contains("event") || !event["event"].is_string()) {
      return fail("{} line {} is not an attempt event", record_path, line_number);
    }
    const std::string kind = event["event"].get<std::string>();
    if (kind == "supervising") {
      record.supervisor_pid = integer_field(event, "supervisor_pid");
      record.takes_the_clock = event.contains("clock") && event["clock"] == true;
    } else if (kind == "started") {
      started = true;
      record.job_pid = integer_field(event, "job_pid");
      record.start_time = number_field(event, "time");
    } else if (kind == "clock_stopped") {
      if (!record.clock_stopped) stopped_at = number_field(event, "time");  // a word said again changes nothing
      record.clock_stopped = true;
    } else if (kind == "clock_started") {
      auto started_at = number_field(event, "time");
      if (record.clock_stopped && stopped_at && started_at) record.clock_stopped_s += *started_at - *stopped_at;
      record.clock_stopped = false;
    } else if (kind == "exited") {
      exited = true;
      record.exit_code = integer_field(event, "exit_code");
      record.signal = integer_field(event, "signal");
      record.end_time = number_field(event, "time");
      if (event.contains("reason") && event["reason"].is_string()) {
        record.reason = event["reason"].get<std::string>();
      }
    }
  }
  if (locked) {
    record.progress = AttemptProgress::Running;
  } else if (exited) {
    record.progress = AttemptProgress::Exited;
  } else if (started) {
    record.progress = AttemptProgress::Lost;
    record.reason = "supervisor lost";
  } else {
    record.progress = AttemptProgress::NeverStarted;
  }
  return record;
}

}  // namespace gpupool
