"""gpupool launch: one process per GPU with torchrun's environment, all or nothing."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from harness import GPUPOOL, TEST_FIXTURES, clean_env, gpupool, gpupool_json, main

# A rank that prints its environment as one JSON line.
PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"
TORCHRUN_VARIABLES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                      "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"]


def rank_lines(text):
    """{rank: [lines]} from "[rank R] line" output."""
    ranks = {}
    for line in text.splitlines():
        if not line.startswith("[rank "):
            continue
        label, _, rest = line.partition("] ")
        ranks.setdefault(int(label[len("[rank "):]), []).append(rest)
    return ranks


def process_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie not yet collected by init counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


class LaunchTest(unittest.TestCase):
    def setUp(self):
        self.runtime = tempfile.TemporaryDirectory(prefix="gpupool-launch-")
        self.env = {"GPUPOOL_RUNTIME_DIR": self.runtime.name}

    def make_idle(self, count):
        """Has the simulated driver report GPUs 0..count-1 idle (fixtures keep some busy)."""
        state = os.path.join(self.runtime.name, "idle-overlay.json")
        idle = {"processes": [], "memory_used_mib": 0, "utilization_gpu": 0}
        with open(state, "w") as f:
            json.dump({"gpus": {str(i): idle for i in range(count)}}, f)
        self.env["GPUPOOL_SIM_STATE"] = state

    def tearDown(self):
        self.runtime.cleanup()

    def launch(self, *args, sim="hgx-h200", check=True, env=None):
        return gpupool("launch", *args, sim=sim, check=check, env={**self.env, **(env or {})})

    def start(self, *args, sim="hgx-h200", **popen):
        """gpupool launch in the background, its stdout a pipe read line by line."""
        return subprocess.Popen([GPUPOOL, "launch", *args], env=clean_env(GPUPOOL_SIM=sim, **self.env),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)

    def read_pids(self, proc, count):
        """The pids the ranks print first ("$$ $GPUPOOL_GPUS"), by rank; and their GPUs."""
        pids, gpus = {}, {}
        while len(pids) < count:
            line = proc.stdout.readline()
            self.assertTrue(line, "gpupool ended before every rank started")
            (rank, (text,)), = rank_lines(line).items()
            pid, gpu = text.split()
            pids[rank], gpus[rank] = int(pid), gpu
        self.gpus = gpus
        return pids

    def assert_no_leases(self, sim="hgx-h200"):
        self.assertEqual(gpupool_json("leases", "--json", sim=sim, env=self.env), [])

    def test_each_rank_sees_one_gpu_and_the_torchrun_variables(self):
        proc = self.launch("-g", "4", "--name", "train", "--", sys.executable, "-c", PRINT_ENV,
                           env={"NCCL_DEBUG": "INFO"})
        envs = {rank: json.loads(lines[0]) for rank, lines in rank_lines(proc.stdout).items()}
        self.assertEqual(sorted(envs), [0, 1, 2, 3])
        uuids = [envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(4)]
        self.assertEqual(len(set(uuids)), 4)
        listed = {g["uuid"] for g in gpupool_json("list", "--json")}
        for rank, env in envs.items():
            self.assertIn(env["CUDA_VISIBLE_DEVICES"], listed)  # one full UUID, no comma
            self.assertEqual(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID")
            self.assertEqual(env["GPUPOOL_GPU_UUIDS"], env["CUDA_VISIBLE_DEVICES"])
            for name in TORCHRUN_VARIABLES:
                self.assertIn(name, env)
            self.assertEqual(env["RANK"], str(rank))
            self.assertEqual(env["LOCAL_RANK"], str(rank))
            self.assertEqual(env["ROLE_RANK"], str(rank))
            self.assertEqual(env["WORLD_SIZE"], "4")
            self.assertEqual(env["LOCAL_WORLD_SIZE"], "4")
            self.assertEqual(env["ROLE_WORLD_SIZE"], "4")
            self.assertEqual(env["GROUP_RANK"], "0")
            self.assertEqual(env["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(env["MASTER_PORT"], envs[0]["MASTER_PORT"])
            self.assertTrue(0 < int(env["MASTER_PORT"]) < 65536)
            self.assertEqual(env["TORCHELASTIC_RUN_ID"], "train")
            self.assertEqual(env["OMP_NUM_THREADS"], "1")
            self.assertEqual(env["NCCL_DEBUG"], "INFO")  # the user's environment passes through
        self.assertIn("train has GPUs", proc.stderr)
        self.assert_no_leases()

    def test_user_settings_of_omp_threads_are_kept(self):
        proc = self.launch("-g", "2", "-q", "--", sys.executable, "-c", PRINT_ENV,
                           env={"OMP_NUM_THREADS": "6"})
        for lines in rank_lines(proc.stdout).values():
            self.assertEqual(json.loads(lines[0])["OMP_NUM_THREADS"], "6")
        self.assertEqual(proc.stderr, "")

    def test_per_gpu_starts_several_ranks_on_each_gpu(self):
        proc = self.launch("-g", "2", "--per-gpu", "2", "--", sys.executable, "-c", PRINT_ENV)
        envs = {rank: json.loads(lines[0]) for rank, lines in rank_lines(proc.stdout).items()}
        self.assertEqual(sorted(envs), [0, 1, 2, 3])
        self.assertEqual({envs[r]["WORLD_SIZE"] for r in envs}, {"4"})
        uuid = [envs[r]["CUDA_VISIBLE_DEVICES"] for r in range(4)]
        self.assertEqual(uuid[0], uuid[1])
        self.assertEqual(uuid[2], uuid[3])
        self.assertNotEqual(uuid[0], uuid[2])

    def test_output_lines_are_prefixed_and_streams_kept_apart(self):
        script = 'printf "out $RANK\\nsecond\\n"; printf "err $RANK\\nno newline" >&2'
        proc = self.launch("-g", "2", "-q", "--", "sh", "-c", script)
        self.assertEqual(rank_lines(proc.stdout), {0: ["out 0", "second"], 1: ["out 1", "second"]})
        self.assertEqual(rank_lines(proc.stderr), {0: ["err 0", "no newline"], 1: ["err 1", "no newline"]})
        for line in proc.stdout.splitlines() + proc.stderr.splitlines():
            self.assertRegex(line, r"^\[rank [01]\] ")

    def test_one_failing_rank_stops_the_others(self):
        script = 'echo $$ $GPUPOOL_GPUS; if [ "$RANK" = 2 ]; then sleep 0.5; exit 3; fi; exec sleep 60'
        started = time.monotonic()
        proc = self.start("-g", "4", "--", "sh", "-c", script)
        pids = self.read_pids(proc, 4)
        stdout, stderr = proc.communicate(timeout=30)
        self.assertLess(time.monotonic() - started, 20)
        self.assertEqual(proc.returncode, 3)
        self.assertIn(f"gpupool: rank 2 (GPU {self.gpus[2]}) exited with code 3; stopped the other 3 ranks\n",
                      stderr)
        self.assertEqual(rank_lines(stdout), {})  # the others printed nothing more
        for pid in pids.values():
            self.assertTrue(process_gone(pid))
        self.assert_no_leases()

    def test_a_rank_ignoring_sigterm_is_killed_after_the_grace_period(self):
        script = ('echo $$ $GPUPOOL_GPUS; if [ "$RANK" = 0 ]; then sleep 0.5; exit 1; fi; '
                  'trap "" TERM; exec sleep 60')
        started = time.monotonic()
        proc = self.start("-g", "2", "--grace", "1s", "--", "sh", "-c", script)
        pids = self.read_pids(proc, 2)
        _, stderr = proc.communicate(timeout=30)
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("rank 0 (GPU", stderr)
        self.assertTrue(process_gone(pids[1]))

    def test_a_command_that_does_not_exist_fails_the_job(self):
        proc = self.launch("-g", "2", "-q", "--", "/nonexistent/trainer", check=False)
        self.assertEqual(proc.returncode, 127)
        self.assertIn("cannot run /nonexistent/trainer", proc.stderr)
        self.assertRegex(proc.stderr, r"gpupool: rank [01] \(GPU \d+\) exited with code 127")

    def test_sigint_stops_every_rank_and_exits_130(self):
        proc = self.start("-g", "3", "--", "sh", "-c", "echo $$ $GPUPOOL_GPUS; exec sleep 60")
        pids = self.read_pids(proc, 3)
        self.assertEqual(len(gpupool_json("leases", "--json", env=self.env)), 3)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130)
        self.assertIn("gpupool: got SIGINT; stopped all 3 running ranks", stderr)
        for pid in pids.values():
            self.assertTrue(process_gone(pid))
        self.assert_no_leases()

    def test_sigterm_exits_143(self):
        proc = self.start("-g", "1", "--", "sh", "-c", "echo $$ $GPUPOOL_GPUS; exec sleep 60")
        self.read_pids(proc, 1)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 143)
        self.assert_no_leases()

    def test_the_driver_librarys_threads_take_none_of_gpupools_signals(self):
        # NVML starts threads (the simulated one too). One that did not block SIGCHLD took it from
        # gpupool's signalfd and dropped it: about half the launches waited forever for ranks that
        # had exited.
        proc = self.start("-g", "1", "--", "sh", "-c", "echo $$ $GPUPOOL_GPUS; exec sleep 60")
        self.read_pids(proc, 1)
        threads = [t for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        self.assertTrue(threads, "the simulated NVML starts a thread, as the real one does")
        for thread in threads:
            with open(f"/proc/{proc.pid}/task/{thread}/status") as f:
                blocked = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
            for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                self.assertTrue(blocked & 1 << (sig - 1), f"thread {thread} does not block {sig.name}")
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 143)
        for _ in range(20):
            started = time.monotonic()
            self.launch("-q", "-g", "2", "--", "true")
            self.assertLess(time.monotonic() - started, 30, "a launch of `true` must end with it")

    def test_the_ranks_keep_the_leases_when_gpupool_is_killed(self):
        proc = self.start("-g", "2", "--", "sh", "-c", "echo $$ $GPUPOOL_GPUS; exec sleep 60")
        pids = self.read_pids(proc, 2)
        proc.kill()
        proc.wait()
        try:
            self.assertEqual(len(gpupool_json("leases", "--json", env=self.env)), 2)
        finally:
            for pid in pids.values():
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while gpupool_json("leases", "--json", env=self.env) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assert_no_leases()

    def test_bind_numa_runs_each_rank_on_its_gpus_node(self):
        self.make_idle(8)
        topo = {g["index"]: g for g in gpupool_json("list", "--json", sim="dgx1-v100", env=self.env)}
        available = os.sched_getaffinity(0)
        # gpupool itself runs on one CPU only, so a rank that was bound shows it even on a 2-CPU machine.
        own_cpu = max(available)
        script = ("import json, os; print(json.dumps({'gpu': os.environ['GPUPOOL_GPUS'], "
                  "'cpus': sorted(os.sched_getaffinity(0))}))")
        proc = subprocess.run(
            [GPUPOOL, "launch", "-g", "8", "--bind-numa", "--", sys.executable, "-c", script],
            env=clean_env(GPUPOOL_SIM="dgx1-v100", **self.env), capture_output=True, text=True,
            timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {own_cpu}))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("unbound", proc.stderr)
        ranks = [json.loads(lines[0]) for lines in rank_lines(proc.stdout).values()]
        self.assertEqual(len(ranks), 8)
        bound = 0
        for rank in ranks:
            wanted = parse_cpu_list(topo[int(rank["gpu"])]["cpu_affinity"])
            possible = wanted & available
            if possible:  # the kernel leaves out the CPUs this machine does not have
                self.assertEqual(set(rank["cpus"]), possible, rank)
                bound += 1
            else:  # none of the node's CPUs exist here: binding fails and the rank runs as started
                self.assertEqual(rank["cpus"], [own_cpu], rank)
        self.assertGreater(bound, 0)
        self.assert_no_leases(sim="dgx1-v100")

    def test_bind_numa_without_the_information_warns_once(self):
        old_driver = os.path.join(TEST_FIXTURES, "old-driver.json")  # NVML reports no NUMA node there
        self.make_idle(2)
        proc = self.launch("-g", "2", "--bind-numa", "-q", "--", "true", sim=old_driver)
        self.assertEqual(proc.stderr, "gpupool: the NUMA node of GPU 0,1 is unknown; its ranks run unbound\n")
        self.assert_no_leases(sim=old_driver)


def parse_cpu_list(text):
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


if __name__ == "__main__":
    main()
