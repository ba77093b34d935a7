#!/usr/bin/env python3
"""On a GPU machine: gpupoold's monitoring against the real GPU while torch works on it.

A job holds the GPU doing nothing (flagged idle after idle_flag_after), then a torch matmul loop
runs through the queue. Meanwhile the script saves what the daemon serves (/metrics, /api/*),
`gpupool top --once` frames, and at the end `gpupool report`; then it measures the /metrics
scrape latency and the daemon's CPU while it samples at 1 Hz with nothing else going on.
Usage: verify-monitoring.py BIN_DIR OUT_DIR. Prints PASS/FAIL lines; exits 1 on a FAIL."""
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

bin_dir, out = sys.argv[1], sys.argv[2]
gpupool, gpupoold = os.path.join(bin_dir, "gpupool"), os.path.join(bin_dir, "gpupoold")
root = tempfile.mkdtemp(prefix="gpupool-monitoring-")
config = os.path.join(root, "gpupool.toml")
with open(config, "w") as f:
    f.write('[monitor]\nidle_flag_after = "8s"\n')
env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "CUDA_VISIBLE"))}
env.update(GPUPOOL_RUNTIME_DIR=os.path.join(root, "run"), GPUPOOL_STATE_DIR=os.path.join(root, "state"),
           GPUPOOL_CONFIG=config, TERM="xterm-256color", COLUMNS="100", LINES="30")
failures = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def save(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text)


def gp(*args):
    return subprocess.run([gpupool, *args], env=env, capture_output=True, text=True, timeout=60)


log = open(os.path.join(out, "gpupoold.log"), "w")
daemon = subprocess.Popen([gpupoold, "--http", "127.0.0.1:0"], env=env, stdout=log, stderr=log)
address = None
for _ in range(100):
    with open(os.path.join(out, "gpupoold.log")) as f:
        match = re.search(r"HTTP on http://([^/]+)/", f.read())
    if match:
        address = match.group(1)
        break
    time.sleep(0.1)
check(address is not None, f"gpupoold serves HTTP ({address})")
connection = http.client.HTTPConnection(address, timeout=10)


def get(path):
    global connection
    try:
        connection.request("GET", path)
        response = connection.getresponse()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        # The server closes a connection idle past its keep-alive timeout (5 s): open another.
        connection.close()
        connection = http.client.HTTPConnection(address, timeout=10)
        connection.request("GET", path)
        response = connection.getresponse()
    return response.read().decode()


def snapshot(tag):
    for name, path in (("gpus", "/api/gpus"), ("jobs", "/api/jobs"), ("history", "/api/history?seconds=600"),
                       ("metrics", "/metrics")):
        save(f"{tag}-{name}.{'txt' if name == 'metrics' else 'json'}", get(path))
    save(f"{tag}-top.txt", gp("top", "--once").stdout)


time.sleep(2)
snapshot("0-idle-machine")
# The jobs get the submitter's environment: without the library path gpupool's binaries may run
# with, so torch loads the system's own libraries.
idle = gp("submit", "--name", "holds-and-waits", "--", "env", "-u", "LD_LIBRARY_PATH", "python3", "-c",
          "import torch, time; torch.zeros(1, device='cuda'); time.sleep(20)").stdout.strip()
matmul = gp("submit", "--name", "matmul", "--", "env", "-u", "LD_LIBRARY_PATH", "python3", "-c",
            "import torch, time\n"
            "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)\n"
            "end = time.time() + 45\n"
            "while time.time() < end:\n"
            "    for _ in range(20): c = a @ b\n"
            "    torch.cuda.synchronize()\n").stdout.strip()
check(idle.isdigit() and matmul.isdigit(), f"jobs submitted ({idle}, {matmul})")

deadline = time.time() + 40
flagged = False
while time.time() < deadline and not flagged:
    jobs = {str(j["id"]): j for j in json.loads(get("/api/jobs"))["jobs"]}
    flagged = jobs.get(idle, {}).get("idle", False)
    time.sleep(1)
check(flagged, "the job holding the GPU at 0 % is flagged idle")
snapshot("1-idle-job")

# The matmul job starts when the first one ends (one GPU).
seen = []
deadline = time.time() + 90
while time.time() < deadline:
    gpus = json.loads(get("/api/gpus"))["gpus"]
    util = gpus[0]["sample"]["utilization_gpu"] if gpus[0]["sample"] else None
    holders = [j["id"] for j in gpus[0]["jobs"]]
    seen.append((round(time.time(), 1), util, holders))
    if int(matmul) in holders and util is not None and util >= 90 and len([s for s in seen if s[1] and s[1] >= 90]) >= 15:
        break
    time.sleep(1)
save("utilization-trace.json", json.dumps(seen))
check(any(u is not None and u >= 90 for _, u, h in seen if int(matmul) in h), "utilisation climbs to ≥ 90 % under matmul")
snapshot("2-matmul")
metrics = get("/metrics")
check(re.search(rf'DCGM_FI_DEV_GPU_UTIL\{{[^}}]*job_id="{matmul}"[^}}]*\}} (9\d|100)', metrics) is not None,
      "the GPU's series carries the matmul job's label and a busy value")
check("DCGM_FI_DEV_SM_CLOCK" in metrics and "DCGM_FI_DEV_POWER_USAGE" in metrics, "clocks and power are in /metrics")

subprocess.run([gpupool, "wait", matmul], env=env, timeout=120)
time.sleep(2)
report = gp("report")
save("report.txt", report.stdout + report.stderr)
print(report.stdout)
lines = json.loads(gp("report", "--json").stdout)["jobs"]
by_id = {str(j["id"]): j for j in lines}
check((by_id.get(matmul, {}).get("mean_utilization") or 0) >= 50, "report: the matmul job's mean utilisation")
check((by_id.get(idle, {}).get("mean_utilization") or 0) < 5, "report: the idle job's mean utilisation")

# /metrics latency (keep-alive) and the daemon's CPU while it samples with nothing else going on.
times = []
get("/metrics")  # a fresh connection after the idle wait
for _ in range(2000):
    began = time.perf_counter()
    get("/metrics")
    times.append((time.perf_counter() - began) * 1000)
times.sort()
latency = (f"/metrics scrape, 2000 requests: p50 {statistics.median(times):.3f} ms, "
           f"p99 {times[int(0.99 * len(times))]:.3f} ms, max {times[-1]:.3f} ms")
print(latency)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


connection.close()
before, began = cpu_seconds(daemon.pid), time.monotonic()
time.sleep(60)
cpu = 100 * (cpu_seconds(daemon.pid) - before) / (time.monotonic() - began)
idle_cpu = f"daemon CPU while sampling 1 GPU at 1 Hz for 60 s: {cpu:.2f} % of a core"
print(idle_cpu)
save("bench.txt", latency + "\n" + idle_cpu + "\n")
daemon.terminate()
daemon.wait(30)
print("failed:", failures or "none")
sys.exit(1 if failures else 0)
