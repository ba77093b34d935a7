// gpupool leases: who holds which GPU right now, read from the locks themselves.
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/display_text.h"
#include "cli/commands.h"
#include "jobs/job_text.h"
#include "lease/lease_directory.h"

namespace gpupool::cli {
namespace {

Result<int> show_leases(bool json) {
  TRY_ASSIGN(LeaseDirectory leases, LeaseDirectory::open_default());
  TRY_ASSIGN(std::vector<LeaseRecord> records, leases.list());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const LeaseRecord& r : records) {
      out.push_back({{"index", r.index},
                     {"uuid", r.uuid},
                     {"pid", r.holder.pid},
                     {"user", r.holder.user},
                     {"job", r.holder.job},
                     {"mem_mib", r.slice_mib ? nlohmann::json(*r.slice_mib) : nullptr},
                     {"since", r.holder.since}});
    }
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  if (records.empty()) {
    fmt::print("No GPU is leased (lease directory {}).\n", leases.path());
    return 0;
  }
  fmt::print("{:>3}  {:<14} {:>8}  {:<30} {:>10}  {}\n", "GPU", "UUID", "PID", "HELD BY", "MEMORY", "SINCE");
  for (const LeaseRecord& r : records) {
    std::time_t since = static_cast<std::time_t>(r.holder.since);
    // The holder's names come from whoever took the lease: escaped, cut in display cells.
    fmt::print("{:>3}  {:<14} {:>8}  {} {:>10}  {:%Y-%m-%d %H:%M:%S}\n", r.index, r.uuid.substr(0, 12),
               r.holder.pid, pad_cells(lease_holder_text(r.holder.job, r.holder.user), 30),
               r.slice_mib                   ? fmt::format("{} MiB", *r.slice_mib)
               : r.uuid.starts_with("MIG-") ? "MIG device"
                                            : "whole",
               fmt::localtime(since));
  }
  return 0;
}

}  // namespace

void add_leases_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("leases", "Show who holds which GPU (pid, user, job, memory, since)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json,
                "Print [{index, uuid (a MIG device's for --mig), pid, user, job, mem_mib (null: whole GPU or MIG device), "
                "since (Unix seconds)}]");
  cmd->callback([&exit_code, json] { run_command(exit_code, [&] { return show_leases(*json); }); });
}

}  // namespace gpupool::cli
