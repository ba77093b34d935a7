// Memory slices held by CUDA's Multi-Process Service (MPS), the decisions, pure: which jobs run as
// MPS clients, where each GPU's control daemon keeps its pipe and logs, the environments of the
// control daemon and of its clients, and when a GPU's control daemon is no longer needed
// (docs/leases.md, "Slices that hold").
//
// One control daemon per GPU, so that each GPU serves its own user: a control daemon runs one
// MPS server at a time, for one Linux user, and another user's clients wait until it has none.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "jobs/job.h"
#include "sched/slice_watch.h"

namespace gpupool {

// NVIDIA's MPS control program, looked up on PATH.
inline constexpr const char* kMpsControlProgram = "nvidia-cuda-mps-control";

// Where one GPU's control daemon talks to its clients (`pipe`, CUDA_MPS_PIPE_DIRECTORY) and
// logs (`log`, CUDA_MPS_LOG_DIRECTORY): <runtime directory>/mps/GPU-xxxxxxxx/{pipe,log}, named
// by the first 8 hexadecimal digits of the GPU's UUID, or as many more as it takes to tell it
// from the machine's other GPUs (`machine_uuids`). Short, because the control daemon's sockets
// in the pipe directory must fit a Unix socket's 107 bytes.
struct MpsDirectories {
  std::string root;  // <runtime directory>/mps/GPU-xxxxxxxx
  std::string pipe;
  std::string log;
};
MpsDirectories mps_directories(const std::string& runtime_dir, const std::string& gpu_uuid,
                               const std::vector<std::string>& machine_uuids);

// Nullopt when the control daemon's sockets fit in the pipe directory; else why not.
std::optional<std::string> mps_pipe_too_long(const MpsDirectories& directories);

// Whether a job with this request runs as an MPS client, given that the daemon enforces slices
// with MPS: a slice of one GPU, batch or interactive (whose client is handed the settings with
// its lease). A slice of several GPUs cannot (a process reaches one control daemon, each GPU has
// its own): the watchdog watches it.
bool runs_under_mps(const GpuRequest& request);

// The environment `nvidia-cuda-mps-control -d` starts with for `gpu_uuid`: that GPU alone
// visible, and its directories.
std::vector<std::string> mps_control_environment(const MpsDirectories& directories, const std::string& gpu_uuid);

// What an MPS client in a slice of `slice_mib` on its one GPU adds to its environment: the pipe
// and log directories, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for device 0 (the client sees only its
// GPU) and, for a compute share, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. A client's own values can
// only lower what the control daemon allows, never raise it.
std::vector<std::string> mps_client_environment(const MpsDirectories& directories, uint64_t slice_mib,
                                                std::optional<unsigned> sm_percent);

// get_server_list's and get_client_list's answers: one PID a line, nothing when there is none.
Result<std::vector<uint32_t>> parse_mps_pids(const std::string& text);

// A fatal GPU fault an MPS server handled, as its server.log tells it (docs/leases.md, MPS): the
// client process that caused it, when the log names one, and every client process the server
// tore down with it (the culprit's too), whose CUDA calls all fail from then on.
struct MpsFault {
  std::optional<uint32_t> culprit_pid;
  std::vector<uint32_t> torn_down_pids;
  friend bool operator==(const MpsFault&, const MpsFault&) = default;
};

// The faults in `log`: whole lines of a server.log, in order (a reader passes what was appended
// since it last read, up to the last newline). Lines are "[DATE TIME Server PID] MESSAGE"; the
// messages read are "Client {PID: 487, Context: 1} encountered a fatal GPU error.", "Server is
// handling a fatal GPU error." and "The following client process have a sticky error set:"
// followed by one pid a line. Anything else is skipped.
std::vector<MpsFault> parse_mps_faults(std::string_view log);

// Why each job that faults ended gives for its attempt's end, the jobs named by their MPS clients'
// pids (`job_of_client`, as the watchdog's samples saw them): the culprit's job "a fatal GPU fault
// in its process 487 ended every MPS client on its GPU"; the others "ended by a fault in job 12 on
// the same GPU" (or of a process of no job, or of a client the log does not name).
std::map<JobId, std::string> mps_fault_reasons(const std::vector<MpsFault>& faults,
                                               const std::map<uint32_t, JobId>& job_of_client);

// The GPUs whose control daemons can stop: running ones that no MPS slice job runs on.
std::vector<std::string> unneeded_mps_controls(const std::set<std::string>& running_gpu_uuids,
                                               const std::set<std::string>& gpu_uuids_in_use);

// The MPS slice jobs (`is_mps_job`) with a process outside MPS on their GPU (`worst`, the
// watchdog's reading) that have not been told to end yet: their limit does not hold, so they
// are stopped, whatever slice_overrun says.
std::vector<uint64_t> jobs_outside_mps(const std::map<uint64_t, SliceUse>& worst,
                                       const std::function<bool(uint64_t job)>& is_mps_job,
                                       const std::function<bool(uint64_t job)>& told_to_end);

// "its process 4242 used GPU 0 outside MPS, where its slice's memory limit does not hold": the
// reason such a job ends with.
std::string outside_mps_text(uint32_t pid, unsigned gpu);

// "GPU 2's MPS server serves alice's slices: MPS serves one user at a time on a GPU".
std::string mps_one_user_text(unsigned gpu, const std::string& user);
// The same where no slice of gpupool's runs there but MPS clients of `user` do (ones that
// outlived their job): "GPU 2's MPS server serves alice's processes outside gpupool's jobs: ...".
std::string mps_other_clients_text(unsigned gpu, const std::string& user);

}  // namespace gpupool
