"""The `suspend` step of scripts/device/verify: `gpupool suspend` and `resume` on the real CUDA
driver (its checkpoint API), with torch.

For each size (8, 32 and, where the GPU has the memory, 100 GiB): a batch job fills that much of
its GPU with seeded random values and sums them; `gpupool suspend` must free that memory on the
GPU (nvidia-smi's memory.used, and the process gone from --query-compute-apps); another torch job
then runs on the same GPU and ends; `gpupool resume` restores the first, which sums its values
again and exits 0 only if they are the same. On the first size, `resume` is asked while the other
job still holds the GPU: the suspended job must wait its turn, then resume. Suspend and resume
times against size go to OUT/suspend.json and the summary.
"""
import contextlib
import json
import os
import subprocess
import time

from verify_steps import PLAIN

# argv: GiB, a file for the first sum, a file that says "go on", a file for the second sum.
HOLDER = """
import os, sys, time, torch
gib = int(sys.argv[1])
torch.manual_seed(7)
values = torch.randint(0, 2 ** 31 - 1, (gib << 28,), dtype=torch.int32, device='cuda')
def checksum():
    return sum(int(chunk.sum(dtype=torch.int64)) for chunk in values.split(1 << 26))
first = checksum()
open(sys.argv[2], 'w').write(str(first))
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
second = checksum()
open(sys.argv[4], 'w').write(str(second))
sys.exit(0 if first == second else 3)
"""
# Another job on the GPU while the first is suspended: 4 GiB, a matmul, then waits for argv[1].
OTHER = """
import os, sys, time, torch
x = torch.ones(1 << 30, device='cuda'); a = torch.randn(4096, 4096, device='cuda'); (a @ a).sum().item()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
"""


def gpu_memory_mib(index):
    out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=memory.used,memory.total",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    used, total = (int(v) for v in out.strip().split(","))
    return used, total


def listed_pids():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    return {int(line) for line in out.split() if line.strip().isdigit()}


def wait_file(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    with open(path) as f:
        return f.read().strip()


def one_size(s, d, gib, busy_resume):
    tag = f"{gib} GiB"
    paths = {name: d.path(f"{gib}-{name}") for name in ("first", "go", "second", "other-go")}
    job = d.submit("--name", f"hold{gib}", "--", *PLAIN, "python3", "-c", HOLDER, str(gib), paths["first"],
                   paths["go"], paths["second"])
    gpu = d.wait_state(job, "running", timeout=60)["gpus"][0]
    first = wait_file(paths["first"], 300)
    if first is None:
        s.check(f"suspend {tag}: the job filled its GPU", False, d.gp("logs", "-e", str(job)).stdout[-400:])
        return None
    d.wait_for_samples(2)
    used_before, total = gpu_memory_mib(gpu)
    began = time.monotonic()
    suspended = d.gp("suspend", str(job), timeout=900)
    suspend_s = time.monotonic() - began
    print(f"$ gpupool suspend {job}  -> exit {suspended.returncode}\n{suspended.stdout}{suspended.stderr}", flush=True)
    shown = d.show(job)
    used_during, _ = gpu_memory_mib(gpu)
    pid_gone = not (set(shown.get("suspension", {}).get("pids", [])) & listed_pids())
    s.check(f"suspend {tag}: suspended, its GPU memory freed",
            suspended.returncode == 0 and shown["state"] == "suspended" and used_before - used_during >= gib * 1024 * 0.9
            and pid_gone,
            f"{suspend_s:.2f} s; GPU {gpu} memory.used {used_before} -> {used_during} MiB of {total}; "
            f"process listed: {not pid_gone}; {suspended.stdout.strip() or suspended.stderr.strip()}")
    if suspended.returncode != 0:
        open(paths["go"], "w").close()
        d.finish(job, timeout=300)
        return None

    other = d.submit("--name", f"other{gib}", "--", *PLAIN, "python3", "-c", OTHER, paths["other-go"])
    other_gpu = d.wait_state(other, "running", timeout=60)["gpus"][0]
    if busy_resume:
        waiting = d.gp("resume", str(job), "--no-wait")
        d.wait_for_samples(3)
        state = d.show(job)
        s.check(f"resume {tag} while GPU {gpu} is busy: waits its turn",
                other_gpu != gpu or (waiting.returncode == 0 and state["state"] == "suspended"),
                f"other job on GPU {other_gpu}; {state['state']}: {state['reason']}")
        began = time.monotonic()
        open(paths["other-go"], "w").close()
        d.finish(other, timeout=120)
        resumed = d.wait_state(job, "running", timeout=900)
        resume_s = time.monotonic() - began
        resume_ok = resumed["state"] == "running"
    else:
        open(paths["other-go"], "w").close()
        other_end = d.finish(other, timeout=120)[0]
        s.check(f"suspend {tag}: another job ran on GPU {gpu} meanwhile", other_gpu == gpu and other_end["state"] == "done",
                f"other job on GPU {other_gpu}: {other_end['state']}")
        began = time.monotonic()
        resumed_proc = d.gp("resume", str(job), timeout=900)
        resume_s = time.monotonic() - began
        print(f"$ gpupool resume {job}  -> exit {resumed_proc.returncode}\n{resumed_proc.stdout}{resumed_proc.stderr}",
              flush=True)
        resume_ok = resumed_proc.returncode == 0
    used_after, _ = gpu_memory_mib(gpu)
    open(paths["go"], "w").close()
    ended = d.finish(job, timeout=300)[0]
    second = wait_file(paths["second"], 5)
    s.check(f"resume {tag}: restored, its values intact, it ends done",
            resume_ok and ended["state"] == "done" and ended["exit_code"] == 0 and first == second,
            f"{resume_s:.2f} s; memory.used back to {used_after} MiB; sums {first} / {second}; "
            f"{ended['state']} exit {ended['exit_code']} {ended['reason']}")
    return {"gib": gib, "gpu": gpu, "suspend_s": round(suspend_s, 2), "resume_s": round(resume_s, 2),
            "memory_used_mib": [used_before, used_during, used_after], "values_intact": first == second}


def step_suspend(s):
    config = "[daemon]\nsample_interval_s = 1.0\n"
    rows = []
    with s.daemon(config) as d:
        d.protocol = 3
        _, total = gpu_memory_mib(0)
        sizes = [gib for gib in s.args.sizes if gib * 1024 + 6000 < total]
        for gib in s.args.sizes:
            if gib not in sizes:
                s.result("SKIP", f"suspend {gib} GiB", f"the GPU has {total} MiB")
        for i, gib in enumerate(sizes):
            row = one_size(s, d, gib, busy_resume=i == 0)
            if row:
                rows.append(row)
        events = [json.loads(line) for line in d.gp("events", "--json").stdout.splitlines()]
        print("events:", [(e["kind"], e["job"], e["detail"]) for e in events if "suspend" in e["kind"] or
                          e["kind"] == "job_resumed"], flush=True)
    with open(os.path.join(s.args.out, "suspend.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(json.dumps(rows, indent=1), flush=True)


# Holds 4 GiB and runs no kernel until argv[1] exists: idle to the monitor.
IDLE = ("import os, sys, time, torch; x = torch.ones(1 << 30, device='cuda'); torch.cuda.synchronize()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.1)\n"
        "assert float(x.sum()) == float(1 << 30)")


@contextlib.contextmanager
def one_gpu_daemon(s, config, check, why):
    """A daemon (protocol 3: it knows the suspended state) on a machine of one GPU; on another,
    None, with `check` said to be skipped for `why`."""
    with s.daemon(config) as d:
        d.protocol = 3
        gpus = len(json.loads(s.cli("list", "--json", quiet=True).stdout or "[]"))
        if gpus == 1:
            yield d
        else:
            s.result("SKIP", check, f"{gpus} GPUs: {why}")
            yield None


def step_suspend_policies(s):
    """The daemon suspends by itself: an idle job while another waits (idle_suspend_after), and a job
    of lower priority for one of higher priority (preempt = "suspend"); each resumes after."""
    config = ('[daemon]\nsample_interval_s = 1.0\nidle_suspend_after = "5s"\n[monitor]\nidle_flag_after = "5s"\n'
              '[scheduler]\npreempt = "suspend"\n')
    with one_gpu_daemon(s, config, "suspend policies", "the waiting job would take another") as d:
        if d is None:
            return
        idle = d.submit("--name", "idle", "--", *PLAIN, "python3", "-c", IDLE, d.path("idle-go"))
        d.wait_state(idle, "running", timeout=60)
        deadline = time.monotonic() + 60
        while not (d.show(idle).get("usage") or {}).get("idle_since") and time.monotonic() < deadline:
            time.sleep(0.5)
        waiting = d.submit("--name", "waiting", "--", *PLAIN, "python3", "-c", OTHER, d.path("waiting-go"))
        began = time.monotonic()
        shown = d.wait_state(waiting, "running", timeout=120)
        took = time.monotonic() - began
        idle_shown = d.show(idle)
        s.check("idle_suspend_after: the idle job suspended, the waiting one runs on its GPU",
                idle_shown["state"] == "suspended" and shown["gpus"] == idle_shown["gpus"],
                f"{took:.1f} s from the submission to its start; {idle_shown['state']}: {idle_shown['reason']}")
        open(d.path("waiting-go"), "w").close()
        d.finish(waiting, timeout=120)
        resumed = d.wait_state(idle, "running", timeout=300)
        s.check("idle_suspend_after: the idle job resumes once the GPU is free", resumed["state"] == "running",
                resumed["reason"] or "running")

        # Preemption: the idle job is running again; a job of priority 5 makes it give way.
        urgent = d.submit("--priority", "5", "--name", "urgent", "--", *PLAIN, "python3", "-c", OTHER, d.path("urgent-go"))
        shown = d.wait_state(urgent, "running", timeout=120)
        low = d.show(idle)
        s.check("preempt = suspend: the job of lower priority suspended for the urgent one",
                low["state"] == "suspended" and f"for job {urgent}" in low["reason"], f"{low['state']}: {low['reason']}")
        open(d.path("urgent-go"), "w").close()
        d.finish(urgent, timeout=120)
        d.wait_state(idle, "running", timeout=300)
        open(d.path("idle-go"), "w").close()
        ended = d.finish(idle, timeout=120)[0]
        s.check("the twice suspended job ends done, its memory intact", (ended["state"], ended["exit_code"]) == ("done", 0),
                f"{ended['state']} exit {ended['exit_code']} {ended['reason']}")
        events = [json.loads(line) for line in d.gp("events", "--job", str(idle), "--json").stdout.splitlines()]
        print("events:", [(e["kind"], e["detail"]) for e in events], flush=True)


def step_suspend_loan(s):
    """backfill = "suspend" on one GPU: "first" (a slice with an hour's time limit) runs, "whole" waits
    for all the GPU and holds the reservation, and "loan" (a slice holding 8 GiB of known values, no
    time limit) starts on loan. Once "first" ends, "loan" is suspended, "whole" runs, and "loan"
    resumes after it with its values intact."""
    config = '[daemon]\nsample_interval_s = 1.0\nslice_enforcement = "watch"\n[scheduler]\nbackfill = "suspend"\n'
    with one_gpu_daemon(s, config, "backfill on loan", "the jobs would not meet on one") as d:
        if d is None:
            return
        first = d.submit("--mem", "20G", "--time", "1h", "--name", "first", "--", *PLAIN, "python3", "-c", OTHER,
                         d.path("first-go"))
        d.wait_state(first, "running", timeout=120)
        whole = d.submit("--name", "whole", "--", *PLAIN, "python3", "-c", OTHER, d.path("whole-go"))
        sums = {name: d.path(f"loan-{name}") for name in ("first", "go", "second")}
        loan = d.submit("--mem", "40G", "--name", "loan", "--", *PLAIN, "python3", "-c", HOLDER, "8", sums["first"],
                        sums["go"], sums["second"])
        started = d.wait_state(loan, "running", timeout=120)
        filled = wait_file(sums["first"], 300)
        s.check("a job without a time limit starts on loan beside the reservation",
                started["state"] == "running" and d.show(whole)["state"] == "queued" and filled is not None,
                f"loan {started['state']}, whole {d.show(whole)['state']}: {d.show(whole)['reason']}")
        d.wait_for_samples(2)  # its process seen on the GPU: what the checkpoint takes
        open(d.path("first-go"), "w").close()
        began = time.monotonic()
        whole_shown = d.wait_state(whole, "running", timeout=300)
        took = time.monotonic() - began
        loan_shown = d.show(loan)
        s.check("the job on loan suspended for the reserved job, which runs",
                whole_shown["state"] == "running" and loan_shown["state"] == "suspended"
                and f"reserved for job {whole}" in loan_shown["reason"],
                f"{took:.1f} s from the end of 'first' to the start of 'whole'; loan {loan_shown['state']}: "
                f"{loan_shown['reason']}")
        open(d.path("whole-go"), "w").close()
        d.finish(whole, timeout=120)
        d.wait_state(loan, "running", timeout=300)
        open(sums["go"], "w").close()
        ended = d.finish(loan, timeout=300)[0]
        second = wait_file(sums["second"], 5)
        s.check("the job on loan resumes after it and ends done, its values intact",
                (ended["state"], ended["exit_code"]) == ("done", 0) and filled == second,
                f"{ended['state']} exit {ended['exit_code']} {ended['reason']}; sums {filled} / {second}")
        events = [json.loads(line) for line in d.gp("events", "--job", str(loan), "--json").stdout.splitlines()]
        print("events:", [(e["kind"], e["detail"]) for e in events], flush=True)


def step_suspend_interactive(s):
    """`gpupool run` through the daemon (an interactive job: its client holds the leases) of a torch
    program holding 8 GiB: suspended (GPU memory freed), resumed, its values intact."""
    with s.daemon("[daemon]\nsample_interval_s = 1.0\n") as d:
        d.protocol = 3
        paths = {name: d.path(f"run-{name}") for name in ("first", "go", "second")}
        run = d.background("run", "--", *PLAIN, "python3", "-c", HOLDER, "8", paths["first"], paths["go"],
                           paths["second"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = wait_file(paths["first"], 300)
        jobs = [j for j in d.jobs() if j["kind"] == "interactive"]
        if first is None or len(jobs) != 1:
            run.kill()
            s.check("gpupool run: suspended and resumed", False, f"the program never filled its GPU; jobs {jobs}")
            return
        job, gpu = jobs[0]["id"], jobs[0]["gpus"][0]
        d.wait_for_samples(2)
        before, _ = gpu_memory_mib(gpu)
        suspended = d.gp("suspend", str(job), timeout=600)
        during, _ = gpu_memory_mib(gpu)
        resumed = d.gp("resume", str(job), timeout=600)
        open(paths["go"], "w").close()
        out, err = run.communicate(timeout=300)
        second = wait_file(paths["second"], 5)
        s.check("gpupool run: suspended and resumed through its client, its values intact",
                suspended.returncode == 0 and resumed.returncode == 0 and during < 1024 and run.returncode == 0
                and first == second,
                f"memory.used {before} -> {during} MiB; {suspended.stdout.strip()}; {resumed.stdout.strip()}; "
                f"run exit {run.returncode}; sums {first} / {second} {err[-300:]}")


def driver_state(s, pid):
    """The process's checkpoint state as the driver says it (the staged helper's `state` step)."""
    helper = os.path.join(s.args.bin, "..", "lib", "gpupool", "gpupool-cuda-checkpoint")
    words = subprocess.run([helper, "state", str(pid)], capture_output=True, text=True, timeout=120).stdout.split()
    return words[2] if len(words) == 4 else "unknown"


def wait_for(what, timeout, poll=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = what()
        if value:
            return value
        time.sleep(poll)
    return None


def step_suspend_restart(s):
    """gpupoold killed (kill -9) during a job's checkpoint, then during its restore: each time the
    restarted daemon waits for the helper left in the driver, reads where it left the process and
    goes on; the job's values are intact and it ends done. Its time limit does not count the time
    suspended."""
    gib = s.args.gib
    config = "[daemon]\nsample_interval_s = 1.0\n"
    with s.daemon(config) as d:
        d.protocol = 3
        _, total = gpu_memory_mib(0)
        if gib * 1024 + 6000 >= total:
            s.result("SKIP", "suspend-restart", f"the GPU has {total} MiB")
            return
        paths = {name: d.path(f"restart-{name}") for name in ("first", "go", "second")}
        job = d.submit("--name", "restart", "--time", "20m", "--", *PLAIN, "python3", "-c", HOLDER, str(gib),
                       paths["first"], paths["go"], paths["second"])
        gpu = d.wait_state(job, "running", timeout=60)["gpus"][0]
        first = wait_file(paths["first"], 300)
        d.wait_for_samples(2)
        used_before, _ = gpu_memory_mib(gpu)
        began = time.monotonic()
        d.gp("suspend", str(job), "--no-wait", check=True)
        pid = wait_for(lambda: (d.show(job).get("suspension") or {}).get("pids", [None])[0], 30)
        locked = wait_for(lambda: driver_state(s, pid) in ("locked", "checkpointing"), 60, poll=0.1)
        time.sleep(2)  # well inside a checkpoint of this size (about 20 s for 32 GiB)
        d.kill()
        state_at_kill = driver_state(s, pid)
        d.start()
        shown = d.wait_state(job, "suspended", timeout=600)
        suspend_s = time.monotonic() - began
        used_during, _ = gpu_memory_mib(gpu)
        s.check("suspend-restart: gpupoold killed during the checkpoint; the restarted one goes on to suspended",
                bool(locked) and shown["state"] == "suspended" and used_before - used_during >= gib * 1024 * 0.9,
                f"killed {2:.0f} s into the checkpoint (the driver said {state_at_kill} then); suspended "
                f"{suspend_s:.1f} s after the suspend; GPU {gpu} memory.used {used_before} -> {used_during} MiB")

        d.gp("resume", str(job), "--no-wait", check=True)
        resuming = wait_for(lambda: d.show(job)["reason"] == "resuming", 60, poll=0.1)
        time.sleep(1)  # inside the restore (about 7 s for 32 GiB)
        d.kill()
        state_at_kill = driver_state(s, pid)
        d.start()
        resumed = d.wait_state(job, "running", timeout=600)
        open(paths["go"], "w").close()
        ended = d.finish(job, timeout=300)[0]
        second = wait_file(paths["second"], 5)
        # The helper's lock file of the process, removed once the process has ended.
        lock_gone = wait_for(lambda: not os.path.exists(os.path.join(d.state_dir, "checkpoints", str(pid))), 10,
                             poll=0.1)
        s.check("suspend-restart: gpupoold killed during the restore; the restarted one resumes it, values intact",
                bool(resuming) and resumed["state"] == "running" and ended["state"] == "done" and first == second
                and bool(lock_gone),
                f"the driver said {state_at_kill} at the kill; suspended_s {resumed.get('suspended_s', 0):.1f}; "
                f"sums {first} / {second}; {ended['state']} exit {ended['exit_code']} {ended['reason']}; "
                f"lock file {'removed' if lock_gone else 'left'}")
