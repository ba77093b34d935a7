"""Stress: 48 concurrent `gpupool run` clients on a simulated 8-GPU machine, with clients and jobs
killed at random. Each job records its GPUs, start and end; afterwards no GPU may ever have had two
holders at once (or slices past its memory), every client not killed must have run its job, and no
lease may be left. Then a crowd on one GPU, where every client joins the waiting line at once.
Bounded to about a minute and a half."""
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from harness import GPUPOOL, clean_env, main

CLIENTS = 48
# The job: record start (GPUs, memory, time), hold them a little, record the end.
RECORDER = r"""
import os, sys, time, random
path = sys.argv[1]
with open(path, "w") as f:
    f.write("start %s %s %d\n" % (os.environ["GPUPOOL_GPU_UUIDS"], os.environ.get("GPUPOOL_MEM_MIB", "-"),
                                   time.monotonic_ns()))
time.sleep(random.uniform(0.02, 0.25))
with open(path, "a") as f:
    f.write("end %d\n" % time.monotonic_ns())
"""


class StressTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpupool-stress-")
        self.env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_RUNTIME_DIR=os.path.join(self.dir, "run"))
        listing = json.loads(subprocess.run([GPUPOOL, "list", "--json"], env=self.env, capture_output=True,
                                            text=True, check=True).stdout)
        self.memory = {g["uuid"]: g["memory_total_mib"] for g in listing}

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_clients(self, make_args, seed):
        rng = random.Random(seed)
        clients, kills = [], []  # kills: (record path, monotonic ns when the job was killed)
        for i in range(CLIENTS):
            record = os.path.join(self.dir, f"job-{seed}-{i}.txt")
            proc = subprocess.Popen([GPUPOOL, "run", "-q", *make_args(rng), "--", sys.executable, "-c", RECORDER,
                                     record], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            fate = rng.choice(["live"] * 6 + ["kill-client", "kill-job"])
            clients.append((proc, record, fate))

        def killer(proc, record, fate, delay):
            time.sleep(delay)
            if fate == "kill-client":
                proc.kill()
            elif fate == "kill-job":
                for child in children_of(proc.pid):
                    kills.append((record, time.monotonic_ns()))
                    os.kill(child, signal.SIGKILL)

        threads = [threading.Thread(target=killer, args=(p, r, f, rng.uniform(0.0, 1.5)))
                   for p, r, f in clients if f != "live"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for proc, record, fate in clients:
            proc.wait(timeout=120)
            if fate == "live":
                self.assertEqual(proc.returncode, 0, proc.stderr.read().decode())
                self.assertTrue(os.path.exists(record), "a client that was not killed must have run its job")
        # Jobs whose client was killed keep running with their lease: wait for them to finish.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.leases():
            time.sleep(0.1)
        self.assertEqual(self.leases(), [], "no lease may be left")
        return self.check_records(dict(kills), seed)

    def leases(self):
        return json.loads(subprocess.run([GPUPOOL, "leases", "--json"], env=self.env, capture_output=True,
                                         text=True, check=True).stdout)

    def check_records(self, kill_times, seed):
        events = []  # (time, +1 start / -1 end, uuid, mib or None)
        ran = 0
        for path in glob.glob(os.path.join(self.dir, f"job-{seed}-*.txt")):
            lines = open(path).read().split("\n")
            start = lines[0].split()
            if len(start) != 4:
                continue  # killed before its first write completed
            ran += 1
            uuids, mem, t0 = start[1].split(","), start[2], int(start[3])
            end_line = [l for l in lines[1:] if l.startswith("end ")]
            # A killed job's lock is released only after it died, so the kill time bounds its end from below.
            t1 = int(end_line[0].split()[1]) if end_line else kill_times.get(path)
            self.assertIsNotNone(t1, f"{path}: no end and not killed by the test")
            for uuid in uuids:
                events.append((t0, 1, uuid, None if mem == "-" else int(mem)))
                events.append((t1, -1, uuid, None if mem == "-" else int(mem)))
        events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same instant
        exclusive = {u: 0 for u in self.memory}
        shared = {u: 0 for u in self.memory}
        for t, kind, uuid, mib in events:
            if mib is None:
                exclusive[uuid] += kind
            else:
                shared[uuid] += kind * mib
            self.assertLessEqual(exclusive[uuid], 1, f"GPU {uuid} had two exclusive holders at {t}")
            self.assertFalse(exclusive[uuid] and shared[uuid], f"GPU {uuid} exclusive and shared at {t}")
            self.assertLessEqual(shared[uuid], self.memory[uuid], f"GPU {uuid} slices past its memory at {t}")
        return ran

    def test_single_gpu_clients(self):
        ran = self.run_clients(lambda rng: ["-g", "1"], seed=1)
        self.assertGreater(ran, CLIENTS // 2)

    def test_mixed_sizes_and_shared_slices(self):
        def args(rng):
            kind = rng.choice(["g1", "g2", "g4", "mem", "mem"])
            if kind == "mem":
                return ["-g", rng.choice(["1", "2"]), "--mem", rng.choice(["30G", "50G", "70G"])]
            return ["-g", kind[1:]]
        ran = self.run_clients(args, seed=2)
        self.assertGreater(ran, CLIENTS // 2)


class CrowdOnOneGpuTest(unittest.TestCase):
    """100 clients start together on a 1-GPU machine, so nearly all of them take a queue ticket in
    the same instant while others scan the line for dead tickets. A ticket seen before its owner
    had locked it was once cleared as dead, and its owner failed with 'cannot lock queue ticket'."""

    def test_every_client_of_a_crowd_gets_its_turn(self):
        with tempfile.TemporaryDirectory(prefix="gpupool-crowd-") as tmp:
            env = clean_env(GPUPOOL_SIM="h200-1", GPUPOOL_RUNTIME_DIR=os.path.join(tmp, "run"))
            # Before the fix, about two rounds in three lost a client.
            for _ in range(3):
                clients = [subprocess.Popen([GPUPOOL, "run", "-q", "-g", "1", "--", "true"], env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(100)]
                failures = [p.stderr.read().decode().strip() for p in clients if p.wait(timeout=120) != 0]
                self.assertEqual(failures, [], "every client in the crowd must run its job")
            self.assertEqual(os.listdir(os.path.join(tmp, "run", "queue")), [], "no queue ticket may be left")


def children_of(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


if __name__ == "__main__":
    main()
