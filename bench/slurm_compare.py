#!/usr/bin/env python3
"""The same short 1-GPU jobs through a local gpupoold, through Slurm, and packed by gpupool inside
one Slurm allocation, side by side in one run: jobs/s and dispatch latency.

    bench/slurm_compare.py BIN_DIR OUT.json [--jobs 500] [--stock-jobs 100] [--submitters 1]

Run by hand as root, with Debian's Slurm installed (scripts/install-deps); not part of CI. BIN_DIR
holds `gpupool` and `gpupoold` of a build tree. Every machine is a simulated HGX H200
(GPUPOOL_SIM=hgx-h200, 8 GPUs); every job asks for one GPU and is a small static C program that
reads CLOCK_REALTIME first thing and appends its start and end to a file (daemon_bench.STAMP_C).
Each submission is timed by its submitter, from just before the submit command to its exit.

  local    a gpupoold of its own (tests/e2e/harness.py's Daemon: temporary state and lease
           directories, its fast test configuration), --jobs `gpupool submit -g 1 -- STAMP`.
  slurm    a throwaway single-node Slurm (tests/e2e/slurm_cluster.py) with the scheduling settings
           that start short jobs at once (batch_sched_delay=0, a no-op Epilog), --jobs
           `sbatch --gres=gpu:1` of a batch script that execs STAMP.
  packed   on that same Slurm, one `sbatch --gres=gpu:8` whose batch script runs
           `gpupool slurm start`, --jobs `gpupool submit -g 1 -- STAMP` and `gpupool wait --all`;
           counted from the first `gpupool submit`, and from the sbatch (the allocation's start
           and gpupoold's start included).
  stock    Slurm at its stock scheduling pace (neither setting), --stock-jobs jobs as in `slurm`.

For each: jobs/s (jobs / (the last job's end - the first submission)), dispatch latency (a job's
first instruction - the start of its submit command) p50/p95/p99, the submit command's p50, and
the load average before and after. Prints a Markdown table and writes every figure to OUT.json.
"""
import argparse
import datetime
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from daemon_bench import STAMP_C, load_average, percentile  # noqa: E402

SIM = "hgx-h200"
GPUS = 8
PARTS = ["local", "slurm", "packed", "stock"]


def import_e2e(bin_dir):
    """tests/e2e's harness and throwaway Slurm, told where the binaries are (read at import)."""
    os.environ["GPUPOOL_BIN_DIR"] = os.path.abspath(bin_dir)
    os.environ["GPUPOOL_SOURCE_DIR"] = SOURCE_DIR
    import harness
    importlib.reload(harness)  # daemon_bench imported it before the binaries were named
    import slurm_cluster
    return harness, slurm_cluster


def build_stamp(directory):
    source = os.path.join(directory, "stamp.c")
    program = os.path.join(directory, "stamp")
    with open(source, "w") as f:
        f.write(STAMP_C)
    subprocess.run(["cc", "-O2", "-static", "-o", program, source], check=True)
    os.chmod(directory, 0o755)
    return program


def latency_ms(seconds):
    ms = [s * 1000 for s in seconds]
    if not ms:
        return {"n": 0}
    return {"n": len(ms), **{f"p{p}_ms": round(percentile(ms, p), 1) for p in (50, 95, 99)},
            "max_ms": round(max(ms), 1)}


def read_stamps(path):
    """{job id: (first instruction, last instruction)} from the stamp program's lines."""
    stamps = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                job, _, start, end = line.split()
                stamps[job] = (float(start), float(end))
    return stamps


def shares(count, submitters):
    """How many of count jobs each submitter submits."""
    return [count // submitters + (1 if i < count % submitters else 0) for i in range(submitters)]


def submit_all(submit_one, count, submitters):
    """count submissions from `submitters` threads, each one after another; submit_one() returns the
    job id. Returns ({id: (before, after)}, failures)."""
    submits, failures, lock = {}, [], threading.Lock()

    def some(n):
        for _ in range(n):
            before = time.time()
            try:
                job = submit_one()
            except (RuntimeError, ValueError) as error:
                with lock:
                    failures.append(str(error)[:300])
                continue
            after = time.time()
            with lock:
                submits[job] = (before, after)

    threads = [threading.Thread(target=some, args=(n,)) for n in shares(count, submitters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return submits, failures


def run_command(argv, env, cwd):
    """Runs a submit command; returns what it printed (the job id)."""
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]


def figures(count, submits, stamps, all_done):
    """The figures of one part: submits {id: (before, after)}, stamps {id: (start, end)}; all_done:
    when the scheduler said every job had ended."""
    first_submit = min(before for before, _ in submits.values())
    last_submit = max(after for _, after in submits.values())
    ran = [job for job in submits if job in stamps]
    first_job = min(ran, key=lambda job: submits[job][0], default=None)
    last_end = max((stamps[job][1] for job in ran), default=first_submit)
    return {
        "jobs": count, "ran": len(ran),
        "seconds": round(last_end - first_submit, 2),
        "jobs_per_s": round(count / (last_end - first_submit), 1) if ran else 0.0,
        "submits_per_s": round(count / (last_submit - first_submit), 1),
        "all_done_seconds": round(all_done - first_submit, 2),
        "dispatch": latency_ms([stamps[job][0] - submits[job][0] for job in ran]),
        # The first job meets an idle scheduler: its latency has no queue in it.
        "first_job_dispatch_ms": round((stamps[first_job][0] - submits[first_job][0]) * 1000, 1) if ran else None,
        "submit_command": latency_ms([after - before for before, after in submits.values()]),
    }


def count_states(states):
    counts = {}
    for state in states:
        counts[state] = counts.get(state, 0) + 1
    return counts


# --- the parts --------------------------------------------------------------------------------------


def run_local(harness, stamp, count, submitters):
    with harness.Daemon(sim=SIM) as daemon:
        stamp_file = daemon.path("stamps")
        argv, env = daemon.command(["submit", "-g", "1", "--", stamp, stamp_file, "0"])
        load_before = load_average()
        submits, failures = submit_all(lambda: run_command(argv, env, daemon.work), count, submitters)
        jobs = daemon.finish(*[int(job) for job in submits], timeout=600)
        result = figures(count, submits, read_stamps(stamp_file), time.time())
        result.update(states=count_states(job["state"] for job in jobs), submit_failures=failures[:5],
                      load_before=load_before, load_after=load_average())
    return result


def slurm_ended(slurm, jobs):
    """{job id: JobState} of the jobs that Slurm's job completion log has."""
    states = {}
    path = slurm.path("log", "jobcomp.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                fields = dict(word.partition("=")[::2] for word in line.split())
                if fields.get("JobId") in jobs:
                    states[fields["JobId"]] = fields.get("JobState", "?")
    return states


def wait_slurm_jobs(slurm, jobs, timeout=600):
    """Waits until every job is in Slurm's completion log (polled every 0.2 s); returns their states."""
    jobs = set(jobs)
    deadline = time.monotonic() + timeout
    while True:
        states = slurm_ended(slurm, jobs)
        if len(states) == len(jobs) or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def slurm_allocated(slurm):
    """{job id: when slurmctld allocated its node} from its log (local time, milliseconds): the
    main scheduler says "sched: Allocate JobId=N", the backfill scheduler "Started JobId=N"."""
    allocated = {}
    with open(slurm.path("log", "slurmctld.log")) as f:
        for line in f:
            found = re.match(r"\[([0-9T:.-]+)\] .*(?:sched: Allocate|Started) JobId=(\d+)", line)
            if found and found[2] not in allocated:
                allocated[found[2]] = datetime.datetime.fromisoformat(found[1]).timestamp()
    return allocated


def run_slurm_direct(slurm, stamp, count, submitters):
    work = tempfile.mkdtemp(prefix="direct-", dir=slurm.path("jobs"))
    stamp_file = os.path.join(work, "stamps")
    script = os.path.join(work, "job.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\nexec {stamp} {stamp_file} 0 SLURM_JOB_ID CUDA_VISIBLE_DEVICES\n")
    argv = ["sbatch", "--parsable", "--gres=gpu:1", "-n1", f"--chdir={work}",
            f"--output={work}/slurm-%j.out", script]
    env = slurm.env()
    load_before = load_average()
    submits, failures = submit_all(lambda: run_command(argv, env, work), count, submitters)
    states = wait_slurm_jobs(slurm, submits)
    stamps = read_stamps(stamp_file)
    result = figures(count, submits, stamps, time.time())
    # Where Slurm's dispatch latency goes: the scheduler's part, then the node's (slurmd starts a
    # slurmstepd, which starts the batch script, which execs the stamp program).
    allocated = slurm_allocated(slurm)
    known = [job for job in submits if job in allocated and job in stamps]
    result["dispatch, split"] = {
        "submit -> allocated (slurmctld)": latency_ms([allocated[job] - submits[job][0] for job in known]),
        "allocated -> first instruction (slurmd, slurmstepd, script)": latency_ms(
            [stamps[job][0] - allocated[job] for job in known])}
    result.update(states=count_states(states.values()), submit_failures=failures[:5], load_before=load_before,
                  load_after=load_average())
    return result


# The batch script of the packed part. Each submitter appends "BEFORE ID AFTER" per submission
# ($EPOCHREALTIME: the shell's clock, read without a process); the marks are the allocation's steps.
PACKED_SCRIPT = r"""#!/bin/bash
mark() { printf '%s %s\n' "$1" "$EPOCHREALTIME" >> {work}/marks; }
mark script_start
cd {work}
gpupool slurm start > start.out || exit 1
mark daemon_started
submitter() {
  exec 3>> "$2"
  for ((i = 0; i < $1; i++)); do
    before=$EPOCHREALTIME
    id=$(gpupool submit -g 1 -- {stamp} {work}/stamps 0)
    printf '%s %s %s\n' "$before" "$id" "$EPOCHREALTIME" >&3
  done
}
{submitters}
wait
mark submitted
gpupool wait --all > /dev/null
mark drained
gpupool jobs --all --json > jobs.json
gpupool slurm stop > /dev/null
mark stopped
"""


def run_packed(harness, slurm, stamp, count, submitters):
    work = tempfile.mkdtemp(prefix="packed-", dir=slurm.path("jobs"))
    config = os.path.join(work, "gpupool.toml")
    with open(config, "w") as f:
        f.write(harness.DAEMON_CONFIG)
    lines = "\n".join(f"submitter {n} {work}/submits.{i} &"
                      for i, n in enumerate(shares(count, submitters)))
    script = os.path.join(work, "packed.sh")
    with open(script, "w") as f:
        f.write(PACKED_SCRIPT.replace("{work}", work).replace("{stamp}", stamp).replace("{submitters}", lines))
    env = slurm.env(GPUPOOL_SIM=SIM, GPUPOOL_CONFIG=config)
    env["PATH"] = os.path.abspath(os.path.dirname(harness.GPUPOOL)) + ":" + env["PATH"]
    output = os.path.join(work, "packed.out")
    load_before = load_average()
    sbatch_time = time.time()
    job = run_command(["sbatch", "--parsable", f"--gres=gpu:{GPUS}", "-n1", f"--chdir={work}", f"--output={output}",
                       script], env, work)
    sbatch_seconds = time.time() - sbatch_time
    fields = slurm.wait_job(job, timeout=600)
    allocation_over = time.time()
    load_after = load_average()
    shutil.rmtree(f"/tmp/gpupool-{job}", ignore_errors=True)  # the job's private directory

    text = open(output).read() if os.path.exists(output) else ""
    marks = {}
    if os.path.exists(os.path.join(work, "marks")):
        for line in open(os.path.join(work, "marks")):
            name, at = line.split()
            marks[name] = float(at)
    submits, failures = {}, []
    for i in range(submitters):
        path = os.path.join(work, f"submits.{i}")
        for line in open(path) if os.path.exists(path) else []:
            words = line.split()
            if len(words) == 3:
                submits[words[1]] = (float(words[0]), float(words[2]))
            else:
                failures.append(line.strip())
    if fields.get("JobState") != "COMPLETED" or "drained" not in marks or not submits:
        raise RuntimeError(f"the packed allocation {job} ended {fields.get('JobState')}: {text[-2000:]}\n"
                           f"{slurm.logs()}")
    stamps = read_stamps(os.path.join(work, "stamps"))
    result = figures(count, submits, stamps, marks["drained"])
    jobs_json = os.path.join(work, "jobs.json")
    states = count_states(j["state"] for j in (json.load(open(jobs_json)) if os.path.exists(jobs_json) else []))
    first_start = min(start for start, _ in stamps.values())
    last_end = max(end for _, end in stamps.values())
    result.update(states=states, submit_failures=failures[:5], load_before=load_before, load_after=load_after)
    result["from the sbatch"] = {
        "sbatch_command_ms": round(sbatch_seconds * 1000, 1),
        "allocation_start_ms": round((marks["script_start"] - sbatch_time) * 1000, 1),
        "gpupool_slurm_start_ms": round((marks["daemon_started"] - marks["script_start"]) * 1000, 1),
        "first_gpupool_submit_after_sbatch_ms": round((min(b for b, _ in submits.values()) - sbatch_time) * 1000, 1),
        "first_job_start_after_sbatch_ms": round((first_start - sbatch_time) * 1000, 1),
        "seconds": round(last_end - sbatch_time, 2),
        "jobs_per_s": round(count / (last_end - sbatch_time), 1),
        "drained_seconds": round(marks["drained"] - sbatch_time, 2),
        "gpupool_slurm_stop_ms": round((marks["stopped"] - marks["drained"]) * 1000, 1) if "stopped" in marks else None,
        "allocation_ended_seconds": round(allocation_over - sbatch_time, 2),
        "job_state": fields.get("JobState"),
    }
    return result


# --- the report ---------------------------------------------------------------------------------------


def dispatch_text(d):
    return f"{d['p50_ms']} / {d['p95_ms']} / {d['p99_ms']}" if d.get("n") else "n/a"


def load_text(r):
    return f"{r['load_before'][0]} → {r['load_after'][0]}"


def print_table(results, submitters):
    names = {"local": "local gpupoold",
             "slurm": "Slurm, tuned (batch_sched_delay=0, no-op Epilog)",
             "stock": "Slurm, stock scheduling pace",
             "packed": "packed: gpupoold in one `--gres=gpu:8` allocation, from the first `gpupool submit`"}
    print(f"| {submitters} submitter{'s' if submitters > 1 else ''}, 1-GPU jobs | jobs | jobs/s | "
          "first submit → last job's end, s | → scheduler says all done, s | dispatch p50 / p95 / p99, ms | "
          "first job's dispatch, ms | submit command p50, ms | jobs done | load (1 min) before → after |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for part in ("local", "slurm", "packed", "stock"):
        r = results.get(part)
        if not r:
            continue
        done = r["states"].get("done", r["states"].get("COMPLETED", 0))
        print(f"| {names[part]} | {r['jobs']} | **{r['jobs_per_s']}** | {r['seconds']} | {r['all_done_seconds']} | "
              f"{dispatch_text(r['dispatch'])} | {r['first_job_dispatch_ms']} | {r['submit_command']['p50_ms']} | "
              f"{done} | {load_text(r)} |")
        if part == "packed":
            s = r["from the sbatch"]
            print(f"| packed, from the sbatch (allocation starts in {s['allocation_start_ms']} ms, "
                  f"`gpupool slurm start` takes {s['gpupool_slurm_start_ms']} ms) | {r['jobs']} | "
                  f"**{s['jobs_per_s']}** | {s['seconds']} | {s['drained_seconds']} (`gpupool wait --all`); "
                  f"allocation over at {s['allocation_ended_seconds']} | | "
                  f"{s['first_job_start_after_sbatch_ms']} (sbatch → first job) | "
                  f"sbatch {s['sbatch_command_ms']} | | |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", help="directory holding gpupool and gpupoold")
    parser.add_argument("output", help="JSON file to write")
    parser.add_argument("--jobs", type=int, default=500, help="jobs of the local, slurm and packed parts")
    parser.add_argument("--stock-jobs", type=int, default=100, help="jobs of Slurm at its stock pace")
    parser.add_argument("--submitters", type=int, default=1, help="parallel submitters, in every part")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=PARTS)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("slurm_compare: run as root (the throwaway Slurm's daemons run as root)")
    for program in ("gpupool", "gpupoold"):
        if not os.access(os.path.join(args.bin_dir, program), os.X_OK):
            sys.exit(f"slurm_compare: {os.path.join(args.bin_dir, program)} is not an executable")
    harness, slurm_cluster = import_e2e(args.bin_dir)
    work = tempfile.mkdtemp(prefix="slurm-compare-")
    stamp = build_stamp(work)
    results = {"meta": {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": os.uname().nodename,
        "kernel": os.uname().release, "cpus": os.cpu_count(), "simulated_machine": SIM,
        "bin_dir": os.path.abspath(args.bin_dir), "submitters": args.submitters, "load_before": load_average(),
    }}
    began = time.monotonic()

    def part(name, run):
        print(f"slurm_compare: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        results[name] = run()
        results["meta"][f"{name}_seconds"] = round(time.monotonic() - started, 1)

    try:
        if "local" in args.only:
            part("local", lambda: run_local(harness, stamp, args.jobs, args.submitters))
        if "slurm" in args.only or "packed" in args.only:
            with slurm_cluster.SlurmCluster(sim=SIM, cpus=64, fast=True) as slurm:
                results["meta"]["slurm"] = slurm.run("sinfo", "--version").stdout.strip()
                if "slurm" in args.only:
                    part("slurm", lambda: run_slurm_direct(slurm, stamp, args.jobs, args.submitters))
                if "packed" in args.only:
                    part("packed", lambda: run_packed(harness, slurm, stamp, args.jobs, args.submitters))
        if "stock" in args.only:
            with slurm_cluster.SlurmCluster(sim=SIM, cpus=64, fast=False) as slurm:
                part("stock", lambda: run_slurm_direct(slurm, stamp, args.stock_jobs, args.submitters))
    finally:
        results["meta"]["load_after"] = load_average()
        results["meta"]["seconds"] = round(time.monotonic() - began, 1)
        with open(args.output, "w") as f:
            json.dump(results, f, indent=2)
        shutil.rmtree(work, ignore_errors=True)
    print_table(results, args.submitters)
    meta = results["meta"]
    print(f"\n{meta['cpus']} CPUs; load average before {meta['load_before']}, after {meta['load_after']}; "
          f"{meta['seconds']} s in all; {meta.get('slurm', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
