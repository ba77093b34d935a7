#include "cli/report_command.h"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/display_text.h"
#include "base/quote.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "cli/daemon_client.h"
#include "cli/jobs_table.h"
#include "cli/lease_options.h"
#include "cli/value_checks.h"
#include "os/clock.h"
#include "protocol/messages.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

struct ReportOptions {
  std::string since;
  std::optional<std::string> user;
  std::optional<size_t> limit;
  bool efficiency = false;
  bool json = false;
};

std::optional<double> local_date(const std::string& text) {
  for (const char* format : {"%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    tm fields{};
    const char* end = strptime(text.c_str(), format, &fields);
    if (end == nullptr || *end != '\0') continue;
    fields.tm_isdst = -1;  // as the local rules say for that day
    time_t seconds = mktime(&fields);
    if (seconds == -1) return std::nullopt;
    return static_cast<double>(seconds);
  }
  return std::nullopt;
}

std::string percent_text(const std::optional<double>& percent) {
  return percent ? fmt::format("{:.0f} %", *percent) : "n/a";
}


// --user keeps one user's line and jobs; --limit the latest jobs (the highest ids), in id order.
// Returns how many jobs there were before --limit.
size_t narrow(proto::ReportResponse& report, const ReportOptions& options) {
  if (options.user) {
    std::erase_if(report.users, [&](const proto::UserUsageLine& line) { return line.user != *options.user; });
    std::erase_if(report.jobs, [&](const proto::JobUsageLine& line) { return line.user != *options.user; });
  }
  size_t found = report.jobs.size();
  if (options.limit && found > *options.limit) {
    report.jobs.erase(report.jobs.begin(), report.jobs.end() - static_cast<std::ptrdiff_t>(*options.limit));
  }
  return found;
}

std::string note_text(const proto::JobUsageLine& job) { return job.idle ? "running, IDLE" : job.running ? "running" : ""; }

std::string sm_hours_text(const GpuEfficiency& efficiency) {
  return efficiency.sm_active_gpu_hours ? fmt::format("{:.2f}", *efficiency.sm_active_gpu_hours) : "n/a";
}

// --efficiency: how much of the GPU time held was used, and what it cost.
void print_efficiency(const proto::ReportResponse& report) {
  fmt::print("{:<16} {:>6} {:>10} {:>10} {:>6} {:>9}\n", "USER", "JOBS", "GPU-HOURS", "SM-ACTIVE", "USED", "ENERGY");
  for (const proto::UserUsageLine& user : report.users) {
    fmt::print("{} {:>6} {:>10.2f} {:>10} {:>6} {:>9}\n", pad_cells(user.user, 16), user.jobs, user.gpu_hours,
               sm_hours_text(user.efficiency), used_text(user.efficiency), energy_text(user.efficiency));
  }
  fmt::print("\n{:>6}  {:<16} {:<20} {:>10} {:>10} {:>6} {:>9} {:>10}  {}\n", "ID", "USER", "NAME", "GPU-HOURS",
             "SM-ACTIVE", "USED", "ENERGY", "PEAK MEM", "NOTE");
  for (const proto::JobUsageLine& job : report.jobs) {
    fmt::print("{:>6}  {} {} {:>10.3f} {:>10} {:>6} {:>9} {:>10}  {}\n", job.id, pad_cells(job.user, 16),
               pad_cells(job.name, 20), job.gpu_hours, sm_hours_text(job.efficiency), used_text(job.efficiency),
               energy_text(job.efficiency), peak_memory_text(job.efficiency), note_text(job));
  }
  fmt::print("\nSM-ACTIVE: GPU-hours with the SMs busy; USED: that over the GPU-hours measured; ENERGY in kWh.\n"
             "n/a: the GPUs do not measure it (SM activity needs Hopper or later).\n");
}

Result<int> print_report(const ReportOptions& options) {
  proto::ReportRequest request;
  if (!options.since.empty()) {
    double now = unix_now();
    TRY_ASSIGN(request.since, parse_since(options.since, now));
  }
  TRY_ASSIGN(DaemonClient client, DaemonClient::connect(runtime_directory()));
  TRY_ASSIGN(proto::Response response, client.request(request));
  TRY_ASSIGN(proto::ReportResponse report, expect<proto::ReportResponse>(std::move(response)));
  const size_t jobs_found = narrow(report, options);
  if (options.json) {
    // The daemon's own encoding of the report, without the envelope.
    auto envelope = nlohmann::json::parse(proto::encode(proto::Response(report)));
    fmt::print("{}\n", envelope["report"].dump(2));
    return kExitOk;
  }
  fmt::print("GPU time {}\n\n", report.since ? "since " + time_text(*report.since) : "since accounting began");
  if (report.users.empty()) {
    fmt::print("No job {}held a GPU in that time.\n", options.user ? "of " + printable(*options.user, kMaxShownBytes) + " " : "");
    return kExitOk;
  }
  if (options.efficiency) {
    print_efficiency(report);
  } else {
    fmt::print("{:<16} {:>6} {:>10} {:>10}\n", "USER", "JOBS", "GPU-HOURS", "MEAN UTIL");
    for (const proto::UserUsageLine& user : report.users) {
      fmt::print("{} {:>6} {:>10.2f} {:>10}\n", pad_cells(user.user, 16), user.jobs, user.gpu_hours,
                 percent_text(user.mean_utilization));
    }
    fmt::print("\n{:>6}  {:<16} {:<20} {:>10} {:>10}  {:<16}  {}\n", "ID", "USER", "NAME", "GPU-HOURS", "MEAN UTIL",
               "LAST SAMPLE", "NOTE");
    for (const proto::JobUsageLine& job : report.jobs) {
      fmt::print("{:>6}  {} {} {:>10.3f} {:>10}  {:<16}  {}\n", job.id, pad_cells(job.user, 16), pad_cells(job.name, 20),
                 job.gpu_hours, percent_text(job.mean_utilization), time_text(job.last_time), note_text(job));
    }
  }
  if (jobs_found > report.jobs.size()) fmt::print("(the latest {} of {} jobs)\n", report.jobs.size(), jobs_found);
  return kExitOk;
}

}  // namespace

std::string time_text(double unix_seconds, const char* format) {
  time_t t = static_cast<time_t>(unix_seconds);
  tm local{};
  localtime_r(&t, &local);
  char text[32];
  strftime(text, sizeof(text), format, &local);
  return text;
}

Result<double> parse_since(std::string_view text, double now) {
  if (auto back = parse_duration(std::string(text))) return now - std::chrono::duration<double>(*back).count();
  if (auto date = local_date(std::string(text))) return *date;
  return fail("'{}' is neither a duration (30m, 12h, 7d, 2w) nor a date (2026-12-01, "
              "\"2026-12-01 08:00\")",
              text);
}

void add_report_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("report", "GPU-hours, utilisation and efficiency per user and per job (from gpupoold)");
  auto options = std::make_shared<ReportOptions>();
  cmd->add_option("--since", options->since,
                  "Only jobs that held GPUs since then: a duration back from now (7d, 12h) or a date (2026-12-01)")
      ->type_name("WHEN")
      ->check(since_value());
  cmd->add_option("-u,--user", options->user, "Only this user's line and jobs");
  cmd->add_option("-n,--limit", options->limit, "Only the latest N jobs (the users' lines count them all)")
      ->type_name("N")
      ->check(whole_number(1, 1000000000));
  cmd->add_flag("--efficiency", options->efficiency,
                "How much of the GPU time held was used (SM activity), energy (kWh) and peak GPU memory");
  cmd->add_flag("--json", options->json, "Print JSON (the efficiency figures included)");
  cmd->footer("A job counts whole when any of its time falls after --since. A slice of a GPU counts its\n"
              "share of the GPU's memory (and energy). Running jobs flagged idle (idle_flag_after) are marked\n"
              "IDLE. --user and --limit apply to --json too.");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return print_report(*options); }); });
}

}  // namespace gpupool::cli
