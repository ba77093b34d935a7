"""The `daemon` step of scripts/device/verify: gpupoold on a real GPU, with torch.

  1. a batch job with torch sees exactly its GPU (UUID compared), runs as the submitter, logs land;
  2. a queued job starts the moment the running one exits: dispatch latency over a chain of jobs
     (each job's own clock: the previous job's last act -> the next job's first act);
  3. a GPU held by a process gpupool did not start (torch holding memory) keeps queued jobs off
     it; once that process exits, the queued job starts within the sampling interval;
  4. `gpupool run` through the daemon: torch sees the leased GPU, the job is recorded;
  5. kill -9 of the daemon while a torch job runs: after a restart the job is adopted and its exit
     code recorded.
Writes OUT/daemon.json with the dispatch figures.
"""
import json
import os
import statistics
import subprocess
import time

from verify_steps import PLAIN

SEES = ("import os, torch; n = torch.cuda.device_count(); u = 'GPU-' + str(torch.cuda.get_device_properties(0).uuid); "
        "x = torch.ones(256, 1024, 1024, device='cuda'); torch.cuda.synchronize(); "
        "print('torch sees', n, 'GPU(s):', u, 'uid', os.getuid()); print('leased:', os.environ['GPUPOOL_GPU_UUIDS']); "
        "raise SystemExit(0 if n == 1 and u == os.environ['GPUPOOL_GPU_UUIDS'] else 3)")


def step_daemon(s):
    with s.daemon("[daemon]\nsample_interval_s = 1.0\nkill_grace_s = 2\n") as d:
        report = {}
        # 1. a batch job with torch
        job = d.submit("--name", "torch-sees", "--", *PLAIN, "python3", "-c", SEES)
        state = d.finish(job)[0]["state"]
        log = d.gp("logs", str(job)).stdout
        print(log, flush=True)
        s.check("batch job: torch sees exactly its GPU", state == "done" and "torch sees 1 GPU(s)" in log,
                log.strip().replace("\n", "; "))
        s.check("batch job: runs as the submitter", f"uid {os.getuid()}" in log)

        # 2. dispatch latency: a chain of jobs on one GPU, each stamping its own start and end
        stamps = d.path("stamps")
        stamp = 'echo "start $(date +%s.%N)" >> "$0"; sleep 0.2; echo "end $(date +%s.%N)" >> "$0"'
        d.finish(*[d.submit("--", "sh", "-c", stamp, stamps) for _ in range(21)])
        with open(stamps) as f:
            lines = [line.split() for line in f]
        starts = [float(t) for k, t in lines if k == "start"]
        ends = [float(t) for k, t in lines if k == "end"]
        gaps = sorted((starts[i + 1] - ends[i]) * 1000 for i in range(len(ends) - 1))
        # sh and date start-up are part of each gap; measure them alone
        began = time.time()
        for _ in range(10):
            subprocess.run(["sh", "-c", 'echo "x $(date +%s.%N)" > /dev/null'])
        shell_ms = (time.time() - began) * 100
        report["dispatch_ms"] = {"p50": statistics.median(gaps), "p90": gaps[int(len(gaps) * 0.9)], "max": gaps[-1],
                                 "shell_and_date_ms": shell_ms}
        s.check("dispatch: next job starts when the GPU frees", statistics.median(gaps) < 1000,
                f"gap p50 {statistics.median(gaps):.1f} ms, p90 {gaps[int(len(gaps) * 0.9)]:.1f} ms "
                f"(includes sh + date start-up, {shell_ms:.1f} ms alone)")

        # 3. a GPU busy with a process gpupool did not start
        holder = subprocess.Popen([*PLAIN, "python3", "-c", "import sys, torch; x = torch.ones(512, 1024, 1024, "
                                   "device='cuda'); torch.cuda.synchronize(); print('holding', flush=True); "
                                   "sys.stdin.read()"],
                                  env={k: v for k, v in d.env.items() if not k.startswith("GPUPOOL_")},
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
        d.wait_for_samples()  # the daemon has seen the outside process
        queued = d.submit("--", "true")
        d.wait_for_samples()
        state_while_busy = d.job_state(queued)
        s.check("outside process keeps the GPU busy", state_while_busy == "queued", state_while_busy)
        holder.stdin.close()
        holder.wait()
        freed = time.time()
        started = d.finish(queued)[0]["start_time"]
        s.check("queued job starts within the sampling interval of the GPU freeing", started - freed < 2.5,
                f"{started - freed:.2f} s after the outside process exited")

        # 4. gpupool run through the daemon
        run = d.gp("run", "--", *PLAIN, "python3", "-c", SEES, timeout=300)
        print(run.stdout + run.stderr, flush=True)
        s.check("run through the daemon: torch sees its GPU",
                run.returncode == 0 and "torch sees 1 GPU(s)" in run.stdout)
        s.check("run through the daemon: recorded as an interactive job",
                any(j["kind"] == "interactive" and j["state"] == "done" for j in d.all_jobs()))

        # 5. kill -9 while a torch job runs; restart; adopted
        long_job = d.submit("--", *PLAIN, "python3", "-c", "import torch, time; x = torch.ones(256, 1024, 1024, "
                            "device='cuda'); print('holding', flush=True); time.sleep(4); raise SystemExit(7)")
        d.wait_state(long_job, "running")
        d.kill()
        d.start()
        shown = d.finish(long_job)[0]
        s.check("kill -9: running job adopted, exit code recorded",
                (shown["state"], shown["exit_code"]) == ("failed", 7),
                f"state {shown['state']} exit {shown['exit_code']}")
    with open(os.path.join(s.args.out, "daemon.json"), "w") as f:
        json.dump(report, f, indent=2)
