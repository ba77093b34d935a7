#include "os/paths.h"

#include <fmt/format.h>

#include "os/environment.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {
namespace {

// A variable that is set and not empty: an empty one means "not set" to every rule here.
std::optional<std::string> set_variable(const char* name) {
  std::optional<std::string> value = environment_variable(name);
  if (value && value->empty()) return std::nullopt;
  return value;
}

}  // namespace

std::string default_runtime_dir() {
  if (auto dir = set_variable("GPUPOOL_RUNTIME_DIR")) return *dir;
  if (auto job = slurm_job_directory()) return *job + "/run";
  if (auto run = file_status("/run/gpupool"); run && run->type == FileType::directory) return "/run/gpupool";
  return "/tmp/gpupool";
}

std::string default_daemon_state_dir() {
  if (auto dir = set_variable("GPUPOOL_STATE_DIR")) return *dir;
  // A Slurm job's daemon keeps its queue with the job: it ends with the allocation.
  if (auto job = slurm_job_directory()) return *job + "/state";
  if (effective_user_id() == 0) return "/var/lib/gpupool";
  return user_state_dir().value_or("/tmp/.local/state/gpupool");
}

std::optional<std::string> user_state_dir() {
  if (auto xdg = set_variable("XDG_STATE_HOME"); xdg && xdg->starts_with('/')) return *xdg + "/gpupool";
  std::optional<std::string> home = environment_variable("HOME");
  if (!home || !home->starts_with('/')) home = home_directory_of(real_user_id());
  if (!home || !home->starts_with('/')) return std::nullopt;
  return *home + "/.local/state/gpupool";
}

std::optional<std::string> slurm_job_directory() {
  std::optional<std::string> job = set_variable("SLURM_JOB_ID");
  if (!job || job->find('/') != std::string::npos) return std::nullopt;
  return fmt::format("/tmp/gpupool-{}", *job);
}

Result<void> prepare_slurm_job_directory() {
  std::optional<std::string> path = slurm_job_directory();
  if (!path) return {};
  TRY(make_directory(*path, 0700));
  TRY_ASSIGN(FileStatus status, link_status(*path));
  if (status.type != FileType::directory) return fail("{} must be a directory, not a link or file", *path);
  if (status.owner != real_user_id() || (status.permissions & 077) != 0) {
    return fail("{} belongs to uid {} with mode {:o}: this Slurm job's gpupool needs it private to uid {}; "
                "remove it", *path, status.owner, status.permissions, real_user_id());
  }
  return {};
}

}  // namespace gpupool
