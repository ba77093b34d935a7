"""The `monitoring` step of scripts/device/verify: gpupoold's monitoring against the real GPU
while torch works on it.

A job holds the GPU doing nothing (flagged idle after idle_flag_after), then a torch matmul loop
runs through the queue. Meanwhile the step saves what the daemon serves (/metrics, /api/*),
`gpupool top --once` frames, and at the end `gpupool report`; then it measures the /metrics
scrape latency and the daemon's CPU while it samples at 1 Hz with nothing else going on.
"""
import http.client
import json
import os
import re
import statistics
import time

from verify_steps import PLAIN


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Http:
    """One keep-alive connection to the daemon's HTTP server."""

    def __init__(self, address):
        self.address = address
        self.connection = http.client.HTTPConnection(address, timeout=10)

    def get(self, path):
        try:
            self.connection.request("GET", path)
            response = self.connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The server closes a connection idle past its keep-alive timeout (5 s): open another.
            self.connection.close()
            self.connection = http.client.HTTPConnection(self.address, timeout=10)
            self.connection.request("GET", path)
            response = self.connection.getresponse()
        return response.read().decode()


def step_monitoring(s):
    out = s.args.out

    def check(ok, what):
        s.check(what, ok)

    def save(name, text):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)

    with s.daemon('[monitor]\nidle_flag_after = "8s"\n', http="127.0.0.1:0",
                  env={"TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}) as d:
        server = Http(d.http_address())
        get = server.get

        def snapshot(tag):
            for name, path in (("gpus", "/api/gpus"), ("jobs", "/api/jobs"), ("history", "/api/history?seconds=600"),
                               ("metrics", "/metrics")):
                save(f"{tag}-{name}.{'txt' if name == 'metrics' else 'json'}", get(path))
            save(f"{tag}-top.txt", d.gp("top", "--once").stdout)

        d.wait_for_samples()
        snapshot("0-idle-machine")
        idle = d.gp("submit", "--name", "holds-and-waits", "--", *PLAIN, "python3", "-c",
                    "import torch, time; torch.zeros(1, device='cuda'); time.sleep(20)").stdout.strip()
        matmul = d.gp("submit", "--name", "matmul", "--", *PLAIN, "python3", "-c",
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
            busy = sum(1 for _, seen_util, _ in seen if seen_util and seen_util >= 90)
            if int(matmul) in holders and util is not None and util >= 90 and busy >= 15:
                break
            time.sleep(1)
        save("utilization-trace.json", json.dumps(seen))
        check(any(u is not None and u >= 90 for _, u, h in seen if int(matmul) in h),
              "utilisation climbs to ≥ 90 % under matmul")
        snapshot("2-matmul")
        metrics = get("/metrics")
        check(re.search(rf'DCGM_FI_DEV_GPU_UTIL\{{[^}}]*job_id="{matmul}"[^}}]*\}} (9\d|100)', metrics) is not None,
              "the GPU's series carries the matmul job's label and a busy value")
        check("DCGM_FI_DEV_SM_CLOCK" in metrics and "DCGM_FI_DEV_POWER_USAGE" in metrics,
              "clocks and power are in /metrics")

        d.finish(int(matmul))
        d.wait_for_samples()  # the last readings are accounted to the job
        report = d.gp("report")
        save("report.txt", report.stdout + report.stderr)
        print(report.stdout)
        lines = json.loads(d.gp("report", "--json").stdout)["jobs"]
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

        server.connection.close()
        before, began = cpu_seconds(d.proc.pid), time.monotonic()
        time.sleep(60)
        cpu = 100 * (cpu_seconds(d.proc.pid) - before) / (time.monotonic() - began)
        idle_cpu = f"daemon CPU while sampling 1 GPU at 1 Hz for 60 s: {cpu:.2f} % of a core"
        print(idle_cpu)
        save("bench.txt", latency + "\n" + idle_cpu + "\n")
