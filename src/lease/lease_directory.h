// Leases: the only place that knows how a GPU is held.
//
// One lock file per GPU under the runtime directory; a lease is an OFD
// (open-file-description) byte-range lock on it, held by the kernel for as
// long as any process holding the descriptor lives. Byte offsets stand for
// MiB of the GPU's memory: an exclusive lease locks the whole file, a shared
// lease of M MiB locks M bytes below the GPU's total. So the kernel itself
// guarantees that no GPU is held twice, that slices never add up past the
// GPU's memory, and that exclusive and shared leases never overlap; and a
// crash of the holder (job, client or daemon) releases exactly its locks.
//
// Beside each lock, a holder record (pid, user, job, memory, since) says who
// holds it, for display. Records are advisory: one whose byte range is no
// longer locked is stale and ignored.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "os/fd.h"
#include "os/files.h"

namespace gpupool {

struct LeaseClaim {
  std::string uuid;
  unsigned index = 0;                // nvidia-smi index, for display
  uint64_t memory_total_mib = 0;     // the GPU's memory: the lock file's range for slices
  std::optional<uint64_t> slice_mib;  // nullopt: exclusive
};

struct LeaseHolder {
  pid_t pid = 0;     // the process the lease is held for (the job)
  std::string user;   // the caller's user, from its uid; root may name another (a job's owner)
  std::string job;   // job id or name
  int64_t since = 0;  // Unix seconds
};

struct LeaseRecord {
  unsigned index = 0;
  std::string uuid;
  LeaseHolder holder;
  std::optional<uint64_t> slice_mib;  // nullopt: exclusive
};

// What is held on one GPU right now, according to the locks themselves.
struct GpuHold {
  bool exclusive = false;     // the whole GPU is taken
  uint64_t shared_mib = 0;    // MiB taken by slices
};

// A set of held leases. Destroying it (or the death of the process) releases them.
class HeldLeases {
 public:
  HeldLeases() = default;
  HeldLeases(HeldLeases&& other) noexcept;
  HeldLeases& operator=(HeldLeases&& other) noexcept;
  HeldLeases(const HeldLeases&) = delete;
  HeldLeases& operator=(const HeldLeases&) = delete;
  ~HeldLeases();

  // The lock descriptors, for a child to inherit (their close-on-exec flag is cleared by
  // `inheritable_descriptors`) or to pass over a socket.
  std::vector<int> descriptors() const;
  // Clears close-on-exec on every descriptor, so an exec'd job keeps holding the leases.
  Result<void> make_inheritable() const;
  // Records the job's pid in the holder records (when the job is a child of the acquirer).
  void set_holder_pid(pid_t pid);
  // Releases now: removes the records and closes the descriptors.
  void release();
  // Closes our descriptors but keeps the records: another process (a job's supervisor, or a
  // client the descriptors were sent to) holds the locks now and stands in the records.
  void hand_over();
  // Leases received over a socket from whoever took them (and wrote their records).
  static HeldLeases from_descriptors(std::vector<Fd> fds);

 private:
  friend class LeaseDirectory;
  std::vector<Fd> fds_;
  std::vector<std::string> record_paths_;
  std::vector<std::string> record_texts_;
};

class LeaseDirectory {
 public:
  // Opens (creating if needed) the shared runtime directory. See docs/leases.md for the modes:
  // the directory and its subdirectories are 1777 and must belong to root or the caller.
  static Result<LeaseDirectory> open(const std::string& path);
  // open(default_path()); inside a Slurm job it first makes the job's private directory, which
  // holds the default path.
  static Result<LeaseDirectory> open_default();
  // os/paths' default_runtime_dir().
  static std::string default_path();
  // os/paths' prepare_slurm_job_directory(), which holds the default path inside a Slurm job.
  static Result<void> prepare_slurm_job_directory();

  // Takes every claim or none, without waiting. nullopt: some GPU is busy right now.
  Result<std::optional<HeldLeases>> try_acquire(const std::vector<LeaseClaim>& claims,
                                               const LeaseHolder& holder) const;
  // A running job's leases while it is suspended (docs/suspend.md). `holder` (a batch job's
  // supervisor) holds one lock descriptor per claim; the job's processes share its open file
  // descriptions. let_go drops their locks, so the GPUs are free; take_again locks the same
  // descriptions again (false: some GPU is busy; nothing is taken), so the processes that hold
  // them hold the GPUs again, and writes the records. An error when the holder's descriptors
  // cannot be found or copied.
  Result<void> let_go(pid_t holder, const std::vector<LeaseClaim>& claims) const;
  Result<bool> take_again(pid_t holder, const std::vector<LeaseClaim>& claims, const LeaseHolder& record) const;
  // The leases held now (stale records are skipped).
  Result<std::vector<LeaseRecord>> list() const;
  // What the locks say is held on one GPU (nothing where it has no lock file).
  Result<GpuHold> hold(const std::string& uuid, uint64_t memory_total_mib) const;

  const std::string& path() const { return path_; }

  // Whether the directory is still the one opened, not deleted or replaced since: a lease taken
  // in another excludes none of those held in this one.
  bool in_place() const;
  // Makes the directory again where it was (with open()'s checks), to be used from now on.
  Result<void> remake();

 private:
  LeaseDirectory(std::string path, FileIdentity locks) : path_(std::move(path)), locks_(locks) {}
  Result<Fd> open_lock(const std::string& uuid) const;
  // Locks every claim or none, each on the description `description_for` gives.
  Result<std::optional<HeldLeases>> lock_claims(const std::vector<LeaseClaim>& claims, const LeaseHolder& holder,
                                                const std::function<Result<Fd>(const LeaseClaim&)>& description_for) const;
  // Copies of `holder`'s descriptors of the claims' lock files, by UUID.
  Result<std::map<std::string, Fd>> descriptions_held_by(pid_t holder, const std::vector<LeaseClaim>& claims) const;
  std::string lock_path(const std::string& uuid) const;
  std::string path_;
  FileIdentity locks_;  // locks/ as opened
};

}  // namespace gpupool
