// The MPS control daemons of the GPUs that host MPS slices (sched/mps.h has the decisions): one
// per GPU, started for the first slice job on it, taken up again by a restarted daemon, and told
// to quit once no MPS slice runs on its GPU. Each is NVIDIA's `nvidia-cuda-mps-control -d`, run
// and spoken to through its own program (its commands on standard input).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "os/files.h"
#include "sched/mps.h"
#include "sched/slice_watch.h"

namespace gpupool {

// Whether slices are held by MPS under `mode`: "mps" always, "auto" where the control program is
// on PATH.
bool mps_in_effect(SliceEnforcement mode);

class MpsControls {
 public:
  MpsControls(std::string runtime_dir, const Machine& machine);

  // At start: the control daemons a previous daemon left running for the machine's GPUs (those
  // that answer), so that their slices' clients keep their server.
  void adopt();
  // The environment an MPS client in a slice of `slice_mib` (and `sm_percent` of the
  // multiprocessors) on the GPU `gpu_uuid` adds to its own; the GPU's control daemon is started
  // first where none runs. An error: it could not be started.
  Result<std::vector<std::string>> client_environment(const std::string& gpu_uuid, uint64_t slice_mib,
                                                      std::optional<unsigned> sm_percent);
  // Whether a control daemon of this GPU runs as far as this daemon knows (started or adopted).
  bool controls(const std::string& gpu_uuid) const { return running_.contains(gpu_uuid); }
  // Tells the control daemons of the GPUs not in `in_use` to quit.
  void stop_unneeded(const std::set<std::string>& in_use);
  // The fatal faults the servers of the running control daemons logged since the last call (or
  // since the control was started or taken up): each server.log read on from where the last read
  // stopped, to its last whole line, at most 1 MiB a call. A log that shrank or was replaced is
  // read from its start.
  std::vector<MpsFault> new_faults();

 private:
  // From where a server.log is read next: its file, and the offset in it.
  struct LogPosition {
    FileIdentity file;
    uint64_t offset = 0;
  };
  // What the control daemon of `gpu_uuid` has logged so far is not read: its faults were before.
  void skip_logged(const std::string& gpu_uuid);

  Result<void> start(const std::string& gpu_uuid);
  Result<void> cap(const std::string& gpu_uuid, uint64_t slice_mib);
  MpsDirectories directories_of(const std::string& gpu_uuid) const;

  std::string runtime_dir_;
  std::vector<std::string> gpu_uuids_;  // the machine's, which name the directories
  std::map<std::string, uint64_t> running_;  // GPU UUID → the server limit set on its control, MiB (0: none)
  std::map<std::string, LogPosition> log_read_;  // GPU UUID → where its server.log is read next
};

}  // namespace gpupool
