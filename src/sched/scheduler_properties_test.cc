// Properties of the scheduler under random operations and random traces (rapidcheck).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "sched/scheduler.h"
#include "sched/scheduler_testing.h"
#include "sim/replay.h"

namespace gpupool {
namespace {

using namespace scheduler_testing;

// A random entry of a map that is not empty.
template <typename Map>
auto random_entry(Map& map) {
  return std::next(map.begin(), *rc::gen::inRange<long>(0, static_cast<long>(map.size())));
}

// The daemon's operations in random order on 1-GPU whole jobs under strict FIFO: every pass
// starts exactly the first jobs of the queue, in arrival order, as many as there are GPUs free
// of the scheduler's jobs and of outside use, whatever was removed or requeued.
RC_GTEST_PROP(SchedulerProperties, RemoveAndRequeueKeepTheQueueOrder, ()) {
  unsigned gpus = *rc::gen::inRange(1u, 5u);
  Scheduler s = make_scheduler(gpus, *rc::gen::element(Policy::Fifo, Policy::Gpupool));
  std::set<JobId> queue;              // the model: queued jobs, numbered in arrival order
  std::map<JobId, unsigned> running;  // and running ones, with their GPU
  std::vector<bool> outside_busy(gpus, false);
  JobId next = 1;
  double now = 0;
  size_t steps = *rc::gen::inRange<size_t>(1, 60);
  for (size_t step = 0; step < steps; ++step, now += 1) {
    switch (*rc::gen::inRange(0, 6)) {
      case 0:
        RC_ASSERT(s.submit(job(next, 1, 50), now).ok());
        queue.insert(next++);
        break;
      case 1:
        if (!queue.empty()) {
          auto victim = random_entry(queue);
          RC_ASSERT(s.remove(*victim).ok());
          queue.erase(victim);
        }
        break;
      case 2:
      case 3:
        if (!running.empty()) {
          JobId id = random_entry(running)->first;
          running.erase(id);
          if (*rc::gen::arbitrary<bool>()) {
            RC_ASSERT(s.requeue(id, now).ok());
            queue.insert(id);
          } else {
            RC_ASSERT(s.finish(id, now).ok());
          }
        }
        break;
      case 4: {
        std::vector<GpuAvailability> outside(gpus);
        for (unsigned gpu = 0; gpu < gpus; ++gpu) {
          outside_busy[gpu] = *rc::gen::inRange(0, 4) == 0;
          if (outside_busy[gpu]) outside[gpu] = outside_process(1000);
        }
        RC_ASSERT(s.set_outside_use(outside).ok());
        break;
      }
      default: {
        std::vector<bool> taken = outside_busy;
        for (const auto& [id, gpu] : running) taken[gpu] = true;
        size_t room = static_cast<size_t>(std::count(taken.begin(), taken.end(), false));
        std::vector<JobId> expected;
        for (auto it = queue.begin(); it != queue.end() && expected.size() < room; ++it)
          expected.push_back(*it);
        std::vector<JobStart> starts = s.schedule(now);
        RC_ASSERT(ids(starts) == expected);
        for (const JobStart& start : starts) {
          RC_ASSERT(start.gpus.size() == 1u);
          RC_ASSERT(!taken[start.gpus[0]]);
          taken[start.gpus[0]] = true;
          queue.erase(start.id);
          running[start.id] = start.gpus[0];
        }
      }
    }
    RC_ASSERT(s.queued() == queue.size());
    RC_ASSERT(s.running() == running.size());
  }
}

// Mixed jobs, slices, adopted jobs and changing outside use: at every pass, the jobs it starts
// fit beside outside use, and the scheduler's jobs together never over-commit a GPU.
RC_GTEST_PROP(SchedulerProperties, NoGpuOvercommittedWithOutsideUse, ()) {
  unsigned gpus = *rc::gen::inRange(1u, 9u);
  SchedulerConfig config;
  config.policy = *rc::gen::element(Policy::Fifo, Policy::Backfill, Policy::Gpupool);
  auto created = Scheduler::create(make_machine(gpus), config);
  RC_ASSERT(created.ok());
  Scheduler& s = *created;
  std::map<JobId, JobRequest> requests;
  std::map<JobId, std::vector<unsigned>> running;
  std::vector<GpuAvailability> outside(gpus);
  JobId next = 1;
  double now = 0;
  auto random_request = [&](JobId id) {
    JobRequest request = job(id, *rc::gen::inRange(1u, gpus + 1), *rc::gen::inRange(1, 100),
                             *rc::gen::element<std::string>("a", "b"));
    if (request.gpus.count == 1 && *rc::gen::arbitrary<bool>())
      request.gpus.slice_mib = *rc::gen::inRange<uint64_t>(1000, kGpuMib + 1);
    return request;
  };
  size_t steps = *rc::gen::inRange<size_t>(1, 60);
  for (size_t step = 0; step < steps; ++step, now += 1) {
    switch (*rc::gen::inRange(0, 6)) {
      case 0: {
        JobRequest request = random_request(next++);
        RC_ASSERT(s.submit(request, now).ok());
        requests[request.id] = request;
        break;
      }
      case 1: {
        // Adoption succeeds exactly when the GPUs have room among the scheduler's jobs.
        JobRequest request = random_request(next++);
        auto on = *rc::gen::unique<std::vector<unsigned>>(request.gpus.count, rc::gen::inRange(0u, gpus));
        bool room = true;
        for (unsigned gpu : on) {
          uint64_t shared = 0;
          for (const auto& [id, held] : running) {
            if (std::find(held.begin(), held.end(), gpu) == held.end()) continue;
            if (!requests[id].gpus.slice_mib || !request.gpus.slice_mib) room = false;
            shared += requests[id].gpus.slice_mib.value_or(0);
          }
          if (request.gpus.slice_mib && shared + *request.gpus.slice_mib > kGpuMib) room = false;
        }
        RC_ASSERT(s.adopt(request, on, now).ok() == room);
        if (room) {
          requests[request.id] = request;
          running[request.id] = on;
        }
        break;
      }
      case 2:
        if (!running.empty()) {
          auto victim = random_entry(running);
          RC_ASSERT((*rc::gen::arbitrary<bool>() ? s.requeue(victim->first, now)
                                                 : s.finish(victim->first, now))
                        .ok());
          running.erase(victim);
        }
        break;
      case 3:
        for (GpuAvailability& use : outside) {
          use = GpuAvailability{};
          switch (*rc::gen::inRange(0, 5)) {
            case 0:
              use = outside_process(*rc::gen::inRange<uint64_t>(0, kGpuMib + 1));
              break;
            case 1:
              use.exclusive_held = true;
              break;
            case 2:
              use.shared_mib = *rc::gen::inRange<uint64_t>(0, kGpuMib + 1);
              break;
            case 3:
              use.usable = *rc::gen::arbitrary<bool>();
              break;
            default:
              break;
          }
        }
        RC_ASSERT(s.set_outside_use(outside).ok());
        break;
      default: {
        std::vector<JobStart> starts = s.schedule(now);
        std::vector<uint64_t> outside_mib(gpus);
        for (unsigned gpu = 0; gpu < gpus; ++gpu) {
          outside_mib[gpu] = outside[gpu].exclusive_held
                                 ? kGpuMib
                                 : outside[gpu].shared_mib + outside[gpu].external_mib;
        }
        std::vector<uint64_t> shared(gpus, 0);
        std::vector<unsigned> whole(gpus, 0);
        for (const JobStart& start : starts) running[start.id] = start.gpus;
        for (const auto& [id, on] : running) {
          const JobRequest& request = requests[id];
          RC_ASSERT(on.size() == request.gpus.count);
          for (unsigned gpu : on) {
            if (request.gpus.slice_mib) {
              shared[gpu] += *request.gpus.slice_mib;
            } else {
              ++whole[gpu];
            }
          }
        }
        for (unsigned gpu = 0; gpu < gpus; ++gpu) {
          RC_ASSERT(whole[gpu] + (shared[gpu] > 0 ? 1u : 0u) <= 1u);
          RC_ASSERT(shared[gpu] <= kGpuMib);
        }
        for (const JobStart& start : starts) {
          const JobRequest& request = requests[start.id];
          for (unsigned gpu : start.gpus) {
            RC_ASSERT(outside[gpu].usable);
            if (request.gpus.slice_mib) {
              RC_ASSERT(shared[gpu] + outside_mib[gpu] <= kGpuMib);
            } else {
              RC_ASSERT(!outside[gpu].exclusive_held && !outside[gpu].external_busy &&
                        outside[gpu].shared_mib == 0);
            }
          }
        }
      }
    }
    RC_ASSERT(s.running() == running.size());
  }
}

// A random workload on a random machine, replayed to the end.
struct Scenario {
  unsigned gpus = 1;
  std::vector<PcieLevel> levels;  // per GPU pair, above the diagonal
  Policy policy = Policy::Gpupool;
  std::optional<double> quota;
  std::vector<TraceJob> trace;
};

rc::Gen<Scenario> scenarios() {
  return rc::gen::exec([] {
    Scenario s;
    s.gpus = *rc::gen::inRange(1u, 9u);
    s.levels = *rc::gen::container<std::vector<PcieLevel>>(
        s.gpus * s.gpus,
        rc::gen::element(PcieLevel::SingleSwitch, PcieLevel::HostBridge, PcieLevel::System));
    s.policy = *rc::gen::element(Policy::Fifo, Policy::Backfill, Policy::Gpupool);
    if (*rc::gen::arbitrary<bool>()) s.quota = *rc::gen::inRange(1, 9);
    size_t count = *rc::gen::inRange<size_t>(1, 40);
    for (size_t i = 0; i < count; ++i) {
      TraceJob job;
      job.id = std::to_string(i);
      job.submit_s = *rc::gen::inRange(0, 200);
      // At least a second: a job of none starts and ends at one instant, which the check below
      // could not tell from one that overlaps.
      job.duration_s = *rc::gen::inRange(1, 300);
      job.gpus = *rc::gen::inRange(1u, s.gpus + 1);
      if (job.gpus == 1 && *rc::gen::arbitrary<bool>())
        job.gpu_mem_mib = *rc::gen::inRange(1000, 80001);
      job.user = *rc::gen::element<std::string>("a", "b", "c");
      job.priority = *rc::gen::inRange(0, 3);
      if (*rc::gen::arbitrary<bool>()) job.time_limit_s = *rc::gen::inRange(1, 400);
      if (s.quota && job.gpus > *s.quota) job.gpus = static_cast<unsigned>(*s.quota);
      s.trace.push_back(job);
    }
    return s;
  });
}

Machine scenario_machine(const Scenario& s) {
  Machine machine = make_machine(s.gpus);
  for (unsigned a = 0; a < s.gpus; ++a) {
    for (unsigned b = 0; b < s.gpus; ++b) {
      machine.links[a][b] = Link{0, false, s.levels[std::min(a, b) * s.gpus + std::max(a, b)]};
    }
  }
  return machine;
}

// Whether a scheduled job holds its GPUs at `at`: started, not ended, not suspended then.
bool holds_gpus(const sim::ScheduledJob& job, double at) {
  if (at < job.start_s || at >= job.end_s) return false;
  return std::ranges::none_of(job.suspensions, [&](const sim::SuspendedSpell& off) {
    return off.released_s <= at && at < off.restarted_s;
  });
}

// At each start (and restart, with backfill by suspending) of a replay's schedule, no GPU is
// over-committed and no user is over quota.
void check_no_overcommit_no_quota_breach(const Scenario& s, const std::vector<sim::ScheduledJob>& schedule) {
  std::vector<std::pair<double, size_t>> starts;
  for (size_t i = 0; i < schedule.size(); ++i) {
    RC_ASSERT(schedule[i].start_s >= s.trace[i].submit_s);
    starts.emplace_back(schedule[i].start_s, i);
    for (const sim::SuspendedSpell& off : schedule[i].suspensions) starts.emplace_back(off.restarted_s, i);
  }
  for (const auto& [at, i] : starts) {
    std::vector<bool> exclusive(s.gpus, false);
    std::vector<uint64_t> shared(s.gpus, 0);
    std::map<std::string, double> held;
    for (size_t j = 0; j < schedule.size(); ++j) {
      bool running = j == i || holds_gpus(schedule[j], at);
      if (!running) continue;
      const TraceJob& job = s.trace[j];
      RC_ASSERT(schedule[j].gpus.size() == job.gpus);
      for (unsigned gpu : schedule[j].gpus) {
        if (job.gpu_mem_mib) {
          shared[gpu] += *job.gpu_mem_mib;
        } else {
          RC_ASSERT(!exclusive[gpu]);
          exclusive[gpu] = true;
        }
      }
      held[job.user] +=
          job.gpu_mem_mib ? static_cast<double>(*job.gpu_mem_mib) / kGpuMib : job.gpus;
    }
    for (unsigned gpu = 0; gpu < s.gpus; ++gpu) {
      RC_ASSERT(shared[gpu] <= kGpuMib);
      RC_ASSERT(!(exclusive[gpu] && shared[gpu] > 0));
    }
    for (const auto& [user, gpus] : held) RC_ASSERT(!s.quota || gpus <= *s.quota + 1e-9);
  }
}

// Every job that fits the machine is eventually scheduled (the replay fails otherwise), and the
// schedule never over-commits a GPU or breaches a quota.
RC_GTEST_PROP(SchedulerProperties, NoOvercommitNoQuotaBreachEveryJobRuns, ()) {
  Scenario s = *scenarios();
  SchedulerConfig config;
  config.policy = s.policy;
  config.quota_gpus = s.quota;
  config.backfill_by_suspending = *rc::gen::arbitrary<bool>();
  auto result = sim::replay(scenario_machine(s), s.trace, config);
  RC_ASSERT(result.ok());
  check_no_overcommit_no_quota_breach(s, result->schedule);
}

// The same with backfill by suspending on, in scenarios where it acts: the gpupool policy, most
// jobs without a time limit (only those go on loan), some wide ones to reserve GPUs for. The
// suspended jobs resume on their own GPUs (the replay fails otherwise) and every job ends.
// A plain test around rc::check, to count the cases that suspend: in none, the property would
// say nothing about giving way.
TEST(SchedulerProperties, JobsOnLoanGiveWayWithoutOvercommit) {
  unsigned cases = 0;
  unsigned suspending = 0;
  bool held = rc::check("jobs on loan give way without overcommit", [&] {
    Scenario s = *scenarios();
    s.policy = Policy::Gpupool;
    for (TraceJob& job : s.trace) {
      if (*rc::gen::inRange(0, 4) > 0) job.time_limit_s.reset();
      if (*rc::gen::inRange(0, 6) == 0) job.gpus = std::max(job.gpus, s.gpus / 2 + 1);
      if (s.quota && job.gpus > *s.quota) job.gpus = static_cast<unsigned>(*s.quota);
      if (job.gpus > 1) job.gpu_mem_mib.reset();
    }
    SchedulerConfig config;
    config.policy = s.policy;
    config.quota_gpus = s.quota;
    config.backfill_by_suspending = true;
    auto result = sim::replay(scenario_machine(s), s.trace, config);
    RC_ASSERT(result.ok());
    ++cases;
    if (result->summary.suspensions > 0) ++suspending;
    check_no_overcommit_no_quota_breach(s, result->schedule);
  });
  EXPECT_TRUE(held);
  // About a fifth of the cases suspend a job: none of a hundred means it no longer acts.
  EXPECT_GT(suspending, 0u) << "of " << cases << " cases";
}

// --mig jobs of random profiles beside whole-GPU jobs and slices, finished and requeued at
// random, under every policy: a MIG device (or another compute instance of its GPU instance) is
// never given to two running jobs, a MIG job runs on a device that matches its request, no other
// job runs on a GPU in MIG mode, and once the running jobs end, every job has run.
RC_GTEST_PROP(SchedulerProperties, MigDevicesAreNeverSharedAndEveryJobRuns, ()) {
  Machine machine = make_machine(3);
  auto device = [](unsigned index, unsigned instance, unsigned compute, unsigned slices, uint64_t mib,
                   std::string profile) {
    return MigDevice{index, fmt::format("MIG-{}-{}", instance, compute), instance, compute, slices, slices, mib, 0,
                     std::move(profile)};
  };
  for (unsigned gpu : {0u, 1u}) machine.gpus[gpu].mig_enabled = true;
  machine.gpus[0].mig_devices = {device(0, 1, 0, 3, 40000, "1c.3g.40gb"), device(1, 1, 1, 3, 40000, "2c.3g.40gb"),
                                 device(2, 2, 0, 2, 20000, "2g.20gb"), device(3, 3, 0, 1, 10000, "1g.10gb")};
  for (unsigned i = 0; i < 7; ++i) machine.gpus[1].mig_devices.push_back(device(i, 10 + i, 0, 1, 10000, "1g.10gb"));
  SchedulerConfig config;
  config.policy = *rc::gen::element(Policy::Fifo, Policy::Backfill, Policy::Gpupool);
  auto created = Scheduler::create(machine, config);
  RC_ASSERT(created.ok());
  Scheduler& s = *created;
  const std::vector<MigRequest> requests = {{"1g.10gb", 0}, {"2g.20gb", 0}, {"1c.3g.40gb", 0}, {"", 0}, {"", 15000}};
  std::map<JobId, JobStart> running;
  std::map<JobId, JobRequest> submitted;
  auto check = [&](const std::vector<JobStart>& starts) {
    for (const JobStart& start : starts) running[start.id] = start;
    std::set<std::pair<unsigned, unsigned>> instances;  // (GPU, GPU instance) in use
    for (const auto& [id, start] : running) {
      const JobRequest& request = submitted.at(id);
      RC_ASSERT(start.gpus.size() == 1u);
      const Gpu& gpu = machine.gpus[start.gpus[0]];
      if (!request.gpus.mig) {
        RC_ASSERT(!gpu.mig_enabled.value_or(false));
        continue;
      }
      auto it = std::ranges::find(gpu.mig_devices, start.mig_uuid, &MigDevice::uuid);
      RC_ASSERT(it != gpu.mig_devices.end());
      RC_ASSERT(mig_device_matches(*it, *request.gpus.mig));
      RC_ASSERT(instances.insert({gpu.index, it->gpu_instance_id}).second);
    }
  };
  JobId next = 1;
  double now = 0;
  size_t steps = *rc::gen::inRange<size_t>(1, 80);
  for (size_t step = 0; step < steps; ++step, now += 1) {
    int action = *rc::gen::inRange(0, 5);
    if (action <= 1) {
      JobRequest request = job(next, 1, 100);
      if (action == 0) {
        request.gpus.mig = *rc::gen::elementOf(requests);
      } else if (*rc::gen::arbitrary<bool>()) {
        request.gpus.slice_mib = 30000;
      }
      RC_ASSERT(s.submit(request, now).ok());
      submitted[next++] = request;
    } else if (action == 2 && !running.empty()) {
      JobId id = random_entry(running)->first;
      running.erase(id);
      RC_ASSERT((*rc::gen::arbitrary<bool>() ? s.requeue(id, now) : s.finish(id, now)).ok());
    } else {
      check(s.schedule(now));
    }
  }
  for (size_t round = 0; round < submitted.size() + 1 && s.queued() + s.running() > 0; ++round, now += 1) {
    for (const auto& [id, start] : running) RC_ASSERT(s.finish(id, now).ok());
    running.clear();
    check(s.schedule(now));
  }
  RC_ASSERT(s.queued() == 0u);
}

}  // namespace
}  // namespace gpupool
