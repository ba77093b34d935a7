"""The Python client (python/gpupool, docs/python.md) against gpupoold on a simulated machine:
the queue requests, paging, errors, and acquire() — what it sets, when it refuses, how a lease
ends (release, context manager, interpreter exit, a process that dies)."""
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
import unittest

from harness import GPUPOOL, SOURCE_DIR, Daemon, LineReader, clean_env, main, until_exists, wait_until

PYTHON_DIR = os.path.abspath(os.path.join(SOURCE_DIR, "python"))
sys.path.insert(0, PYTHON_DIR)
import gpupool  # noqa: E402
from gpupool import _client  # noqa: E402

LEASE_KEYS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPUPOOL_JOB", "GPUPOOL_GPUS", "GPUPOOL_GPU_UUIDS",
              "GPUPOOL_MEM_MIB")
# A process that acquires, says what it got, then obeys lines on stdin: release, exit (atexit
# releases), die (os._exit: no atexit), raise (an exception leaves the `with` block).
HOLDER = """
import json, os, sys, gpupool
n, mem = int(sys.argv[1]), sys.argv[2] or None
def report(lease):
    print(json.dumps({"id": lease.id, "gpus": lease.gpus, "uuids": lease.uuids, "pid": os.getpid(),
                      "env": {k: os.environ[k] for k in os.environ if k.startswith(("CUDA_", "GPUPOOL_"))}}),
          flush=True)
lease = gpupool.acquire(n, mem=mem)
report(lease)
for line in sys.stdin:
    word = line.strip()
    if word == "release":
        lease.release()
        print("released", json.dumps({k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "GPUPOOL_JOB")}),
              flush=True)
    elif word == "exit":
        sys.exit(0)
    elif word == "die":
        os._exit(0)
    elif word == "raise":
        with gpupool.acquire(1) as inner:
            report(inner)
            raise RuntimeError("boom")
"""


def lease_env(env, job):
    """The lease's variables, with the job id (which differs from lease to lease) named."""
    return {k: ("JOB" if k == "GPUPOOL_JOB" and v == str(job) else v) for k, v in env.items() if k in LEASE_KEYS}


class FakeTorch(types.ModuleType):
    """torch as imported by a program: its CUDA started or not, its cards of 80 GiB, and the
    memory fractions set on them (device → fraction)."""
    def __init__(self, initialised):
        super().__init__("torch")
        self.fractions = {}
        self.cuda = types.SimpleNamespace(
            is_initialized=lambda: initialised,
            get_device_properties=lambda device: types.SimpleNamespace(total_memory=80 << 30),
            set_per_process_memory_fraction=lambda fraction, device: self.fractions.__setitem__(device, fraction))


class PythonClientTest(unittest.TestCase):
    def setUp(self):
        self.saved_env = dict(os.environ)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved_env)
        sys.modules.pop("torch", None)

    def holder(self, d, n=1, mem="", env=None):
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(n), mem],
                                env=dict(d.env, PYTHONPATH=PYTHON_DIR, **(env or {})), cwd=d.work, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(self.end, proc)
        lines = LineReader(proc.stdout)
        first = lines.readline()
        if not first:
            self.fail(f"the holder failed: {proc.stderr.read()}")
        return proc, lines, json.loads(first)

    def end(self, proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()

    def tell(self, proc, word):
        proc.stdin.write(word + "\n")
        proc.stdin.flush()

    def test_queue_requests(self):
        with Daemon() as d:
            os.environ["GPUPOOL_RUNTIME_DIR"] = d.runtime_dir  # found the way gpupool finds it
            with gpupool.Client() as c:
                self.assertEqual(c.user, pwd.getpwuid(os.getuid()).pw_name)
                failing = c.submit(["sh", "-c", "echo hi; exit 3"], name="three", env={"E2E": "x=y"}, cwd=d.work)
                [ended] = c.wait(failing)
                self.assertEqual((ended["state"], ended["exit_code"], ended["name"]), ("failed", 3, "three"))
                shown = c.show(failing)
                self.assertEqual(shown, d.show(failing))
                self.assertEqual(shown["environment"], ["E2E=x=y"])
                self.assertEqual(shown["cwd"], d.work)
                with open(shown["stdout"]) as out:
                    self.assertEqual(out.read(), "hi\n")
                first = c.submit(["sh", "-c", until_exists(d.path("go"))], gpus=2, mem="20G", env=d.env)
                second = c.submit(["true"], after=first, priority=-5, retries=2, time_limit="1h", env=d.env,
                                  cwd=d.work)
                held = c.submit(["true"], hold=True, time_limit=30, env=d.env)
                d.wait_state(first, "running")
                spec = c.show(second)
                self.assertEqual((spec["after"], spec["priority"], spec["retries"], spec["time_limit_s"]),
                                 ([first], -5, 2, 3600.0))
                self.assertEqual(spec["umask"], d.show(second)["umask"])
                self.assertEqual(c.show(first)["mem_mib"], 20480)
                self.assertEqual([j["id"] for j in c.jobs()], [first, second, held])
                self.assertEqual([j["id"] for j in c.jobs(state="held")], [held])
                self.assertEqual([j["id"] for j in c.jobs(all=True)], [failing, first, second, held])
                self.assertEqual(c.jobs(user="nobody-else"), [])
                self.assertEqual([o["id"] for o in c.release(held)], [held])
                self.assertEqual(c.wait(held)[0]["state"], "done")
                self.assertEqual(c.cancel(second)[0]["state"], "cancelled")
                d.touch("go")
                self.assertEqual([j["state"] for j in c.wait(first, second)], ["done", "cancelled"])
                self.assertEqual(c.jobs(), [])
                status = c.status()
                self.assertEqual((status["pid"], status["queued"], status["running"]), (d.proc.pid, 0, 0))
                self.assertEqual(status["gpus"], 8)

    def test_events_listed_and_followed(self):
        with Daemon() as d, gpupool.Client(d.socket) as c:
            first = c.submit(["true"], name="first")
            c.wait(first)
            self.assertEqual([e["kind"] for e in c.events(job=first)], ["job_started", "job_ended"])
            self.assertEqual([e["kind"] for e in c.events(since=0, kinds="job_ended")], ["job_ended"])
            following = c.follow(kinds=["job_ended", "job_failed"])
            with gpupool.Client(d.socket) as other:
                second = other.submit(["false"], name="second")
            event = next(following)
            self.assertEqual((event["kind"], event["job"], event["name"]), ("job_failed", second, "second"))
            with self.assertRaises(gpupool.Error) as refused:
                c.events(kinds=["job_done"])
            self.assertIn("unknown event 'job_done'", str(refused.exception))

    def test_jobs_pages_through_the_listing(self):
        with Daemon() as d, gpupool.Client(d.socket) as c:
            ids = [c.submit(["true"], hold=True, env=d.env, cwd=d.work) for _ in range(5)]
            old = _client._JOBS_PAGE
            _client._JOBS_PAGE = 2
            try:
                self.assertEqual([j["id"] for j in c.jobs()], ids)
            finally:
                _client._JOBS_PAGE = old
            c.cancel(*ids)

    def test_errors_are_the_daemons_line(self):
        with Daemon() as d, gpupool.Client(d.socket) as c:
            for call, args in ((lambda: c.show(999), ("show", "999")),
                               (lambda: c.cancel(999), ("cancel", "999")),
                               (lambda: c.submit(["true"], gpus=9), ("submit", "-g", "9", "--", "true"))):
                with self.assertRaises(gpupool.Error) as caught:
                    call()
                cli = d.gp(*args)
                self.assertEqual(f"gpupool: {caught.exception}\n", cli.stderr, "the message gpupool prints")
            with gpupool.Client(d.socket) as refused:
                with self.assertRaisesRegex(gpupool.Error, r"^bad request: 'priority' must be a whole number"):
                    refused.submit(["true"], priority=5000)
                self.assertEqual(refused.status()["queued"], 0, "the client lives on after a bad request")
            with self.assertRaisesRegex(gpupool.Error, "list of strings"):
                c.submit("echo hi")
            with self.assertRaisesRegex(gpupool.Error, "unknown unit"):
                c.submit(["true"], mem="20X")
            self.assertEqual(c.jobs(all=True), [], "nothing was stored")
        missing = tempfile.mkdtemp(prefix="gpupool-none-")
        self.addCleanup(shutil.rmtree, missing)
        os.environ["GPUPOOL_RUNTIME_DIR"] = missing
        with self.assertRaisesRegex(gpupool.Error, rf"^no gpupoold is running \(no socket at {missing}/gpupoold.sock\)"):
            gpupool.Client()
        with self.assertRaisesRegex(gpupool.Error, "^no gpupoold is running"):
            gpupool.acquire(1)

    def test_a_compute_share_is_refused_where_nothing_would_hold_it(self):
        with Daemon(config='slice_enforcement = "watch"\n') as d, gpupool.Client(d.socket) as c:
            with self.assertRaises(gpupool.Error) as caught:
                c.submit(["true"], mem="20G", sm=25)
            cli = d.gp("submit", "--mem", "20G", "--sm", "25", "--", "true")
            self.assertEqual(f"gpupool: {caught.exception}\n", cli.stderr, "the message gpupool prints")
            self.assertIn("--sm needs MPS", cli.stderr)
            with self.assertRaisesRegex(gpupool.Error, "^sm needs mem"):
                gpupool.acquire(1, sm=25)
            with self.assertRaisesRegex(gpupool.Error, "^invalid compute share 0"):
                gpupool.acquire(1, mem="1G", sm=0)
            self.assertEqual(c.jobs(all=True), [], "nothing was stored")

    def test_an_mps_slice_gets_its_client_settings(self):
        fake_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake-bin")
        with Daemon(config='slice_enforcement = "mps"\n', env={"PATH": fake_bin + os.pathsep + os.environ["PATH"]}) as d:
            os.environ["GPUPOOL_RUNTIME_DIR"] = d.runtime_dir
            lease = gpupool.acquire(1, mem="1G", sm=30)
            self.assertEqual(os.environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=1024M")
            self.assertEqual(os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30")
            pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
            self.assertTrue(pipe.startswith(os.path.join(d.runtime_dir, "mps", "GPU-")), pipe)
            self.assertEqual(d.show(lease.id)["sm_percent"], 30)
            lease.release()
            self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", os.environ)
            wait_until(lambda: not os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid")),
                       what="the MPS control daemon quitting")

    def test_a_client_carries_on_across_a_restart_of_the_daemon(self):
        with Daemon() as d, gpupool.Client(d.socket) as c:
            job = c.submit(["sh", "-c", f"{until_exists(d.path('go'))}; exit 5"], env=d.env, cwd=d.work)
            d.wait_state(job, "running")
            waited = []
            waiter = threading.Thread(target=lambda: waited.extend(c.wait(job)))
            waiter.start()
            d.stop()  # the job runs on; the wait is asked again of the next daemon
            d.start()
            d.touch("go")
            waiter.join(timeout=60)
            self.assertFalse(waiter.is_alive(), "the wait did not end")
            self.assertEqual([(j["id"], j["state"], j["exit_code"]) for j in waited], [(job, "failed", 5)])
            self.assertEqual(c.status()["pid"], d.proc.pid)
            os.environ["GPUPOOL_RECONNECT_S"] = "0.3"
            d.kill()
            with self.assertRaisesRegex(gpupool.Error, r"^lost gpupoold \(.*\), and none answered again: "):
                c.status()
            d.start()
            self.assertEqual(c.status()["pid"], d.proc.pid, "it connects again when asked again")

    def test_acquire_sets_what_gpupool_run_sets(self):
        with Daemon() as d:
            for n, mem, run_args in ((1, "", []), (2, "20G", ["-g", "2", "--mem", "20G"])):
                # Someone else's CUDA_VISIBLE_DEVICES is replaced, as gpupool run replaces it.
                outside = {"CUDA_VISIBLE_DEVICES": "3", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
                run = d.gp("run", "-q", *run_args, "--", "env", env=outside, check=True)
                run_env = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
                run_job = d.all_jobs()[-1]["id"]
                proc, _, held = self.holder(d, n, mem, env=outside)
                self.assertEqual(lease_env(held["env"], held["id"]), lease_env(run_env, run_job))
                self.assertEqual(held["env"]["CUDA_VISIBLE_DEVICES"].split(","), held["uuids"])
                self.assertEqual(len(held["gpus"]), n)
                self.tell(proc, "exit")
                self.assertEqual(proc.wait(timeout=30), 0)

    def test_a_lease_is_held_until_released(self):
        with Daemon() as d:
            proc, lines, held = self.holder(d, 2)
            self.assertEqual(sorted(d.held_gpus()), sorted(held["uuids"]))
            leases = d.leases()
            self.assertEqual(sorted(l["uuid"] for l in leases), sorted(held["uuids"]))
            self.assertEqual({l["job"] for l in leases}, {f"job-{held['id']}"})
            [job] = d.jobs()
            self.assertEqual((job["id"], job["kind"], job["state"], job["pid"]),
                             (held["id"], "interactive", "running", held["pid"]))
            self.tell(proc, "release")
            released = lines.readline()
            self.assertTrue(released.startswith("released "), released)
            self.assertEqual(json.loads(released.split(" ", 1)[1]),
                             {"CUDA_VISIBLE_DEVICES": None, "GPUPOOL_JOB": None}, "the variables are restored")
            self.assertEqual(d.held_gpus(), [])
            self.assertEqual((d.show(held["id"])["state"], d.show(held["id"])["exit_code"]), ("done", 0))
            self.tell(proc, "raise")  # a `with` block ending in an exception
            inner = json.loads(lines.readline())
            self.assertNotEqual(proc.wait(timeout=30), 0)
            self.assertEqual((d.show(inner["id"])["state"], d.show(inner["id"])["exit_code"]), ("failed", 1))
            self.assertEqual(d.held_gpus(), [])

    def test_a_lease_ends_with_its_process(self):
        with Daemon() as d:
            for word, reason in (("exit", ""), ("die", "exit status unknown: the client disconnected")):
                proc, _, held = self.holder(d)
                self.assertEqual(d.held_gpus(), held["uuids"])
                self.tell(proc, word)
                self.assertEqual(proc.wait(timeout=30), 0)
                job = d.finish(held["id"])[0]
                self.assertEqual((job["state"], job["reason"]), ("done", reason), word)
                wait_until(lambda: not d.held_gpus(), 10, what="the lease ending")
            proc, _, held = self.holder(d)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            self.assertEqual(d.finish(held["id"])[0]["state"], "done")
            wait_until(lambda: not d.held_gpus(), 10, what="the lease of a killed process ending")
            self.assertEqual(d.leases(), [])

    def test_acquire_in_this_process_and_its_refusals(self):
        with Daemon() as d:
            os.environ["GPUPOOL_RUNTIME_DIR"] = d.runtime_dir
            os.environ["CUDA_VISIBLE_DEVICES"] = "7"
            sys.modules["torch"] = FakeTorch(initialised=True)
            with self.assertRaisesRegex(gpupool.Error, "torch has already initialised CUDA"):
                gpupool.acquire(1)
            self.assertEqual(d.all_jobs(), [], "nothing was asked of the daemon")
            sys.modules["torch"] = FakeTorch(initialised=False)  # imported, CUDA untouched: fine
            lease = gpupool.acquire(1, name="in-process")
            self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], lease.uuids[0])
            self.assertEqual(os.environ["GPUPOOL_JOB"], "in-process")
            with self.assertRaisesRegex(gpupool.Error, f"holds job {lease.id}'s GPUs already"):
                gpupool.acquire(1)
            lease.release()
            lease.release()  # twice does nothing
            self.assertEqual(os.environ["CUDA_VISIBLE_DEVICES"], "7")
            self.assertNotIn("GPUPOOL_JOB", os.environ)
            self.assertEqual(d.show(lease.id)["state"], "done")
            self.assertEqual(d.held_gpus(), [])

    def test_acquire_limits_torch_to_the_slice(self):
        with Daemon() as d:
            os.environ["GPUPOOL_RUNTIME_DIR"] = d.runtime_dir
            torch = sys.modules["torch"] = FakeTorch(initialised=False)
            with gpupool.acquire(2, mem="20G"):
                self.assertEqual(torch.fractions, {0: 0.25, 1: 0.25})
            torch.fractions.clear()
            with gpupool.acquire(1):
                self.assertEqual(torch.fractions, {}, "a whole GPU is torch's to fill")
            del sys.modules["torch"]
            with gpupool.acquire(1, mem="20G"):
                self.assertNotIn("torch", sys.modules, "acquire() does not import torch")

    def test_acquire_waits_gives_up_and_hears_a_cancel(self):
        with Daemon() as d, gpupool.Client(d.socket) as c:
            busy = c.submit(["sh", "-c", until_exists(d.path("go"))], gpus=8, env=d.env, cwd=d.work)
            d.wait_state(busy, "running")
            heard = []
            with self.assertRaisesRegex(gpupool.Error, r"^gave up waiting after 0.3 s$"):
                gpupool.acquire(1, timeout=0.3, on_wait=heard.append, socket_path=d.socket)
            self.assertRegex(heard[0], r"^job \d+ queued: ")
            gave_up = d.all_jobs()[-1]
            wait_until(lambda: d.show(gave_up["id"])["state"] == "cancelled", 10, what="the request leaving")
            outcome = {}

            def waiter():
                try:
                    outcome["lease"] = gpupool.acquire(1, socket_path=d.socket)
                except gpupool.Error as e:
                    outcome["error"] = str(e)
            thread = threading.Thread(target=waiter)
            thread.start()
            queued = wait_until(lambda: [j for j in d.jobs() if j["kind"] == "interactive"], 10)[0]
            c.cancel(queued["id"])
            thread.join(30)
            self.assertRegex(outcome.get("error", ""), rf"^job {queued['id']} cancelled")
            thread = threading.Thread(target=waiter)
            thread.start()
            wait_until(lambda: [j for j in d.jobs() if j["kind"] == "interactive"], 10)
            d.touch("go")
            thread.join(30)
            self.assertIn("lease", outcome, outcome)
            outcome["lease"].release()
            self.assertEqual(d.held_gpus(), [])


    def test_acquire_without_a_daemon(self):
        scratch = tempfile.mkdtemp(prefix="gpupool-python-alone-")
        self.addCleanup(shutil.rmtree, scratch, True)
        env = clean_env(GPUPOOL_SIM="hgx-h200", GPUPOOL_RUNTIME_DIR=os.path.join(scratch, "run"), GPUPOOL_CLI=GPUPOOL)
        alone = types.SimpleNamespace(env=env, work=scratch)

        def gp(*args):
            return subprocess.run([GPUPOOL, *args], env=env, capture_output=True, text=True, timeout=60)

        def leases():
            out = gp("leases", "--json")
            self.assertEqual(out.returncode, 0, out.stderr)
            return json.loads(out.stdout)
        run = gp("run", "-q", "-g", "2", "--mem", "20G", "--", "env")
        run_env = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
        proc, lines, held = self.holder(alone, 2, "20G")
        self.assertIsNone(held["id"])
        # What gpupool run sets without a daemon, the job named after the process that holds it.
        self.assertEqual(held["env"]["GPUPOOL_JOB"], f"acquire-{held['pid']}")
        self.assertEqual({k: v for k, v in lease_env(held["env"], None).items() if k != "GPUPOOL_JOB"},
                         {k: v for k, v in lease_env(run_env, None).items() if k != "GPUPOOL_JOB"})
        # The leases name the Python process, whose GPU work is then gpupool's, and hold: eight
        # whole GPUs cannot be had meanwhile.
        self.assertEqual(sorted((l["uuid"], l["pid"]) for l in leases()),
                         sorted((uuid, held["pid"]) for uuid in held["uuids"]))
        self.assertNotEqual(gp("run", "-q", "-g", "8", "--wait=0", "--", "true").returncode, 0)
        self.tell(proc, "release")
        self.assertTrue(lines.readline().startswith("released "))
        self.assertEqual(leases(), [])
        self.assertEqual(gp("run", "-q", "-g", "8", "--wait=0", "--", "true").returncode, 0)
        # A holder that dies without releasing: its leases end with it.
        for ending in ("die", signal.SIGKILL):
            proc, _, held = self.holder(alone, 1)
            self.assertEqual([l["pid"] for l in leases()], [held["pid"]])
            if ending == "die":
                self.tell(proc, "die")
            else:
                proc.send_signal(ending)
            proc.wait(timeout=30)
            wait_until(lambda: leases() == [], 10, what=f"the lease ending after {ending}")
        # Waiting for busy GPUs: the reason is heard, the timeout kept, nothing is left behind.
        os.environ.update(env)
        busy = subprocess.Popen([GPUPOOL, "run", "-q", "-g", "8", "--", "sh", "-c", until_exists(f"{scratch}/go")],
                                env=env)
        self.addCleanup(busy.wait)
        wait_until(lambda: len(leases()) == 8, 10, what="all eight GPUs leased")
        heard = []
        with self.assertRaisesRegex(gpupool.Error, r"^gave up after"):
            gpupool.acquire(1, timeout=0.3, on_wait=heard.append)
        self.assertRegex(heard[0], r"8 busy")
        open(f"{scratch}/go", "w").close()
        self.assertEqual(busy.wait(timeout=30), 0)
        with gpupool.acquire(1, name="alone") as lease:
            self.assertEqual(os.environ["GPUPOOL_JOB"], "alone")
            self.assertEqual([l["job"] for l in leases()], ["alone"])
        self.assertEqual(leases(), [])

class PipInstallTest(unittest.TestCase):
    def has(self, statement):
        return subprocess.run([sys.executable, "-c", statement], capture_output=True).returncode == 0

    def test_pip_installs_an_importable_package(self):
        # Offline, pip builds with what is installed: setuptools, and wheel for setuptools < 70.1.
        for what, needed in (("setuptools", "import setuptools"), ("pip", "import pip"),
                             ("wheel", "try:\n import wheel\nexcept ImportError:\n import setuptools.command.bdist_wheel")):
            if not self.has(needed):
                self.skipTest(f"{sys.executable} cannot build offline: it has no {what}")
        work = tempfile.mkdtemp(prefix="gpupool-pip-")
        self.addCleanup(shutil.rmtree, work)
        source = os.path.join(work, "python")  # a copy: setuptools builds in the source tree
        shutil.copytree(PYTHON_DIR, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        target = os.path.join(work, "site")
        install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                                  "--no-deps", "--target", target, source], capture_output=True, text=True,
                                 timeout=240)
        self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
        probe = subprocess.run([sys.executable, "-c", "import gpupool; print(gpupool.__file__, gpupool.__version__)"],
                               env=dict(os.environ, PYTHONPATH=target), cwd=work, capture_output=True, text=True)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        self.assertTrue(probe.stdout.startswith(os.path.join(target, "gpupool", "__init__.py")), probe.stdout)


if __name__ == "__main__":
    main()
