"""The `mps` step of scripts/device/verify: memory slices held by CUDA's MPS on a real GPU, with torch.

With `slice_enforcement = "mps"`:
  1. two 4 GiB slice jobs on one GPU run as clients of that GPU's MPS server (nvidia-smi lists them
     as M+C); the one that allocates 8 GiB gets CUDA's out-of-memory error, in that process alone,
     and the neighbour's matrix products give the same result before and after;
  2. a bf16 matrix-product loop in an MPS slice against the same loop without MPS: at least 95 %
     of the throughput; `--sm 25` (a batch job) beside `--sm 75` (`gpupool run`, interactive), the
     same loop at the same time: a throughput ratio near 1:3;
  3. a slice job whose program leaves MPS (CUDA_MPS_PIPE_DIRECTORY unset) is ended, failed with
     "its process N used GPU G outside MPS, ...", within 2 s of its allocation;
  4. a gpupoold killed with kill -9 while an MPS slice runs: the next daemon adopts the GPU's
     control daemon (started once), a slice submitted after the restart joins that server, both
     finish, and the control daemon quits once none runs.
"""
import importlib.util
import os
import re
import subprocess
import time

from verify_steps import HERE, PLAIN

# Allocates GiB (argv[1]) in steps of 1 GiB; says how far it got and how it failed.
ALLOCATE = ("import sys, torch\nheld = []\n"
            "try:\n"
            "    for _ in range(int(sys.argv[1])): held.append(torch.empty(1 << 30, dtype=torch.uint8, device='cuda'))\n"
            "    print('allocated', len(held), 'GiB', flush=True)\n"
            "except torch.OutOfMemoryError as e:\n"
            "    print('out of memory after', len(held), 'GiB:', str(e).splitlines()[0], flush=True); sys.exit(3)\n")
# Allocates GiB (argv[1]), writes when to the file argv[2], then waits for the file argv[3].
ALLOCATE_AND_WAIT = ("import os, sys, time, torch; x = torch.ones(int(sys.argv[1]) << 28, device='cuda'); "
                     "torch.cuda.synchronize(); open(sys.argv[2], 'w').write(repr(time.time()))\n"
                     "while not os.path.exists(sys.argv[3]): time.sleep(0.05)")
# Matrix products until the file argv[1] exists; the same product's checksum at the start and the end.
NEIGHBOUR = ("import os, sys, time, torch\ntorch.manual_seed(0)\n"
             "a = torch.randn(4096, 4096, device='cuda'); keep = torch.empty(1 << 30, dtype=torch.uint8, device='cuda')\n"
             "first = (a @ a).sum().item(); n = 0\n"
             "while not os.path.exists(sys.argv[1]): b = a @ a; n += 1\n"
             "last = (a @ a).sum().item(); print('products', n, 'first', first, 'last', last, flush=True)\n"
             "sys.exit(0 if first == last else 4)\n")
# A bf16 matrix-product loop for argv[1] seconds (once the file argv[2] exists, when given):
# TFLOP/s on stdout.
MATMUL = ("import os, sys, time, torch\na = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
          "for _ in range(5): a @ a\n"
          "while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]): time.sleep(0.01)\n"
          "torch.cuda.synchronize(); t = time.time(); n = 0\n"
          "while time.time() - t < float(sys.argv[1]):\n"
          "    for _ in range(10): a @ a\n    torch.cuda.synchronize(); n += 10\n"
          "print('tflops', n * 2 * 8192 ** 3 / (time.time() - t) / 1e12, flush=True)\n")


def control_log(d, uuid):
    try:
        with open(os.path.join(d.runtime_dir, "mps", uuid[:12], "log", "control.log")) as f:
            return f.read()
    except OSError:
        return ""


def control_gone(d, uuid):
    return not os.path.exists(os.path.join(d.runtime_dir, "mps", uuid[:12], "pipe", "nvidia-cuda-mps-control.pid")) and \
        subprocess.run(["pgrep", "-f", "nvidia-cuda-mps-control"], capture_output=True).returncode != 0


def wait_for(condition, timeout):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def started(s, d, job, what):
    """The job once it runs; a FAIL line with its state and reason when it ended instead."""
    shown = d.wait_state(job, "running", "done", "failed", "cancelled", timeout=120)
    if shown["state"] != "running":
        s.check(f"MPS: {what} starts", False, f"{shown['state']}: {shown['reason']}")
        raise AssertionError(f"{what} did not start: {shown['reason']}")
    return shown


def mps_clients(count, timeout=60):
    """Waits until nvidia-smi lists `count` MPS clients (M+C); its output."""
    deadline = time.monotonic() + timeout
    while True:
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
        if smi.count("M+C") >= count or time.monotonic() > deadline:
            return smi
        time.sleep(0.5)


def tflops(text):
    found = re.search(r"tflops ([\d.]+)", text)
    return float(found.group(1)) if found else None


def step_mps(s):
    config = "[daemon]\nsample_interval_s = 1.0\nkill_grace_s = 2\nslice_enforcement = \"mps\"\n"
    with s.daemon(config) as d:
        go = d.path("go")
        neighbour = d.submit("--mem", "4G", "--name", "neighbour", "--", *PLAIN, "python3", "-c", NEIGHBOUR, go)
        shown = started(s, d, neighbour, "the neighbour")
        uuid = shown["gpu_uuids"][0]
        hungry = d.submit("--mem", "4G", "--name", "hungry", "--", *PLAIN, "python3", "-c", ALLOCATE, "8")
        ended = d.finish(hungry, timeout=120)[0]
        log = d.gp("logs", str(hungry)).stdout
        print(log, flush=True)
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
        print(smi, flush=True)
        s.check("MPS: both slices on one GPU", ended["gpus"] == shown["gpus"], f"{ended['gpus']} and {shown['gpus']}")
        s.check("MPS: a job past its slice gets CUDA's out-of-memory error",
                ended["exit_code"] == 3 and "out of memory after" in log, f"exit {ended['exit_code']}: {log.strip()}")
        s.check("MPS: nvidia-smi lists the neighbour as an MPS client", "M+C" in smi,
                " ".join(line.strip() for line in smi.splitlines() if "M+C" in line or "mps-server" in line))
        d.wait_for_samples(2)
        s.check("MPS: the neighbour runs on", d.job_state(neighbour) == "running", d.job_state(neighbour))
        open(go, "w").close()
        done = d.finish(neighbour, timeout=120)[0]
        print(d.gp("logs", str(neighbour)).stdout, flush=True)
        s.check("MPS: the neighbour's products are intact", (done["state"], done["exit_code"]) == ("done", 0),
                f"{done['state']} exit {done['exit_code']}")
        s.check("MPS: the control daemon quits once no slice runs", wait_for(lambda: control_gone(d, uuid), 30),
                control_log(d, uuid)[-400:])

        mps = d.submit("--mem", "20G", "--name", "mps-matmul", "--", *PLAIN, "python3", "-c", MATMUL, "15")
        d.finish(mps, timeout=180)
        under_mps = re.search(r"tflops ([\d.]+)", d.gp("logs", str(mps)).stdout)
        plain = subprocess.run([*PLAIN, "python3", "-c", MATMUL, "15"], capture_output=True, text=True, timeout=180)
        alone = re.search(r"tflops ([\d.]+)", plain.stdout)
        if under_mps and alone:
            ratio = float(under_mps.group(1)) / float(alone.group(1))
            s.check("MPS: one job under MPS keeps >= 95 % of its throughput", ratio >= 0.95,
                    f"{float(under_mps.group(1)):.1f} against {float(alone.group(1)):.1f} TFLOP/s: {ratio:.1%}")
        else:
            s.check("MPS: one job under MPS keeps >= 95 % of its throughput", False, f"{plain.stdout}{plain.stderr}")
        wait_for(lambda: control_gone(d, uuid), 30)

        # Compute shares: --sm 25 (a batch job) beside --sm 75 (`gpupool run`, interactive), the same
        # loop at the same time.
        together = d.path("together")
        small = d.submit("--mem", "20G", "--sm", "25", "--name", "sm25", "--", *PLAIN, "python3", "-c", MATMUL, "20",
                         together)
        large = d.background("run", "--mem", "20G", "--sm", "75", "-q", "--", *PLAIN, "python3", "-c", MATMUL, "20",
                             together, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        print(mps_clients(2), flush=True)
        open(together, "w").close()
        large_out, large_err = large.communicate(timeout=180)
        d.finish(small, timeout=180)
        small_tflops, large_tflops = tflops(d.gp("logs", str(small)).stdout), tflops(large_out)
        if small_tflops and large_tflops:
            ratio = large_tflops / small_tflops
            s.check("MPS: --sm 25 beside --sm 75 (run) gives about 1:3", 2.4 <= ratio <= 3.6,
                    f"{small_tflops:.1f} and {large_tflops:.1f} TFLOP/s: 1:{ratio:.2f}")
        else:
            s.check("MPS: --sm 25 beside --sm 75 (run) gives about 1:3", False, f"{large_out}{large_err}")
        wait_for(lambda: control_gone(d, uuid), 30)

        # A program that leaves MPS: seen at the next sample (1 s), ended.
        outside = d.submit("--mem", "4G", "--name", "outside", "--", *PLAIN, "env", "-u", "CUDA_MPS_PIPE_DIRECTORY",
                           "python3", "-c", ALLOCATE_AND_WAIT, "1", d.path("outside.t"), d.path("never"))
        ended = d.finish(outside, timeout=120)[0]
        try:
            with open(d.path("outside.t")) as f:
                took = f"{ended['end_time'] - float(f.read()):.2f} s from its allocation to its end"
        except (OSError, ValueError):
            took = "it never said it had allocated"
        s.check("MPS: a slice process outside MPS ends its job",
                ended["state"] == "failed" and "outside MPS" in ended["reason"],
                f"{ended['state']}: {ended['reason']}; {took}")
        wait_for(lambda: control_gone(d, uuid), 30)

        starts_before = control_log(d, uuid).count("Starting control daemon")
        first = d.submit("--mem", "4G", "--name", "before", "--", *PLAIN, "python3", "-c", NEIGHBOUR, go + "2")
        started(s, d, first, "the slice before the restart")
        mps_clients(1)  # an MPS client before the kill
        d.kill()
        d.start()
        second = d.submit("--mem", "4G", "--name", "after", "--", *PLAIN, "python3", "-c", NEIGHBOUR, go + "2")
        started(s, d, second, "the slice after the restart")
        smi = mps_clients(2)
        open(go + "2", "w").close()
        results = d.finish(first, second, timeout=120)
        starts = control_log(d, uuid).count("Starting control daemon") - starts_before
        s.check("MPS: a restart adopts the control daemon (started once, both slices done)",
                starts == 1 and all((j["state"], j["exit_code"]) == ("done", 0) for j in results),
                f"{starts} starts; " + ", ".join(f"{j['name']} {j['state']} {j['exit_code']}" for j in results)
                + f"; MPS clients together after the restart: {smi.count('M+C')}")
        s.check("MPS: the adopted control daemon quits once no slice runs", wait_for(lambda: control_gone(d, uuid), 30),
                control_log(d, uuid)[-400:])


def faulting_client():
    """The probe's client that writes through a bad pointer (scripts/device/probe-mps-fault.py)."""
    spec = importlib.util.spec_from_file_location("probe_mps_fault", os.path.join(HERE, "probe-mps-fault.py"))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe.FAULTING


def step_mps_fault(s):
    config = "[daemon]\nsample_interval_s = 1.0\nkill_grace_s = 2\nslice_enforcement = \"mps\"\n"
    with s.daemon(config) as d:
        go = d.path("go")
        neighbour = d.submit("--mem", "4G", "--name", "neighbour", "--", *PLAIN, "python3", "-c", NEIGHBOUR, go)
        started(s, d, neighbour, "the neighbour")
        # It faults 8 s on: the watchdog's samples have seen both clients by then.
        culprit = d.submit("--mem", "4G", "--name", "culprit", "--", *PLAIN, "python3", "-c", faulting_client(), "8")
        ended = {culprit: d.finish(culprit, timeout=120)[0]}
        s.check("MPS fault: the neighbour ends with the culprit", wait_for(lambda: d.job_state(neighbour) != "running", 30),
                d.job_state(neighbour))
        open(go, "w").close()  # where it did not, it ends now
        ended[neighbour] = d.finish(neighbour, timeout=120)[0]
        for job in (culprit, neighbour):
            print(d.gp("logs", str(job)).stdout, d.gp("logs", "--stderr", str(job)).stdout[-2000:], flush=True)
        log = os.path.join(d.runtime_dir, "mps")
        print(subprocess.run(["sh", "-c", f"tail -n 40 {log}/*/log/server.log"], capture_output=True, text=True).stdout)
        s.check("MPS fault: the culprit's end names its fault", ended[culprit]["reason"].startswith(
            "a fatal GPU fault in its process"), f"{ended[culprit]['state']}: {ended[culprit]['reason']}")
        s.check("MPS fault: the neighbour's end names the culprit's job",
                ended[neighbour]["reason"].startswith(f"ended by a fault in job {culprit} on the same GPU"),
                f"{ended[neighbour]['state']}: {ended[neighbour]['reason']}")
        after = d.submit("--mem", "4G", "--name", "after", "--", *PLAIN, "python3", "-c", ALLOCATE, "1")
        done = d.finish(after, timeout=120)[0]
        s.check("MPS fault: the server takes new clients after it", (done["state"], done["exit_code"]) == ("done", 0),
                f"{done['state']} exit {done['exit_code']}: {done['reason']}")
