"""The `python-client` step of scripts/device/verify: gpupool.acquire() before torch, on a real GPU.

  1. `gpupool.acquire(1)`, then `import torch`: one device, its UUID the lease's;
  2. after `torch.cuda.init()`, acquire is refused (torch's own flag);
  3. after `torch.cuda.is_available()` (the driver initialised, torch's flag still unset), refused too;
  4. without a daemon, `gpupool.acquire(1, mem="20G")` (through `gpupool acquire`): torch sees the
     leased GPU, the lease names the Python process, and `gpupool doctor` does not take its 4 GiB
     for an outside process;
  5. no lease is left afterwards.
"""
import os
import subprocess

from verify_steps import PLAIN, SOURCE_DIR

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
ALONE = """
import json, os, subprocess, gpupool
lease = gpupool.acquire(1, mem="20G")
import torch
block = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
cli = os.environ["GPUPOOL_CLI"]
leases = json.loads(subprocess.run([cli, "leases", "--json"], capture_output=True, text=True, check=True).stdout)
doctor = json.loads(subprocess.run([cli, "doctor", "--json"], capture_output=True, text=True).stdout)
[outside] = [f for f in doctor["findings"] if f["check"] == "outside-processes"]
print("lease", lease.job, lease.uuids, "| torch on", uuid, "| leases", [(l["index"], l["pid"]) for l in leases],
      "| doctor outside-processes:", outside["status"], outside["summary"], outside.get("evidence"))
ok = uuid == lease.uuids[0] and [l["pid"] for l in leases] == [os.getpid()] and outside["status"] == "ok"
lease.release()
raise SystemExit(0 if ok else 3)
"""


def step_python_client(s):
    with s.daemon("[daemon]\nsample_interval_s = 1.0\n") as d:
        env = dict(d.env, PYTHONPATH=f"{SOURCE_DIR}/python")

        def check(name, code):
            proc = subprocess.run([*PLAIN, "python3", "-c", code], env=env, capture_output=True, text=True,
                                  timeout=180)
            s.check(name, proc.returncode == 0, (proc.stdout + proc.stderr).strip().replace("\n", "; "))

        check("acquire before torch: torch sees exactly the leased GPU", SEES)
        check("acquire after torch.cuda.init() is refused", REFUSED.format(touch="torch.cuda.init()"))
        check("acquire after torch.cuda.is_available() is refused",
              REFUSED.format(touch="print('is_available', torch.cuda.is_available(), "
                                   "'torch initialised', torch.cuda.is_initialized())"))
        s.check("no lease left behind", d.held_gpus() == [], str(d.held_gpus()))
    # Without a daemon: `gpupool acquire` leases for the Python process. It and the checks' own
    # gpupool calls need the staged build's libraries, which torch's process must not have.
    wrapper = os.path.join(s.args.out, "gpupool-cli")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nLD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')} exec {s.gpupool} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, PYTHONPATH=f"{SOURCE_DIR}/python", GPUPOOL_CLI=wrapper)
    proc = subprocess.run([*PLAIN, "python3", "-c", ALONE], env=env, capture_output=True, text=True, timeout=180)
    s.check("acquire without a daemon: torch on the lease, its holder this process, doctor sees no outsider",
            proc.returncode == 0, (proc.stdout + proc.stderr).strip().replace("\n", "; "))
    s.check("no lease left behind without a daemon", s.leases() == [], str(s.leases()))
