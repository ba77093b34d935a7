#!/usr/bin/env python3
"""Times each NVML call `gpupool list` makes, on the real driver (ctypes): the first call and the median of 20.

Usage: nvml-call-costs.py — prints microseconds per call, median of 20, most expensive first,
to find where the time of `gpupool list --json` goes beside nvidia-smi's.
"""
import ctypes
import statistics
import subprocess
import sys
import time

# Initialisation variants, each in a fresh process (the first init of a process is what a CLI pays).
INIT = ("import ctypes, time; n = ctypes.CDLL('libnvidia-ml.so.1'); t = time.perf_counter(); "
        "rc = {call}; print(rc, round(1e3 * (time.perf_counter() - t), 2))")
for label, call in (("nvmlInit_v2", "n.nvmlInit_v2()"), ("nvmlInitWithFlags(0)", "n.nvmlInitWithFlags(0)"),
                    ("nvmlInitWithFlags(NO_ATTACH)", "n.nvmlInitWithFlags(2)")):
    runs = [subprocess.run([sys.executable, "-c", INIT.format(call=call)], capture_output=True, text=True).stdout.split()
            for _ in range(5)]
    print(f"{label}: rc {runs[0][0]}, ms " + " ".join(r[1] for r in runs if len(r) == 2))

nvml = ctypes.CDLL("libnvidia-ml.so.1")
start = time.perf_counter()
assert nvml.nvmlInit_v2() == 0
print(f"nvmlInit_v2: {1e3 * (time.perf_counter() - start):.2f} ms")
device = ctypes.c_void_p()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device))
buf = ctypes.create_string_buffer(256)
u = ctypes.c_uint()
ul = (ctypes.c_ulong * 64)()
big = ctypes.create_string_buffer(4096)
# Four nvmlFieldValue_t records (40 bytes each, fieldId first): the NVLink error totals.
fields = ctypes.create_string_buffer(40 * 4)
for i, field in enumerate((38, 45, 52, 59)):
    ctypes.memmove(ctypes.addressof(fields) + 40 * i, ctypes.byref(ctypes.c_uint(field)), 4)
calls = {
    "GetName": lambda: nvml.nvmlDeviceGetName(device, buf, 96),
    "GetUUID": lambda: nvml.nvmlDeviceGetUUID(device, buf, 96),
    "GetPciInfo_v3": lambda: nvml.nvmlDeviceGetPciInfo_v3(device, big),
    "GetMinorNumber": lambda: nvml.nvmlDeviceGetMinorNumber(device, ctypes.byref(u)),
    "GetMemoryInfo_v2": lambda: (ctypes.memmove(big, ctypes.byref(ctypes.c_uint(40 | (2 << 24))), 4),
                                 nvml.nvmlDeviceGetMemoryInfo_v2(device, big)),
    "GetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(device, big),
    "GetTemperature": lambda: nvml.nvmlDeviceGetTemperature(device, 0, ctypes.byref(u)),
    "GetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(device, ctypes.byref(u)),
    "GetEnforcedPowerLimit": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(device, ctypes.byref(u)),
    "GetPersistenceMode": lambda: nvml.nvmlDeviceGetPersistenceMode(device, ctypes.byref(u)),
    "GetComputeMode": lambda: nvml.nvmlDeviceGetComputeMode(device, ctypes.byref(u)),
    "GetMigMode": lambda: nvml.nvmlDeviceGetMigMode(device, ctypes.byref(u), ctypes.byref(ctypes.c_uint())),
    "GetTotalEccErrors": lambda: nvml.nvmlDeviceGetTotalEccErrors(device, 0, 0, big),
    "GetMemoryAffinity": lambda: nvml.nvmlDeviceGetMemoryAffinity(device, 64, ul, 0),
    "GetCpuAffinity": lambda: nvml.nvmlDeviceGetCpuAffinity(device, 64, ul),
    "GetCudaComputeCapability": lambda: nvml.nvmlDeviceGetCudaComputeCapability(device, ctypes.byref(ctypes.c_int()),
                                                                                ctypes.byref(ctypes.c_int())),
    "GetNumGpuCores": lambda: nvml.nvmlDeviceGetNumGpuCores(device, ctypes.byref(u)),
    "GetComputeRunningProcesses_v3": lambda: (ctypes.memmove(ctypes.byref(u), ctypes.byref(ctypes.c_uint(32)), 4),
                                              nvml.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(u), big)),
    "GetGraphicsRunningProcesses_v3": lambda: (ctypes.memmove(ctypes.byref(u), ctypes.byref(ctypes.c_uint(32)), 4),
                                               nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(device, ctypes.byref(u), big)),
    "GetFieldValues(4 NVLink error totals)": lambda: nvml.nvmlDeviceGetFieldValues(device, 4, fields),
    "GetNvLinkState(link 0)": lambda: nvml.nvmlDeviceGetNvLinkState(device, 0, ctypes.byref(u)),
    "SystemGetDriverVersion": lambda: nvml.nvmlSystemGetDriverVersion(buf, 80),
    "SystemGetCudaDriverVersion_v2": lambda: nvml.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(ctypes.c_int())),
}
costs = {}
for name, call in calls.items():
    samples = []
    for _ in range(20):
        t0 = time.perf_counter()
        call()
        samples.append(1e6 * (time.perf_counter() - t0))
    costs[name] = (samples[0], statistics.median(samples))
print("first call / median of 20, microseconds")
for name, (first, median) in sorted(costs.items(), key=lambda kv: -kv[1][0]):
    print(f"{first:10.1f} {median:10.1f}  {name}")
print(f"sum of first calls: {sum(f for f, _ in costs.values()) / 1000:.2f} ms, "
      f"of medians: {sum(m for _, m in costs.values()) / 1000:.2f} ms")
