#!/usr/bin/env python3
"""The same measurements as daemon_bench.py, made on a single-node Slurm, for comparison.

    bench/slurm_bench.py OUT.json [--partition p] [--jobs 2000] [--submitters 4]

Needs a running slurmctld and slurmd on this host whose partition has 8 GPUs as a GRES
(`Gres=gpu:8`) and at least 8 CPUs; docs/benchmarks.md shows the configuration used. Every job
asks for one GPU (`--gres=gpu:1`), as `gpupool submit` does by default. The partition is set
DOWN while the dispatch benchmark fills the queue, and UP again afterwards.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_bench import STAMP_C, load_average, summary_ms, wait_for_lines  # noqa: E402


def sbatch(*args):
    """Runs sbatch; returns (seconds until it printed the job id, the id)."""
    started = time.perf_counter()
    proc = subprocess.Popen(["sbatch", "--parsable", "--gres=gpu:1", "-n1", "-o", "/dev/null", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - started
    _, errors = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch exited {proc.returncode}: {errors.strip()}")
    return elapsed, int(line.split(";")[0])


def queue_length():
    return len(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout.split())


def wait_empty(timeout=1200):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if queue_length() == 0:
            return time.time()
        time.sleep(0.05)
    raise RuntimeError("Slurm jobs still queued or running")


def set_partition(partition, state):
    subprocess.run(["scontrol", "update", f"partition={partition}", f"state={state}"], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output")
    parser.add_argument("--partition", default="p")
    parser.add_argument("--submits", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--job-ms", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--submitters", type=int, default=4)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="slurm-bench-")
    stamp = os.path.join(work, "stamp")
    with open(stamp + ".c", "w") as f:
        f.write(STAMP_C)
    subprocess.run(["cc", "-O2", "-static", "-o", stamp, stamp + ".c"], check=True)
    version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip()
    results = {"meta": {"slurm": version, "load_before": load_average()}}
    os.chdir(work)

    wait_empty()
    results["sbatch --wrap true (process start to id)"] = summary_ms(
        [sbatch("--wrap", "true")[0] for _ in range(args.submits)])
    wait_empty()

    stamps = os.path.join(work, "idle")
    latencies = []
    for i in range(args.submits // 4):
        started = time.time()
        sbatch("--wrap", f"{stamp} {stamps} 0 SLURM_JOB_ID CUDA_VISIBLE_DEVICES")
        latencies.append(float(wait_for_lines(stamps, i + 1)[i].split()[2]) - started)
        wait_empty()
    results["idle machine: sbatch start -> job's first instruction"] = summary_ms(latencies)

    stamps = os.path.join(work, "busy")
    set_partition(args.partition, "DOWN")
    for _ in range(8 * args.rounds):
        sbatch("--wrap", f"{stamp} {stamps} {args.job_ms} SLURM_JOB_ID CUDA_VISIBLE_DEVICES")
    set_partition(args.partition, "UP")
    wait_empty()
    by_gpu = {}
    for line in wait_for_lines(stamps, 8 * args.rounds):
        _, gpu, start, end = line.split()
        by_gpu.setdefault(gpu, []).append((float(start), float(end)))
    gaps = []
    for runs in by_gpu.values():
        runs.sort()
        gaps += [b[0] - a[1] for a, b in zip(runs, runs[1:])]
    results[f"busy: 8 GPUs, {8 * args.rounds} jobs of {args.job_ms} ms: gap"] = summary_ms(gaps)

    failures = []

    def submit_some(n):
        for _ in range(n):
            try:
                sbatch("--wrap", "true")
            except RuntimeError as error:
                failures.append(str(error))

    shares = [args.jobs // args.submitters + (1 if i < args.jobs % args.submitters else 0)
              for i in range(args.submitters)]
    threads = [threading.Thread(target=submit_some, args=(n,)) for n in shares]
    first = time.time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    submitted = time.time()
    done = wait_empty()
    results["throughput"] = {"jobs": args.jobs, "submitters": args.submitters, "seconds": round(done - first, 2),
                             "jobs_per_s": round(args.jobs / (done - first), 1),
                             "submits_per_s": round(args.jobs / (submitted - first), 1),
                             "failures": failures[:5]}
    results["meta"]["load_after"] = load_average()
    with open(args.output, "w") as f:
        json.dump(results, f, indent=2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
