// The job scheduler: which queued jobs start now, on which GPUs. Pure logic over state and a
// clock that the caller passes in (the daemon's wall clock, or the simulator's virtual one), so
// what the simulator measures is what the daemon runs. It sees only what a real scheduler knows:
// the requests, their declared time limits and how long running jobs have run so far; never how
// long a job will actually take. docs/scheduling.md explains the policies.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "machine/gpu.h"
#include "sched/allocation.h"
#include "sched/fragmentation.h"

namespace gpupool {

enum class Policy {
  Fifo,      // strict arrival order, first-fit GPUs: the head blocks everyone (task-spooler)
  Backfill,  // arrival order, first-fit GPUs, any job that fits starts: big jobs may starve
  Gpupool,   // priority, aged fair share, arrival; topology placement, memory packing, EASY backfill
};

Result<Policy> parse_policy(std::string_view name);  // "fifo", "backfill", "gpupool"
const char* to_string(Policy policy);

// Where the gpupool policy puts a memory slice among the GPUs it fits on.
enum class SlicePlacement {
  BestFit,        // the least room left, GPUs already shared first
  Fragmentation,  // where it least grows the memory the recent requests could not use (FGD)
};
Result<SlicePlacement> parse_slice_placement(std::string_view name);  // "best-fit", "fragmentation"
const char* to_string(SlicePlacement placement);

struct JobRequest {
  JobId id = 0;
  std::string user;
  GpuRequest gpus;
  int priority = 0;                    // higher first (gpupool policy)
  std::optional<double> time_limit_s;  // the job is ended when it runs longer (by the caller)
  // A task of an array job: waits while `limit` tasks of its array run.
  std::optional<ArrayTask> array = std::nullopt;
  // A slice held by its GPU's MPS server (sched/mps.h): it shares a GPU only with the same
  // user's MPS slices, since the server serves one user at a time.
  bool mps = false;
  // Its processes can be checkpointed and its GPUs freed at any time (docs/suspend.md): with
  // SchedulerConfig::backfill_by_suspending it may backfill onto reserved GPUs without being
  // expected to leave them in time, and is suspended when the reservation's job needs them.
  bool suspendable = false;
};

// The users' decayed GPU-seconds as of `as_of_s`: what outlives a daemon restart, so that a
// heavy user does not go back to the front of the queue.
struct FairShareUsage {
  double as_of_s = 0;
  std::map<std::string, double> usage;
};

struct SchedulerConfig {
  Policy policy = Policy::Gpupool;
  // GPUs one user may hold at once, a memory slice counting as its share of the largest GPU.
  std::optional<double> quota_gpus;
  // Per-user quotas, replacing quota_gpus for those users (who may then have more than it).
  std::map<std::string, double> user_quota_gpus;
  // Fair share: GPU-seconds used count half as much after this long.
  double fair_share_half_life_s = 24 * 3600;
  // A job that has waited this long is past fair share: it goes ahead of the jobs that have not
  // (within its priority), in arrival order, so that a heavy user's jobs wait a bounded time.
  double overdue_after_s = 6 * 3600;
  // A running job without a time limit is expected to run this long, or twice as long as it
  // has run so far when that is more: only reservations use the estimate.
  double default_runtime_s = 3600;
  // How many queued jobs a pass examines for backfill behind a reservation (Slurm's
  // bf_max_job_test): bounds the cost of a pass whatever the length of the queue.
  size_t backfill_depth = 1000;
  // A queued job without a time limit may backfill when its user's recent jobs say it will end
  // before the reservation: its expected run time is this quantile of the run times of the
  // user's last `runtime_history` ended jobs (once there are 5). 0: such jobs never backfill.
  size_t runtime_history = 50;
  double runtime_estimate_quantile = 0.97;
  // How slices are placed (gpupool policy); Fragmentation judges by the GPU requests of the
  // last `recent_requests` submitted jobs (sched/fragmentation.h). Best fit did as well on one
  // 8-GPU machine (docs/scheduling.md, "Fragmentation-aware placement"), so it stays the default.
  SlicePlacement slice_placement = SlicePlacement::BestFit;
  size_t recent_requests = 1000;
  // Behind a reservation, a suspendable job that fits only on reserved GPUs, and is not known to
  // end before the reservation starts, starts there all the same, on loan: once the
  // reservation's job could start on its GPUs but for jobs on loan, jobs_in_the_way() names
  // them, the caller suspends them and queues them again (resume()), and the reserved job
  // starts. The drain then wastes nothing, and the reservation is not delayed by a job whose
  // run time nobody knew. A job suspended once does not go on loan again.
  bool backfill_by_suspending = false;
};

struct JobStart {
  JobId id = 0;
  std::vector<unsigned> gpus;  // nvidia-smi indices
  std::string mig_uuid = {};   // a --mig job's MIG device, on its one GPU
  bool on_loan = false;        // on reserved GPUs (SchedulerConfig::backfill_by_suspending)
};

// Where the first waiting job in order will run (gpupool policy): jobs that backfill must end
// before `start_s` by their time limit, or keep off `gpus`. The job keeps its reservation, and
// its place ahead of fair share, until it starts; a pass that cannot start anything keeps the
// last plan.
struct Reservation {
  JobId id = 0;
  double start_s = 0;
  std::vector<unsigned> gpus;
};

class Scheduler {
 public:
  // The machine's GPUs must be indexed 0..n-1 in order, with links filled (Machine::links).
  static Result<Scheduler> create(Machine machine, SchedulerConfig config);

  // Queues a job at `now`, or as queued since `queued_since` when that is earlier (a job a
  // restarted daemon takes up keeps its wait, and so the time after which it is overdue). An
  // error when it is not admissible() or its id is already known.
  Result<void> submit(const JobRequest& request, double now, std::optional<double> queued_since = std::nullopt);
  // An error when the job could never run here: more GPUs than the machine has ("asks for 9
  // GPUs, the machine has 8"), a slice larger than its GPUs, more than its user's quota, or
  // fewer GPUs allowed (and not excluded) than it asks for. The daemon asks before storing it.
  Result<void> admissible(const JobRequest& request) const;
  // A running job has ended at `now` (exited, or killed at its time limit): its GPUs are free.
  Result<void> finish(JobId id, double now);
  // Starts what the policy allows at `now`; the jobs returned are running from then on.
  std::vector<JobStart> schedule(double now);

  // The daemon's needs beyond the simulator's:
  // Takes a queued (or suspended) job out (cancelled, held); an error when it is neither.
  Result<void> remove(JobId id);
  // Puts a job that was returned by schedule() back in the queue with its original place
  // (its GPUs turned out to be taken by someone outside the scheduler); its GPUs are free.
  // An error when it is not running.
  Result<void> requeue(JobId id, double now);
  // A running job suspended at `now` (docs/suspend.md): its GPUs are free, its user's fair share
  // stops growing, and it keeps its request and its place for resume(), which queues it again
  // for the GPUs it ran on, at its old place or (`keep_place` false) behind the jobs queued now.
  // remove() forgets it. An error when it is not running, or holds a MIG device.
  Result<void> suspend(JobId id, double now);
  Result<void> resume(JobId id, bool keep_place = true);
  // With backfill_by_suspending: the running jobs on loan that keep the reservation's job from
  // its reserved GPUs, once nothing else does (each GPU's other jobs have ended); suspending
  // them lets it start at the next pass. As few as it needs: the largest first, then the most
  // recently started. Empty otherwise.
  std::vector<JobId> jobs_in_the_way() const;
  // The caller is about to suspend a job on loan for the reservation (jobs_in_the_way()): once
  // suspend() is told, it goes next after the reservation's job, ahead of the jobs that waited
  // meanwhile, and the reservation passes to no other job while it waits. An error when the job
  // is not running on loan.
  Result<void> give_way(JobId id);
  // Whether a running job is to be suspended for the reservation (give_way), for the caller to
  // store; and, after a restart, a queued job that was suspended so goes next after the
  // reservation's job again (an error when it is not queued).
  bool giving_way(JobId id) const;
  Result<void> gave_way(JobId id);
  // A job on loan that could not be suspended: it runs on as any job does, to its own end, and
  // reservations expect it to.
  void end_loan(JobId id);
  // Records a job that is already running on `gpus` since `start_s` (adopted after a daemon
  // restart); it is not subject to quotas, which it may exceed, and counts towards its user's
  // fair share from `start_s`. An error when its id is known, a GPU index is out of range or
  // repeated, there are not `request.gpus` of them, or a GPU is already taken by the
  // scheduler's other jobs (a whole GPU held, or its memory full): two jobs on one GPU would
  // make the scheduler's view wrong. Outside use is not checked.
  // A --mig job names its MIG device (`mig_uuid`), which no other job may hold; a job that
  // started on loan (JobStart::on_loan) is on loan still, while backfill_by_suspending is on.
  Result<void> adopt(const JobRequest& request, const std::vector<unsigned>& gpus, double start_s,
                     const std::string& mig_uuid = {}, bool on_loan = false);
  // What stands on each GPU apart from the scheduler's own jobs (indexed like the machine's
  // GPUs): processes gpupool did not start, leases taken without the daemon. Replaces the
  // previous call's view; placement avoids those GPUs and memory, and reservations treat them
  // as taken for good. An exclusive lease, or `external_busy`, keeps whole-GPU jobs off a
  // GPU; slices fit around `shared_mib` + `external_mib` (nothing fits beside an exclusive
  // lease); `usable = false` keeps every job off. finish() never clears outside use.
  // An error when the vector does not have one entry per GPU.
  Result<void> set_outside_use(const std::vector<GpuAvailability>& outside);

  size_t queued() const { return queued_.size(); }
  size_t running() const { return running_.size(); }
  // What placement sees: the scheduler's jobs as `exclusive_held` / `shared_mib`, outside use
  // as `external_busy` / `external_mib` / `holders`, and `usable` false where either says so.
  const std::vector<GpuAvailability>& availability() const { return availability_; }
  const std::optional<Reservation>& reservation() const { return reservation_; }
  // Why a queued job has not started, as of the last pass (nullopt when it is not queued):
  // over its user's quota, next in line with GPUs reserved, waiting for busy GPUs (and who
  // holds them), kept off GPUs reserved for the job in line before it, or behind jobs that go
  // first, or as many tasks of its array running as its %N allows. `now` is the clock of the
  // last pass, for how long a reservation has to go.
  struct Waiting {
    WaitReason reason = WaitReason::Priority;
    std::string detail;  // one line: "waiting for 2 GPUs: 2 busy (GPU 0,1: alice (train))"
  };
  std::optional<Waiting> waiting(JobId id, double now) const;
  // When queued jobs are expected to start, from a plan that takes them in the policy's order
  // (the first `limit` of them) and gives each the earliest moment its GPUs are free for its
  // whole time limit (the default run time without one) beside the jobs planned before it, as
  // running jobs are expected to end (expected_end). A job over its quota or its array's limit,
  // or one that only GPUs in outside use would fit, has no estimate. Plans, never starts: as squeue --start.
  std::map<JobId, double> expected_starts(double now, size_t limit);
  // GPUs the user holds now (slices as fractions, as for quotas).
  double held_gpus(const std::string& user) const;
  // The user's decayed GPU-seconds, as of the last call.
  double fair_share_usage(const std::string& user) const;
  // Every user's decayed GPU-seconds as of `now` (accounted up to then).
  FairShareUsage export_fair_share(double now);
  // Takes up usage exported before a restart, after the running jobs have been adopted and
  // before the first pass: it decays over the time since it was exported, and the adopted jobs
  // add what they ran since then (what they ran before, it holds already). Replaces every
  // user's usage. An error when `saved` has a negative or non-finite value.
  Result<void> import_fair_share(const FairShareUsage& saved, double now);
  // Takes up the run times (seconds) of jobs that ended before a restart, each user's oldest
  // first, so that jobs without a time limit backfill on their users' record at once rather
  // than after five more of their jobs end (SchedulerConfig::runtime_history). Negative or
  // non-finite times are left out.
  void import_run_times(const std::map<std::string, std::vector<double>>& by_user);

 private:
  struct UserState {
    std::string name;
    std::optional<double> quota;  // GPU-equivalents
    double held = 0;              // GPU-equivalents of the running jobs
    double usage = 0;             // decayed GPU-seconds
    std::deque<double> run_times = {};  // of the last runtime_history jobs that ended, oldest first
    std::optional<double> expected_run_time = {};  // of a job without a time limit (see config)
    size_t queued_without_limit = 0;  // queued jobs that rely on expected_run_time
  };
  struct QueuedJob {
    JobRequest request;
    uint64_t arrival = 0;  // submission order
    double submit_s = 0;
    size_t user = 0;
    double weight = 0;  // GPU-equivalents
  };
  // Keeps what it had in the queue, should it be requeued.
  struct RunningJob : QueuedJob {
    double start_s = 0;
    std::vector<unsigned> gpus;
    std::string mig_uuid = {};
    bool on_loan = false;  // started on reserved GPUs under backfill_by_suspending
    bool giving_way = false;  // to be suspended for the reservation (give_way)
  };
  class Pass;
  friend class Pass;

  Scheduler(Machine machine, SchedulerConfig config);
  size_t user_index(const std::string& name);
  std::optional<double> quota_of(const std::string& user) const;
  double accrued_per_gpu(double elapsed) const;
  void account_usage(double now);
  double weight_of(const JobRequest& request) const;
  bool over_quota(const QueuedJob& job) const;
  bool at_array_limit(const QueuedJob& job) const;
  // Kept from starting whatever GPUs are free: over quota, or its array's limit reached.
  bool held_back(const QueuedJob& job) const;
  // How long a queued job is expected to run, for backfill: its time limit, else its user's
  // estimate; nullopt when there is neither.
  std::optional<double> backfill_run_time(const QueuedJob& job) const;
  // The shortest backfill_run_time() of the queued jobs (infinity for none).
  double shortest_queued_run_time() const;
  void record_run_time(UserState& user, double run_time);
  void enqueue(const QueuedJob& job);
  // Returns the MIG device a --mig job takes (empty for others).
  std::string start(const QueuedJob& job, std::vector<unsigned> gpus, double now, bool on_loan = false);
  // Whether a queued job may go on loan (backfill_by_suspending).
  bool may_borrow(const JobRequest& request) const {
    return config_.backfill_by_suspending && request.suspendable && !request.gpus.mig && !request.time_limit_s;
  }
  void release(std::unordered_map<JobId, RunningJob>::iterator job);

  Machine machine_;
  SchedulerConfig config_;
  uint64_t largest_gpu_mib_ = 0;
  std::vector<GpuAvailability> availability_;  // the scheduler's jobs and outside use together
  std::vector<UserState> users_;
  std::unordered_map<std::string, size_t> user_by_name_;
  // Queued jobs by (priority, user), each in arrival order; a pass merges them in policy order.
  struct Group {
    int priority = 0;
    size_t user = 0;
    std::map<uint64_t, QueuedJob> jobs;  // by arrival
  };
  std::vector<Group> groups_;
  std::map<std::pair<int, size_t>, size_t> group_index_;
  // Where each queued job is: its group and arrival.
  std::unordered_map<JobId, std::pair<size_t, uint64_t>> queued_;
  // The queued jobs' time limits (infinity for none): behind a reservation, when the shortest
  // one does not fit before it and only reserved GPUs have room, a pass can stop.
  std::multiset<double> queued_limits_;
  size_t queued_borrowers_ = 0;  // queued jobs that may go on loan (may_borrow)
  uint64_t arrivals_ = 0;
  std::unordered_map<JobId, RunningJob> running_;
  std::unordered_map<JobId, QueuedJob> suspended_;
  // Jobs on loan suspended for a reservation (give_way), until they end or are suspended again:
  // queued, they go next after the reservation's job, ahead of the jobs that waited meanwhile,
  // since they ran before it.
  std::set<JobId> gave_way_;
  std::unordered_map<JobId, unsigned> array_running_;  // running tasks by array id
  std::optional<Reservation> reservation_;
  double last_accounted_s_ = 0;
  // While reservations pass from one wide job to the next, only jobs that arrived before the
  // first hand-over take part, so that the jobs the chain passes by wait a bounded time.
  std::optional<uint64_t> chain_before_;
  RequestMix recent_requests_;
};

}  // namespace gpupool
