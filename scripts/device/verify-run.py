#!/usr/bin/env python3
"""gpupool run / launch on a real GPU, with torch: what the leases issue asks to see on the GPU machine.

Usage: verify-run.py BIN_DIR
  1. `gpupool run -g 1` — torch sees exactly the leased GPU (UUIDs compared);
  2. two concurrent exclusive runs — the second starts only after the first ended;
  3. two shared runs (--mem 20G) — they hold the GPU at the same time;
  4. `gpupool launch -g 1 --per-gpu 2` — a torch.distributed all-reduce over gloo, sum checked.
Prints each command and its output, then PASS/FAIL per check; exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile
import time

bin_dir = sys.argv[1]
gpupool = os.path.join(bin_dir, "gpupool")
env = dict(os.environ, GPUPOOL_RUNTIME_DIR=os.path.join(tempfile.mkdtemp(), "run"), PYTHONUNBUFFERED="1")
for key in ("GPUPOOL_SIM", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
    env.pop(key, None)
failures = []


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        failures.append(name)


def show(args, proc):
    print("$ gpupool " + " ".join(args[1:]))
    print(proc.stdout + proc.stderr, flush=True)


SEES = ("import os, torch; n = torch.cuda.device_count(); u = 'GPU-' + str(torch.cuda.get_device_properties(0).uuid); "
        "print('torch sees', n, 'GPU(s):', u); print('leased:', os.environ['GPUPOOL_GPU_UUIDS']); "
        "print('CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES']); "
        "raise SystemExit(0 if n == 1 and u == os.environ['GPUPOOL_GPU_UUIDS'] else 3)")
args = [gpupool, "run", "-g", "1", "--", "python3", "-c", SEES]
proc = subprocess.run(args, env=env, capture_output=True, text=True)
show(args, proc)
check("torch sees exactly the leased GPU", proc.returncode == 0)

HOLD = ("import sys, time, torch; x = torch.ones(256, 1024, 1024, device='cuda'); "
        "print(sys.argv[1], 'start', time.time(), flush=True); time.sleep(float(sys.argv[2])); "
        "print(sys.argv[1], 'end', time.time(), flush=True)")


def times(output, name):
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == name:
            found[parts[1]] = float(parts[2])
    return found


first = subprocess.Popen([gpupool, "run", "--name", "first", "--", "python3", "-c", HOLD, "first", "4"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
time.sleep(2)
args = [gpupool, "run", "--name", "second", "--", "python3", "-c", HOLD, "second", "0"]
second = subprocess.run(args, env=env, capture_output=True, text=True)
out1, err1 = first.communicate()
show(["gpupool", "run", "--name", "first", "--", "python3", "-c", "HOLD", "first", "4"],
     subprocess.CompletedProcess([], first.returncode, out1, err1))
show(args, second)
t1, t2 = times(out1, "first"), times(second.stdout, "second")
check("second exclusive run waited for the first", "end" in t1 and "start" in t2 and t2["start"] >= t1["end"],
      f"(first ended {t1.get('end')}, second started {t2.get('start')}; waiting line shown: "
      f"{'waiting for 1 GPU' in second.stderr})")

shared = [subprocess.Popen([gpupool, "run", "--mem", "20G", "--name", f"shared{i}", "--", "python3", "-c", HOLD,
                            f"shared{i}", "3"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for i in range(2)]
results = [p.communicate() for p in shared]
for i, (out, err) in enumerate(results):
    show(["gpupool", "run", "--mem", "20G", "--", f"shared{i}"], subprocess.CompletedProcess([], 0, out, err))
spans = [times(out, f"shared{i}") for i, (out, _) in enumerate(results)]
overlap = all("start" in s and "end" in s for s in spans) and \
    max(s["start"] for s in spans) < min(s["end"] for s in spans)
check("two shared runs held the GPU together", overlap, str(spans))

ALLREDUCE = ("import os, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
             "r = dist.get_rank(); t = torch.tensor([float(r + 1)]); dist.all_reduce(t); "
             "w = dist.get_world_size(); ok = t.item() == w * (w + 1) / 2; "
             "print('rank', r, 'of', w, 'sum', t.item(), 'ok' if ok else 'WRONG', 'cuda devices', torch.cuda.device_count()); "
             "dist.destroy_process_group(); raise SystemExit(0 if ok else 4)")
args = [gpupool, "launch", "-g", "1", "--per-gpu", "2", "--", "python3", "-c", ALLREDUCE]
proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
show(args, proc)
check("launch -g 1 --per-gpu 2 all-reduce (gloo)", proc.returncode == 0 and proc.stdout.count(" ok ") == 2)

leases = subprocess.run([gpupool, "leases", "--json"], env=env, capture_output=True, text=True).stdout.strip()
check("no lease left", leases == "[]", leases)
print(f"{len(failures)} failed: {failures}")
sys.exit(1 if failures else 0)
