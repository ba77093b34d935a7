#!/usr/bin/env python3
"""What a fatal GPU fault in one MPS client does to its neighbours, on a real GPU (no gpupool).

    scripts/device/probe-mps-fault.py OUT

Starts an MPS control daemon of its own (pipe and log directories under OUT), two healthy
clients (torch matrix products in a loop, each reporting the first CUDA error it meets) and one
client that writes through a bad pointer (a PTX kernel loaded through the driver API: an MMU
fault, Xid 31, not a device-side assert). It then records what each client saw and when, the
control daemon's and the server's logs, `get_server_status` before and after, whether a new
client can start afterwards, and the kernel's Xid lines where dmesg is readable: the facts a
scheduler needs to say "ended by a fault in job N on the same GPU" (docs/leases.md, MPS).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HEALTHY = r"""
import sys, time, torch
x = torch.randn(4096, 4096, device="cuda")
print("ready", flush=True)
deadline = time.time() + float(sys.argv[1])
n = 0
try:
    while time.time() < deadline:
        y = x @ x
        torch.cuda.synchronize()
        n += 1
    print(f"done {n}", flush=True)
except Exception as e:
    print(f"error after {n}: {type(e).__name__}: {e}", flush=True)
    sys.exit(3)
"""

# Stores through the pointer it is given: 0x10 is no allocation, so the MMU faults.
FAULTING = r"""
import ctypes, sys, time
ptx = b'''
.version 7.0
.target sm_80
.address_size 64
.visible .entry bad(.param .u64 p) {
  .reg .u64 %rd<2>;
  ld.param.u64 %rd1, [p];
  st.global.u32 [%rd1], 1;
  ret;
}
'''
cuda = ctypes.CDLL("libcuda.so.1")
def check(what, rc):
    if rc != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(rc, ctypes.byref(name))
        print(f"{what}: {rc} {name.value.decode() if name.value else ''}", flush=True)
    return rc
check("cuInit", cuda.cuInit(0))
device, context, module, function = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(device), 0))
check("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device))
check("cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(module), ptx))
check("cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(function), module, b"bad"))
time.sleep(float(sys.argv[1]))
pointer = ctypes.c_uint64(0x10)
params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(pointer), ctypes.c_void_p))
print(f"launching at {time.time():.3f}", flush=True)
check("cuLaunchKernel", cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None))
rc = check("cuCtxSynchronize", cuda.cuCtxSynchronize())
sys.exit(4 if rc else 0)
"""


def control(env, command):
    proc = subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", env=env, capture_output=True,
                          text=True, timeout=10)
    return (proc.stdout + proc.stderr).strip()


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError as e:
        return f"({e})"


def main():
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="mps-")  # short: the control socket's path must fit 107 bytes
    env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=f"{root}/pipe", CUDA_MPS_LOG_DIRECTORY=f"{root}/log",
               CUDA_VISIBLE_DEVICES="0")
    env.pop("LD_LIBRARY_PATH", None)
    for sub in ("pipe", "log"):
        os.makedirs(f"{root}/{sub}")
    facts = {"started": subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env).returncode}
    clients = {}
    try:
        for name, code, arg in (("healthy-a", HEALTHY, "40"), ("healthy-b", HEALTHY, "40"), ("faulting", FAULTING, "8")):
            clients[name] = subprocess.Popen([sys.executable, "-c", code, arg], env=env, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True)
        time.sleep(6)
        facts["server_list_before"] = control(env, "get_server_list")
        server = facts["server_list_before"].split()[0] if facts["server_list_before"] else ""
        facts["server_status_before"] = control(env, f"get_server_status {server}") if server else ""
        facts["ps_before"] = control(env, "ps")
        facts["smi_before"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
        ended = {}
        deadline = time.time() + 90
        while len(ended) < len(clients) and time.time() < deadline:
            for name, proc in clients.items():
                if name not in ended and proc.poll() is not None:
                    ended[name] = {"at": time.time(), "exit": proc.returncode, "output": proc.stdout.read()}
            time.sleep(0.1)
        facts["clients"] = ended
        facts["server_status_after"] = control(env, f"get_server_status {server}") if server else ""
        facts["server_list_after"] = control(env, "get_server_list")
        late = subprocess.run([sys.executable, "-c", HEALTHY, "3"], env=env, capture_output=True, text=True,
                              timeout=120)
        facts["new_client_after"] = {"exit": late.returncode, "output": late.stdout + late.stderr[-2000:]}
    finally:
        for proc in clients.values():
            if proc.poll() is None:
                proc.kill()
        facts["quit"] = control(env, "quit")
        time.sleep(2)
    facts["control_log"] = read(f"{root}/log/control.log")
    facts["server_log"] = read(f"{root}/log/server.log")
    dmesg = subprocess.run(["dmesg"], capture_output=True, text=True)
    facts["xid_lines"] = [line for line in (dmesg.stdout or dmesg.stderr).splitlines() if "Xid" in line][-20:]
    with open(os.path.join(out, "mps-fault.json"), "w") as f:
        json.dump(facts, f, indent=1)
    for key in ("clients", "server_status_before", "server_status_after", "new_client_after", "xid_lines"):
        print(f"== {key}\n{json.dumps(facts[key], indent=1)}")
    print(f"== server.log\n{facts['server_log'][-6000:]}\n== control.log\n{facts['control_log'][-3000:]}")


if __name__ == "__main__":
    main()
