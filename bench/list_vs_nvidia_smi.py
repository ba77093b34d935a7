#!/usr/bin/env python3
"""Times `gpupool list --json` against `nvidia-smi --query-gpu=<the same fields> --format=csv`.

Usage: bench/list_vs_nvidia_smi.py PATH/TO/gpupool [RUNS]
Runs the two commands alternately (so both see the same machine state), RUNS times each (default 50),
and prints the median and 95th percentile wall time of each, in milliseconds, as a table and as JSON.
"""
import json
import statistics
import subprocess
import sys
import time

gpupool = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 50
fields = ("index,uuid,pci.bus_id,name,memory.total,memory.used,memory.free,utilization.gpu,"
          "utilization.memory,temperature.gpu,power.draw,power.limit,persistence_mode,compute_mode,"
          "mig.mode.current,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total")
commands = {
    "gpupool list --json": [gpupool, "list", "--json"],
    "nvidia-smi --query-gpu": ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"],
}
times = {name: [] for name in commands}
for _ in range(3):  # warm-up: page cache, driver state
    for argv in commands.values():
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
for _ in range(runs):
    for name, argv in commands.items():
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        times[name].append((time.perf_counter() - start) * 1000.0)


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


summary = {name: {"runs": len(t), "median_ms": round(statistics.median(t), 2), "p95_ms": round(p95(t), 2)}
           for name, t in times.items()}
print(f"{'command':<26}{'runs':>6}{'median ms':>12}{'p95 ms':>10}")
for name, s in summary.items():
    print(f"{name:<26}{s['runs']:>6}{s['median_ms']:>12}{s['p95_ms']:>10}")
print(json.dumps(summary))
