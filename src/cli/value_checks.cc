#include "cli/value_checks.h"

#include <array>
#include <charconv>
#include <string>

#include <fmt/format.h>

#include "base/duration.h"
#include "cli/report_command.h"
#include "jobs/job.h"
#include "os/clock.h"
#include "sched/allocation.h"
#include "slurm/slurm_jobs.h"

namespace gpupool::cli {
namespace {

// A validator from a parser that returns a Result: its error is the message.
template <typename Parse>
CLI::Validator checked_by(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        auto parsed = parse(text);
        return parsed.ok() ? std::string() : parsed.error().message;
      },
      std::move(description));
}

}  // namespace

CLI::Validator duration_value() {
  return checked_by([](const std::string& text) { return parse_duration_s(text); }, "DURATION");
}

CLI::Validator duration_or_nothing_value() {
  return checked_by(
      [](const std::string& text) -> Result<double> { return text.empty() ? Result<double>(0.0) : parse_duration_s(text); },
      "DURATION");
}

CLI::Validator memory_size_value() {
  return checked_by([](const std::string& text) { return parse_memory_mib(text); }, "SIZE");
}

CLI::Validator job_state_value() {
  return checked_by([](const std::string& text) { return parse_job_state(text); }, "STATE");
}

CLI::Validator since_value() {
  return checked_by([](const std::string& text) { return parse_since(text, unix_now()); }, "WHEN");
}

CLI::Validator job_ids_value() {
  return checked_by([](const std::string& text) { return parse_any_job_ids(std::array{text}); }, "JOB_ID");
}

CLI::Validator array_spec_value() {
  return checked_by([](const std::string& text) { return parse_array_spec(text); }, "SPEC");
}

CLI::Validator whole_number(uint64_t low, uint64_t high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        uint64_t value = 0;
        auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc() && end == text.data() + text.size() && value >= low && value <= high) return "";
        return fmt::format("'{}' is not a whole number from {} to {}", text, low, high);
      },
      fmt::format("{}-{}", low, high));
}

}  // namespace gpupool::cli
