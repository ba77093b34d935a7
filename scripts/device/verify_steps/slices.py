"""The `slices` step of scripts/device/verify: the slice watchdog on a real GPU, with torch.

With `slice_enforcement = "watch"` and `slice_overrun = "stop"` (sample_interval_s = 1):
  1. a torch job in a 4 GiB slice that allocates 8 GiB is ended, failed with the reason
     "used N GiB of its 4 GiB slice", within 2 s of its allocation (measured: the job's own clock
     after the allocation -> the job's end time in the daemon);
  2. a neighbour torch job in a 4 GiB slice on the same GPU, using 1 GiB, runs on and finishes;
  3. a slice job sees the frameworks' limits (CUPY_GPU_MEMORY_LIMIT, XLA_PYTHON_CLIENT_MEM_FRACTION).
Without a daemon, `gpupool run --mem 4G --slice-overrun stop` of the same torch program that
allocates 8 GiB is stopped within 2 s of its allocation, and says so.
"""
import json
import os
import re
import subprocess
import tempfile
import time

from verify_steps import PLAIN

# Allocates GiB (argv[1]), then says when on stdout (the job's log) and in a file, and waits for
# another file (argv[3]) before it exits 0.
ALLOCATE = ("import sys, time, torch; x = torch.ones(int(sys.argv[1]) << 28, device='cuda'); torch.cuda.synchronize(); "
            "t = time.time(); print('allocated', sys.argv[1], 'GiB at', t, flush=True); "
            "open(sys.argv[2], 'w').write(repr(t)); import os\n"
            "while not os.path.exists(sys.argv[3]): time.sleep(0.05)")


def step_slices(s):
    config = "[daemon]\nsample_interval_s = 1.0\nkill_grace_s = 2\nslice_enforcement = \"watch\"\nslice_overrun = \"stop\"\n"
    with s.daemon(config) as d:
        go = d.path("go")
        neighbour = d.submit("--mem", "4G", "--name", "neighbour", "--", *PLAIN, "python3", "-c", ALLOCATE, "1",
                             d.path("neighbour.t"), go)
        d.wait_state(neighbour, "running")
        hungry = d.submit("--mem", "4G", "--name", "hungry", "--", *PLAIN, "python3", "-c", ALLOCATE, "8",
                          d.path("hungry.t"), go)
        gpus = [d.wait_state(job, "running")["gpus"] for job in (neighbour, hungry)]
        s.check("both slices on one GPU", gpus[0] == gpus[1], f"GPUs {gpus}")

        ended = d.finish(hungry, timeout=120)[0]
        print(d.gp("logs", str(hungry)).stdout, flush=True)
        try:
            with open(d.path("hungry.t")) as f:
                allocated = float(f.read())
        except (OSError, ValueError):
            allocated = None
        reason_ok = ended["state"] == "failed" and re.fullmatch(r"used \d+(\.\d)? GiB of its 4 GiB slice", ended["reason"])
        s.check("over its slice: ended with the reason", bool(reason_ok), f"{ended['state']}: {ended['reason']!r}")
        if allocated is None:
            s.check("over its slice: ended within 2 s of the overrun", False, "the job never said it had allocated")
        else:
            took = ended["end_time"] - allocated
            s.check("over its slice: ended within 2 s of the overrun", took <= 2.0,
                    f"{took:.2f} s from the 8 GiB allocation to the job's end (sample interval 1 s)")

        d.wait_for_samples(2)
        state = d.job_state(neighbour)
        s.check("neighbour in its slice runs on", state == "running", state)
        used = d.show(neighbour).get("usage", {}).get("slice_used_mib")
        s.check("neighbour's use is watched and within its slice", used is not None and used <= 4096, f"{used} MiB")
        open(go, "w").close()
        shown = d.finish(neighbour, timeout=60)[0]
        s.check("neighbour finishes fine", (shown["state"], shown["exit_code"]) == ("done", 0),
                f"{shown['state']} exit {shown['exit_code']}")

        env_job = d.submit("--mem", "4G", "--", "sh", "-c",
                           'echo "limits $CUPY_GPU_MEMORY_LIMIT $XLA_PYTHON_CLIENT_MEM_FRACTION"')
        d.finish(env_job)
        log = d.gp("logs", str(env_job)).stdout
        s.check("a slice job sees the frameworks' limits", f"limits {4 << 30} 0." in log, log.strip())

    # Without a daemon: gpupool run watches its own slice (the default runtime directory has none).
    scratch = tempfile.mkdtemp(prefix="run-watch-", dir=s.args.root)
    stamp, go = os.path.join(scratch, "allocated.t"), os.path.join(scratch, "go")
    proc = s.cli("run", "--mem", "4G", "--slice-overrun", "stop", "--", *PLAIN, "python3", "-c", ALLOCATE, "8", stamp,
                 go, timeout=120)
    ended = time.time()
    try:
        with open(stamp) as f:
            allocated = float(f.read())
    except (OSError, ValueError):
        allocated = None
    said = re.search(r"was stopped: used \d+(\.\d)? GiB of its 4 GiB slice", proc.stderr)
    s.check("gpupool run without a daemon: stopped past its slice, with the reason",
            proc.returncode == 143 and bool(said), f"exit {proc.returncode}: {proc.stderr.strip()!r}")
    if allocated is None:
        s.check("gpupool run without a daemon: stopped within 2 s of the overrun", False,
                "the program never said it had allocated")
    else:
        took = ended - allocated
        s.check("gpupool run without a daemon: stopped within 2 s of the overrun", took <= 2.0,
                f"{took:.2f} s from the 8 GiB allocation to gpupool run's exit (samples every 1 s)")


# A slice kept busy with bf16 matmuls, and one that holds 1 GiB and runs no kernel, until argv[1] exists.
BUSY = ("import os, sys, torch; a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "while not os.path.exists(sys.argv[1]): (a @ a).sum().item()")
IDLE = ("import os, sys, time, torch; x = torch.ones(1 << 28, device='cuda'); torch.cuda.synchronize()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.1)")


def step_slice_activity(s):
    """Slices sharing a GPU: each job's utilisation is its own processes' (nvmlDeviceGetProcessUtilization),
    so the idle one is flagged idle (idle_flag_after 5 s) while the card is busy with its neighbour."""
    config = '[daemon]\nsample_interval_s = 1.0\nslice_enforcement = "watch"\n[monitor]\nidle_flag_after = "5s"\n'
    with s.daemon(config) as d:
        go = d.path("go")
        busy = d.submit("--mem", "8G", "--name", "busy", "--", *PLAIN, "python3", "-c", BUSY, go)
        idle = d.submit("--mem", "8G", "--name", "idle", "--", *PLAIN, "python3", "-c", IDLE, go)
        gpus = [d.wait_state(job, "running")["gpus"] for job in (busy, idle)]
        s.check("both slices on one GPU", gpus[0] == gpus[1], f"GPUs {gpus}")
        deadline = time.time() + 60
        usage = {}
        while time.time() < deadline:
            time.sleep(1)
            usage = {job: d.show(job).get("usage") or {} for job in (busy, idle)}
            if usage[idle].get("idle_since") and (usage[busy].get("mean_utilization") or 0) > 50:
                break
        listed = json.loads(s.cli("list", "--json", quiet=True).stdout or "[]")
        gpu = next((g for g in listed if g.get("index") == gpus[0][0]), {})
        print("processes:", [(p.get("pid"), p.get("sm_utilization"), p.get("used_memory_mib")) for p in gpu.get("processes", [])],
              f"card {gpu.get('utilization_gpu')} %", flush=True)
        pmon = subprocess.run(["nvidia-smi", "pmon", "-c", "1", "-s", "u"], capture_output=True, text=True)
        print("$ nvidia-smi pmon -c 1 -s u\n" + pmon.stdout + pmon.stderr, flush=True)
        # 0.0 is a figure: compared as one, not taken for missing.
        busy_mean, idle_mean = usage[busy].get("mean_utilization"), usage[idle].get("mean_utilization")
        s.check("each slice's own utilisation", busy_mean is not None and busy_mean > 50
                and idle_mean is not None and idle_mean < 5,
                f"busy {usage[busy].get('mean_utilization')} %, idle {usage[idle].get('mean_utilization')} % "
                f"(card {gpu.get('utilization_gpu')} %)")
        s.check("only the idle slice is flagged idle", bool(usage[idle].get("idle_since")) and not usage[busy].get("idle_since"),
                f"idle_since: busy {usage[busy].get('idle_since')}, idle {usage[idle].get('idle_since')}")
        listed_events = d.gp("events", "--kind", "job_idle", "--json").stdout.splitlines()
        s.check("its job_idle event, and none for the busy one",
                [json.loads(line)["job"] for line in listed_events] == [idle], "; ".join(listed_events))
        open(go, "w").close()
        d.finish(busy, idle, timeout=60)
