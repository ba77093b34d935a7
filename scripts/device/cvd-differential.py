#!/usr/bin/env python3
"""Differential test of the CUDA_VISIBLE_DEVICES model against the real CUDA driver.

Usage: cvd-differential.py BIN_DIR CASES.jsonl OBSERVED.jsonl
For every case ({"value", "order"}, null = unset) it asks the driver (gpupool-cuda-probe, one child
process per case, since the driver reads the variables once) and the model (`gpupool resolve
--json`), compares the outcome (CUDA status and the visible GPUs' UUIDs in CUDA order), writes each
driver answer to OBSERVED.jsonl (replayed by the unit tests), prints every disagreement and the
agreement rate, and exits 1 on any disagreement.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

bin_dir, cases_path, observed_path = sys.argv[1:4]
cases = [json.loads(line) for line in open(cases_path) if line.strip()]


def environment(case):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    if case["value"] is not None:
        env["CUDA_VISIBLE_DEVICES"] = case["value"]
    if case["order"] is not None:
        env["CUDA_DEVICE_ORDER"] = case["order"]
    return env


def ask_driver(case):
    out = subprocess.run([os.path.join(bin_dir, "gpupool-cuda-probe")], env=environment(case),
                         capture_output=True, text=True).stdout
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
    return case, ask_driver(case), ask_model(case)


agree = 0
disagreements = []
with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as pool, \
        open(observed_path, "w") as observed:
    for case, driver, model in pool.map(check, cases):
        observed.write(json.dumps({"value": case["value"], "order": case["order"],
                                   "init": driver[0], "uuids": driver[1]}) + "\n")
        if driver == model:
            agree += 1
        else:
            disagreements.append((case, driver, model))
for case, driver, model in disagreements:
    print(f"DIFFER value={case['value']!r} order={case['order']!r}: driver={driver} model={model}")
print(f"{agree}/{len(cases)} cases agree ({100.0 * agree / max(1, len(cases)):.2f} %), "
      f"{len(disagreements)} disagree")
sys.exit(1 if disagreements else 0)
