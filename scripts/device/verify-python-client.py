#!/usr/bin/env python3
"""The Python client on a real GPU: gpupool.acquire() before torch, torch sees exactly the leased GPU.

Usage: verify-python-client.py BIN_DIR OUT_DIR
  1. `gpupool.acquire(1)`, then `import torch`: one device, its UUID the lease's;
  2. after `torch.cuda.init()`, acquire is refused (torch's own flag);
  3. after `torch.cuda.is_available()` (the driver initialised, torch's flag still unset), refused too;
  4. the leases are gone afterwards.
Prints PASS/FAIL per check, writes OUT_DIR/gpupoold.log; exits 1 on any failure.
"""
import os
import subprocess
import sys
import tempfile
import time

bin_dir, out_dir = sys.argv[1], sys.argv[2]
root = tempfile.mkdtemp(prefix="gpupool-python-verify-")
python_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")
env = {k: v for k, v in os.environ.items() if k not in ("GPUPOOL_SIM", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
env.update(GPUPOOL_RUNTIME_DIR=os.path.join(root, "run"), GPUPOOL_STATE_DIR=os.path.join(root, "state"),
           GPUPOOL_CONFIG=os.path.join(root, "gpupool.toml"), PYTHONPATH=os.path.abspath(python_dir))
with open(env["GPUPOOL_CONFIG"], "w") as f:
    f.write("[daemon]\nsample_interval_s = 1.0\n")
failures = []
# A staged build may need LD_LIBRARY_PATH for its own libraries; torch must not get them.
PLAIN = ["env", "-u", "LD_LIBRARY_PATH", "python3", "-c"]
SEES = """
import gpupool
lease = gpupool.acquire(1)
import torch
n = torch.cuda.device_count()
uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
print("lease", lease.id, lease.gpus, lease.uuids, "| torch sees", n, "device(s):", uuid)
raise SystemExit(0 if n == 1 and uuid == lease.uuids[0] else 3)
"""
REFUSED = """
import gpupool, torch
{touch}
try:
    gpupool.acquire(1)
except gpupool.Error as e:
    print("refused:", e)
    raise SystemExit(0)
print("not refused")
raise SystemExit(3)
"""


def check(name, proc):
    ok = proc.returncode == 0
    print(f"{'PASS' if ok else 'FAIL'} {name}: {(proc.stdout + proc.stderr).strip()}", flush=True)
    if not ok:
        failures.append(name)


def python(code):
    return subprocess.run([*PLAIN, code], env=env, capture_output=True, text=True, timeout=180)


log = open(os.path.join(out_dir, "gpupoold.log"), "a")
daemon = subprocess.Popen([os.path.join(bin_dir, "gpupoold"), "--http", "off"], env=env, stdout=log, stderr=log)
try:
    for _ in range(200):
        if subprocess.run([os.path.join(bin_dir, "gpupool"), "jobs"], env=env, capture_output=True).returncode == 0:
            break
        time.sleep(0.05)
    check("acquire before torch: torch sees exactly the leased GPU", python(SEES))
    check("acquire after torch.cuda.init() is refused", python(REFUSED.format(touch="torch.cuda.init()")))
    check("acquire after torch.cuda.is_available() is refused",
          python(REFUSED.format(touch="print('is_available', torch.cuda.is_available(), "
                                      "'torch initialised', torch.cuda.is_initialized())")))
    leases = subprocess.run([os.path.join(bin_dir, "gpupool"), "leases"], env=env, capture_output=True, text=True)
    gone = subprocess.CompletedProcess([], 0 if len(leases.stdout.strip().splitlines()) <= 1 else 1, leases.stdout, "")
    check("no lease left behind", gone)
finally:
    daemon.terminate()
    daemon.wait()
print("FAILED: " + ", ".join(failures) if failures else "ALL PASS")
sys.exit(1 if failures else 0)
