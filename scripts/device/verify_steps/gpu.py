"""The steps of scripts/device/verify that hold gpupool's readings against the driver's own tools:

  abi         our NVML declarations compiled against the toolkit's nvml.h
  list        `gpupool list/topo` against nvidia-smi (compare-nvidia-smi.py), torch holding memory
  cvd         the CUDA_VISIBLE_DEVICES model against the driver (cvd-differential.py)
  list-bench  `gpupool list --json` against `nvidia-smi --query-gpu` timing
  nvml-costs  what each NVML call costs (nvml-call-costs.py)
  doctor      `gpupool doctor` as is and under broken CUDA settings
"""
import glob
import json
import os
import subprocess
import sys
import time

from verify_steps import HERE, JOB, SOURCE_DIR


def run(argv, timeout, **options):
    """argv's CompletedProcess (text), its output shown in the step's details."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **options)
    print(f"$ {' '.join(argv)}  -> exit {proc.returncode}\n{proc.stdout}{proc.stderr}", flush=True)
    return proc


def last_line(proc):
    return ((proc.stdout + proc.stderr).strip().splitlines() or ["no output"])[-1]


def step_abi(s):
    headers = sorted(glob.glob("/usr/local/cuda*/**/include/nvml.h", recursive=True))
    if not headers:
        return s.result("FAIL", "abi", "no nvml.h under /usr/local/cuda*")
    program = os.path.join(s.args.root, "nvml_abi_check")
    built = run(["g++", "-std=c++20", "-Wall", f"-I{SOURCE_DIR}/src", f"-I{os.path.dirname(headers[0])}", "-o",
                 program, os.path.join(SOURCE_DIR, "tests", "device", "nvml_abi_check.cc")], 120)
    checked = run([program], 30) if built.returncode == 0 else built
    s.check("abi", checked.returncode == 0, f"against {headers[0]}: {last_line(checked)}")


def step_list(s):
    name = "1a list/topo vs nvidia-smi"
    holder_log = os.path.join(s.args.out, "list-holder.txt")
    with open(holder_log, "w") as log:
        holder = subprocess.Popen([*JOB, "hold", "2", "300"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 120
        while holder.poll() is None and time.monotonic() < deadline:
            with open(holder_log) as f:
                if "ready" in f.read():
                    break
            time.sleep(1)
        with open(holder_log) as f:
            held = f.read()
        if "ready" not in held:
            return s.result("FAIL", name, "the torch process holding memory did not start: "
                            + (held.strip().splitlines() or ["no output"])[-1])
        for argv in (["list"], ["topo"], ["list", "--json"]):
            s.cli(*argv)
        run(["nvidia-smi"], 60)
        # Clocks move too fast to compare field by field: shown beside `list --json`'s for a person.
        run(["nvidia-smi", "--query-gpu=index,clocks.sm,clocks.mem", "--format=csv"], 60)
        compared = run([sys.executable, os.path.join(HERE, "compare-nvidia-smi.py"), s.gpupool], 120)
    finally:
        holder.kill()
        holder.wait()
    figures = f"{last_line(compared)}, torch holding 2 GiB on each of {s.args.gpus} GPUs"
    failures = [line for line in compared.stdout.splitlines() if line.startswith("FAIL")][:3]
    s.check(name, compared.returncode == 0,
            figures if compared.returncode == 0 else f"{figures} (exit {compared.returncode}); {'; '.join(failures)}")


def step_cvd(s):
    name = "2 resolver vs driver"
    uuids = run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], 60).stdout.split()
    cases = os.path.join(s.args.root, "cases.jsonl")
    corpus = run([sys.executable, os.path.join(SOURCE_DIR, "scripts", "cvd-corpus.py"), *uuids, "--count",
                  str(s.args.cases), "--seed", os.environ.get("CVD_SEED", "2027"), "-o", cases], 120)
    if corpus.returncode != 0:
        return s.result("FAIL", name, f"the corpus: {last_line(corpus)}")
    for value in ("0,0", uuids[0][:12]):  # examples for a person to read: a repeat, a UUID prefix
        s.cli("resolve", "--driver", "--json", "--", value)
    differential = run([sys.executable, os.path.join(HERE, "cvd-differential.py"), s.args.bin, cases,
                        os.path.join(s.args.out, "cvd-driver.jsonl"), "--time-limit", str(s.args.limit)],
                       s.args.limit + 60)
    figures = f"{last_line(corpus)}; {last_line(differential)}"
    differ = [line for line in differential.stdout.splitlines() if line.startswith("DIFFER")][:3]
    s.check(name, differential.returncode == 0,
            figures if differential.returncode == 0 else f"{figures} (exit {differential.returncode}); "
            + "; ".join(differ))


def step_list_bench(s):
    timed = run([sys.executable, os.path.join(SOURCE_DIR, "bench", "list_vs_nvidia_smi.py"), s.gpupool, "50"], 110)
    s.check("list-bench", timed.returncode == 0, last_line(timed))


def step_nvml_costs(s):
    costs = run([sys.executable, os.path.join(HERE, "nvml-call-costs.py")], 110)
    s.check("nvml-costs", costs.returncode == 0, f"most expensive first: {(costs.stdout.splitlines() or [''])[0]}"
            if costs.returncode == 0 else last_line(costs))


def step_doctor(s):
    as_is = s.cli("doctor")
    s.result("PASS", "doctor", f"as is: exit {as_is.returncode}, {last_line(as_is)}")
    # Each setting breaks CUDA's view of this machine: doctor must say so in that check.
    for setting in ("CUDA_VISIBLE_DEVICES=0,0", f"CUDA_VISIBLE_DEVICES={s.args.gpus}", "CUDA_VISIBLE_DEVICES=GPU-",
                    "CUDA_DEVICE_ORDER=bogus"):
        key, value = setting.split("=")
        shown = s.cli("doctor", "--json", env=dict(os.environ, **{key: value}), quiet=True)
        findings = {f["check"]: f for f in json.loads(shown.stdout or "{}").get("findings", [])}
        finding = findings.get("cuda-visible-devices", {})
        s.check(f"doctor with {setting}", finding.get("status") in ("warning", "problem"),
                f"exit {shown.returncode}: {finding.get('status')} {finding.get('summary')}")
