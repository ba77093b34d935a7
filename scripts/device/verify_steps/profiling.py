"""The `profiling` step of scripts/device/verify: the DCGM_FI_PROF_* series gpupoold reads through
NVML's GPM calls, against workloads whose shape is known.

On GPU 0, one after the other: a bf16 matrix-product loop (tensor cores and every SM busy), a
large copy loop (memory-bound: DRAM busy, tensor cores idle) and a process that holds memory and
does nothing (everything near 0). While each runs, /metrics is read every half second; the
step checks the median of the readings taken while the workload was in its steady state. During
the matmul, pynvml's own GPM calls, where installed, read the same GPU for comparison.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from verify_steps import PLAIN
from verify_steps.monitoring import Http

# GPU 0 as NVML numbers it, for CUDA too.
GPU0 = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
WORKLOADS = {
    "matmul": "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)\n"
              "def work():\n"
              "    for _ in range(20): c = a @ b\n",
    "copy": "src = torch.empty(2 ** 30, device='cuda', dtype=torch.float32); dst = torch.empty_like(src)\n"
            "def work():\n"
            "    for _ in range(10): dst.copy_(src)\n",
    "idle": "held = torch.empty(2 ** 30, device='cuda', dtype=torch.float32)\n"
            "def work():\n"
            "    time.sleep(0.1)\n",
}
# Runs `work` for SECONDS after a warm-up, saying "steady" on stdout when the warm-up is over.
LOOP = ("import sys, time, torch\n{setup}"
        "work(); torch.cuda.synchronize()\n"
        "print('steady', flush=True)\n"
        "end = time.time() + float(sys.argv[1])\n"
        "while time.time() < end:\n"
        "    work(); torch.cuda.synchronize()\n"
        "print('done', flush=True)\n")
PYNVML = """
import json, time
try:
    import pynvml as n
    n.nvmlInit()
    handle = n.nvmlDeviceGetHandleByIndex(0)
    first, second = n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()
    n.nvmlGpmSampleGet(handle, first)
    time.sleep(2)
    n.nvmlGpmSampleGet(handle, second)
    request = n.c_nvmlGpmMetricsGet_t()
    request.version = n.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 2
    request.sample1, request.sample2 = first, second
    request.metrics[0].metricId = n.NVML_GPM_METRIC_SM_UTIL
    request.metrics[1].metricId = n.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    n.nvmlGpmMetricsGet(request)
    print(json.dumps({"sm": request.metrics[0].value / 100, "tensor": request.metrics[1].value / 100}))
except Exception as error:  # not installed, too old for GPM, or GPM refused: the comparison is skipped
    print(json.dumps({"skip": f"pynvml: {type(error).__name__}: {error}"}))
"""
SERIES = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
          "DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def gpu0_values(metrics):
    """{metric: value} of GPU 0's DCGM_FI_PROF_* series in one scrape."""
    values = {}
    for name, labels, value in re.findall(r'^(DCGM_FI_PROF_\w+)\{([^}]*)\} (\S+)$', metrics, re.M):
        if re.search(r'(^|,)gpu="0"', labels):
            values[name] = float(value)
    return values


def step_profiling(s):
    out = s.args.out
    with s.daemon("", http="127.0.0.1:0") as d:
        server = Http(d.http_address())
        d.wait_for_samples()  # two samples: the first activity is computed between them
        first = server.get("/metrics")
        with open(os.path.join(out, "profiling-metrics-at-rest.txt"), "w") as f:
            f.write(first)
        if not gpu0_values(first):
            s.result("SKIP", "profiling", "GPU 0 reports no DCGM_FI_PROF_* series (no GPM: before Hopper, "
                                          "or a driver without it); nothing more to check")
            return
        s.check("all twelve DCGM_FI_PROF_* series for GPU 0", len(gpu0_values(first)) == 12,
                ", ".join(sorted(gpu0_values(first))))

        medians = {}
        for name, setup in WORKLOADS.items():
            env = dict(os.environ, **GPU0)
            load = subprocess.Popen([*PLAIN, sys.executable, "-c", LOOP.format(setup=setup), "10"], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            reader = None
            readings = []
            try:
                ready = load.stdout.readline().strip() == "steady"
                if ready and name == "matmul":
                    reader = subprocess.Popen([*PLAIN, sys.executable, "-c", PYNVML], stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True)
                began = time.time()
                while ready and load.poll() is None and time.time() - began < 12:
                    time.sleep(0.5)
                    if time.time() - began >= 1.5:  # a sample interval after the start: steady readings
                        readings.append(gpu0_values(server.get("/metrics")))
                load.wait(60)
            finally:
                if load.poll() is None:
                    load.kill()
                    load.wait()
            s.check(f"{name}: the workload ran", ready and load.returncode == 0,
                    f"exit {load.returncode}; {load.stderr.read()[-300:].strip()}")
            with open(os.path.join(out, f"profiling-{name}.json"), "w") as f:
                json.dump(readings, f)
            medians[name] = {series: statistics.median([r[series] for r in readings if series in r] or [float("nan")])
                             for series in SERIES}
            figures = ", ".join(f"{series.removeprefix('DCGM_FI_PROF_')} {value:.3f}"
                                for series, value in medians[name].items())
            print(f"{name}: medians of {len(readings)} readings: {figures}", flush=True)
            if reader is not None:
                compare_with_pynvml(s, reader, readings)

        m, c, i = medians["matmul"], medians["copy"], medians["idle"]
        s.check("matmul: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE > 0.5", m["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] > 0.5,
                f"median {m['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE']:.3f}")
        s.check("matmul: DCGM_FI_PROF_SM_ACTIVE > 0.8", m["DCGM_FI_PROF_SM_ACTIVE"] > 0.8,
                f"median {m['DCGM_FI_PROF_SM_ACTIVE']:.3f}")
        s.check("copy: DCGM_FI_PROF_DRAM_ACTIVE > 0.5 and above the matmul's",
                c["DCGM_FI_PROF_DRAM_ACTIVE"] > 0.5 and c["DCGM_FI_PROF_DRAM_ACTIVE"] > m["DCGM_FI_PROF_DRAM_ACTIVE"],
                f"median {c['DCGM_FI_PROF_DRAM_ACTIVE']:.3f} (matmul {m['DCGM_FI_PROF_DRAM_ACTIVE']:.3f})")
        s.check("copy: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE < 0.05", c["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] < 0.05,
                f"median {c['DCGM_FI_PROF_PIPE_TENSOR_ACTIVE']:.3f}")
        s.check("idle holder: SM, tensor and DRAM activity < 0.05",
                all(i[series] < 0.05 for series in SERIES[:3]),
                ", ".join(f"{series.removeprefix('DCGM_FI_PROF_')} {i[series]:.3f}" for series in SERIES[:3]))
        api = json.loads(server.get("/api/gpus"))["gpus"][0]["sample"]
        s.check("the API's sample carries sm_active", api is not None and isinstance(api.get("sm_active"), float),
                f"sm_active {api and api.get('sm_active')}")
        server.connection.close()


def compare_with_pynvml(s, reader, readings):
    """pynvml's 2 s of GPM against gpupoold's readings of the same seconds (medians)."""
    try:
        answer = json.loads(reader.communicate(timeout=60)[0].strip().splitlines()[-1])
    except (ValueError, IndexError, subprocess.TimeoutExpired) as error:
        answer = {"skip": f"pynvml reader gave no answer ({error})"}
    if "skip" in answer:
        s.result("SKIP", "matmul: gpupoold against pynvml's GPM", answer["skip"])
        return
    ours = {key: statistics.median([r[series] for r in readings[:6] if series in r] or [float("nan")])
            for key, series in (("sm", "DCGM_FI_PROF_SM_ACTIVE"), ("tensor", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"))}
    s.check("matmul: gpupoold within 0.1 of pynvml's GPM (SM active, tensor active)",
            all(abs(ours[key] - answer[key]) <= 0.1 for key in ("sm", "tensor")),
            f"gpupoold SM {ours['sm']:.3f} tensor {ours['tensor']:.3f}; "
            f"pynvml SM {answer['sm']:.3f} tensor {answer['tensor']:.3f}")


NSIGHT_KERNELS = ("import torch; a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16)\n"
                  "for _ in range(5): a @ a\n"
                  "torch.cuda.synchronize(); print('kernels ran')")


def step_nsight(s):
    """Nsight Compute profiles kernels on GPU 0 while gpupoold samples GPM there: DCGM's profiling
    module takes a host-wide lock that makes such a profile fail; NVML's GPM should not."""
    ncu = shutil.which("ncu") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/ncu"))), None)
    if ncu is None:
        s.result("SKIP", "nsight", "no ncu (Nsight Compute) on this machine")
        return
    with s.daemon("", http="127.0.0.1:0") as d:
        server = Http(d.http_address())
        d.wait_for_samples()
        s.check("GPM sampled before the profile", len(gpu0_values(server.get("/metrics"))) == 12, "")
        proc = subprocess.run([ncu, "--target-processes", "all", "-c", "3", "--metrics",
                               "sm__throughput.avg.pct_of_peak_sustained_elapsed",
                               *PLAIN, sys.executable, "-c", NSIGHT_KERNELS],
                              env=dict(os.environ, **GPU0), capture_output=True, text=True, timeout=240)
        with open(os.path.join(s.args.out, "nsight.txt"), "w") as f:
            f.write(f"$ {ncu} ... -> exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        profiled = re.findall(r"sm__throughput.avg.pct_of_peak_sustained_elapsed\s+%\s+(\S+)", proc.stdout)
        s.check("ncu profiled the kernels while the daemon sampled GPM", proc.returncode == 0 and bool(profiled)
                and "ERR_NVGPUCTRPERM" not in proc.stdout + proc.stderr,
                f"exit {proc.returncode}; SM throughput % of the profiled kernels: {profiled}; "
                f"{(proc.stdout + proc.stderr).strip().splitlines()[-1:]}")
        d.wait_for_samples()
        after = gpu0_values(server.get("/metrics"))
        s.check("GPM sampled after the profile", len(after) == 12, f"{len(after)} DCGM_FI_PROF_* series for GPU 0")
        server.connection.close()


def cpu_seconds(pid):
    """User plus system CPU seconds of a process so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step_monitor_cpu(s, seconds=20, interval_s=0.2):
    """gpupoold's CPU with the GPM counters sampled against `[monitor] profiling = "off"`: two
    daemons one after the other, each sampling every `interval_s` (five times the default rate,
    so the difference stands above the noise) for `seconds`, with a matmul loop on GPU 0."""
    env = dict(os.environ, **GPU0)
    load = subprocess.Popen([*PLAIN, sys.executable, "-c", LOOP.format(setup=WORKLOADS["matmul"]), str(4 * seconds + 60)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    per_sample_ms = {}
    try:
        s.check("the matmul load started", load.stdout.readline().strip() == "steady", "")
        for profiling in ("on", "off"):
            config = f'[daemon]\nsample_interval_s = {interval_s}\n[monitor]\nprofiling = "{profiling}"\n'
            with s.daemon(config, http="127.0.0.1:0") as d:
                server = Http(d.http_address())
                d.wait_for_samples()
                series = len(gpu0_values(server.get("/metrics")))
                s.check(f"profiling {profiling}: {12 if profiling == 'on' else 0} DCGM_FI_PROF_* series for GPU 0",
                        series == (12 if profiling == "on" else 0), f"{series}")
                server.connection.close()
                samples_before, cpu_before = d.status()["samples"], cpu_seconds(d.proc.pid)
                time.sleep(seconds)  # a measurement, not a wait for an event
                samples, cpu = d.status()["samples"] - samples_before, cpu_seconds(d.proc.pid) - cpu_before
            per_sample_ms[profiling] = 1000 * cpu / max(samples, 1)
            print(f"profiling {profiling}: {cpu:.2f} CPU s over {seconds} s, {samples} samples: "
                  f"{per_sample_ms[profiling]:.3f} ms a sample", flush=True)
    finally:
        load.kill()
        load.wait()
    extra = per_sample_ms["on"] - per_sample_ms["off"]
    # At the default 1 s interval, a sample's CPU in ms over 10 is the share of a core in %.
    s.check("GPM costs under 1 % of a core at the default 1 s interval", extra / 10 < 1,
            f"{per_sample_ms['on']:.3f} ms a sample with GPM, {per_sample_ms['off']:.3f} ms without: "
            f"{extra:+.3f} ms, {extra / 10:+.3f} % of a core at 1 s")
