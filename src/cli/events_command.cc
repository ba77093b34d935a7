// `gpupool events`: what happened to jobs and GPUs, from gpupoold's event stream (docs/events.md):
// the latest events, those since a time, and with --follow each new one as it comes.
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
#include "cli/report_command.h"
#include "cli/value_checks.h"
#include "jobs/event.h"
#include "os/clock.h"
#include "protocol/messages.h"

namespace gpupool::cli {
namespace {

namespace proto = protocol;

constexpr unsigned kDefaultLines = 20;

struct EventsOptions {
  bool follow = false;
  bool json = false;
  std::string since;
  std::optional<unsigned> lines;
  std::optional<JobId> job;
  std::optional<std::string> user;
  std::string kinds;
};

void print_event(const Event& event, bool json) {
  if (json) {
    fmt::print("{}\n", proto::event_to_json(event).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else {
    // Job names and reasons are other users' text: made harmless to the terminal.
    fmt::print("{}  {:<15}  {}\n", time_text(event.time, "%Y-%m-%d %H:%M:%S"), to_string(event.kind),
               printable(describe_event(event), kMaxShownBytes));
  }
  std::fflush(stdout);  // a reader at the other end of a pipe sees each as it comes
}

Result<int> print_events(const EventsOptions& options) {
  proto::EventsRequest request;
  request.filter.job = options.job;
  request.filter.user = options.user;
  if (!options.kinds.empty()) {
    TRY_ASSIGN(request.filter.kinds, parse_event_kinds(options.kinds));
  }
  if (!options.since.empty()) {
    TRY_ASSIGN(request.since, parse_since(options.since, unix_now()));
  }
  // Without --since (or with --lines): the newest ones, as tail shows a file's end.
  if (options.lines || !request.since) {
    request.latest = true;
    request.limit = options.lines.value_or(kDefaultLines);
  } else {
    request.limit = proto::kMaxEventsPage;
  }
  TRY_ASSIGN(ReconnectingClient client, ReconnectingClient::connect(runtime_directory()));
  for (;;) {
    TRY_ASSIGN(std::optional<ReceivedResponse> received, client.request(request));
    TRY_ASSIGN(proto::EventsResponse page, expect<proto::EventsResponse>(std::move(received->response)));
    for (const Event& event : page.events) print_event(event, options.json);
    request.after = page.last;
    const bool more_since = page.more && !request.latest;
    if (!more_since && !options.follow) return kExitOk;
    // Then onwards from there: pages of what is there, then one answer per event as it comes.
    request.latest = false;
    request.since.reset();
    request.limit = proto::kMaxEventsPage;
    request.wait = !more_since;
  }
}

}  // namespace

void add_events_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("events", "What happened to jobs and GPUs: starts, ends, failures, idle jobs, quarantines "
                                           "(from gpupoold)");
  auto options = std::make_shared<EventsOptions>();
  cmd->add_flag("-f,--follow", options->follow, "Then print each new event as it happens, until interrupted");
  cmd->add_option("--since", options->since,
                  "The events since then: a duration back from now (30m, 7d) or a date (2026-12-01)")
      ->type_name("WHEN")
      ->check(since_value());
  cmd->add_option("-n,--lines", options->lines, fmt::format("Only the latest N (default: {}, or all with --since)", kDefaultLines))
      ->type_name("N")
      ->check(whole_number(1, proto::kMaxEventsPage));
  cmd->add_option("-j,--job", options->job, "Only this job's events, and those of the GPUs it ran on")
      ->type_name("ID")
      ->check(whole_number(1, UINT64_MAX));
  cmd->add_option("-u,--user", options->user, "Only the events of this user's jobs");
  cmd->add_option("--kind", options->kinds, "Only these events, comma-separated (job_failed,gpu_quarantined)")
      ->type_name("KIND[,KIND]");
  cmd->add_flag("--json", options->json, "One JSON object per event and line");
  cmd->footer("Events: job_started, job_ended, job_failed, job_cancelled, job_requeued, job_idle,\n"
              "slice_overrun, gpu_quarantined, gpu_returned, gpu_drained, gpu_resumed, queue_drained,\n"
              "queue_resumed. Kept for [events] keep (30 days). Other users' job names and reasons\n"
              "are withheld under private_data = [\"jobs\"].");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return print_events(*options); }); });
}

}  // namespace gpupool::cli
