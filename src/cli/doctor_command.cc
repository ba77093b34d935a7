// gpupool doctor: the GPU troubleshooting checklist as one command (docs/doctor.md). Each check
// says ok, warning or problem, with what it read and what to do; the exit code is the worst.
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/doctor_facts.h"
#include "doctor/doctor.h"
#include "os/environment.h"
#include "os/host_files.h"

namespace gpupool::cli {
namespace {

struct DoctorOptions {
  std::optional<uint32_t> pid;
  std::string root;  // empty: GPUPOOL_HOST_ROOT, else "/"
  bool json = false;
  bool verbose = false;
};

void print_json(const std::vector<Finding>& findings, int exit_code) {
  nlohmann::json list = nlohmann::json::array();
  for (const Finding& f : findings) {
    list.push_back({{"check", f.check},
                    {"status", to_string(f.status)},
                    {"summary", f.summary},
                    {"evidence", f.evidence},
                    {"fix", f.fix.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.fix)}});
  }
  nlohmann::json out = {{"status", to_string(static_cast<CheckStatus>(exit_code))},
                        {"exit_code", exit_code},
                        {"findings", list}};
  fmt::print("{}\n", out.dump(2));
}

Result<int> run_doctor(const DoctorOptions& options) {
  // The backend reads /proc and /sys through GPUPOOL_HOST_ROOT too (process owners and commands):
  // one root for every fact.
  if (!options.root.empty()) set_environment_variable("GPUPOOL_HOST_ROOT", options.root);
  HostFiles host = host_files_from_environment();
  std::vector<Finding> findings = diagnose(gather_doctor_facts(host, options.pid));
  int exit_code = doctor_exit_code(findings);
  if (options.json) {
    print_json(findings, exit_code);
  } else {
    fmt::print("{}", findings_text(findings, options.verbose));
  }
  return exit_code;
}

}  // namespace

void add_doctor_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("doctor", "Check the driver, device nodes, NVML, CUDA variables, leases and "
                                           "daemon, and say what to fix");
  auto options = std::make_shared<DoctorOptions>();
  cmd->add_option("--pid", options->pid,
                  "Also compare what this process asked for (its CUDA_VISIBLE_DEVICES) with the GPUs it holds");
  cmd->add_option("--root", options->root,
                  "Read /proc, /dev and /sys under this directory (default: GPUPOOL_HOST_ROOT, else /)")
      ->check(CLI::ExistingDirectory);
  cmd->add_flag("--json", options->json, "Print {status, exit_code, findings: [{check, status, summary, evidence, fix}]}");
  cmd->add_flag("-v,--verbose", options->verbose, "Show what every check read, the passing ones too");
  cmd->footer("Exit code 0 when every check is ok, 1 with warnings, 2 with problems (and 2 for a wrong command "
              "line). See docs/doctor.md.");
  cmd->callback([&exit_code, options] { run_command(exit_code, [&] { return run_doctor(*options); }); });
}

}  // namespace gpupool::cli
