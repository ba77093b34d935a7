#!/usr/bin/env python3
"""What the CUDA driver's checkpoint API does on this machine, before gpupool builds suspend and
resume on it (docs/benchmarks.md).

    scripts/device/probe-checkpoint.py OUT.json [GIB ...]

For each size (default 8 and 32 GiB): a torch process fills that much of GPU 0 with random
values and prints their checksum; this script then calls, from its own process through
libcuda.so.1, cuCheckpointProcessLock, cuCheckpointProcessCheckpoint (the GPU memory goes to host
memory and the GPU is released), reads what nvidia-smi says the process holds, then
cuCheckpointProcessRestore and cuCheckpointProcessUnlock, and asks the process to sum its values
again. Each call's result and time, the memory before, between and after, and whether the values
survived go to OUT.json and stdout. Nothing here is gpupool's code: it is the evidence it is
designed from.
"""
import ctypes
import json
import os
import subprocess
import sys
import time

HOLDER = """
import sys, torch
gib = int(sys.argv[1])
torch.manual_seed(7)
values = torch.randint(0, 2 ** 31 - 1, (gib * 2 ** 28,), dtype=torch.int32, device='cuda')
def checksum():
    return sum(int(chunk.sum(dtype=torch.int64)) for chunk in values.split(2 ** 26))
print(checksum(), flush=True)
for line in sys.stdin:
    print(checksum(), flush=True)
"""
PROCESS_STATES = {0: "running", 1: "locked", 2: "checkpointed", 3: "failed"}


def used_mib(pid):
    """What nvidia-smi lists the process as holding on the GPUs, MiB; None when it lists nothing."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    held = [int(line.split(",")[1]) for line in out.splitlines() if line.split(",")[0].strip() == str(pid)]
    return sum(held) if held else None


def probe(cuda, gib):
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="0")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(gib)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = {"gib": gib}
    try:
        result["checksum"] = holder.stdout.readline().strip()
        result["held_mib_before"] = used_mib(holder.pid)

        def state():
            value = ctypes.c_int(-1)
            code = cuda.cuCheckpointProcessGetState(holder.pid, ctypes.byref(value))
            return PROCESS_STATES.get(value.value, value.value) if code == 0 else f"error {code}"

        result["state_before"] = state()
        for call in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "held_between",
                     "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock"):
            if call == "held_between":
                result["held_mib_checkpointed"] = used_mib(holder.pid)
                result["state_checkpointed"] = state()
                continue
            began = time.monotonic()
            code = getattr(cuda, call)(holder.pid, None)
            result[call] = {"result": code, "seconds": round(time.monotonic() - began, 3)}
            print(f"{gib} GiB: {call} -> {code} in {result[call]['seconds']} s", flush=True)
            if code != 0:
                break
        result["state_after"] = state()
        result["held_mib_after"] = used_mib(holder.pid)
        holder.stdin.write("again\n")
        holder.stdin.flush()
        result["checksum_after"] = holder.stdout.readline().strip()
        result["values_survived"] = result["checksum_after"] == result["checksum"] != ""
    finally:
        holder.kill()
        result["holder_stderr"] = holder.communicate(timeout=30)[1][-400:]
    return result


def main():
    out = sys.argv[1]
    sizes = [int(size) for size in sys.argv[2:]] or [8, 32]
    report = {}
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        report["cuInit"] = cuda.cuInit(0)
        version = ctypes.c_int()
        cuda.cuDriverGetVersion(ctypes.byref(version))
        report["driver_cuda_version"] = version.value
        for name in ("cuCheckpointProcessLock", "cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore",
                     "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState"):
            getattr(cuda, name)  # AttributeError: the driver has no checkpoint API
        report["runs"] = [probe(cuda, gib) for gib in sizes]
    except (OSError, AttributeError) as error:
        report["error"] = f"{type(error).__name__}: {error}"
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
