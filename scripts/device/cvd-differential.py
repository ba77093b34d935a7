#!/usr/bin/env python3
"""Differential test of the CUDA_VISIBLE_DEVICES model against the real CUDA driver.

Usage: cvd-differential.py BIN_DIR CASES.jsonl OBSERVED.jsonl
For every case ({"value", "order"}, null = unset) it asks the driver (gpupool-cuda-probe, one child
process per case, since the driver reads the variables once) and the model (`gpupool resolve
--json`), compares the outcome (CUDA status and the visible GPUs' UUIDs in CUDA order), writes each
driver answer to OBSERVED.jsonl (replayed by the unit tests), prints every disagreement and the
agreement rate, and exits 1 on any disagreement. With --time-limit SECONDS, cases not yet started
by then are left out (the corpus's hand-picked cases come first) and counted as not run.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("bin_dir")
parser.add_argument("cases")
parser.add_argument("observed")
parser.add_argument("--time-limit", type=float, help="seconds; later cases are not run")
args = parser.parse_args()
bin_dir = args.bin_dir
cases = [json.loads(line) for line in open(args.cases) if line.strip()]
deadline = time.monotonic() + args.time_limit if args.time_limit else None


def environment(case):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    if case["value"] is not None:
        env["CUDA_VISIBLE_DEVICES"] = case["value"]
    if case["order"] is not None:
        env["CUDA_DEVICE_ORDER"] = case["order"]
    return env


def ask_driver(case):
    probe = os.path.join(bin_dir, "..", "lib", "gpupool", "gpupool-cuda-probe")
    out = subprocess.run([probe], env=environment(case), capture_output=True, text=True).stdout
    answer = json.loads(out)
    return answer.get("init"), [d["uuid"] for d in answer.get("devices", [])]


def ask_model(case):
    env = environment(case)
    args = [os.path.join(bin_dir, "gpupool"), "resolve", "--json"]
    if case["value"] is not None:
        args += ["--", case["value"]]
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    answer = json.loads(proc.stdout)
    uuids = [d["uuid"] for d in answer["devices"]]
    if answer["error"]:
        status = answer["error"].split(":")[0]
    else:
        status = "CUDA_SUCCESS" if uuids else "CUDA_ERROR_NO_DEVICE"
    return status, uuids


def check(case):
    if deadline and time.monotonic() > deadline:
        return case, None, None
    return case, ask_driver(case), ask_model(case)


agree = 0
not_run = 0
disagreements = []
with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool, \
        open(args.observed, "w") as observed:
    for case, driver, model in pool.map(check, cases):
        if driver is None:
            not_run += 1
            continue
        observed.write(json.dumps({"value": case["value"], "order": case["order"],
                                   "init": driver[0], "uuids": driver[1]}) + "\n")
        if driver == model:
            agree += 1
        else:
            disagreements.append((case, driver, model))
for case, driver, model in disagreements:
    print(f"DIFFER value={case['value']!r} order={case['order']!r}: driver={driver} model={model}")
run = len(cases) - not_run
print(f"{agree}/{run} cases agree ({100.0 * agree / max(1, run):.2f} %), {len(disagreements)} disagree"
      + (f", {not_run} not run (time limit {args.time_limit:g} s)" if not_run else ""))
sys.exit(1 if disagreements else 0)
