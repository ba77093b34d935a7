#include "daemon/dispatcher.h"

#include <fcntl.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lease/gpu_pool.h"
#include "os/child_process.h"
#include "os/clock.h"
#include "os/files.h"
#include "os/process.h"

namespace gpupool {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// Runs nothing: records what it is asked, and holds a started attempt's leases (as its
// supervisor would) until the test ends the attempt.
class FakeRunner final : public AttemptRunner {
 public:
  Result<pid_t> reserve(JobId id) override {
    if (refuse_reserve) return fail("no supervisor could be started");
    reserved.insert(id);
    return own_pid();
  }
  void unreserve(JobId id) override {
    reserved.erase(id);
    unreserved.push_back(id);
  }
  Result<void> start(const SupervisedAttempt& attempt, const LeasedDevices& devices,
                     const std::vector<int>& lease_descriptors) override {
    if (reserved.erase(attempt.id) == 0) return fail("job {} was not reserved a supervisor", attempt.id);
    if (refuse_start) return fail("the supervisor went away");
    started.push_back(attempt);
    started_gpus.push_back(devices.gpus);
    for (int fd : lease_descriptors) {
      auto copy = duplicate(fd);
      if (!copy) return copy.error();
      held[attempt.id].push_back(std::move(*copy));
    }
    watched[attempt.id] = own_pid();
    return {};
  }
  Result<void> stop(JobKind, pid_t pid) override {
    stopped.push_back(pid);
    return {};
  }
  Result<void> signal(pid_t pid, int signal_number, bool whole_group) override {
    signals.push_back({pid, signal_number, whole_group});
    return {};
  }
  void watch(JobId id, pid_t pid) override { watched[id] = pid; }
  void forget(JobId id) override { watched.erase(id); }
  void reap(pid_t) override {}
  Result<AttemptRecord> read_record(const std::string& record_path) override {
    auto it = records.find(record_path);
    return it == records.end() ? AttemptRecord{} : it->second;
  }
  void remove_record(const std::string& record_path) override {
    records.erase(record_path);
    removed.push_back(record_path);
  }
  void attempt_over(JobId id, unsigned attempt) override { over.emplace_back(id, attempt); }

  // The last attempt of job `id` has ended so: its record says so and its leases are let go.
  void end(JobId id, int exit_code, const std::string& reason = "") {
    const SupervisedAttempt& attempt = last_of(id);
    AttemptRecord record;
    record.progress = AttemptProgress::Exited;
    record.exit_code = exit_code;
    record.reason = reason;
    records[attempt.record_path] = record;
    held.erase(id);
  }
  // The attempt's supervisor (this process) runs on, as its record says, past a daemon restart.
  void goes_on(const std::string& record_path) {
    AttemptRecord alive;
    alive.progress = AttemptProgress::Running;
    alive.supervisor_pid = own_pid();
    records[record_path] = alive;
  }
  const SupervisedAttempt& last_of(JobId id) const {
    auto it = std::find_if(started.rbegin(), started.rend(), [id](const auto& a) { return a.id == id; });
    EXPECT_NE(it, started.rend()) << "job " << id << " never started";
    return *it;
  }

  bool refuse_reserve = false;
  bool refuse_start = false;
  std::set<JobId> reserved;
  std::vector<JobId> unreserved;
  std::vector<SupervisedAttempt> started;
  std::vector<std::vector<unsigned>> started_gpus;
  std::map<JobId, std::vector<Fd>> held;
  std::vector<pid_t> stopped;
  struct Signal {
    pid_t pid = 0;
    int number = 0;
    bool whole_group = false;
    bool operator==(const Signal&) const = default;
  };
  std::vector<Signal> signals;
  std::map<JobId, pid_t> watched;
  std::map<std::string, AttemptRecord> records;
  std::vector<std::string> removed;
  std::vector<std::pair<JobId, unsigned>> over;
};

// Two 80 GB GPUs joined by an NVSwitch.
Machine two_gpu_machine() {
  Machine machine;
  for (unsigned i = 0; i < 2; ++i) {
    Gpu gpu;
    gpu.index = i;
    gpu.minor_number = i;
    gpu.uuid = fmt::format("GPU-dispatch-{}", i);
    gpu.memory_total_mib = 80000;
    machine.gpus.push_back(gpu);
  }
  machine.links.assign(2, std::vector<Link>(2, Link{12, true, PcieLevel::System}));
  return machine;
}

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/gpupool-dispatcher-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::filesystem::create_directories(dir_ + "/state/attempts");
    auto store = JobStore::open(dir_ + "/state/gpupool.db");
    ASSERT_TRUE(store.ok()) << store.error().message;
    store_.emplace(std::move(*store));
    auto leases = LeaseDirectory::open(dir_ + "/run");
    ASSERT_TRUE(leases.ok()) << leases.error().message;
    leases_.emplace(std::move(*leases));
    auto scheduler = Scheduler::create(machine_, SchedulerConfig{});
    ASSERT_TRUE(scheduler.ok()) << scheduler.error().message;
    scheduler_.emplace(std::move(*scheduler));
    make_dispatcher();
  }
  void TearDown() override {
    dispatcher_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A dispatcher as a (re)started daemon has it, over the same store, leases and runner.
  void make_dispatcher() {
    DispatcherHooks hooks;
    hooks.hand_to_client = [this](const Job& job, const HeldLeases&, const std::vector<std::string>&) {
      handed_to_client.push_back(job.id);
      return client_waits;
    };
    hooks.client_connected = [this](JobId) { return client_waits; };
    hooks.finished = [this](const Job& job) { finished.push_back(job); };
    hooks.started = [this](const Job& job) { told.push_back(fmt::format("started {} attempt {}", job.id, job.attempts)); };
    hooks.requeued = [this](const Job& job) { told.push_back(fmt::format("requeued {} after {}", job.id, job.attempts)); };
    hooks.look_again_soon = [this] { ++looks_again; };
    hooks.queue_changed = [] {};
    hooks.started_in = [](double) {};
    hooks.mps_environment = [](const Job&, unsigned) { return Result<std::vector<std::string>>(std::vector<std::string>{}); };
    hooks.call_checkpoint = [this](JobId id, CheckpointStep, const std::vector<pid_t>&) { checkpoint_calls.push_back(id); };
    hooks.mps_fault_reason = [this](JobId id) -> std::optional<std::string> {
      auto reason = mps_faults.find(id);
      return reason == mps_faults.end() ? std::nullopt : std::optional(reason->second);
    };
    dispatcher_.emplace(DispatcherSettings{dir_ + "/state", 0.5, own_pid(), OutputLimits{}, mps_slices}, *store_,
                        *leases_, machine_, *scheduler_, runner_, host_, hooks);
  }

  // The daemon restarted: a new scheduler and dispatcher over the same store and leases.
  void restart() {
    auto scheduler = Scheduler::create(machine_, SchedulerConfig{});
    ASSERT_TRUE(scheduler.ok());
    scheduler_.emplace(std::move(*scheduler));
    make_dispatcher();
  }

  // A restart that takes up the stored jobs as gpupoold's start does, with alice's fair-share
  // usage read back far above everyone's before the waiting jobs are queued; returns those.
  std::vector<JobId> restart_with_alice_far_ahead() {
    restart();
    auto left_waiting = dispatcher_->adopt_running(*store_->unfinished());
    EXPECT_TRUE(left_waiting.ok()) << left_waiting.error().message;
    if (!left_waiting.ok()) return {};
    EXPECT_TRUE(scheduler_->import_fair_share(FairShareUsage{unix_now(), {{"alice", 1e9}}}, unix_now()).ok());
    dispatcher_->adopt_waiting(*left_waiting);
    return *left_waiting;
  }

  JobId submit(unsigned gpus, unsigned retries = 0, std::vector<JobId> after = {},
               std::optional<uint64_t> slice_mib = std::nullopt, const std::string& user = "alice") {
    Job job;
    job.spec.gpus.slice_mib = slice_mib;
    job.owner = JobOwner{1000, 1000, {}, user};
    job.spec.argv = {"train.py"};
    job.spec.cwd = "/";
    job.spec.gpus.count = gpus;
    job.spec.retries = retries;
    job.spec.after = std::move(after);
    job.submit_time = 1;
    auto id = store_->insert(job);
    EXPECT_TRUE(id.ok()) << id.error().message;
    job.id = *id;
    dispatcher_->submitted(job);
    dispatcher_->dispatch();
    return job.id;
  }

  Job stored(JobId id) {
    auto job = store_->get(id);
    EXPECT_TRUE(job.ok() && job->has_value());
    return **job;
  }

  // Whether GPU `index` is free to lease now (a lease taken and let go again).
  bool gpu_free(unsigned index) {
    auto held = leases_->try_acquire(claims_for(machine_, LeasedDevices{{index}}), LeaseHolder{own_pid(), "test", "probe", 0});
    EXPECT_TRUE(held.ok());
    return held.ok() && held->has_value();
  }

  void ended(JobId id, int exit_code, const std::string& reason = "") {
    runner_.end(id, exit_code, reason);
    dispatcher_->on_exit(id);
  }

  std::string dir_;
  Machine machine_ = two_gpu_machine();
  std::optional<JobStore> store_;
  std::optional<LeaseDirectory> leases_;
  std::optional<Scheduler> scheduler_;
  FakeRunner runner_;
  HostFiles host_;
  std::optional<Dispatcher> dispatcher_;
  bool client_waits = true;
  bool mps_slices = false;                   // the daemon holds slices with MPS
  std::map<JobId, std::string> mps_faults;   // what the MPS servers' logs say ended a job
  std::vector<JobId> handed_to_client;
  std::vector<Job> finished;
  std::vector<std::string> told;  // the started and requeued hooks, in order
  std::vector<JobId> checkpoint_calls;
  int looks_again = 0;
};

TEST_F(DispatcherTest, RunsABatchJobOnLeasedGpusAndRecordsItsEnd) {
  JobId id = submit(2);
  ASSERT_EQ(runner_.started.size(), 1u);
  const SupervisedAttempt& attempt = runner_.started[0];
  EXPECT_EQ(attempt.attempt, 1u);
  EXPECT_EQ(attempt.uid, 1000u);
  EXPECT_EQ(attempt.record_path, fmt::format("{}/state/attempts/{}.1", dir_, id));
  EXPECT_EQ(attempt.stdout_path, fmt::format("{}/state/logs/{}.out", dir_, id));
  EXPECT_EQ(attempt.kill_grace_s, 0.5);
  EXPECT_THAT(attempt.environment, Contains(HasSubstr("CUDA_VISIBLE_DEVICES=GPU-dispatch-")));
  EXPECT_EQ(runner_.started_gpus[0], (std::vector<unsigned>{0, 1}));
  // Stored as running under its supervisor before the attempt could begin; the GPUs are its.
  Job running = stored(id);
  EXPECT_EQ(running.state, JobState::Running);
  EXPECT_EQ(running.pid, own_pid());
  EXPECT_EQ(running.gpu_uuids, (std::vector<std::string>{"GPU-dispatch-0", "GPU-dispatch-1"}));
  EXPECT_FALSE(gpu_free(0));
  EXPECT_EQ(runner_.watched.count(id), 1u);

  ended(id, 0);
  Job done = stored(id);
  EXPECT_EQ(done.state, JobState::Done);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_TRUE(done.end_time.has_value());
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].id, id);
  EXPECT_TRUE(dispatcher_->active().empty());
  EXPECT_EQ(runner_.watched.count(id), 0u);
  EXPECT_EQ(runner_.over, (std::vector<std::pair<JobId, unsigned>>{{id, 1}}));
  EXPECT_TRUE(gpu_free(0) && gpu_free(1));
}

TEST_F(DispatcherTest, ArrayTasksSeeTheirIndexAndKeepToTheArraysLimit) {
  Job task;
  task.owner = JobOwner{1000, 1000, {}, "alice"};
  task.spec.argv = {"sweep.py"};
  task.spec.cwd = "/";
  std::vector<Job> tasks(3, task);
  for (unsigned i = 0; i < tasks.size(); ++i) tasks[i].array = ArrayTask{0, 4 * i, 1};
  auto ids = store_->insert_array(tasks);
  ASSERT_TRUE(ids.ok()) << ids.error().message;
  for (JobId id : *ids) {
    auto stored_task = store_->get(id);
    ASSERT_TRUE(stored_task.ok() && *stored_task);
    dispatcher_->submitted(**stored_task);
  }
  dispatcher_->dispatch();
  ASSERT_EQ(runner_.started.size(), 1u);  // two GPUs are free, but the array runs one task at a time
  EXPECT_THAT(runner_.started[0].environment, Contains("GPUPOOL_ARRAY_TASK_ID=0"));
  EXPECT_THAT(runner_.started[0].environment, Contains(fmt::format("GPUPOOL_ARRAY_JOB_ID={}", ids->front())));
  ended(ids->front(), 0);
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].id, (*ids)[1]);
  EXPECT_THAT(runner_.started[1].environment, Contains("GPUPOOL_ARRAY_TASK_ID=4"));
}

TEST_F(DispatcherTest, AQueuedJobStartsWhenTheGpusItWaitsForAreFree) {
  JobId first = submit(2);
  JobId second = submit(1);
  EXPECT_EQ(runner_.started.size(), 1u);
  EXPECT_EQ(stored(second).state, JobState::Queued);
  ended(first, 0);
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].id, second);
  EXPECT_EQ(stored(second).state, JobState::Running);
}

TEST_F(DispatcherTest, AFailedAttemptRunsAgainUnderTheNextNumber) {
  JobId id = submit(1, /*retries=*/1);
  ended(id, 3);
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].attempt, 2u);
  EXPECT_EQ(runner_.started[1].record_path, fmt::format("{}/state/attempts/{}.2", dir_, id));
  EXPECT_TRUE(finished.empty());
  ended(id, 3);
  Job failed = stored(id);
  EXPECT_EQ(failed.state, JobState::Failed);
  EXPECT_EQ(failed.attempts, 2u);
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(told, (std::vector<std::string>{fmt::format("started {} attempt 1", id), fmt::format("requeued {} after 1", id),
                                            fmt::format("started {} attempt 2", id)}));
}

TEST_F(DispatcherTest, AnMpsJobEndedByAFaultInAnotherSaysSoAndRunsAgain) {
  mps_slices = true;
  make_dispatcher();
  JobId culprit = submit(1, /*retries=*/0, {}, 20480);
  JobId neighbour = submit(1, /*retries=*/1, {}, 20480);
  JobId unrelated = submit(1, /*retries=*/0, {}, 20480);
  mps_faults[culprit] = "a fatal GPU fault in its process 487 ended every MPS client on its GPU";
  mps_faults[neighbour] = fmt::format("ended by a fault in job {} on the same GPU", culprit);
  ended(culprit, 4);
  EXPECT_EQ(stored(culprit).state, JobState::Failed);
  EXPECT_EQ(stored(culprit).reason, "a fatal GPU fault in its process 487 ended every MPS client on its GPU (exit code 4)");
  dispatcher_->feed(lifecycle::Drain{});  // so that the retry waits, and its reason can be read
  ended(neighbour, 3);
  EXPECT_EQ(stored(neighbour).state, JobState::Queued);
  EXPECT_EQ(stored(neighbour).reason,
            fmt::format("retry 1 of 1 after: ended by a fault in job {} on the same GPU (exit code 3)", culprit));
  // Its own failure, or one that succeeds, says nothing of faults.
  ended(unrelated, 2);
  EXPECT_EQ(stored(unrelated).reason, "exit code 2");
}

TEST_F(DispatcherTest, ACancelStopsTheAttemptAndWinsOverHowItEnds) {
  JobId id = submit(1);
  EXPECT_EQ(dispatcher_->feed(lifecycle::Cancel{id, "bob"}), std::nullopt);
  EXPECT_EQ(runner_.stopped, (std::vector<pid_t>{own_pid()}));
  EXPECT_TRUE(finished.empty());  // until the attempt has ended
  ended(id, 0);
  Job cancelled = stored(id);
  EXPECT_EQ(cancelled.state, JobState::Cancelled);
  EXPECT_EQ(cancelled.reason, "cancelled by bob");
}

TEST_F(DispatcherTest, ASliceOverrunUnderStopEndsTheJobOnceWithItsFiguresAndNoRetry) {
  JobId id = submit(1, /*retries=*/1);
  std::map<JobId, SliceUse> worst = {{id, SliceUse{id, 0, 31949, 20480, 0}}};
  dispatcher_->stop_slice_overruns(worst, SliceOverrunPolicy::Warn);
  EXPECT_TRUE(runner_.stopped.empty());
  dispatcher_->stop_slice_overruns(worst, SliceOverrunPolicy::Stop);
  dispatcher_->stop_slice_overruns(worst, SliceOverrunPolicy::Stop);  // the next sample: told once
  EXPECT_EQ(runner_.stopped, (std::vector<pid_t>{own_pid()}));
  ended(id, 143);
  EXPECT_EQ(runner_.started.size(), 1u);  // not retried: it would overrun again
  Job failed = stored(id);
  EXPECT_EQ(failed.state, JobState::Failed);
  EXPECT_EQ(failed.reason, "used 31.2 GiB of its 20 GiB slice");
}

TEST_F(DispatcherTest, AnAttemptThatNeverRanRunsAgainUnderItsNumber) {
  JobId id = submit(1);
  std::string record = runner_.started[0].record_path;
  // The supervisor ended before starting the job: its leases went with it, no record says it began.
  runner_.held.erase(id);
  dispatcher_->on_exit(id);
  EXPECT_EQ(runner_.removed, (std::vector<std::string>{record}));
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].attempt, 1u);
  EXPECT_TRUE(finished.empty());
  // Not a retry: nothing failed.
  EXPECT_EQ(told, (std::vector<std::string>{fmt::format("started {} attempt 1", id), fmt::format("started {} attempt 1", id)}));
}

TEST_F(DispatcherTest, GpusTakenFromOutsideAreLookedAtAgainNotFailed) {
  auto outsider = leases_->try_acquire(claims_for(machine_, LeasedDevices{{0, 1}}),
                                       LeaseHolder{own_pid(), "carol", "pid 99", 0});
  ASSERT_TRUE(outsider.ok() && outsider->has_value());
  JobId id = submit(1);
  EXPECT_TRUE(runner_.started.empty());
  EXPECT_EQ(runner_.unreserved, (std::vector<JobId>{id}));  // its supervisor goes back to the pool
  EXPECT_GE(looks_again, 1);
  EXPECT_EQ(stored(id).state, JobState::Queued);
  (*outsider)->release();
  dispatcher_->dispatch();
  EXPECT_EQ(runner_.started.size(), 1u);
}

// Not a failed attempt, which a retry could mend: the daemon could not run one at all.
TEST_F(DispatcherTest, AnAttemptThatCannotStartFailsTheJobAndFreesItsGpus) {
  for (bool* refuse : {&runner_.refuse_reserve, &runner_.refuse_start}) {
    *refuse = true;
    JobId id = submit(1);
    *refuse = false;
    Job failed = stored(id);
    EXPECT_EQ(failed.state, JobState::Failed);
    EXPECT_THAT(failed.reason, ::testing::AnyOf("could not start: no supervisor could be started",
                                                "could not start: the supervisor went away"));
    EXPECT_TRUE(gpu_free(0) && gpu_free(1));
  }
}

TEST_F(DispatcherTest, ADrainedQueueStartsNothingUntilResumed) {
  dispatcher_->feed(lifecycle::Drain{});
  JobId id = submit(1);
  EXPECT_TRUE(runner_.started.empty());
  EXPECT_TRUE(dispatcher_->drained());
  dispatcher_->feed(lifecycle::Resume{});
  dispatcher_->dispatch();
  ASSERT_EQ(runner_.started.size(), 1u);
  EXPECT_EQ(runner_.started[0].id, id);
}

TEST_F(DispatcherTest, AJobAfterAnotherStartsOnlyOnceItIsDone) {
  JobId first = submit(1);
  JobId second = submit(1, 0, {first});
  EXPECT_EQ(runner_.started.size(), 1u);  // a GPU is free, but the job it runs after is not done
  ended(first, 0);
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].id, second);
}

TEST_F(DispatcherTest, AnInteractiveJobsLeasesGoToItsClient) {
  Job job;
  job.owner = JobOwner{1000, 1000, {}, "alice"};
  job.spec.kind = JobKind::Interactive;
  job.spec.gpus.count = 1;
  job.pid = own_pid();
  JobId id = *store_->insert(job);
  job.id = id;
  dispatcher_->submitted(job);
  dispatcher_->dispatch();
  EXPECT_EQ(handed_to_client, (std::vector<JobId>{id}));
  EXPECT_TRUE(runner_.started.empty());
  EXPECT_EQ(stored(id).state, JobState::Running);
  dispatcher_->attempt_ended(id, {id, 0, std::nullopt, "", false});
  EXPECT_EQ(stored(id).state, JobState::Done);

  client_waits = false;  // the next one's client went away before its GPUs were free
  job.id = *store_->insert(job);
  dispatcher_->submitted(job);
  dispatcher_->dispatch();
  Job gone = stored(job.id);
  EXPECT_EQ(gone.state, JobState::Cancelled);
  EXPECT_THAT(gone.reason, HasSubstr("its client disconnected"));
  EXPECT_TRUE(gpu_free(0) && gpu_free(1));
}

TEST_F(DispatcherTest, AnInteractiveJobPastItsTimeLimitAndGraceIsToldToEndOnceThenKilled) {
  Job job;
  job.owner = JobOwner{1000, 1000, {}, "alice"};
  job.spec.kind = JobKind::Interactive;
  job.spec.time_limit_s = 60;
  job.pid = own_pid();
  JobId id = *store_->insert(job);
  job.id = id;
  dispatcher_->submitted(job);
  dispatcher_->dispatch();
  ASSERT_EQ(stored(id).state, JobState::Running);
  double started = *dispatcher_->active().at(id).start_time;
  // Within its limit and the grace period (0.5 s here) its client ends it: nothing yet.
  dispatcher_->check_running(started + 60.4);
  EXPECT_TRUE(runner_.stopped.empty());
  dispatcher_->check_running(started + 61);
  EXPECT_EQ(runner_.stopped, std::vector<pid_t>{own_pid()});
  EXPECT_TRUE(runner_.signals.empty());
  // A client that does not end within another grace period is killed, once.
  dispatcher_->check_running(unix_now() + 1);
  dispatcher_->check_running(unix_now() + 2);
  EXPECT_EQ(runner_.stopped.size(), 1u);
  EXPECT_EQ(runner_.signals, (std::vector<FakeRunner::Signal>{{own_pid(), SIGKILL, false}}));
  dispatcher_->attempt_ended(id, {id, 137, 9, "", false});
  EXPECT_EQ(stored(id).state, JobState::Failed);
  EXPECT_EQ(stored(id).reason, "time limit");
}

TEST_F(DispatcherTest, ACancelledInteractiveClientIsNotKilled) {
  Job job;
  job.owner = JobOwner{1000, 1000, {}, "alice"};
  job.spec.kind = JobKind::Interactive;
  job.pid = own_pid();
  JobId id = *store_->insert(job);
  job.id = id;
  dispatcher_->submitted(job);
  dispatcher_->dispatch();
  EXPECT_FALSE(dispatcher_->feed(lifecycle::Cancel{id, "alice"}));
  dispatcher_->check_running(unix_now() + 10);
  EXPECT_EQ(runner_.stopped, std::vector<pid_t>{own_pid()});
  EXPECT_TRUE(runner_.signals.empty());  // it ends its program; killed, it would leave that running
}

TEST_F(DispatcherTest, ARemadeLeaseDirectoryHasTheRunningJobsGpusLockedUntilTheyEnd) {
  JobId id = submit(1);
  unsigned gpu = runner_.started_gpus.back()[0];
  ASSERT_FALSE(gpu_free(gpu));
  std::filesystem::remove_all(dir_ + "/run");  // the job's lock goes with its file's name
  ASSERT_TRUE(leases_->remake().ok());
  ASSERT_TRUE(gpu_free(gpu));
  dispatcher_->relock_running();
  EXPECT_FALSE(gpu_free(gpu));
  EXPECT_TRUE(gpu_free(1 - gpu));
  ended(id, 0);
  EXPECT_EQ(stored(id).state, JobState::Done);
  EXPECT_TRUE(gpu_free(gpu));
}

// A process group standing for a job whose supervisor was killed: a `sleep` leading its own group.
class LostJobGroup {
 public:
  LostJobGroup() {
    ChildSpec spec;
    spec.argv = {"sleep", "60"};
    spec.environment = {"PATH=/bin:/usr/bin"};
    spec.own_process_group = true;
    auto pid = spawn_child(spec);
    EXPECT_TRUE(pid.ok());
    pid_ = pid.ok() ? *pid : -1;
  }
  ~LostJobGroup() { end(); }
  pid_t pid() const { return pid_; }
  void end() {
    if (pid_ <= 0) return;
    (void)signal_process_group(pid_, SIGKILL);
    (void)reap_child(pid_);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

TEST_F(DispatcherTest, ALostAttemptKeepsItsGpusAndIsEndedAtItsTimeLimitByTheDaemon) {
  LostJobGroup group;
  Job job;
  job.owner = JobOwner{1000, 1000, {}, "alice"};
  job.spec.argv = {"train.py"};
  job.spec.cwd = "/";
  job.spec.gpus.count = 1;
  job.spec.time_limit_s = 60;
  JobId id = *store_->insert(job);
  job.id = id;
  dispatcher_->submitted(job);
  dispatcher_->dispatch();
  ASSERT_EQ(stored(id).state, JobState::Running);
  AttemptRecord lost;
  lost.progress = AttemptProgress::Lost;
  lost.job_pid = group.pid();
  runner_.records[runner_.last_of(id).record_path] = lost;
  dispatcher_->on_exit(id);  // its supervisor died; its group lives on, holding the leases
  EXPECT_EQ(stored(id).state, JobState::Running);
  EXPECT_FALSE(gpu_free(runner_.started_gpus.back()[0]));
  double started = *dispatcher_->active().at(id).start_time;
  dispatcher_->check_running(started + 59);
  EXPECT_TRUE(runner_.signals.empty());
  dispatcher_->check_running(started + 60);
  EXPECT_EQ(runner_.signals, (std::vector<FakeRunner::Signal>{{group.pid(), SIGTERM, true}}));
  dispatcher_->check_running(unix_now() + 1);  // the grace period (0.5 s) is over
  EXPECT_EQ(runner_.signals.back(), (FakeRunner::Signal{group.pid(), SIGKILL, true}));
  EXPECT_EQ(stored(id).state, JobState::Running);  // until its processes are gone
  group.end();
  runner_.held.erase(id);
  dispatcher_->check_running(unix_now() + 2);
  EXPECT_EQ(stored(id).state, JobState::Failed);
  EXPECT_EQ(stored(id).reason, "time limit");
  EXPECT_THAT(runner_.over, Contains(std::pair<JobId, unsigned>{id, 1}));
}

TEST_F(DispatcherTest, ALostAttemptCanBeCancelledAndEndsCancelledOnceItsGroupIsGone) {
  LostJobGroup group;
  JobId id = submit(1);
  AttemptRecord lost;
  lost.progress = AttemptProgress::Lost;
  lost.job_pid = group.pid();
  runner_.records[runner_.last_of(id).record_path] = lost;
  dispatcher_->on_exit(id);
  ASSERT_EQ(stored(id).state, JobState::Running);
  EXPECT_FALSE(dispatcher_->feed(lifecycle::Cancel{id, "alice"}));
  EXPECT_TRUE(runner_.stopped.empty());  // not its dead supervisor: the group
  EXPECT_EQ(runner_.signals, (std::vector<FakeRunner::Signal>{{group.pid(), SIGTERM, true}}));
  group.end();
  dispatcher_->check_running(unix_now());
  EXPECT_EQ(stored(id).state, JobState::Cancelled);
  EXPECT_EQ(stored(id).reason, "cancelled by alice");
}

TEST_F(DispatcherTest, ALostAttemptWhoseProcessesAreGoneFailsAtOnce) {
  JobId id = submit(1);
  AttemptRecord lost;
  lost.progress = AttemptProgress::Lost;
  {
    LostJobGroup group;
    lost.job_pid = group.pid();
  }
  runner_.records[runner_.last_of(id).record_path] = lost;
  runner_.held.erase(id);
  dispatcher_->on_exit(id);
  EXPECT_EQ(stored(id).state, JobState::Failed);
  EXPECT_EQ(stored(id).reason, "supervisor lost");
  EXPECT_TRUE(gpu_free(0) && gpu_free(1));
}

TEST_F(DispatcherTest, ARestartedDaemonAdoptsTheRunningAttemptAndRecordsItsEnd) {
  JobId id = submit(1);
  JobId waiting = submit(2);
  std::string record_path = runner_.started[0].record_path;
  // The daemon goes; the supervisor (this process) runs on and holds the leases.
  runner_.goes_on(record_path);
  runner_.watched.clear();
  ASSERT_NO_FATAL_FAILURE(restart());

  auto unfinished = store_->unfinished();
  ASSERT_TRUE(unfinished.ok());
  auto left_waiting = dispatcher_->adopt_running(*unfinished);
  ASSERT_TRUE(left_waiting.ok()) << left_waiting.error().message;
  EXPECT_EQ(*left_waiting, (std::vector<JobId>{waiting}));
  dispatcher_->adopt_waiting(*left_waiting);
  EXPECT_EQ(runner_.watched.at(id), own_pid());
  dispatcher_->dispatch();
  EXPECT_EQ(runner_.started.size(), 1u);  // the adopted job still has its GPU

  ended(id, 0);
  EXPECT_EQ(stored(id).state, JobState::Done);
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].id, waiting);
}

TEST_F(DispatcherTest, QueuedJobsTakenUpAfterARestartKeepTheTimeTheyWaited) {
  JobId running = submit(2);
  JobId alices = submit(1);  // submitted long ago (at 1 s), as every job here
  JobId bobs = submit(1, 0, {}, std::nullopt, "bob");
  runner_.goes_on(runner_.started[0].record_path);
  // Fair share alone would put bob's job first; both have waited past overdue_after_s.
  EXPECT_EQ(restart_with_alice_far_ahead(), (std::vector<JobId>{alices, bobs}));
  ended(running, 0);
  ASSERT_EQ(runner_.started.size(), 3u);
  EXPECT_EQ(runner_.started[1].id, alices) << "in the order they arrived, as overdue jobs go";
  EXPECT_EQ(runner_.started[2].id, bobs);
}

TEST_F(DispatcherTest, AJobQueuedWhenItsDependencyEndedKeepsThatTimeAfterARestart) {
  JobId dependency = submit(1);
  JobId blocker = submit(1);
  JobId alices = submit(2, 0, {dependency});  // submitted long ago, queued only once its dependency ends
  JobId bobs = submit(2, 0, {}, std::nullopt, "bob");
  ended(dependency, 0);
  EXPECT_TRUE(stored(alices).queued_at);
  Job recent = stored(bobs);
  recent.submit_time = unix_now();  // not overdue
  ASSERT_TRUE(store_->update(recent).ok());
  runner_.goes_on(runner_.last_of(blocker).record_path);
  EXPECT_EQ(restart_with_alice_far_ahead(), (std::vector<JobId>{alices, bobs}));
  ended(blocker, 0);
  ASSERT_EQ(runner_.started.size(), 3u);
  EXPECT_EQ(runner_.started[2].id, bobs) << "alice's job has waited since its dependency ended: not overdue";
}

TEST_F(DispatcherTest, AJobThatGaveWayToAReservationKeepsItsTurnAfterARestart) {
  JobId running = submit(2);
  JobId bobs = submit(2, 0, {}, std::nullopt, "bob");  // overdue, as every job submitted here
  JobId alices = submit(1);
  runner_.goes_on(runner_.started[0].record_path);
  // Alice's job ran on GPU 0, on loan, and was suspended there for a reservation: stored so.
  Job suspended = stored(alices);
  suspended.state = JobState::Suspended;
  suspended.submit_time = unix_now();  // not overdue: without its mark it would go after bob's
  suspended.attempts = 1;
  suspended.gpus = {0};
  suspended.gpu_uuids = {"GPU-dispatch-0"};
  suspended.suspension = Suspension{{own_pid()}, "gpupoold", unix_now(), 100, true, false, true};
  ASSERT_TRUE(store_->update(suspended).ok());
  runner_.goes_on(fmt::format("{}/state/attempts/{}.1", dir_, alices));
  // Its processes (this one) keep the description of GPU 0's lease, unlocked, while suspended.
  auto kept_lease = open_file(dir_ + "/run/locks/GPU-dispatch-0.lock", O_RDWR);
  ASSERT_TRUE(kept_lease.ok()) << kept_lease.error().message;
  // Her job goes first by its mark alone: bob's is overdue, and she is far ahead in fair share.
  EXPECT_EQ(restart_with_alice_far_ahead(), (std::vector<JobId>{bobs}));
  ended(running, 0);
  // Alice's job has GPU 0 back and is being restored; bob's waits for both GPUs.
  EXPECT_EQ(checkpoint_calls, (std::vector<JobId>{alices}));
  EXPECT_TRUE(stored(alices).suspension->restoring);
  EXPECT_EQ(runner_.started.size(), 1u);
}

TEST_F(DispatcherTest, ARestartBeforeTheJobBeganRunsTheAttemptAgain) {
  JobId id = submit(1);
  std::string record_path = runner_.started[0].record_path;
  runner_.held.clear();  // the supervisor died before starting the job; no record says it began
  ASSERT_NO_FATAL_FAILURE(restart());

  auto left_waiting = dispatcher_->adopt_running(*store_->unfinished());
  ASSERT_TRUE(left_waiting.ok());
  EXPECT_EQ(*left_waiting, (std::vector<JobId>{id}));
  EXPECT_EQ(runner_.removed, (std::vector<std::string>{record_path}));
  Job queued = stored(id);
  EXPECT_EQ(queued.state, JobState::Queued);
  EXPECT_EQ(queued.attempts, 0u);
  EXPECT_TRUE(queued.gpus.empty());
  dispatcher_->adopt_waiting(*left_waiting);
  dispatcher_->dispatch();
  ASSERT_EQ(runner_.started.size(), 2u);
  EXPECT_EQ(runner_.started[1].attempt, 1u);
}

}  // namespace
}  // namespace gpupool
