#!/usr/bin/env python3
"""gpupoold's monitoring on a simulated 8-GPU machine: /metrics scrape latency and idle CPU.

    bench/monitor_bench.py BIN_DIR [--duration 60] [--requests 2000] [--output OUT.json] [--check]

BIN_DIR holds `gpupoold` of a build tree (the simulated NVML and the fixtures are found beside
it). One daemon is started with a fresh state directory under --work-dir, serving
GPUPOOL_SIM=hgx-h200 with `--http 127.0.0.1:0` and sampling once a second:

  cpu     the daemon's CPU time (utime + stime from /proc/PID/stat) over --duration seconds
          with nothing else going on (no jobs, no clients), as a percentage of one core; the
          samples taken meanwhile are counted through /api/history.
  scrape  --requests GET /metrics over one keep-alive HTTP/1.1 connection (http.client), each
          timed from the request's send to the body's last byte; the connections the server
          closed on the way are counted (http.client opens a new one then).

Prints a table and writes every figure to --output. With --check, exits 1 when a target is
missed. Stdlib only.
"""
import argparse
import datetime
import grp
import http.client
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import harness  # noqa: E402

SIM = "hgx-h200"
GPUS = 8

TARGETS = {
    "idle_cpu_percent": 1.0,  # of one core, sampling 8 GPUs at 1 Hz
}


def percentile(values, p):
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def load_average():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


class Daemon(harness.Daemon):
    """harness's gpupoold on the simulated machine, sampling once a second and serving HTTP on a
    port the kernel picks."""

    def __init__(self, bin_dir, work_dir, keep):
        admin = f'[daemon]\nadmin_group = "{grp.getgrgid(os.getgid()).gr_name}"\nsample_interval_s = 1\n'
        super().__init__(sim=SIM, bin_dir=bin_dir, base_config=admin, http="127.0.0.1:0", parent_dir=work_dir,
                         keep_root=keep)

    def __enter__(self):
        super().__enter__()
        self.host, port = self.http_address().rsplit(":", 1)
        self.port = int(port)
        return self

    def cpu_seconds(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            utime, stime = (int(x) for x in f.read().rsplit(")", 1)[1].split()[11:13])
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    def memory_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
        return None

    def get_json(self, path):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {response.status}")
            return json.loads(body)
        finally:
            connection.close()


def bench_cpu(daemon, duration):
    """The daemon's CPU while it only samples; the samples counted prove it sampled meanwhile."""
    daemon.wait_for_samples()  # past the start: database, first readings
    began_wall, began_cpu, began_unix = time.monotonic(), daemon.cpu_seconds(), time.time()
    time.sleep(duration)
    wall, cpu = time.monotonic() - began_wall, daemon.cpu_seconds() - began_cpu
    history = daemon.get_json(f"/api/history?since={began_unix:.3f}")
    ticks = [len(gpu["time"]) for gpu in history["gpus"]]
    return {"seconds": round(wall, 2), "cpu_seconds": round(cpu, 3), "cpu_percent_of_one_core": round(100 * cpu / wall, 3),
            "gpus": len(ticks), "samples_per_gpu": min(ticks) if ticks else 0,
            "sample_interval_s": history.get("sample_interval_s"), "rss_mb": daemon.memory_mb(),
            "clock_tick_s": 1 / os.sysconf("SC_CLK_TCK")}


def bench_scrape(daemon, requests):
    connection = http.client.HTTPConnection(daemon.host, daemon.port, timeout=10)
    connects, sock, body = 0, None, b""

    def scrape():
        """True when the request went over a connection opened for it."""
        nonlocal connects, sock, body
        connection.request("GET", "/metrics")
        fresh = connection.sock is not sock
        if fresh:
            connects += 1
            sock = connection.sock
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET /metrics: HTTP {response.status}")
        return fresh

    for _ in range(20):  # warm-up: the connection, the server's threads
        scrape()
    connects = 0
    times, on_fresh, on_reused = [], [], []
    cpu_before = daemon.cpu_seconds()
    for _ in range(requests):
        started = time.perf_counter()
        fresh = scrape()
        times.append(time.perf_counter() - started)
        (on_fresh if fresh else on_reused).append(times[-1] * 1000)
    cpu = daemon.cpu_seconds() - cpu_before
    connection.close()
    ms = [t * 1000 for t in times]
    return {"requests": requests, "p50_ms": round(percentile(ms, 50), 3), "p90_ms": round(percentile(ms, 90), 3),
            "p99_ms": round(percentile(ms, 99), 3), "max_ms": round(max(ms), 3), "min_ms": round(min(ms), 3),
            "mean_ms": round(sum(ms) / len(ms), 3), "connections_opened": connects, "body_bytes": len(body),
            "series": sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#")),
            "daemon_cpu_ms_per_scrape": round(cpu * 1000 / requests, 3),
            # A server that closes connections early, or answers a reused one late, shows here.
            "p50_ms_first_on_connection": round(percentile(on_fresh, 50), 3) if on_fresh else None,
            "p50_ms_reused_connection": round(percentile(on_reused, 50), 3) if on_reused else None}


def print_table(results):
    rows = [("benchmark", "figure", "value", "target")]
    c = results.get("cpu")
    if c:
        rows.append(("idle CPU", f"{c['gpus']} GPUs sampled for {c['seconds']} s ({c['samples_per_gpu']} samples each)",
                     f"{c['cpu_percent_of_one_core']} % of one core ({c['cpu_seconds']} s)",
                     f"<= {TARGETS['idle_cpu_percent']} %"))
        rows.append(("idle CPU", "RSS", f"{c['rss_mb']} MB", ""))
    s = results.get("scrape")
    if s:
        rows.append(("scrape", f"{s['requests']} x GET /metrics, keep-alive",
                     f"p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, max {s['max_ms']} ms", ""))
        rows.append(("scrape", "answer", f"{s['body_bytes']} bytes, {s['series']} series", ""))
        rows.append(("scrape", "connections opened / daemon CPU per scrape",
                     f"{s['connections_opened']} / {s['daemon_cpu_ms_per_scrape']} ms", ""))
        rows.append(("scrape", "p50 first request on a connection / on a reused one",
                     f"{s['p50_ms_first_on_connection']} / {s['p50_ms_reused_connection']} ms", ""))
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(str(col).ljust(w) for col, w in zip(r, widths)).rstrip())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bin_dir", help="directory holding gpupoold")
    parser.add_argument("--duration", type=float, default=60, help="cpu: seconds of sampling measured")
    parser.add_argument("--requests", type=int, default=2000, help="scrape: timed GET /metrics")
    parser.add_argument("--only", nargs="+", choices=["cpu", "scrape"])
    parser.add_argument("--output", help="JSON file to write")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--work-dir", default=None, help="where the state directory goes (default: $TMPDIR)")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    args = parser.parse_args()
    gpupoold = os.path.abspath(os.path.join(args.bin_dir, "gpupoold"))
    if not os.access(gpupoold, os.X_OK):
        sys.exit(f"monitor_bench: {gpupoold} is not an executable")
    work_dir = tempfile.mkdtemp(prefix="gpupoold-monitor-bench-", dir=args.work_dir)
    results = {"meta": {
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": os.uname().nodename,
        "kernel": os.uname().release, "cpus": os.cpu_count(), "simulated_machine": SIM, "gpupoold": gpupoold,
        "load_before": load_average(),
    }}
    try:
        with Daemon(args.bin_dir, work_dir, args.keep) as daemon:
            for name in args.only or ["cpu", "scrape"]:
                print(f"monitor_bench: {name} ...", file=sys.stderr, flush=True)
                results[name] = (bench_cpu(daemon, args.duration) if name == "cpu"
                                 else bench_scrape(daemon, args.requests))
    finally:
        results["meta"]["load_after"] = load_average()
        if args.output:
            with open(args.output, "w") as f:
                json.dump(results, f, indent=2)
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
    print_table(results)
    print(f"load average before {results['meta']['load_before']}, after {results['meta']['load_after']}")
    missed = []
    if "cpu" in results and results["cpu"]["cpu_percent_of_one_core"] > TARGETS["idle_cpu_percent"]:
        missed.append(f"idle CPU {results['cpu']['cpu_percent_of_one_core']} % > {TARGETS['idle_cpu_percent']} %")
    for line in missed:
        print(f"target missed: {line}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
