#!/usr/bin/env python3
"""gpupoold on a simulated 8-GPU machine: submit latency, dispatch latency, throughput, memory.

    bench/daemon_bench.py BIN_DIR OUT.json [--check] [--only NAME ...] [--machine NAME|real]

BIN_DIR holds `gpupool` and `gpupoold` of a build tree (the simulated NVML and the fixtures are
found beside it, as for the installed programs). Each benchmark starts its own daemon (the
end-to-end tests' harness.Daemon) with a fresh state directory and lease directory under
--work-dir, serving GPUPOOL_SIM=hgx-h200 (or the fixture --machine names; `--machine real`: the
GPUs the real NVML shows):

  submit      `gpupool submit -- true` timed from the process's start to its printed id, once
              with the queue drained (nothing starts) and once while the submitted jobs run;
              the daemon's own part is timed by a client that keeps one connection and times
              each submit round trip; `gpupool --version` gives the floor of a process start.
  dispatch    job B's first instruction minus job A's last, for consecutive jobs on one GPU,
              with the queue never empty. "busy": all 8 GPUs churn through short jobs.
              "one GPU": a 7-GPU job holds the rest, so each dispatch is alone in the daemon.
              The attempt records (STATE_DIR/attempts) and the daemon's start and end times
              split each gap into its steps. "idle machine": from `gpupool submit`'s start to
              its job's first instruction, one job at a time.
  throughput  --jobs jobs of `true`, each submitted by its own `gpupool submit` process, from
              --submitters threads in parallel; from the first submit to the last job's end;
              then the same over one connection (no client processes), and the CPU time per
              job of the clients, the daemon, and the supervisors with their jobs.
  events      --events events in the log (copies of a real one, spread over 100 jobs and users), then
              the time of `gpupool events` as people ask: the latest 20, one job's, one
              user's, a kind none has, and a `jobs` round trip while another client's filtered
              read runs (the daemon answers one request at a time).
  memory      --history finished jobs in the database (a real finished row, copied with new
              ids), then the daemon's VmRSS and VmHWM after start, `jobs`, `jobs --all` (and
              --json, timed) and paging through every job over one connection, three times.

Prints a table and writes every figure to OUT.json. With --check, exits 1 when a target is
missed (submit has no target). Stdlib only; a C compiler (cc) makes the timestamping job
exact, else a Python one is used, whose interpreter start then counts as dispatch latency.
"""
import argparse
import datetime
import grp
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(SOURCE_DIR, "tests", "e2e"), os.path.join(SOURCE_DIR, "python")]
import gpupool  # noqa: E402
import harness  # noqa: E402

SIM = "hgx-h200"
DISPATCH_CASES = ("busy", "one GPU", "idle machine")

TARGETS = {
    "dispatch_p50_ms": 5.0,  # busy machine, p50 of the job-to-job gap
    "throughput_jobs_per_s": 300.0,
    "memory_peak_mb": 50.0,  # VmHWM after `jobs --all` over the whole history
}

# The job that stamps the dispatch benchmark: `stamp FILE MS [JOB_VAR GPU_VAR]`. Its first act is
# reading the clock, its last writing both times, its job id and GPU (from the environment
# variables named, GPUPOOL_JOB and GPUPOOL_GPUS by default) in one O_APPEND write before it exits.
STAMP_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
  double start = now();
  if (argc < 3) return 2;
  long ms = atol(argv[2]);
  struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&pause, NULL);
  const char *job = getenv(argc > 3 ? argv[3] : "GPUPOOL_JOB"), *gpus = getenv(argc > 4 ? argv[4] : "GPUPOOL_GPUS");
  int fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT, 0644);
  char line[128];
  double end = now();
  int n = snprintf(line, sizeof line, "%s %s %.6f %.6f\n", job ? job : "?", gpus ? gpus : "?", start, end);
  return write(fd, line, (size_t)n) == n ? 0 : 1;
}
"""

STAMP_PY = r"""import os, sys, time
start = time.time()
time.sleep(int(sys.argv[2]) / 1000)
end = time.time()
with open(sys.argv[1], "a") as f:
    job, gpus = (sys.argv[3:5] + ["GPUPOOL_JOB", "GPUPOOL_GPUS"][len(sys.argv) - 3:])[:2]
    f.write(f"{os.environ.get(job, '?')} {os.environ.get(gpus, '?')} {start:.6f} {end:.6f}\n")
"""


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def summary_ms(seconds):
    ms = [s * 1000 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p90_ms": round(percentile(ms, 90), 3),
            "p99_ms": round(percentile(ms, 99), 3), "min_ms": round(min(ms), 3), "max_ms": round(max(ms), 3),
            "mean_ms": round(sum(ms) / len(ms), 3)}


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Daemon(harness.Daemon):
    """harness's gpupoold on the benchmark's machine, sampling at the default interval; the user's
    primary group is its admin group (the benchmarks drain and resume)."""

    def __init__(self, bench, config=""):
        admin = f'[daemon]\nadmin_group = "{grp.getgrgid(os.getgid()).gr_name}"\n'
        super().__init__(sim=bench.sim, bin_dir=bench.bin_dir, base_config=admin, config=config,
                         parent_dir=bench.work_dir, keep_root=bench.keep)

    def client(self):
        return harness.RawConnection(self.socket, software="daemon_bench")

    def memory_mb(self):
        values = {}
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = round(int(rest.split()[0]) / 1024, 1)
        return values

    def cpu_seconds(self):
        """(the daemon's own CPU time, that of its reaped children: the supervisors and their jobs)"""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = [int(x) for x in f.read().rsplit(")", 1)[1].split()[11:15]]
        tick = os.sysconf("SC_CLK_TCK")
        return (fields[0] + fields[1]) / tick, (fields[2] + fields[3]) / tick

    def timed(self, *args):
        """Runs gpupool ARGS; returns (seconds from its start until its first line of output, that line)."""
        started = time.perf_counter()
        process = subprocess.Popen([self.gpupool, *args], env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, cwd=self.work)
        line = process.stdout.readline()
        elapsed = time.perf_counter() - started
        _, errors = process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"gpupool {' '.join(args)} exited {process.returncode}: {errors.decode().strip()}")
        return elapsed, line.decode().strip()

    def run_ten_jobs_and_stop(self, before_stop=lambda: None):
        """Ten jobs of `true` run to their end, then the daemon stops (`before_stop` runs first);
        returns its database, for a benchmark to fill with history of that shape."""
        for _ in range(10):
            self.timed("submit", "--", "true")
        self.wait_idle()
        before_stop()
        self.stop()
        return os.path.join(self.state_dir, "gpupool.db")

    def wait_idle(self, timeout=600):
        """Waits until no job is queued or running."""
        with gpupool.Client(self.socket) as client:
            def idle():
                status = client.status()
                return status["queued"] == 0 and status["running"] == 0
            harness.wait_until(idle, timeout, interval=0.02, what="the queue emptying")


class Bench:
    def __init__(self, args):
        self.bin_dir = os.path.abspath(args.bin_dir)
        self.gpupool = os.path.join(self.bin_dir, "gpupool")
        self.gpupoold = os.path.join(self.bin_dir, "gpupoold")
        for program in (self.gpupool, self.gpupoold):
            if not os.access(program, os.X_OK):
                sys.exit(f"daemon_bench: {program} is not an executable")
        self.work_dir = tempfile.mkdtemp(prefix="gpupoold-bench-", dir=args.work_dir)
        self.sim = None if args.machine == "real" else args.machine
        self.keep = args.keep
        topo = subprocess.run([self.gpupool, "topo", "--json"], env=harness.clean_env(GPUPOOL_SIM=self.sim),
                              capture_output=True, text=True)
        if topo.returncode != 0:
            sys.exit(f"daemon_bench: gpupool topo failed: {topo.stderr.strip()}")
        self.gpus = len(json.loads(topo.stdout)["gpus"])
        self.stamp, self.stamp_exact = self.build_stamp()

    def build_stamp(self):
        source = os.path.join(self.work_dir, "stamp.c")
        program = os.path.join(self.work_dir, "stamp")
        with open(source, "w") as f:
            f.write(STAMP_C)
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler:
            for flags in (["-O2", "-static"], ["-O2"]):
                if subprocess.run([compiler, *flags, "-o", program, source], capture_output=True).returncode == 0:
                    return [program], True
        script = os.path.join(self.work_dir, "stamp.py")
        with open(script, "w") as f:
            f.write(STAMP_PY)
        print("daemon_bench: no C compiler: the dispatch job is Python, whose start counts as latency",
              file=sys.stderr)
        return [sys.executable, "-S", script], False


def timed_submits(daemon, count, command=("true",)):
    return [daemon.timed("submit", "--", *command)[0] for _ in range(count)]


def timed_requests(client, count, message):
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.request(message)
        times.append(time.perf_counter() - started)
    return times


def bench_submit(bench, count):
    result = {}
    with Daemon(bench) as daemon:
        daemon.timed("drain")
        floor = []
        for _ in range(count // 4):
            floor.append(daemon.timed("--version")[0])
        result["gpupool --version (process start floor)"] = summary_ms(floor)
        timed_submits(daemon, 5)  # warm-up: page cache, the database's first pages
        result["gpupool submit, queue drained"] = summary_ms(timed_submits(daemon, count))
        with daemon.client() as client:
            submit = {"op": "submit", "job": daemon.job_spec(["true"])}
            result["daemon: submit round trip, drained"] = summary_ms(timed_requests(client, count, submit))
        connects = []
        for _ in range(count):
            started = time.perf_counter()
            daemon.client().close()
            connects.append(time.perf_counter() - started)
        result["daemon: connect + hello"] = summary_ms(connects)
        daemon.timed("resume")
        daemon.wait_idle()
        result["gpupool submit, jobs starting"] = summary_ms(timed_submits(daemon, count))
        daemon.wait_idle()
        with daemon.client() as client:
            times = timed_requests(client, count, {"op": "submit", "job": daemon.job_spec(["true"])})
        result["daemon: submit round trip, jobs starting"] = summary_ms(times)
        daemon.wait_idle()
    return result


def read_record(path):
    events = {}
    with open(path) as f:
        for line in f:
            event = json.loads(line)
            events[event["event"]] = event
    return events


def dispatch_gaps(daemon, stamp_file):
    """Pairs consecutive jobs on each GPU; returns each gap and its steps, in seconds.

    The steps come from the attempt records (supervisor.h) and the daemon's own times: A's end
    time is taken once the daemon has read A's record, B's start time before it leases B's GPUs.
    """
    by_gpu = {}
    with open(stamp_file) as f:
        for line in f:
            job, gpu, start, end = line.split()
            by_gpu.setdefault(gpu, []).append((float(start), float(end), int(job)))
    daemon_view = {job["id"]: job for job in daemon.all_jobs()}
    steps = ["A's last instruction -> its supervisor's 'exited' time",
             "-> daemon has read A's record (A.end_time: supervisor's exit, pidfd wake-up)",
             "-> daemon decides B (B.start_time: A's 'done' committed, scheduler pass)",
             "-> daemon hands B to a standby supervisor ('supervising': leases, 'running' committed)",
             "-> B's supervisor is ready ('started': attempt received, job forked and set up)",
             "-> B's first instruction (exec of the job)"]
    parts = {"gap": [], **{step: [] for step in steps}, "daemon's view: B.start_time - A.end_time": []}
    for runs in by_gpu.values():
        runs.sort()
        for (_, a_end, a_id), (b_start, _, b_id) in zip(runs, runs[1:]):
            a = read_record(os.path.join(daemon.state_dir, "attempts", f"{a_id}.1"))
            b = read_record(os.path.join(daemon.state_dir, "attempts", f"{b_id}.1"))
            times = [a_end, a["exited"]["time"], daemon_view[a_id]["end_time"], daemon_view[b_id]["start_time"],
                     b["supervising"]["time"], b["started"]["time"], b_start]
            parts["gap"].append(b_start - a_end)
            for step, before, after in zip(steps, times, times[1:]):
                parts[step].append(after - before)
            parts["daemon's view: B.start_time - A.end_time"].append(times[3] - times[2])
    return parts


def bench_dispatch(bench, rounds, job_ms, which=DISPATCH_CASES):
    result = {"job": "C, exact" if bench.stamp_exact else "Python (interpreter start included)"}
    gpus = bench.gpus
    cases = [("busy", f"{gpus} GPUs, {gpus * rounds} jobs of {job_ms} ms", gpus * rounds, job_ms),
             ("one GPU", f"1 free GPU (a {gpus - 1}-GPU job holds the rest), {rounds * 4} jobs of 20 ms",
              rounds * 4, 20)]
    # With one GPU, "one GPU" is "busy" again.
    cases = [case for case in cases if case[0] in which and (case[0] != "one GPU" or gpus > 1)]
    for name, description, count, ms in cases:
        with Daemon(bench) as daemon:
            stamp_file = os.path.join(daemon.root, "stamps")
            with daemon.client() as client:
                if name == "one GPU":
                    blocker = client.request({"op": "submit", "job": daemon.job_spec(["sleep", "3600"], gpus - 1)})["id"]
                    while client.request({"op": "show", "id": blocker})["jobs"][0]["state"] != "running":
                        time.sleep(0.01)
                client.request({"op": "drain"})
                for _ in range(count):
                    client.request({"op": "submit", "job": daemon.job_spec([*bench.stamp, stamp_file, str(ms)])})
                client.request({"op": "resume"})  # the queue is full before the first job starts
                while True:
                    status = client.request({"op": "status"})["status"]
                    if status["queued"] == 0 and status["running"] <= (1 if name == "one GPU" else 0):
                        break
                    time.sleep(0.02)
                time.sleep(0.2)  # the last job's end is recorded
                if name == "one GPU":
                    client.request({"op": "cancel", "ids": [blocker]})
            parts = dispatch_gaps(daemon, stamp_file)
            result[name] = {"setup": description, **{part: summary_ms(values) for part, values in parts.items()}}
            if bench.keep:  # where the stamps, the database and the log stay
                result[name]["directory"] = daemon.root
            daemon.wait_idle()
    if "idle machine" in which:
        result["idle machine"] = submit_to_start(bench, rounds * 2)
    return result


def wait_for_lines(path, count, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                lines = f.read().splitlines()
            if len(lines) >= count:
                return lines
        time.sleep(0.001)
    raise RuntimeError(f"{path}: fewer than {count} lines after {timeout} s")


def submit_to_start(bench, count):
    """`gpupool submit` of one job on an idle machine: from the submit process's start to the job's first instruction."""
    latencies, daemon_side = [], []
    with Daemon(bench) as daemon:
        stamp_file = os.path.join(daemon.root, "stamps")
        for i in range(count):
            started = time.time()
            daemon.timed("submit", "--", *bench.stamp, stamp_file, "0")
            latencies.append(float(wait_for_lines(stamp_file, i + 1)[i].split()[2]) - started)
            time.sleep(0.05)
        daemon.wait_idle()
        for job in daemon.all_jobs():
            daemon_side.append(job["start_time"] - job["submit_time"])
    return {"setup": f"{count} single jobs, one at a time",
            "submit process start -> job's first instruction": summary_ms(latencies),
            "daemon's view: start_time - submit_time": summary_ms(daemon_side)}


def bench_throughput(bench, count, submitters):
    result = {"jobs": count, "submitters": submitters, "command": "true"}
    with Daemon(bench) as daemon:
        cpu_before = daemon.cpu_seconds()
        clients_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        failures = []

        def submit_some(n):
            for _ in range(n):
                proc = subprocess.run([bench.gpupool, "submit", "--", "true"], env=daemon.env, cwd=bench.work_dir,
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    failures.append(proc.stderr.strip())

        shares = [count // submitters + (1 if i < count % submitters else 0) for i in range(submitters)]
        threads = [threading.Thread(target=submit_some, args=(n,)) for n in shares]
        first_submit = time.time()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        submitted = time.time()
        daemon.wait_idle()
        jobs = daemon.all_jobs()
        last_end = max(job["end_time"] for job in jobs)
        states, failures_by_reason = {}, {}
        for job in jobs:
            states[job["state"]] = states.get(job["state"], 0) + 1
            if job["state"] != "done":
                failures_by_reason[job["reason"]] = failures_by_reason.get(job["reason"], 0) + 1
        elapsed = last_end - first_submit
        cpu_after = daemon.cpu_seconds()
        clients = resource.getrusage(resource.RUSAGE_CHILDREN)
        client_cpu = clients.ru_utime + clients.ru_stime - clients_before.ru_utime - clients_before.ru_stime
        result.update({
            "seconds": round(elapsed, 3),
            "jobs_per_s": round(count / elapsed, 1),
            "submits_per_s": round(count / (submitted - first_submit), 1),
            "states": states,
            "not done, by reason": failures_by_reason,
            "submit_failures": failures[:5],
            # Where the CPU goes, per job (on a 2-core machine the sum bounds the rate: 2 s / sum).
            "daemon_cpu_ms_per_job": round((cpu_after[0] - cpu_before[0]) * 1000 / count, 3),
            "supervisor_and_job_cpu_ms_per_job": round((cpu_after[1] - cpu_before[1]) * 1000 / count, 3),
            "gpupool_submit_cpu_ms_per_job": round(client_cpu * 1000 / count, 3),
        })

        # The daemon's own capacity: one connection submits, no process starts on the client side.
        cpu_before = daemon.cpu_seconds()
        first_id = None
        started = time.time()
        with daemon.client() as client:
            for _ in range(count):
                answer = client.request({"op": "submit", "job": daemon.job_spec(["true"])})
                first_id = first_id or answer["id"]
        submitted = time.time()
        daemon.wait_idle()
        last_end = max(job["end_time"] for job in daemon.all_jobs() if job["id"] >= first_id)
        result["one connection"] = {
            "seconds": round(last_end - started, 3),
            "jobs_per_s": round(count / (last_end - started), 1),
            "submits_per_s": round(count / (submitted - started), 1),
            "daemon_cpu_ms_per_job": round((daemon.cpu_seconds()[0] - cpu_before[0]) * 1000 / count, 3),
            "supervisor_and_job_cpu_ms_per_job": round((daemon.cpu_seconds()[1] - cpu_before[1]) * 1000 / count, 3),
        }
    return result


def page_through(client):
    """Every job, page after page over one connection: (the jobs, pages, bytes of the largest answer)."""
    jobs, pages, largest, after = [], 0, 0, 0
    while True:
        client.send({"op": "jobs", "all": True, "after_id": after})
        line = client.receive()
        page = json.loads(line)
        jobs += page["jobs"]
        pages += 1
        largest = max(largest, len(line))
        if not page.get("more") or not page["jobs"]:
            return jobs, pages, largest
        after = page["jobs"][-1]["id"]


def copy_history(database, history):
    """Adds `history` copies of a finished job the daemon wrote, with new ids, as the daemon would store them."""
    db = sqlite3.connect(database)
    db.row_factory = sqlite3.Row
    row = dict(db.execute("SELECT * FROM jobs WHERE state = 'done' ORDER BY id LIMIT 1").fetchone())
    next_id = db.execute("SELECT MAX(id) FROM jobs").fetchone()[0] + 1
    columns = list(row)
    old_id = row["id"]

    def copies():
        for i in range(history):
            new = dict(row, id=next_id + i)
            for key in ("submit_time", "start_time", "end_time"):
                new[key] = row[key] + i * 0.01
            for key in ("stdout_path", "stderr_path"):
                new[key] = row[key].replace(f"/{old_id}.", f"/{next_id + i}.")
            yield [new[c] for c in columns]

    with db:
        db.executemany(f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       copies())
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    db.close()
    return total, len(row["environment"])


def bench_memory(bench, history):
    result = {}
    with Daemon(bench) as daemon:
        database = daemon.run_ten_jobs_and_stop(lambda: result.update({"fresh daemon, 10 jobs": daemon.memory_mb()}))
        total, environment_bytes = copy_history(database, history)
        result["jobs in the database"] = total
        result["database MB"] = round(os.path.getsize(database) / 2**20, 1)
        result["environment bytes per job"] = environment_bytes
        started = time.monotonic()
        daemon.start()
        result["start seconds"] = round(time.monotonic() - started, 3)
        daemon.wait_for_samples()  # its memory once settled into sampling
        result["idle"] = daemon.memory_mb()

        elapsed, _ = daemon.timed("jobs")
        result["after gpupool jobs"] = dict(daemon.memory_mb(), ms=round(elapsed * 1000, 1))
        for args in (["jobs", "--all"], ["jobs", "--all", "--json"]):
            started = time.perf_counter()
            proc = subprocess.run([bench.gpupool, *args], env=daemon.env, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            listed = len(json.loads(proc.stdout)) if "--json" in args and proc.returncode == 0 else None
            result[f"gpupool {' '.join(args)}"] = {
                "exit": proc.returncode, "lines": proc.stdout.count("\n"), "jobs": listed,
                "seconds": round(elapsed, 2), "stderr": proc.stderr.strip()[:200]}
            result[f"after gpupool {' '.join(args)}"] = daemon.memory_mb()
        for attempt in (1, 2, 3):
            with daemon.client() as client:
                started = time.perf_counter()
                jobs, pages, largest = page_through(client)
                elapsed = time.perf_counter() - started
            result[f"after jobs --all over one connection, #{attempt}"] = dict(
                daemon.memory_mb(), ms=round(elapsed * 1000, 1), jobs=len(jobs), pages=pages,
                largest_answer_KB=round(largest / 2**10, 1))
        result["peak_mb"] = daemon.memory_mb()["VmHWM"]
    return result


def copy_events(database, count):
    """Adds `count` copies of the first job_ended event (with whom it concerns), for 100 jobs and users."""
    db = sqlite3.connect(database)
    row = db.execute("SELECT time, kind, job, user, name, gpus, detail, jobs, users FROM events "
                     "WHERE kind = 'job_ended' ORDER BY seq LIMIT 1").fetchone()
    with db:
        cursor = db.execute("SELECT COALESCE(MAX(seq), 0) FROM events")
        first = cursor.fetchone()[0] + 1
        db.executemany("INSERT INTO events (seq, time, kind, job, user, name, gpus, detail, jobs, users) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       ((first + i, row[0], row[1], 1000 + i % 100, f"user{i % 100}", *row[4:]) for i in range(count)))
        db.executemany("INSERT INTO event_subjects (seq, job, user) VALUES (?, ?, ?)",
                       ((first + i, 1000 + i % 100, f"user{i % 100}") for i in range(count)))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    db.close()
    return total


def bench_events(bench, count):
    result = {}
    with Daemon(bench) as daemon:
        database = daemon.run_ten_jobs_and_stop()
        result["events in the log"] = copy_events(database, count)
        result["database MB"] = round(os.path.getsize(database) / 2**20, 1)
        started = time.monotonic()
        daemon.start()
        result["start seconds"] = round(time.monotonic() - started, 3)
        cases = {"latest 20": ["events"], "one job's": ["events", "--job", "1050"],
                 "one user's (latest 20)": ["events", "--user", "user7"], "a user with none": ["events", "--user", "nobody"],
                 "a kind none has": ["events", "--kind", "gpu_quarantined"]}
        for name, args in cases.items():
            times = []
            for _ in range(5):
                started = time.perf_counter()
                proc = subprocess.run([bench.gpupool, *args], env=daemon.env, capture_output=True, text=True)
                times.append(time.perf_counter() - started)
                if proc.returncode != 0:
                    raise RuntimeError(f"gpupool {' '.join(args)}: {proc.stderr.strip()}")
            result[name] = {"ms": round(min(times) * 1000, 1), "lines": proc.stdout.count("\n")}
        with daemon.client() as reader, daemon.client() as other:
            reader.send({"op": "events", "user": "nobody", "limit": 1000})
            started = time.perf_counter()
            other.request({"op": "jobs"})
            result["jobs round trip during a filtered read, ms"] = round((time.perf_counter() - started) * 1000, 1)
            reader.receive()
        result["memory"] = daemon.memory_mb()
    return result


def bench_listing(bench, count):
    """`jobs --all`'s page of `count` ended jobs that held GPUs, each answered with its stored
    usage and efficiency (one lookup in the usage table each), against a page of as many held
    jobs, which have none: what the usage costs the page."""
    result = {}
    with Daemon(bench) as daemon:
        with daemon.client() as client:
            for _ in range(count):
                client.request({"op": "submit", "job": daemon.job_spec(["true"])})
        daemon.wait_idle()
        with daemon.client() as client:
            for _ in range(count):
                client.request({"op": "submit", "hold": True, "job": daemon.job_spec(["true"])})
            ended = client.request({"op": "jobs", "all": True, "state": "done", "limit": count})["jobs"]
            held = client.request({"op": "jobs", "state": "held", "limit": count})["jobs"]
            with_usage = sum(1 for j in ended if j.get("usage"))
            if len(ended) != count or len(held) != count or with_usage != count:
                raise RuntimeError(f"expected {count} ended jobs with usage and {count} held ones: {len(ended)} ended "
                                   f"({with_usage} with usage), {len(held)} held")
            for name, message in (("page of ended jobs, with usage", {"op": "jobs", "all": True, "state": "done", "limit": count}),
                                  ("page of held jobs, no usage", {"op": "jobs", "state": "held", "limit": count})):
                result[name] = summary_ms(timed_requests(client, 20, message))
    return result


def print_table(results):
    rows = [("benchmark", "figure", "value", "target")]
    submit = results.get("submit", {})
    for name, s in submit.items():
        rows.append(("submit", name, f"p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms", ""))
    dispatch = results.get("dispatch", {})
    for case in ("busy", "one GPU", "idle machine"):
        if case in dispatch:
            for part, s in dispatch[case].items():
                if isinstance(s, dict):
                    target = f"p50 <= {TARGETS['dispatch_p50_ms']} ms" if case == "busy" and part == "gap" else ""
                    rows.append((f"dispatch, {case}", part, f"p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms", target))
    t = results.get("throughput")
    if t:
        rows.append(("throughput", f"{t['jobs']} x `gpupool submit -- true`, {t['submitters']} submitters",
                     f"{t['jobs_per_s']} jobs/s ({t['seconds']} s; submits {t['submits_per_s']}/s)",
                     f">= {TARGETS['throughput_jobs_per_s']} jobs/s"))
        if t["not done, by reason"]:
            rows.append(("throughput", "jobs not done", "; ".join(f"{n} x {why}" for why, n in
                                                                t["not done, by reason"].items()), "all done"))
        one = t["one connection"]
        rows.append(("throughput", "the same over one connection", f"{one['jobs_per_s']} jobs/s", ""))
        rows.append(("throughput", "CPU per job: gpupool submit / daemon / supervisor + job",
                     f"{t['gpupool_submit_cpu_ms_per_job']} / {t['daemon_cpu_ms_per_job']} / "
                     f"{t['supervisor_and_job_cpu_ms_per_job']} ms", ""))
    m = results.get("memory")
    if m:
        for key, value in m.items():
            if isinstance(value, dict) and "VmRSS" in value:
                rows.append(("memory", key, f"RSS {value['VmRSS']} MB, HWM {value['VmHWM']} MB"
                             + (f", {value['ms']} ms" if "ms" in value else ""), ""))
        rows.append(("memory", f"peak (VmHWM), {m['jobs in the database']} jobs", f"{m['peak_mb']} MB",
                     f"<= {TARGETS['memory_peak_mb']} MB"))
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def missed_targets(results):
    missed = []
    if "busy" in results.get("dispatch", {}):
        p50 = results["dispatch"]["busy"]["gap"]["p50_ms"]
        if p50 > TARGETS["dispatch_p50_ms"]:
            missed.append(f"dispatch p50 {p50} ms > {TARGETS['dispatch_p50_ms']} ms")
    if "throughput" in results:
        rate = results["throughput"]["jobs_per_s"]
        if rate < TARGETS["throughput_jobs_per_s"]:
            missed.append(f"throughput {rate} jobs/s < {TARGETS['throughput_jobs_per_s']}")
    if "memory" in results:
        peak = results["memory"]["peak_mb"]
        if peak > TARGETS["memory_peak_mb"]:
            missed.append(f"memory peak {peak} MB > {TARGETS['memory_peak_mb']} MB")
    return missed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", help="directory holding gpupool and gpupoold")
    parser.add_argument("output", help="JSON file to write")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--only", nargs="+", choices=["submit", "dispatch", "throughput", "memory", "events", "listing"])
    parser.add_argument("--submits", type=int, default=200, help="timed submits per submit case")
    parser.add_argument("--rounds", type=int, default=25, help="dispatch: jobs per GPU on the busy machine")
    parser.add_argument("--job-ms", type=int, default=200, help="dispatch: length of a job on the busy machine")
    parser.add_argument("--dispatch-cases", nargs="+", choices=DISPATCH_CASES, default=DISPATCH_CASES,
                        help="dispatch: which cases (default all)")
    parser.add_argument("--machine", default=SIM,
                        help=f"the fixture the daemons serve (default {SIM}), or `real` for the real GPUs")
    parser.add_argument("--jobs", type=int, default=2000, help="throughput: jobs")
    parser.add_argument("--submitters", type=int, default=4, help="throughput: parallel submitters")
    parser.add_argument("--history", type=int, default=100000, help="memory: finished jobs in the database")
    parser.add_argument("--events", type=int, default=1000000, help="events: events in the log")
    parser.add_argument("--listed", type=int, default=1000, help="listing: jobs on a page (at most 1000)")
    parser.add_argument("--work-dir", default=None, help="where state directories go (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the state directories")
    args = parser.parse_args()
    bench = Bench(args)
    which = args.only or ["submit", "dispatch", "throughput", "memory"]
    results = {"meta": {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": os.uname().nodename, "kernel": os.uname().release, "cpus": os.cpu_count(),
        "simulated_machine": bench.sim, "gpus": bench.gpus, "bin_dir": os.path.abspath(args.bin_dir), "work_dir": bench.work_dir,
        "load_before": load_average(),
    }}
    try:
        for name in which:
            began = time.monotonic()
            print(f"daemon_bench: {name} ...", file=sys.stderr, flush=True)
            if name == "submit":
                results[name] = bench_submit(bench, args.submits)
            elif name == "dispatch":
                results[name] = bench_dispatch(bench, args.rounds, args.job_ms, args.dispatch_cases)
            elif name == "throughput":
                results[name] = bench_throughput(bench, args.jobs, args.submitters)
            elif name == "events":
                results[name] = bench_events(bench, args.events)
            elif name == "listing":
                results[name] = bench_listing(bench, args.listed)
            else:
                results[name] = bench_memory(bench, args.history)
            results["meta"][f"{name}_seconds"] = round(time.monotonic() - began, 1)
    finally:
        results["meta"]["load_after"] = load_average()
        with open(args.output, "w") as f:
            json.dump(results, f, indent=2)
        if not args.keep:
            shutil.rmtree(bench.work_dir, ignore_errors=True)
    print_table(results)
    print(f"load average before {results['meta']['load_before']}, after {results['meta']['load_after']}")
    missed = missed_targets(results)
    for line in missed:
        print(f"target missed: {line}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
