"""Chaos: gpupoold on a simulated 8-GPU machine, jobs of random sizes (1, 2, 4 or 8 whole GPUs, or
memory slices) and durations from four users, and the daemon killed with SIGKILL at random moments
and restarted, some of the kills landing during a submission. Afterwards every job has run exactly
once and is done, or is failed with a reason; no GPU was held by two jobs at once beyond what
memory slices allow (judged from the jobs' own records, not from the daemon); no lease is left.

CI runs a bounded version. The long one (docs/security.md, "Chaos and overload"):
  GPUPOOL_CHAOS_JOBS=1000 GPUPOOL_CHAOS_KILLS=20 python3 tests/e2e/test_chaos.py
GPUPOOL_CHAOS_SEED replays a run's jobs and kill times (the seed is printed first); where each
kill lands among the daemon's steps still depends on the machine."""
import collections
import os
import random
import sys
import threading
import time
import unittest

from harness import Daemon, job_record_script, main, read_records, request_as, wait_until

SEED = int(os.environ.get("GPUPOOL_CHAOS_SEED", time.time_ns() % 2**32))
JOBS = int(os.environ.get("GPUPOOL_CHAOS_JOBS", 150))
KILLS = int(os.environ.get("GPUPOOL_CHAOS_KILLS", 5))
FAILING_EXIT = 3  # the exit code of the jobs meant to fail
SLICES_MIB = (20_000, 40_000, 70_000)


def sh(script):
    return ["sh", "-c", script]


def random_shape(rng):
    """(gpus, mem_mib or None): mostly small whole-GPU jobs, some wide ones, some slices."""
    if rng.random() < 0.2:
        return rng.choice((1, 1, 2)), rng.choice(SLICES_MIB)
    return rng.choices((1, 2, 4, 8), weights=(45, 25, 15, 5))[0], None


def start_counts(path):
    """How many times each job recorded its start (read_records keeps only the last)."""
    with open(path) as f:
        return collections.Counter(line.split()[1] for line in f if line.startswith("start "))


def gpu_clashes(runs, mem_of, capacity_mib):
    """Moments when a GPU was shared beyond what slices allow, from the jobs' records: a whole-GPU
    job beside any other, or slices adding up to more than the GPU's memory."""
    per_gpu = collections.defaultdict(list)
    for job, (start, end, gpus) in runs.items():
        for gpu in gpus:
            per_gpu[gpu].append((start, end if end is not None else float("inf"), job))
    clashes = []
    for gpu, spans in per_gpu.items():
        # An end at the same instant as a start counts first (0 < 1).
        events = sorted([(start, 1, job) for start, _, job in spans] + [(end, 0, job) for _, end, job in spans])
        held = set()
        for _, starting, job in events:
            if not starting:
                held.discard(job)
                continue
            held.add(job)
            whole = [j for j in held if mem_of[j] is None]
            if (whole and len(held) > 1) or sum(mem_of[j] or 0 for j in held) > capacity_mib:
                clashes.append((gpu, sorted(held)))
    return clashes


class ChaosTest(unittest.TestCase):
    def test_kills_at_random_moments_lose_no_job_and_share_no_gpu(self):
        print(f"chaos: seed {SEED} (GPUPOOL_CHAOS_SEED), {JOBS} jobs, {KILLS} kills", file=sys.stderr, flush=True)
        rng = random.Random(SEED)
        # Four users: this one and, as root, three uids without accounts (request_as).
        uids = [os.geteuid()] + ([54401, 54402, 54403] if os.geteuid() == 0 else [])
        # Everything random is drawn up front, so that the seed alone replays the run.
        plan = []  # (name, uid, gpus, mem_mib, seconds, exit code, pause before submitting)
        for n in range(JOBS):
            gpus, mem = random_shape(rng)
            code = FAILING_EXIT if rng.random() < 0.1 else 0
            plan.append((f"chaos{n}", rng.choice(uids), gpus, mem, rng.uniform(0.02, 0.4), code,
                         rng.uniform(0, 0.08)))
        window = sum(step[-1] for step in plan)
        kill_at = sorted(rng.uniform(0.2, window * 1.5 + 1) for _ in range(KILLS))
        downtime = [rng.uniform(0, 0.3) for _ in range(KILLS)]

        began = time.monotonic()
        with Daemon(mode=0o755) as d:
            records = d.path("records")
            os.close(os.open(records, os.O_CREAT | os.O_WRONLY, 0o666))
            os.chmod(records, 0o666)  # the other users' jobs append to it too
            capacity = min(gpu["memory_total_mib"] for gpu in d.gp_json("list", "--json"))
            up = threading.Event()
            up.set()
            ids = {}    # name -> id, for the submissions that were answered
            lost = []   # names whose answer never came (the daemon died): stored or not
            refused = []

            def submit_all():
                for name, uid, gpus, mem, seconds, code, pause in plan:
                    time.sleep(pause)
                    up.wait()
                    body = f"sleep {seconds:.3f}; exit {code}"
                    spec = {"name": name, **({"mem_mib": mem} if mem else {})}
                    try:
                        ids[name] = d.enqueue(sh(job_record_script(records, body, gpus="$CUDA_VISIBLE_DEVICES")),
                                              gpus=gpus, uid=None if uid == os.geteuid() else uid, **spec)
                    except (AssertionError, OSError, ValueError) as e:
                        if "gpupoold refused" in str(e):  # the daemon's answer (Daemon.request's words)
                            refused.append(f"{name}: {e}")
                        else:
                            lost.append(name)

            submitter = threading.Thread(target=submit_all)
            submitter.start()
            try:
                for at, down in zip(kill_at, downtime):
                    time.sleep(max(0.0, at - (time.monotonic() - began)))
                    up.clear()
                    d.kill()
                    time.sleep(down)  # jobs end, or not, while it is down
                    d.start()
                    up.set()
            finally:
                up.set()
                submitter.join()
            self.assertEqual(refused, [], f"submissions refused (seed {SEED})")
            wait_until(lambda: not d.jobs(), 60 + JOBS, interval=0.5, what=f"every job ending (seed {SEED})")
            elapsed = time.monotonic() - began

            listed = d.all_jobs()
            shown = {job["name"]: job for job in listed}
            starts = start_counts(records)
            runs = read_records(records)
            spec = {step[0]: step for step in plan}
            problems = []
            for name, job in ids.items():
                if name not in shown or shown[name]["id"] != job:
                    problems.append(f"{name}: answered with id {job}, but the daemon lists {shown.get(name)}")
            # A submission whose answer was lost may be stored or not, but never twice.
            twice = [name for name, n in collections.Counter(job["name"] for job in listed).items() if n > 1]
            if twice:
                problems.append(f"stored twice: {twice}")
            failed_with_reason = []
            for name, job in shown.items():
                _, uid, gpus, _, _, code, _ = spec[name]
                runs_of = starts[str(job["id"])]
                what = f"{name} (job {job['id']}): {job['state']}, exit {job['exit_code']}, " \
                       f"reason {job['reason']!r}, {job['attempts']} attempts, started {runs_of} times"
                if job["uid"] != uid:
                    problems.append(f"{what}: uid {job['uid']}, submitted as {uid}")
                if runs_of > 1 or job["attempts"] > 1:
                    problems.append(f"{what}: ran twice")
                elif job["state"] == "done" and (code != 0 or runs_of != 1):
                    problems.append(f"{what}: done, expected exit {code}")
                elif job["state"] == "failed" and (job["exit_code"], runs_of) != (code, 1):
                    if not job["reason"]:
                        problems.append(f"{what}: failed without a reason")
                    failed_with_reason.append(what)
                elif job["state"] not in ("done", "failed"):
                    problems.append(f"{what}: not finished")
                if runs_of == 1 and runs[str(job["id"])][1] is None:
                    problems.append(f"{what}: no end recorded")
                if runs_of == 1 and len(set(runs[str(job["id"])][2])) != gpus:
                    problems.append(f"{what}: saw CUDA_VISIBLE_DEVICES={runs[str(job['id'])][2]}")
            self.assertEqual(problems, [], f"seed {SEED}")
            mem_of = {str(job["id"]): spec[name][3] for name, job in shown.items()}
            clashes = gpu_clashes(runs, mem_of, capacity)
            self.assertEqual(clashes, [], f"GPUs shared beyond their slices (seed {SEED})")
            self.assertEqual(d.leases(), [])
            self.assertEqual(d.held_gpus(), [])
            counts = collections.Counter(job["state"] for job in shown.values())
            print(f"chaos: seed {SEED}: {len(shown)} jobs stored ({len(lost)} answers lost to a kill, "
                  f"{len(lost) - sum(1 for n in lost if n in shown)} of them not stored), {KILLS} kills, "
                  f"{counts['done']} done, {counts['failed']} failed ({len(failed_with_reason)} of them by "
                  f"the daemon, not by their exit code), {len(runs)} runs recorded, in {elapsed:.1f} s",
                  file=sys.stderr)
            for what in failed_with_reason:
                print(f"chaos: failed by the daemon: {what}", file=sys.stderr)


if __name__ == "__main__":
    main()
