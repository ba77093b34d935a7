#!/usr/bin/env python3
"""Compares `gpupool list --json` and `gpupool topo --json` with nvidia-smi, field by field.

Run on a machine with real GPUs: compare-nvidia-smi.py PATH/TO/gpupool
Prints one line per field compared and exits 1 on any mismatch. Volatile readings (utilisation,
temperature, power) are compared with a tolerance, since the two tools sample at different moments.
"""
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

gpupool = sys.argv[1]
mismatches = 0
checked = 0


def smi(*args):
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True).stdout


def number(text):
    text = text.strip()
    if text in ("[N/A]", "N/A", "[Not Supported]"):
        return None
    return float(re.sub(r"[^0-9.\-]", "", text))


def compare(gpu, field, ours, theirs, tolerance=0.0):
    global mismatches, checked
    checked += 1
    if isinstance(theirs, float) and ours is not None:
        ok = abs(float(ours) - theirs) <= tolerance
    else:
        ok = ours == theirs
    mismatches += 0 if ok else 1
    print(f"{'ok  ' if ok else 'FAIL'} gpu {gpu} {field}: gpupool={ours!r} nvidia-smi={theirs!r}"
          + (f" (tolerance {tolerance})" if tolerance else ""))


fields = ["index", "uuid", "pci.bus_id", "name", "memory.total", "memory.used", "memory.free",
          "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
          "persistence_mode", "compute_mode", "mig.mode.current",
          "ecc.errors.corrected.volatile.total", "ecc.errors.uncorrected.volatile.total"]
rows = [dict(zip(fields, (c.strip() for c in line.split(","))))
        for line in smi(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits").splitlines()]
ours = json.loads(subprocess.run([gpupool, "list", "--json"], capture_output=True, text=True, check=True).stdout)
xml = ET.fromstring(smi("-q", "-x"))
# nvidia-smi -L: "GPU 0: NAME (UUID: GPU-...)", then "  MIG 3g.71gb     Device  1: (UUID: MIG-...)" per MIG device.
mig_listed = {}
for line in smi("-L").splitlines():
    if line.startswith("GPU "):
        current = mig_listed.setdefault(int(line.split(":")[0].split()[1]), [])
    elif m := re.match(r"\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)", line):
        current.append((m.group(3), m.group(1)))
apps = [line.split(",") for line in
        smi("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits").splitlines() if line.strip()]

compare("-", "gpu count", len(ours), len(rows))
modes = {"Default": "default", "Exclusive_Process": "exclusive_process", "Prohibited": "prohibited",
         "Exclusive_Thread": "exclusive_thread"}
for row, gpu, x in zip(rows, ours, xml.findall("gpu")):
    i = row["index"]
    compare(i, "index", gpu["index"], int(row["index"]))
    compare(i, "uuid", gpu["uuid"], row["uuid"])
    compare(i, "pci_bus_id", gpu["pci_bus_id"], row["pci.bus_id"])
    compare(i, "name", gpu["name"], row["name"])
    compare(i, "minor_number", gpu["minor_number"], int(x.findtext("minor_number")))
    compare(i, "memory_total_mib", gpu["memory_total_mib"], number(row["memory.total"]))
    compare(i, "memory_used_mib", gpu["memory_used_mib"], number(row["memory.used"]), 2.0)
    compare(i, "memory_free_mib", gpu["memory_free_mib"], number(row["memory.free"]), 2.0)
    compare(i, "utilization_gpu", gpu["utilization_gpu"], number(row["utilization.gpu"]), 10.0)
    compare(i, "utilization_memory", gpu["utilization_memory"], number(row["utilization.memory"]), 10.0)
    compare(i, "temperature_c", gpu["temperature_c"], number(row["temperature.gpu"]), 3.0)
    compare(i, "power_w", gpu["power_w"], number(row["power.draw"]), 25.0)
    compare(i, "power_limit_w", gpu["power_limit_w"], number(row["power.limit"]))
    compare(i, "persistence_mode", gpu["persistence_mode"], row["persistence_mode"] == "Enabled")
    compare(i, "compute_mode", gpu["compute_mode"], modes.get(row["compute_mode"]))
    compare(i, "mig_enabled", gpu["mig_enabled"],
            None if row["mig.mode.current"] in ("[N/A]", "N/A") else row["mig.mode.current"] == "Enabled")
    compare(i, "MIG devices (UUID, profile)", sorted((d["uuid"], d["profile"]) for d in gpu["mig_devices"]),
            sorted(mig_listed.get(int(i), [])))
    compare(i, "ecc_corrected_volatile", gpu["ecc_corrected_volatile"],
            number(row["ecc.errors.corrected.volatile.total"]))
    compare(i, "ecc_uncorrected_volatile", gpu["ecc_uncorrected_volatile"],
            number(row["ecc.errors.uncorrected.volatile.total"]))
    theirs = sorted((int(pid), float(mem)) for uuid, pid, mem in apps if uuid.strip() == gpu["uuid"])
    mine = sorted((p["pid"], p["used_memory_mib"]) for p in gpu["processes"] if "compute" in p["type"])
    compare(i, "compute processes (pid, MiB)", [(p, float(m)) for p, m in mine], theirs)
    for p in gpu["processes"]:
        proc_user = subprocess.run(["ps", "-o", "user=", "-p", str(p["pid"])], capture_output=True, text=True).stdout.strip()
        compare(i, f"process {p['pid']} user", p["user"], proc_user or None)

# Topology: nvidia-smi topo -m prints a matrix, then CPU affinity, NUMA affinity (and GPU NUMA ID).
topo = json.loads(subprocess.run([gpupool, "topo", "--json"], capture_output=True, text=True, check=True).stdout)
lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in smi("topo", "-m").splitlines()]
header = lines[0].split("\t")
gpu_rows = [l.split("\t") for l in lines[1:] if re.match(r"^GPU\d+\s", l)]
columns = [h.strip() for h in header]
for r, row in enumerate(gpu_rows):
    cells = [c.strip() for c in row]
    for c in range(len(gpu_rows)):
        compare(r, f"topo link to GPU{c}", topo["matrix"][r][c], cells[1 + c])
    cpu_col = columns.index("CPU Affinity")
    numa_col = columns.index("NUMA Affinity")
    compare(r, "cpu_affinity", topo["gpus"][r]["cpu_affinity"], cells[cpu_col])
    numa = cells[numa_col]
    compare(r, "numa_node", topo["gpus"][r]["numa_node"], None if numa in ("N/A", "") else int(numa))

print(f"{checked} fields compared, {mismatches} mismatches")
sys.exit(1 if mismatches else 0)
