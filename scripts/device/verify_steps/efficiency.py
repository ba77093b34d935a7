"""The `efficiency` step of scripts/device/verify: each job's SM-active GPU time, energy and peak
memory (docs/monitoring.md, "Efficiency") against what ran, and the dcgm-exporter job-mapping
file the daemon keeps for the GPU.

On one whole GPU, one after the other for about 15 s each: a bf16 matrix-product loop and a
process holding 1 GiB doing nothing. nvidia-smi's power draw is read midway for comparison.
"""
import json
import os
import subprocess
import tempfile
import time

from harness import read_if_there
from verify_steps import PLAIN
from verify_steps.slices import BUSY, IDLE


def step_efficiency(s):
    map_dir = tempfile.mkdtemp(prefix="gpupool-job-map-")
    config = f'[daemon]\nsample_interval_s = 1.0\n[monitor]\njob_mapping_dir = "{map_dir}"\n'
    figures = {}
    with s.daemon(config) as d:
        for name, script in (("matmul", BUSY), ("idle", IDLE)):
            go = d.path(f"go-{name}")
            job = d.submit("--name", name, "--", *PLAIN, "python3", "-c", script, go)
            gpu = d.wait_state(job, "running", timeout=60)["gpus"][0]
            time.sleep(8)
            mapped = read_if_there(os.path.join(map_dir, str(gpu)))
            smi = subprocess.run(["nvidia-smi", "-i", str(gpu), "--query-gpu=power.draw", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True)
            time.sleep(7)
            open(go, "w").close()
            d.finish(job, timeout=60)
            ended = time.monotonic()
            # The files follow the queue as the monitor publishes it, just after the job's end.
            deadline = ended + 10
            while read_if_there(os.path.join(map_dir, str(gpu))) != "" and time.monotonic() < deadline:
                time.sleep(0.05)
            usage = d.show(job).get("usage") or {}
            figures[name] = {"job": job, "gpu": gpu, "usage": usage, "mapped": mapped,
                             "smi_power_w": smi.stdout.strip(),
                             "mapped_after": read_if_there(os.path.join(map_dir, str(gpu))),
                             "emptied_after_s": round(time.monotonic() - ended, 3)}
            print(f"{name}: job {job} on GPU {gpu}: {json.dumps(usage)}; nvidia-smi power.draw {smi.stdout.strip()} W",
                  flush=True)
        report = d.gp("report", "--efficiency").stdout
        print("$ gpupool report --efficiency\n" + report, flush=True)
    with open(os.path.join(s.args.out, "efficiency.json"), "w") as f:
        json.dump(figures, f, indent=1)

    m, i = figures["matmul"]["usage"], figures["idle"]["usage"]

    def mean_power(usage):
        held_s = (usage.get("gpu_hours") or 0) * 3600
        return (usage.get("energy_kwh") or 0) * 3.6e6 / held_s if held_s else 0

    s.check("matmul: SMs busy over half the GPU time held (CUDA's start included)",
            (m.get("sm_efficiency") or 0) > 0.5, f"sm_efficiency {m.get('sm_efficiency')}, "
            f"sm_active_gpu_hours {m.get('sm_active_gpu_hours')} of {m.get('gpu_hours')}")
    s.check("idle holder: SMs busy under 5 % of it", i.get("sm_efficiency") is not None and i["sm_efficiency"] < 0.05,
            f"sm_efficiency {i.get('sm_efficiency')}")
    s.check("energy: the matmul's mean power between 150 W and 1000 W and above the idle holder's",
            150 < mean_power(m) < 1000 and mean_power(m) > mean_power(i),
            f"matmul {mean_power(m):.0f} W (nvidia-smi midway {figures['matmul']['smi_power_w']} W), "
            f"idle {mean_power(i):.0f} W (nvidia-smi midway {figures['idle']['smi_power_w']} W)")
    s.check("peak memory: the idle holder's 1 GiB tensor and CUDA's context, under 4 GiB",
            1024 <= (i.get("peak_memory_mib") or 0) < 4096, f"idle {i.get('peak_memory_mib')} MiB, "
            f"matmul {m.get('peak_memory_mib')} MiB")
    s.check("job-mapping file: the job's id while it ran, empty within 10 s of its end",
            all(f["mapped"] == f"{f['job']}\n" and f["mapped_after"] == "" for f in figures.values()),
            "; ".join(f"{name}: {f['mapped']!r} then {f['mapped_after']!r} ({f['emptied_after_s']} s after the end)"
                      for name, f in figures.items()))
