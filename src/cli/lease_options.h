// What `run` and `launch` share: the options that describe a GPU request, and
// turning them into held leases and the job's environment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/daemon_client.h"
#include "lease/acquirer.h"

namespace gpupool::cli {

struct LeaseRequestOptions {
  unsigned count = 1;
  std::string memory;    // --mem: a slice of each GPU's memory; empty: whole GPUs
  std::optional<unsigned> sm_percent;  // --sm: a slice's share of each GPU's multiprocessors
  std::optional<std::string> mig;  // --mig: a MIG device of this profile ("1g.18gb", or "any") instead of GPUs
  std::string gpus;      // --gpus: only these
  std::string exclude;   // --exclude: never these
  std::optional<std::string> wait;  // --wait[=TIMEOUT]; default: wait as long as it takes
  std::string name;      // --name: the job's name
  std::string time_limit;  // --time: the program is ended once it has run this long; empty: no limit
  bool quiet = false;
};

void add_lease_options(CLI::App& cmd, LeaseRequestOptions& options);

// --sm PCT and --mig PROFILE, which `submit` shares with `run`, `launch` and `acquire`.
void add_compute_share_option(CLI::App& cmd, std::optional<unsigned>& sm_percent);
void add_mig_option(CLI::App& cmd, std::optional<std::string>& mig);

// What the request shares of its GPUs: --mem and --sm, the slice (nullopt: whole GPUs) and its
// compute share; or --mig, a MIG device of that profile with at least --mem of memory. A share
// without a slice, and --mig with more than one GPU or with --sm, are errors.
Result<void> set_slice(GpuRequest& request, const std::string& memory, const std::optional<unsigned>& sm_percent,
                       const std::optional<std::string>& mig);

struct LeasedGpus {
  Acquired acquired;
  std::vector<unsigned> gpus;  // nvidia-smi indices, placement order
  std::string job;
  std::optional<uint64_t> slice_mib;
  std::string mig_uuid;  // a --mig lease's MIG device
  // Set when gpupoold granted the lease: the connection to report the end on, and the job.
  std::shared_ptr<DaemonClient> daemon;
  JobId id = 0;
  // What gpupoold adds to the program's environment: an MPS slice's client settings.
  std::vector<std::string> mps_environment = {};
};

// Acquires (waiting as the options say, reporting the wait on stderr): through gpupoold's
// queue when a daemon is running, so interactive and batch jobs share one fair queue, else
// directly from the lease directory. `command` is what the queue shows for the job.
Result<LeasedGpus> lease_gpus(const LeaseRequestOptions& options, const std::vector<std::string>& command);

// The request the options describe, without a report of the wait (on_wait) or a holder.
Result<AcquireOptions> acquire_options(const LeaseRequestOptions& options, GpuBackend& backend);

// Straight from the lease directory, without asking gpupoold: the leases name `holder_pid`.
Result<LeasedGpus> lease_directly(GpuBackend& backend, const LeaseDirectory& leases, AcquireOptions acquire,
                                  std::string job, pid_t holder_pid);

// Through gpupoold, SIGTERM (`gpupool cancel`) is held back from the lease request on: call
// this just before starting the program. When one came, the lease is released, the daemon told,
// and the error is "job N cancelled before it started"; one that comes later stays pending for
// the program's signal forwarding to pass on.
Result<void> start_unless_cancelled(LeasedGpus& leased);

// Tells gpupoold how the job ended (nothing to do without a daemon), and whether it was ended
// at its time limit.
void report_finished(LeasedGpus& leased, int exit_code, bool timed_out);

// The whole environment of a process that uses `gpus`, a subset of the lease: this one's, with
// CUDA_VISIBLE_DEVICES (full UUIDs, in the order of `gpus`), CUDA_DEVICE_ORDER, GPUPOOL_* and a
// slice's memory limits (lease_environment).
std::vector<std::string> job_environment(const LeasedGpus& leased, const std::vector<unsigned>& gpus);

// base's parse_duration_s in milliseconds: --wait, --time, --grace, --idle-after, report --since.
Result<std::chrono::milliseconds> parse_duration(const std::string& text);

// A --time option's value: nullopt when not given, an error unless it is more than 0.
Result<std::optional<std::chrono::milliseconds>> parse_time_limit(const std::string& text);
// Seconds, as a job's time_limit_s holds it.
double seconds_of(std::chrono::milliseconds duration);

}  // namespace gpupool::cli
