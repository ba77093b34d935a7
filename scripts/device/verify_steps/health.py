"""The `health` step of scripts/device/verify: gpupoold's health series against nvidia-smi, and the
driver's XID events reaching the daemon.

A healthy GPU is not quarantined and shows the health series (ECC, row remap, clocks event
reasons, PCIe replays) with nvidia-smi's values. Then a program on GPU 0 stores through a bad
pointer: the driver reports an MMU fault (XID 31, a program's), which the daemon's XID watch must
receive, log and export as DCGM_FI_DEV_XID_ERRORS, without quarantining the GPU (a program's XID
says nothing about the hardware). No hardware XID can be raised on purpose. Last, the same fault as
a gpupool job: its start and failure are events (`gpupool events`, the on_event hook), and no
gpu_quarantined event comes.
"""
import json
import os
import re
import subprocess
import sys
import time

from verify_steps import PLAIN
from verify_steps.monitoring import Http
from verify_steps.mps import faulting_client

# nvidia-smi's names for what the daemon exports as the series beside them.
SMI_FIELDS = {
    "ecc.errors.corrected.volatile.total": "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "ecc.errors.uncorrected.volatile.total": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "ecc.errors.corrected.aggregate.total": "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "ecc.errors.uncorrected.aggregate.total": "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
}
HEALTH_SERIES = (*SMI_FIELDS.values(), "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                 "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_XID_ERRORS")


def gpu0(metrics, name):
    for labels, value in re.findall(rf'^{name}\{{([^}}]*)\}} (\S+)$', metrics, re.M):
        if re.search(r'(^|,)gpu="0"', labels):
            return float(value)
    return None


def smi_values():
    proc = subprocess.run(["nvidia-smi", "-i", "0", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True)
    print(f"$ nvidia-smi --query-gpu=... -> {proc.stdout.strip()} {proc.stderr.strip()}", flush=True)
    values = [v.strip() for v in proc.stdout.strip().split(",")]
    return dict(zip(SMI_FIELDS.values(), values)) if proc.returncode == 0 and len(values) == len(SMI_FIELDS) else {}


NVLINK_SERIES = ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")


def check_nvlink_errors(s, metrics):
    """The NVLink error series are there where nvidia-smi lists active NVLinks for GPU 0; without
    any, the driver may still answer (0) or not (absent): either is right."""
    proc = subprocess.run(["nvidia-smi", "nvlink", "-s", "-i", "0"], capture_output=True, text=True)
    links = re.findall(r"^\s*Link \d+: (?!<inactive>)", proc.stdout, re.M)  # active links
    print(f"$ nvidia-smi nvlink -s -i 0 -> exit {proc.returncode}, {len(links)} links\n{proc.stdout}{proc.stderr}",
          flush=True)
    errors = subprocess.run(["nvidia-smi", "nvlink", "-e", "-i", "0"], capture_output=True, text=True)
    print(f"$ nvidia-smi nvlink -e -i 0 -> exit {errors.returncode}\n{errors.stdout}{errors.stderr}", flush=True)
    ours = {name: gpu0(metrics, name) for name in NVLINK_SERIES}
    present = [value is not None for value in ours.values()]
    s.check("NVLink error series present where nvidia-smi lists active NVLinks",
            all(present) if links else all(present) or not any(present),
            f"{len(links)} active links; " + ", ".join(f"{name.removeprefix('DCGM_FI_DEV_NVLINK_')} {value}"
                                                 for name, value in ours.items()))


def step_health(s):
    hooked = os.path.join(s.args.out, "health-hook.jsonl")
    config = f"[events]\non_event = 'cat >> {hooked}'\n"
    with s.daemon(config, http="127.0.0.1:0") as d:
        server = Http(d.http_address())
        d.wait_for_samples()
        watching = re.search(r"gpupoold: (watching critical XID events of \d+ GPUs?|no XID events: .*)", d.log_text())
        s.check("the daemon watches the GPUs' XID events", watching is not None and "watching" in watching.group(1),
                watching.group(1) if watching else "no line about XID events in the log")
        metrics = server.get("/metrics")
        with open(os.path.join(s.args.out, "health-metrics.txt"), "w") as f:
            f.write(metrics)
        ours = {name: gpu0(metrics, name) for name in HEALTH_SERIES}
        print("gpupoold:", ours, flush=True)
        s.check("GPU 0 has every health series", all(value is not None for value in ours.values()),
                ", ".join(f"{name.removeprefix('DCGM_FI_DEV_')} {value}" for name, value in ours.items()))
        smi = smi_values()
        s.check("ECC counts as nvidia-smi reads them",
                bool(smi) and all(smi[name] in ("[N/A]", "N/A") or float(smi[name]) == ours[name] for name in smi),
                f"nvidia-smi {smi}")
        check_nvlink_errors(s, metrics)
        s.check("a healthy GPU 0 is not quarantined", gpu0(metrics, "gpupool_gpu_quarantined") == 0,
                f"gpupool_gpu_quarantined {gpu0(metrics, 'gpupool_gpu_quarantined')}")

        began = time.time()
        fault = subprocess.run([*PLAIN, sys.executable, "-c", faulting_client(), "0"], capture_output=True, text=True,
                               timeout=120, env=dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="0"))
        print(f"faulting program: exit {fault.returncode}\n{fault.stdout}{fault.stderr[-500:]}", flush=True)
        deadline = time.time() + 15
        while time.time() < deadline and not re.search(r"reported XID \d+", d.log_text()):
            time.sleep(0.2)
        reported = re.findall(r"gpupoold: GPU \S+ reported (XID \d+[^\n]*)", d.log_text())
        seconds = time.time() - began
        dmesg = subprocess.run(["sh", "-c", "dmesg 2>/dev/null | grep -i xid | tail -n 3"], capture_output=True,
                               text=True).stdout.strip()
        print(f"dmesg: {dmesg or '(nothing readable)'}", flush=True)
        s.check("an MMU fault's XID reaches the daemon", bool(reported),
                f"{'; '.join(reported) or 'none'} within {seconds:.1f} s of the program's start")
        d.wait_for_samples()
        metrics = server.get("/metrics")
        last = gpu0(metrics, "DCGM_FI_DEV_XID_ERRORS")
        s.check("DCGM_FI_DEV_XID_ERRORS shows it, and a program's XID quarantines nothing",
                bool(reported) and last is not None and last > 0 and gpu0(metrics, "gpupool_gpu_quarantined") == 0,
                f"DCGM_FI_DEV_XID_ERRORS {last}, gpupool_gpu_quarantined {gpu0(metrics, 'gpupool_gpu_quarantined')}")

        job = d.submit("--name", "faulty", "--", *PLAIN, "python3", "-c", faulting_client(), "0")
        ended = d.finish(job, timeout=120)[0]
        d.wait_for_samples()
        listed = [json.loads(line) for line in d.gp("events", "--json", "-n", "100", check=True).stdout.splitlines()]
        print("$ gpupool events\n" + d.gp("events", "-n", "100", check=True).stdout, flush=True)
        mine = [(e["kind"], e["gpus"]) for e in listed if e["job"] == job]
        s.check("a failing job on the GPU is told as events, and quarantines nothing",
                [kind for kind, _ in mine] == ["job_started", "job_failed"] and mine[0][1] == ended["gpus"]
                and not any(e["kind"] == "gpu_quarantined" for e in listed),
                f"job {job} {ended['state']} ({ended['reason']}): {mine}; "
                f"quarantine events {[e['message'] for e in listed if e['kind'] == 'gpu_quarantined']}")
        deadline = time.time() + 15
        hook_kinds = []
        while time.time() < deadline and "job_failed" not in hook_kinds:
            time.sleep(0.2)
            if os.path.exists(hooked):
                with open(hooked) as f:
                    hook_kinds = [json.loads(line)["kind"] for line in f if line.strip()]
        s.check("the on_event hook got them", hook_kinds[:2] == ["job_started", "job_failed"], f"{hook_kinds}")
        server.connection.close()
