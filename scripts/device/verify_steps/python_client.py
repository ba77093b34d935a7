"""The `python-client` step of scripts/device/verify: gpupool.acquire() before torch, on a real GPU.

  1. `gpupool.acquire(1)`, then `import torch`: one device, its UUID the lease's;
  2. after `torch.cuda.init()`, acquire is refused (torch's own flag);
  3. after `torch.cuda.is_available()` (the driver initialised, torch's flag still unset), refused too;
  4. no lease is left afterwards.
"""
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
