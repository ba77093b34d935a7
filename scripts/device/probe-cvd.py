#!/usr/bin/env python3
"""Asks the real CUDA driver how it reads CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER.

Runs gpupool-cuda-probe once per value (the driver reads the variables once, at
cuInit) and writes one JSON line per value: the value, the order, and what the
driver reported. The corpus covers the rule classes listed in
docs/cuda-visible-devices.md; the GPUs' UUIDs are read from nvidia-smi.
Usage: probe-cvd.py PROBE OUT.jsonl
"""
import json, os, subprocess, sys

probe, out_path = sys.argv[1], sys.argv[2]
uuids = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                       capture_output=True, text=True, check=True).stdout.split()
n = len(uuids)
U = uuids[0]
hexpart = U[4:]

values = [None, "", " ", "  ", "\t", ",", ",,", "0", " 0", "0 ", " 0 ", "\t0", "0\t", "0\n",
          "+0", "-0", "00", "000", "0x0", "0x1", "0X0", "00x0", "0.0", "0.5", "0e0", "0b0", "0o0",
          "1", "-1", "2", "9", "10", "4294967296", "4294967297", "2147483648", "-2147483648",
          "18446744073709551616", "99999999999999999999", "0,1", "1,0", "0,0", "0,00", "00,0",
          "0,-0", "0,+0", "0,,", ",0", "0,", ",0,", "0,,0", " , 0", "0, 0", "0 ,1", "0,  1",
          "0;1", "0;", "0 1", "0 0", "0:0", "0:1", "0|1", "0/0", "a", "0a", "a0", "a,0", "0,a",
          "0,1,a", "0,a,1", "1,a", "-1,0", "0,-1", "zero", "NoDevFiles", "none", "all", "void",
          "GPU", "G", "GP", "GPU-", "gpu-", "MIG", "MIG-", "MIG-0", "MIG-0/0/0", "MIG-GPU-",
          "GPU-0", "GPU-00000000-0000-0000-0000-000000000000", "GPU-ffffffff",
          U, U.upper(), "gpu-" + hexpart, "Gpu-" + hexpart, hexpart, hexpart[:8],
          U + " ", " " + U, U + "x", U + "0", U + ",", U + ",0", "0," + U, U + "," + U,
          U.upper() + "," + U, U + ",1", "1," + U, U + ",a,0", U + ";0", U + " 0",
          U.replace("-", ""), "GPU-" + hexpart.replace("-", ""), "GPU" + hexpart, "GPU " + hexpart,
          "GPU--" + hexpart, "MIG-" + hexpart, "MIG-" + U, "MIG-" + U + "/0/0", U + "/0/0", U + ":0"]
for k in [1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 14, 16, 20, 24, 30, 35, 36]:
    values.append("GPU-" + hexpart[:k])
    values.append("GPU-" + hexpart[:k].upper())
values += ["GPU-" + hexpart[:6] + ",0", "0,GPU-" + hexpart[:6], "GPU-" + hexpart[:4] + "," + U]
# every GPU's own names, single and in pairs, for machines with several GPUs
for i in range(n):
    values += [str(i), uuids[i], uuids[i][:10], "%d,%d" % (i, (i + 1) % n)]
    for j in range(n):
        if i != j:
            values += ["%d,%d" % (i, j), uuids[i] + "," + uuids[j], "%d,%d,%d" % (i, n, j)]

orders = [None, "PCI_BUS_ID", "FASTEST_FIRST", "pci_bus_id", "bogus", "", " PCI_BUS_ID"]
seen = set()
with open(out_path, "w") as out:
    for order in orders:
        for v in (values if order is None else [None, "", "0", "1,0", "0,1", U]):
            if (v, order) in seen:
                continue
            seen.add((v, order))
            env = {k: x for k, x in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
            if v is not None:
                env["CUDA_VISIBLE_DEVICES"] = v
            if order is not None:
                env["CUDA_DEVICE_ORDER"] = order
            r = subprocess.run([probe], env=env, capture_output=True, text=True)
            try:
                res = json.loads(r.stdout)
            except ValueError:
                res = {"raw": r.stdout, "stderr": r.stderr, "rc": r.returncode}
            out.write(json.dumps({"value": v, "order": order, "result": res}) + "\n")
print("probed %d values on %d GPU(s)" % (len(seen), n))
