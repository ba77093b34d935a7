#!/usr/bin/env python3
"""Generates a job trace for `gpupool sim replay` (standard library only, deterministic by seed).

The workload of a shared 8-GPU box: heavy-tailed durations (log-normal, median 15 min, capped
at 24 h), mostly 1-GPU jobs with some 2/4/8-GPU ones, a third of the 1-GPU jobs sharing a GPU
by memory, several users with unequal appetites, most jobs declaring a generous time limit, and
Poisson arrivals whose offered load is --load times what --gpus GPUs can serve (1.3: 30 % overload).

  scripts/gen-trace.py --jobs 2000 --seed 1 > tests/data/traces/h200-overload-1.csv
"""
import argparse
import math
import random
import sys

GPU_MEMORY_MIB = 143771  # an H200: what a slice is a fraction of when computing the load
SHAPES = [(1, 0.75), (2, 0.12), (4, 0.08), (8, 0.05)]  # GPUs per job, share of jobs
SLICES_MIB = [8192, 16384, 24576, 32768, 49152]
USERS = [("alice", 0.30), ("bob", 0.25), ("carol", 0.20), ("dave", 0.15), ("erin", 0.10)]
MEDIAN_S, SIGMA, MIN_S, MAX_S = 900.0, 1.4, 30.0, 24 * 3600.0


def pick(rng, weighted):
    return rng.choices([value for value, _ in weighted], [weight for _, weight in weighted])[0]


def make_job(rng):
    gpus = pick(rng, SHAPES)
    duration = min(MAX_S, max(MIN_S, rng.lognormvariate(math.log(MEDIAN_S), SIGMA)))
    mem = rng.choice(SLICES_MIB) if gpus == 1 and rng.random() < 1 / 3 else None
    # Users overestimate: 1.2x to 4x, rounded up to a quarter of an hour; a quarter declare none.
    limit = None
    if rng.random() < 0.75:
        limit = math.ceil(duration * rng.uniform(1.2, 4.0) / 900) * 900
    priority = 1 if rng.random() < 0.05 else None
    return {"duration": round(duration), "gpus": gpus, "mem": mem, "user": pick(rng, USERS),
            "priority": priority, "limit": limit}


def gpu_seconds(job):
    share = job["mem"] / GPU_MEMORY_MIB if job["mem"] else job["gpus"]
    return share * job["duration"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the machine the load is for")
    parser.add_argument("--load", type=float, default=1.3, help="offered load / capacity")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    jobs = [make_job(rng) for _ in range(args.jobs)]
    # Arrival rate so that the offered GPU-seconds per second are load x GPUs.
    mean_work = sum(gpu_seconds(j) for j in jobs) / len(jobs)
    rate = args.load * args.gpus / mean_work
    out = sys.stdout
    out.write("id,submit_s,duration_s,gpus,gpu_mem_mib,user,priority,time_limit_s\n")
    now = 0.0
    for number, job in enumerate(jobs, 1):
        out.write(f"j{number},{round(now)},{job['duration']},{job['gpus']},{job['mem'] or ''},"
                  f"{job['user']},{job['priority'] or ''},{job['limit'] or ''}\n")
        now += rng.expovariate(rate)


if __name__ == "__main__":
    main()
