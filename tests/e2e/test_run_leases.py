"""gpupool run and gpupool leases end to end: real processes, real locks, a simulated machine."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from harness import GPUPOOL, clean_env, main, until_exists

PRINT_ENV = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
             "if k.startswith(('CUDA_', 'GPUPOOL_'))}))")


class RunTest(unittest.TestCase):
    def setUp(self):
        self.runtime = tempfile.mkdtemp(prefix="gpupool-run-")
        self.env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_RUNTIME_DIR=self.runtime)

    def tearDown(self):
        # Killing a client leaves its job running with the lease (by design): end those jobs too.
        self.kill_jobs()
        shutil.rmtree(self.runtime, ignore_errors=True)

    def kill_jobs(self):
        for lease in self.leases():
            try:
                os.kill(lease["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass

    def gp(self, *args, **kwargs):
        return subprocess.run([GPUPOOL, *args], env=kwargs.pop("env", self.env), capture_output=True,
                              text=True, timeout=60, **kwargs)

    def leases(self):
        return json.loads(self.gp("leases", "--json").stdout)

    def uuids(self):
        listing = json.loads(self.gp("list", "--json").stdout)
        return [g["uuid"] for g in listing]

    def test_the_job_sees_exactly_its_gpus(self):
        proc = self.gp("run", "-g", "2", "--name", "probe", "--", sys.executable, "-c", PRINT_ENV)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        env = json.loads(proc.stdout)
        uuids = self.uuids()
        gpus = [int(i) for i in env["GPUPOOL_GPUS"].split(",")]
        self.assertEqual(len(gpus), 2)
        self.assertEqual(env["CUDA_VISIBLE_DEVICES"].split(","), [uuids[i] for i in gpus])
        self.assertEqual(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID")
        self.assertEqual(env["GPUPOOL_JOB"], "probe")
        self.assertIn("probe has GPUs", proc.stderr)
        self.assertEqual(self.leases(), [])

    def test_small_requests_pass_a_wide_one_while_it_waits_but_not_for_ever(self):
        go = os.path.join(self.runtime, "go")
        holder = subprocess.Popen([GPUPOOL, "run", "-q", "--", "sh", "-c", until_exists(go)], env=self.env)
        self.addCleanup(holder.wait)
        self.wait_for(lambda: len(self.leases()) == 1)
        wide = subprocess.Popen([GPUPOOL, "run", "-g", "8", "--", "true"], env=self.env, stderr=subprocess.PIPE,
                                text=True)
        self.addCleanup(wide.wait)
        queue = os.path.join(self.runtime, "queue")
        self.wait_for(lambda: os.path.isdir(queue) and [n for n in os.listdir(queue) if not n.startswith(".")])
        # Seven GPUs are free: one GPU passes the request for eight that cannot start anyway.
        small = self.gp("run", "-q", "-g", "1", "--wait=30s", "--", "true")
        self.assertEqual(small.returncode, 0, small.stderr)
        # Past the pass window (here 0) nobody passes it: the GPUs drain towards it.
        strict = self.gp("run", "-g", "1", "--wait=1s", "--", "true", env=dict(self.env, GPUPOOL_LINE_PASS="0"))
        self.assertNotEqual(strict.returncode, 0)
        self.assertIn("waiting in line: 1 earlier request goes first (the first has waited", strict.stderr)
        # A request as wide as the one waiting keeps to its turn whatever the window.
        equal = self.gp("run", "-g", "8", "--wait=1s", "--", "true")
        self.assertIn("waiting in line: 1 earlier request goes first", equal.stderr)
        open(go, "w").close()
        self.assertEqual(wide.wait(timeout=60), 0)
        self.assertIn("waiting for 8 GPUs", wide.stderr.read())

    def test_exit_codes_and_signals_pass_through(self):
        self.assertEqual(self.gp("run", "--", "sh", "-c", "exit 7").returncode, 7)
        self.assertEqual(self.gp("run", "--", "sh", "-c", "kill -TERM $$").returncode, 128 + signal.SIGTERM)
        missing = self.gp("run", "--", "/no/such/program")
        self.assertEqual(missing.returncode, 127)
        self.assertIn("cannot run /no/such/program", missing.stderr)
        # A signal sent to gpupool reaches the job.
        proc = subprocess.Popen([GPUPOOL, "run", "-q", "--", "sh", "-c", "trap 'exit 42' USR1; while :; do sleep 0.05; done"],
                                env=self.env)
        self.wait_for(lambda: len(self.leases()) == 1)
        time.sleep(0.2)
        proc.send_signal(signal.SIGUSR1)
        self.assertEqual(proc.wait(timeout=10), 42)

    def test_leases_json_shows_the_holder_while_it_runs(self):
        proc = subprocess.Popen([GPUPOOL, "run", "-q", "-g", "2", "--name", "train", "--", "sleep", "30"], env=self.env)
        try:
            self.wait_for(lambda: len(self.leases()) == 2)
            for lease in self.leases():
                self.assertEqual(set(lease), {"index", "uuid", "pid", "user", "job", "mem_mib", "since"})
                self.assertEqual(lease["job"], "train")
                self.assertIsNone(lease["mem_mib"])
                self.assertAlmostEqual(lease["since"], time.time(), delta=60)
                with open(f"/proc/{lease['pid']}/cmdline") as f:
                    self.assertIn("sleep", f.read())
            self.assertIn("train", self.gp("leases").stdout)
        finally:
            proc.kill()
            proc.wait()

    def test_a_second_exclusive_run_waits_for_the_first(self):
        # Jobs end when the test says (a file appears), not after a sleep: under ASan on a loaded
        # machine one `gpupool leases` can take longer than a short job lives.
        go = os.path.join(self.runtime, "go")
        first = subprocess.Popen([GPUPOOL, "run", "-q", "-g", "8", "--", "sh", "-c", until_exists(go)], env=self.env)
        self.wait_for(lambda: len(self.leases()) == 8)
        with tempfile.TemporaryFile("w+") as stderr:
            second = subprocess.Popen([GPUPOOL, "run", "-g", "1", "--", "true"], env=self.env, stderr=stderr, text=True)

            def said(text):
                stderr.seek(0)
                return text in stderr.read()
            self.wait_for(lambda: said("waiting for 1 GPU: 8 busy"))
            self.assertIsNone(second.poll())
            open(go, "w").close()
            self.assertEqual(second.wait(timeout=60), 0)
            self.assertEqual(first.wait(timeout=60), 0)
            self.assertTrue(said("has GPU"))

    def test_wait_timeout_gives_up_with_one_reason(self):
        first = subprocess.Popen([GPUPOOL, "run", "-q", "-g", "8", "--", "sleep", "5"], env=self.env)
        try:
            self.wait_for(lambda: len(self.leases()) == 8)
            proc = self.gp("run", "--wait=0.3s", "--", "true")
            self.assertEqual(proc.returncode, 1)
            self.assertIn("gave up after", proc.stderr)
        finally:
            first.kill()
            first.wait()

    def test_shared_slices_run_together_and_respect_memory(self):
        # 143771 MiB per H200: three 60G slices cannot share one card, so they use two.
        gpus = self.gp("run", "--gpus", "3", "--mem", "60G", "--", "sleep", "0").returncode
        self.assertEqual(gpus, 0)
        holders = [subprocess.Popen([GPUPOOL, "run", "-q", "--gpus", "3,4", "--mem", "60G", "--", "sleep", "30"],
                                    env=self.env) for _ in range(3)]
        try:
            self.wait_for(lambda: len(self.leases()) == 3)
            leases = self.leases()
            self.assertEqual(sorted(l["index"] for l in leases), [3, 3, 4])
            self.assertEqual({l["mem_mib"] for l in leases}, {61440})
            # An exclusive run cannot take GPU 3 or 4 while slices are on them.
            self.assertEqual(self.gp("run", "--gpus", "3,4", "--wait=0", "--", "true").returncode, 1)
        finally:
            self.kill_jobs()
            for p in holders:
                p.wait()
        self.wait_for(lambda: self.leases() == [])

    def test_external_processes_make_a_gpu_busy(self):
        sleeper = subprocess.Popen(["sleep", "30"])
        state = os.path.join(self.runtime, "sim-state.json")
        with open(state, "w") as f:
            json.dump({"gpus": {str(i): {"processes": [{"pid": sleeper.pid, "used_memory_mib": 9000, "kind": "compute"}]}
                                for i in range(7)}}, f)
        env = dict(self.env, GPUPOOL_SIM_STATE=state)
        try:
            proc = self.gp("run", "--", sys.executable, "-c", PRINT_ENV, env=env)
            self.assertEqual(json.loads(proc.stdout)["GPUPOOL_GPUS"], "7")
            proc = self.gp("run", "-g", "2", "--wait=0", "--", "true", env=env)
            self.assertEqual(proc.returncode, 1)
            self.assertIn(f"pid {sleeper.pid}", proc.stderr)
        finally:
            sleeper.kill()
            sleeper.wait()

    def test_gpus_and_exclude_take_indices_and_uuids(self):
        uuids = self.uuids()
        proc = self.gp("run", "--gpus", f"{uuids[5][:12]},6", "-g", "2", "--", sys.executable, "-c", PRINT_ENV)
        self.assertEqual(json.loads(proc.stdout)["GPUPOOL_GPUS"], "5,6")
        proc = self.gp("run", "--exclude", "0,1,2,3,4,5,6", "--", sys.executable, "-c", PRINT_ENV)
        self.assertEqual(json.loads(proc.stdout)["GPUPOOL_GPUS"], "7")
        bad = self.gp("run", "--gpus", "GPU-ffff", "--", "true")
        self.assertEqual(bad.returncode, 1)
        self.assertEqual(len(bad.stderr.strip().splitlines()), 1)

    def test_bad_requests_are_one_line(self):
        for args in (["--mem", "20X"], ["-g", "9"], ["--wait=soon"], ["--mem", "200G"]):
            with self.subTest(args=args):
                proc = self.gp("run", *args, "--", "true")
                self.assertNotEqual(proc.returncode, 0)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)

    def test_a_killed_client_leaves_the_lease_with_its_job(self):
        go, marker = os.path.join(self.runtime, "go"), os.path.join(self.runtime, "done")
        client = subprocess.Popen([GPUPOOL, "run", "-q", "--", "sh", "-c", f"{until_exists(go)}; touch {marker}"],
                                  env=self.env)
        self.wait_for(lambda: len(self.leases()) == 1)
        client.kill()
        client.wait()
        # The job still runs and still holds its GPU; it is released when the job ends.
        self.assertEqual(len(self.leases()), 1)
        open(go, "w").close()
        self.wait_for(lambda: os.path.exists(marker))
        self.wait_for(lambda: self.leases() == [])

    def wait_for(self, condition, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        self.fail("condition not met in time")


if __name__ == "__main__":
    main()
