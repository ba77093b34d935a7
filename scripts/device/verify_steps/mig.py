"""Step `mig`: MIG leasing against the real driver (docs/mig.md). What a GPU machine can show
depends on its MIG mode, which only an administrator changes (gpupool never does):

- MIG off (every GPU whole): NVML's process records name no GPU instance (`gpu_instance_id` is
  null for a process holding memory), `--mig` is refused in one line naming no MIG device, and a
  whole-GPU `gpupool run` still gets a GPU.
- MIG on for a GPU with instances: `gpupool run --mig any` runs torch on a MIG device, which is
  all torch sees (its memory, not the GPU's), and the device's lock is released after."""
import json
import subprocess
import sys
import time

from verify_steps import PLAIN

HOLD = ("import sys, time, torch; x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); "
        "print('holding', flush=True); time.sleep(float(sys.argv[1]))")
SEE = ("import json, torch; p = torch.cuda.get_device_properties(0); "
       "print(json.dumps({'count': torch.cuda.device_count(), 'memory_mib': p.total_memory >> 20}))")


def step_mig(s):
    listed = json.loads(s.cli("list", "--json").stdout)
    devices = [(gpu["index"], d) for gpu in listed for d in gpu["mig_devices"]]
    print(f"MIG mode: {[gpu['mig_enabled'] for gpu in listed]}; MIG devices: {len(devices)}", flush=True)
    if not devices:
        holder = subprocess.Popen([*PLAIN, sys.executable, "-c", HOLD, "60"], stdout=subprocess.PIPE, text=True)
        try:
            holder.stdout.readline()
            time.sleep(1)
            processes = [p for gpu in json.loads(s.cli("list", "--json").stdout) for p in gpu["processes"]]
            ours = [p for p in processes if p["pid"] == holder.pid]
            s.check("MIG off: a process's GPU instance is null", bool(ours) and ours[0]["gpu_instance_id"] is None,
                    json.dumps(ours))
        finally:
            holder.kill()
            holder.wait()
        refused = s.cli("run", "--mig", "any", "--", "true")
        lines = refused.stderr.strip().splitlines()
        s.check("MIG off: --mig is refused in one line", refused.returncode == 1 and len(lines) == 1 and
                "no allowed GPU has a MIG device" in lines[0], refused.stderr.strip())
        whole = s.cli("run", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
        s.check("MIG off: a whole GPU is still leased", whole.returncode == 0 and whole.stdout.startswith("GPU-"),
                whole.stdout.strip())
        return
    gpu, device = devices[0]
    ran = s.cli("run", "--mig", device["profile"], "--", *PLAIN, sys.executable, "-c", SEE, timeout=300)
    seen = json.loads(ran.stdout.strip().splitlines()[-1]) if ran.returncode == 0 else {}
    s.check("MIG on: torch sees one device of the MIG device's memory",
            seen.get("count") == 1 and abs(seen.get("memory_mib", 0) - device["memory_mib"]) < 1024,
            f"{ran.stderr.strip()} {seen} against {device['profile']} {device['memory_mib']} MiB on GPU {gpu}")
    s.check("MIG on: no lease is left", s.leases() == [], json.dumps(s.leases()))
