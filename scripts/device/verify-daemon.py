#!/usr/bin/env python3
"""gpupoold on a real GPU: what the daemon issue asks to see on the GPU machine.

Usage: verify-daemon.py BIN_DIR OUT_DIR
  1. a batch job with torch sees exactly its GPU (UUID compared), runs as the submitter, logs land;
  2. a queued job starts the moment the running one exits: dispatch latency over a chain of jobs
     (each job's own clock: the previous job's last act → the next job's first act);
  3. a GPU held by a process gpupool did not start (torch holding memory) keeps queued jobs off
     it; once that process exits, the queued job starts within the sampling interval;
  4. `gpupool run` through the daemon: torch sees the leased GPU, the job is recorded;
  5. kill -9 of the daemon while a torch job runs: after a restart the job is adopted and its exit
     code recorded; no lease left behind.
Prints PASS/FAIL per check and writes OUT_DIR/daemon.json; exits 1 on any failure.
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

bin_dir, out_dir = sys.argv[1], sys.argv[2]
gpupool = os.path.join(bin_dir, "gpupool")
gpupoold = os.path.join(bin_dir, "gpupoold")
root = tempfile.mkdtemp(prefix="gpupoold-verify-")
config = os.path.join(root, "gpupool.toml")
with open(config, "w") as f:
    f.write("[daemon]\nsample_interval_s = 1.0\nkill_grace_s = 2\n")
env = dict(os.environ, GPUPOOL_RUNTIME_DIR=os.path.join(root, "run"), GPUPOOL_STATE_DIR=os.path.join(root, "state"),
           GPUPOOL_CONFIG=config, PYTHONUNBUFFERED="1")
for key in ("GPUPOOL_SIM", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
    env.pop(key, None)
failures, report = [], {}
# A staged build may need LD_LIBRARY_PATH for its own libraries; torch must not get them.
PLAIN = ["env", "-u", "LD_LIBRARY_PATH"]


def check(name, ok, detail=""):
    print(f"{'PASS' if ok else 'FAIL'} {name} {detail}", flush=True)
    report.setdefault("checks", {})[name] = {"ok": bool(ok), "detail": str(detail)}
    if not ok:
        failures.append(name)


def cli(*args, check_rc=True):
    proc = subprocess.run([gpupool, *args], env=env, capture_output=True, text=True, timeout=300)
    print(f"$ gpupool {' '.join(args)}\n{proc.stdout}{proc.stderr}", flush=True)
    if check_rc and proc.returncode != 0:
        raise SystemExit(f"gpupool {args} exited {proc.returncode}")
    return proc


def start_daemon():
    log = open(os.path.join(out_dir, "gpupoold.log"), "a")
    daemon = subprocess.Popen([gpupoold], env=env, stdout=log, stderr=log)
    sock = os.path.join(env["GPUPOOL_RUNTIME_DIR"], "gpupoold.sock")
    for _ in range(200):
        if os.path.exists(sock) and cli("jobs", check_rc=False).returncode == 0:
            return daemon
        time.sleep(0.05)
    raise SystemExit("gpupoold did not come up")


def job(jid):
    return json.loads(cli("show", str(jid), "--json").stdout)


SEES = ("import os, torch; n = torch.cuda.device_count(); u = 'GPU-' + str(torch.cuda.get_device_properties(0).uuid); "
        "x = torch.ones(256, 1024, 1024, device='cuda'); torch.cuda.synchronize(); "
        "print('torch sees', n, 'GPU(s):', u, 'uid', os.getuid()); print('leased:', os.environ['GPUPOOL_GPU_UUIDS']); "
        "raise SystemExit(0 if n == 1 and u == os.environ['GPUPOOL_GPU_UUIDS'] else 3)")
daemon = start_daemon()
try:
    # 1. a batch job with torch
    jid = cli("submit", "--name", "torch-sees", "--", *PLAIN, "python3", "-c", SEES).stdout.strip()
    cli("wait", jid, check_rc=False)
    j = job(jid)
    log = cli("logs", jid).stdout
    check("batch job: torch sees exactly its GPU", j["state"] == "done" and "torch sees 1 GPU(s)" in log, log.strip())
    check("batch job: runs as the submitter", f"uid {os.getuid()}" in log)

    # 2. dispatch latency: a chain of jobs on one GPU, each stamping its own start and end
    stamps = os.path.join(root, "stamps")
    stamp = 'echo "start $(date +%s.%N)" >> "$0"; sleep 0.2; echo "end $(date +%s.%N)" >> "$0"'
    ids = [cli("submit", "--", "sh", "-c", stamp, stamps).stdout.strip() for _ in range(21)]
    cli("wait", *ids, "-q")
    lines = [l.split() for l in open(stamps)]
    starts = [float(t) for k, t in lines if k == "start"]
    ends = [float(t) for k, t in lines if k == "end"]
    gaps = sorted((starts[i + 1] - ends[i]) * 1000 for i in range(len(ends) - 1))
    # sh and date start-up are part of each gap; measure them alone
    t0 = time.time()
    for _ in range(10):
        subprocess.run(["sh", "-c", 'echo "x $(date +%s.%N)" > /dev/null'])
    shell_ms = (time.time() - t0) * 100
    report["dispatch_ms"] = {"p50": statistics.median(gaps), "p90": gaps[int(len(gaps) * 0.9)], "max": gaps[-1],
                             "shell_and_date_ms": shell_ms}
    check("dispatch: next job starts when the GPU frees", statistics.median(gaps) < 1000,
          f"gap p50 {statistics.median(gaps):.1f} ms, p90 {gaps[int(len(gaps) * 0.9)]:.1f} ms "
          f"(includes sh + date start-up, {shell_ms:.1f} ms alone)")

    # 3. a GPU busy with a process gpupool did not start
    holder = subprocess.Popen([*PLAIN, "python3", "-c", "import torch, time; x = torch.ones(512, 1024, 1024, device='cuda'); "
                               "torch.cuda.synchronize(); print('holding', flush=True); time.sleep(6)"],
                              env={k: v for k, v in env.items() if not k.startswith("GPUPOOL_")},
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    time.sleep(2.5)  # two sampling intervals: the daemon has seen it
    queued = cli("submit", "--", "true").stdout.strip()
    time.sleep(1.0)
    state_while_busy = job(queued)["state"]
    check("outside process keeps the GPU busy", state_while_busy == "queued", state_while_busy)
    holder.wait()
    freed = time.time()
    cli("wait", queued, "-q")
    started = job(queued)["start_time"]
    check("queued job starts within the sampling interval of the GPU freeing", started - freed < 2.5,
          f"{started - freed:.2f} s after the outside process exited")

    # 4. gpupool run through the daemon
    run = subprocess.run([gpupool, "run", "--", *PLAIN, "python3", "-c", SEES], env=env, capture_output=True, text=True)
    print(run.stdout + run.stderr)
    check("run through the daemon: torch sees its GPU", run.returncode == 0 and "torch sees 1 GPU(s)" in run.stdout)
    listed = json.loads(cli("jobs", "--all", "--json").stdout)
    check("run through the daemon: recorded as an interactive job",
          any(x.get("kind") == "interactive" and x["state"] == "done" for x in listed))

    # 5. kill -9 while a torch job runs; restart; adopted
    long_job = cli("submit", "--", *PLAIN, "python3", "-c",
                   "import torch, time; x = torch.ones(256, 1024, 1024, device='cuda'); time.sleep(4); raise SystemExit(7)"
                   ).stdout.strip()
    time.sleep(2.0)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    time.sleep(0.5)
    daemon = start_daemon()
    cli("wait", long_job, check_rc=False)
    j = job(long_job)
    check("kill -9: running job adopted, exit code recorded", j["state"] == "failed" and j["exit_code"] == 7,
          f"state {j['state']} exit {j['exit_code']}")
    leases = cli("leases").stdout
    check("no lease left behind", len(leases.strip().splitlines()) <= 1, leases.strip())
finally:
    daemon.send_signal(signal.SIGTERM)
    daemon.wait()
    with open(os.path.join(out_dir, "daemon.json"), "w") as f:
        json.dump(report, f, indent=2)
print("FAILED: " + ", ".join(failures) if failures else "ALL PASS")
sys.exit(1 if failures else 0)
