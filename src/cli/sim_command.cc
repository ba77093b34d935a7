// gpupool sim: the simulator's commands. `replay` runs a job trace through the scheduler in
// virtual time on a fixture machine; `import` turns a public cluster trace into one; `place` explains a topology placement; `list` names the
// fixtures; `capture` saves the machine NVML shows as a fixture. Only `capture` touches NVML: the
// others take the machine straight from the fixture.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/cpu_list.h"
#include "cli/app.h"
#include "cli/commands.h"
#include "gpu/gpu_backend.h"
#include "sched/placement.h"
#include "sched/scheduler.h"
#include "sched/trace.h"
#include "sim/fixture.h"
#include "sim/fixture_capture.h"
#include "sim/open_backend.h"
#include "sim/replay.h"
#include "sim/trace_import.h"

namespace gpupool::cli {
namespace {

struct ReplayOptions {
  std::string machine;
  std::string trace;
  std::string policy = "gpupool";
  std::string schedule_out;
  std::optional<double> quota;
  std::optional<size_t> runtime_history;
  std::string slice_placement = "best-fit";
  bool backfill_by_suspending = false;
  bool json = false;
};

struct ImportOptions {
  std::string format;
  std::string input;
  std::string machine = "hgx-h200";
  std::string output;  // "": standard output
  double load = 1.3;
  size_t offset = 0;
  std::optional<size_t> count;
};

struct CaptureOptions {
  std::string output;  // "": standard output
  std::string name;    // "": the output file's stem, else "captured"
  std::string description;
};

struct PlaceOptions {
  std::string machine;
  std::optional<std::string> free;  // nullopt: every GPU
  unsigned count = 1;
  bool json = false;
};

Result<Machine> fixture_machine(const std::string& name_or_path) {
  TRY_ASSIGN(std::string path, sim::locate_fixture(name_or_path, fixture_search_dirs()));
  TRY_ASSIGN(sim::Fixture fixture, sim::load_fixture(path));
  return sim::machine_from_fixture(fixture);
}

Result<void> write_text_file(const std::string& path, const std::string& text,
                             std::string_view what) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return fail("cannot write {} to {}", what, path);
  return {};
}

// "45 s", "12.5 min", "31.2 h": the unit that keeps the number readable.
std::string readable_time(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.1f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

void print_summary(const sim::ReplaySummary& s, Policy policy, const std::string& machine) {
  fmt::print("policy {} on {}: {} jobs\n", to_string(policy), machine, s.jobs);
  fmt::print("  makespan     {:>14}  ({:.1f} % above the lower bound {})\n",
             readable_time(s.makespan_s),
             s.lower_bound_s > 0 ? 100 * (s.makespan_s / s.lower_bound_s - 1) : 0,
             readable_time(s.lower_bound_s));
  fmt::print("  utilization  {:>13.1f} %\n", 100 * s.utilization);
  fmt::print("  wait         {:>14} mean, {} p95, {} max\n", readable_time(s.mean_wait_s),
             readable_time(s.p95_wait_s), readable_time(s.max_wait_s));
  fmt::print("  completion   {:>14} mean, {} p99\n", readable_time(s.mean_completion_s),
             readable_time(s.p99_completion_s));
  fmt::print("  contention   {:>13.1f} % of the GPUs unallocated while jobs waited; "
             "Jain's index {:.3f}; finish-time fairness {:.2f} (worst user)\n",
             100 * s.unallocated_while_waiting, s.jain_index, s.max_finish_time_fairness);
  if (s.ended_at_time_limit > 0)
    fmt::print("  {} jobs ended at their time limit\n", s.ended_at_time_limit);
  fmt::print("  {:<12} {:>6} {:>10} {:>14} {:>14} {:>15} {:>6}\n", "user", "jobs", "GPU-hours",
             "mean wait", "max wait", "mean completion", "FTF");
  for (const sim::UserFigures& u : s.users) {
    fmt::print("  {:<12} {:>6} {:>10.1f} {:>14} {:>14} {:>15} {:>6.2f}\n",
               u.user.empty() ? "(none)" : u.user, u.jobs, u.gpu_hours,
               readable_time(u.mean_wait_s), readable_time(u.max_wait_s),
               readable_time(u.mean_completion_s), u.finish_time_fairness);
  }
}

Result<int> run_replay(const ReplayOptions& options) {
  TRY_ASSIGN(Policy policy, parse_policy(options.policy));
  TRY_ASSIGN(Machine machine, fixture_machine(options.machine));
  TRY_ASSIGN(std::string text, sim::read_text_file(options.trace));
  Result<std::vector<TraceJob>> trace = parse_trace(text);
  if (!trace) return fail("{}: {}", options.trace, trace.error().message);
  SchedulerConfig config;
  config.policy = policy;
  config.quota_gpus = options.quota;
  if (options.runtime_history) config.runtime_history = *options.runtime_history;
  TRY_ASSIGN(config.slice_placement, parse_slice_placement(options.slice_placement));
  config.backfill_by_suspending = options.backfill_by_suspending;
  TRY_ASSIGN(sim::ReplayResult result, sim::replay(machine, *trace, config));
  if (!options.schedule_out.empty()) {
    TRY(write_text_file(options.schedule_out, sim::schedule_csv(*trace, result.schedule),
                        "the schedule"));
  }
  if (options.json) {
    nlohmann::json out = sim::summary_json(result.summary);
    out["policy"] = to_string(policy);
    fmt::print("{}\n", out.dump(2));
  } else {
    print_summary(result.summary, policy, options.machine);
  }
  return kExitOk;
}

Result<int> run_import(const ImportOptions& options) {
  TRY_ASSIGN(sim::TraceFormat format, sim::parse_trace_format(options.format));
  TRY_ASSIGN(Machine machine, fixture_machine(options.machine));
  TRY_ASSIGN(std::string text, sim::read_text_file(options.input));
  Result<sim::RecordedTrace> recorded = sim::read_recorded_trace(format, text);
  if (!recorded) return fail("{}: {}", options.input, recorded.error().message);
  sim::FitOptions fit;
  fit.machine_gpus = static_cast<unsigned>(machine.gpus.size());
  for (const Gpu& gpu : machine.gpus)
    fit.gpu_memory_mib = std::max(fit.gpu_memory_mib, gpu.memory_total_mib.value_or(0));
  fit.target_load = options.load;
  fit.offset = options.offset;
  fit.count = options.count;
  size_t read = recorded->jobs.size() + recorded->unusable;
  TRY_ASSIGN(sim::FittedTrace fitted, sim::fit_to_machine(std::move(recorded->jobs), fit));
  std::string csv = sim::format_trace(fitted.jobs);
  if (options.output.empty()) fmt::print("{}", csv);
  else TRY(write_text_file(options.output, csv, "the trace"));
  fmt::print(stderr,
             "{} jobs read: {} kept, {} never ran or have no times, {} CPU-only, {} wider than "
             "{} GPUs; load {:.2f} at the recorded arrivals, {:.2f} after scaling the gaps by "
             "{:.4g}\n",
             read, fitted.jobs.size(), recorded->unusable, fitted.cpu_only, fitted.too_wide,
             fit.machine_gpus, fitted.offered_load, options.load, fitted.arrival_scale);
  return kExitOk;
}

nlohmann::json placement_json(const Placement& placement) {
  return {{"gpus", placement.gpus},
          {"score",
           {{"worst_link", pair_score_label(placement.score.worst)},
            {"pair_score_sum", placement.score.total},
            {"nvlinks", placement.score.nvlinks},
            {"explanation", explain(placement.score)}}},
          {"remaining", explain(placement.remaining)}};
}

Result<int> run_place(const PlaceOptions& options) {
  TRY_ASSIGN(Machine machine, fixture_machine(options.machine));
  std::vector<unsigned> free;
  if (options.free) {
    Result<std::vector<unsigned>> parsed = parse_cpu_list(*options.free);
    if (!parsed)
      return fail("invalid --free '{}': expected GPU indices such as 0,1,4-7", *options.free);
    free = std::move(*parsed);
  } else {
    for (const Gpu& gpu : machine.gpus) free.push_back(gpu.index);
  }
  TRY_ASSIGN(PlacementChoice choice, place_with_runner_up(machine.links, free, options.count));
  if (options.json) {
    nlohmann::json out = {{"machine", options.machine},
                          {"free", free},
                          {"count", options.count},
                          {"exact", choice.best.exact},
                          {"chosen", placement_json(choice.best)},
                          {"runner_up", choice.runner_up ? placement_json(*choice.runner_up)
                                                         : nlohmann::json(nullptr)}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("{} GPU{} from free {} on {}{}:\n", options.count, options.count == 1 ? "" : "s",
             format_cpu_list(free), options.machine,
             choice.best.exact ? "" : " (heuristic search: too many choices to try them all)");
  fmt::print("  chosen     {:<12} {}\n", format_cpu_list(choice.best.gpus),
             explain(choice.best.score));
  fmt::print("  {:<10} {:<12} {}\n", "", "leaves", explain(choice.best.remaining));
  if (choice.runner_up) {
    fmt::print("  runner-up  {:<12} {}\n", format_cpu_list(choice.runner_up->gpus),
               explain(choice.runner_up->score));
    fmt::print("  {:<10} {:<12} {}\n", "", "leaves", explain(choice.runner_up->remaining));
  } else {
    fmt::print(
        "  runner-up  none: every other set is the same up to a swap of interchangeable GPUs\n");
  }
  return kExitOk;
}

std::string default_description(const Machine& machine) {
  std::string description = fmt::format("{} x {}", machine.gpus.size(), machine.gpus.front().name);
  if (machine.driver.driver_version)
    description += fmt::format(", driver {}", *machine.driver.driver_version);
  return description + ", as NVML reported them (gpupool sim capture)";
}

Result<int> run_capture(const CaptureOptions& options) {
  TRY_ASSIGN(auto backend, open_gpu_backend());
  TRY_ASSIGN(Machine machine, backend->discover(DiscoveryScope{}));
  if (machine.gpus.empty())
    return fail("there are no GPUs to capture ({})", backend->description());
  std::string name = options.name;
  if (name.empty()) {
    name = options.output.empty() ? "captured"
                                  : std::filesystem::path(options.output).stem().string();
  }
  std::string description =
      options.description.empty() ? default_description(machine) : options.description;
  TRY_ASSIGN(sim::CapturedFixture captured, sim::capture_fixture(machine, name, description));
  for (const std::string& line : captured.approximations)
    fmt::print(stderr, "gpupool: warning: {}\n", line);
  std::string text = sim::format_fixture(captured.fixture);
  if (options.output.empty()) {
    fmt::print("{}", text);
    return kExitOk;
  }
  TRY(write_text_file(options.output, text, "the fixture"));
  fmt::print(stderr, "{} GPU{} written to {}: use it with GPUPOOL_SIM={}\n", machine.gpus.size(),
             machine.gpus.size() == 1 ? "" : "s", options.output, options.output);
  return kExitOk;
}

}  // namespace

void add_sim_command(CLI::App& app, int& exit_code) {
  auto* sim =
      app.add_subcommand("sim", "Simulate: replay job traces, explain placements, list fixtures");
  sim->require_subcommand(1);

  auto* replay = sim->add_subcommand(
      "replay", "Replay a job trace in virtual time through the scheduler on a fixture machine");
  auto replay_options = std::make_shared<ReplayOptions>();
  replay
      ->add_option("--machine", replay_options->machine,
                   "Fixture name (see gpupool sim list) or path")
      ->required();
  replay
      ->add_option(
          "--trace", replay_options->trace,
          "Trace CSV: id,submit_s,duration_s,gpus[,gpu_mem_mib,user,priority,time_limit_s]")
      ->required()
      ->type_name("FILE");
  replay->add_option("--policy", replay_options->policy, "fifo, backfill or gpupool (default)")
      ->check(CLI::IsMember({"fifo", "backfill", "gpupool"}));
  replay->add_option("--quota", replay_options->quota,
                     "GPUs one user may hold at once (a memory slice counts as its fraction)");
  replay->add_option("--runtime-history", replay_options->runtime_history,
                     "Ended jobs per user whose run times estimate a job without a time limit "
                     "(default 50; 0: such jobs never backfill)");
  replay->add_option("--slice-placement", replay_options->slice_placement,
                     "Where the gpupool policy puts slices: best-fit (default) or fragmentation")
      ->check(CLI::IsMember({"fragmentation", "best-fit"}));
  replay->add_flag("--backfill-by-suspending", replay_options->backfill_by_suspending,
                   "One-GPU jobs without a time limit backfill onto reserved GPUs on loan and are "
                   "suspended when the reservation's job needs them (gpupool policy)");
  replay->add_option("--schedule-out", replay_options->schedule_out,
                     "Write id,start_s,end_s,gpus,suspended (indices joined by ';') to this CSV file")
      ->type_name("FILE");
  replay->add_flag(
      "--json", replay_options->json,
      "Print the summary as JSON (docs/scheduling.md lists its fields)");
  replay->callback([&exit_code, replay_options] {
    run_command(exit_code, [&] { return run_replay(*replay_options); });
  });

  auto* import = sim->add_subcommand(
      "import", "Read a public GPU cluster trace and fit it to a fixture machine as a trace CSV");
  auto import_options = std::make_shared<ImportOptions>();
  import->add_option("--format", import_options->format, "alibaba-gpu, helios or philly")
      ->required()
      ->check(CLI::IsMember({"alibaba-gpu", "helios", "philly"}));
  import->add_option("input", import_options->input,
                     "openb_pod_list_*.csv, cluster_log.csv or cluster_job_log")
      ->required()
      ->type_name("FILE");
  import->add_option("--machine", import_options->machine,
                     "Fixture to fit to: its GPU count and card memory (default hgx-h200)");
  import->add_option("--load", import_options->load,
                     "Offered GPU time over what the GPUs serve, set by scaling arrival gaps "
                     "(default 1.3)")
      ->check(CLI::PositiveNumber);
  import->add_option("--offset", import_options->offset,
                     "Jobs to pass over first, in arrival order");
  import->add_option("--jobs", import_options->count, "Jobs to keep after them (default: all)")
      ->check(CLI::PositiveNumber);
  import->add_option("-o,--output", import_options->output,
                     "Write the trace here (default: standard output)")
      ->type_name("FILE");
  import->callback([&exit_code, import_options] {
    run_command(exit_code, [&] { return run_import(*import_options); });
  });

  auto* place = sim->add_subcommand(
      "place", "Explain which GPUs a multi-GPU job gets: the chosen set, its score, the runner-up");
  auto place_options = std::make_shared<PlaceOptions>();
  place
      ->add_option("--machine", place_options->machine,
                   "Fixture name (see gpupool sim list) or path")
      ->required();
  place->add_option("--free", place_options->free, "Free GPUs, e.g. 0,1,4-7 (default: all)");
  place->add_option("-g,--gpus", place_options->count, "How many GPUs to place")->required();
  place->add_flag("--json", place_options->json, "Print {chosen, runner_up, ...} as JSON");
  place->callback([&exit_code, place_options] {
    run_command(exit_code, [&] { return run_place(*place_options); });
  });

  auto* capture = sim->add_subcommand(
      "capture", "Save this machine's GPUs, their state and links as a fixture for GPUPOOL_SIM");
  auto capture_options = std::make_shared<CaptureOptions>();
  capture
      ->add_option("-o,--output", capture_options->output,
                   "Write it to this file (default: standard output)")
      ->type_name("FILE");
  capture->add_option("--name", capture_options->name,
                      "The fixture's name (default: the file's name without .json)");
  capture->add_option("--description", capture_options->description,
                      "One line for people (default: the GPUs and the driver)");
  capture->callback([&exit_code, capture_options] {
    run_command(exit_code, [&] { return run_capture(*capture_options); });
  });

  auto* list = sim->add_subcommand("list", "List the fixture machines by name");
  list->callback([&exit_code] {
    for (const std::string& name : sim::fixture_names(fixture_search_dirs()))
      fmt::print("{}\n", name);
    exit_code = kExitOk;
  });
}

}  // namespace gpupool::cli
