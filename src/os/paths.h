// Where gpupool keeps things, decided once for every binary: the runtime directory (leases, the
// daemon's socket) and the state directories (the daemon's queue, the record of Slurm jobs).
#pragma once

#include <optional>
#include <string>

#include "base/result.h"

namespace gpupool {

// GPUPOOL_RUNTIME_DIR, else inside a Slurm job its slurm_job_directory()'s run/, else
// /run/gpupool if it exists, else /tmp/gpupool.
std::string default_runtime_dir();

// The daemon's: GPUPOOL_STATE_DIR, else inside a Slurm job its slurm_job_directory()'s state/,
// else /var/lib/gpupool for root, else user_state_dir() (a personal daemon).
std::string default_daemon_state_dir();

// The user's own, wherever gpupool runs (the XDG rule): $XDG_STATE_HOME/gpupool when that is an
// absolute path, else ~/.local/state/gpupool, the home from HOME or else the user database;
// nullopt when there is no home directory either.
std::optional<std::string> user_state_dir();

// Inside a Slurm job (SLURM_JOB_ID set): /tmp/gpupool-ID, the private home of the job's own
// runtime and state directories (docs/slurm.md); nullopt outside one.
std::optional<std::string> slurm_job_directory();

// Creates slurm_job_directory() (mode 0700) where missing. An error when it is someone else's or
// not a directory: another user could have made it first to watch our sockets.
Result<void> prepare_slurm_job_directory();

}  // namespace gpupool
