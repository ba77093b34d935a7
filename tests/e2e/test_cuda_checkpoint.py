"""gpupool-cuda-checkpoint, the helper behind suspend and resume, on the simulated libcuda.so.1:
the driver's order of steps, refusals, injected failures and hangs, a process that is gone, and
the simulated NVML leaving out a checkpointed process (docs/fixtures.md)."""
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN_DIR, clean_env, gpupool, main, wait_until  # noqa: E402

PRIVATE_LIB_DIR = os.path.join(BIN_DIR, "..", "lib", "gpupool")
HELPER = os.path.join(PRIVATE_LIB_DIR, "gpupool-cuda-checkpoint")
SIM_CUDA = os.path.join(PRIVATE_LIB_DIR, "sim", "libcuda.so.1")


class CudaCheckpointTest(unittest.TestCase):
    def setUp(self):
        self.state = tempfile.mkdtemp(prefix="gpupool-e2e-cuda-")
        self.addCleanup(shutil.rmtree, self.state)

    def sleeper(self):
        """A live process to suspend; the simulated driver takes any live process for a CUDA one."""
        proc = subprocess.Popen(["sleep", "600"])
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        return proc.pid

    def write(self, name, text):
        with open(os.path.join(self.state, name), "w") as f:
            f.write(text)

    def helper(self, *args, timeout=60, state_dir=True):
        env = clean_env(GPUPOOL_SIM_CUDA_STATE=self.state if state_dir else None)
        return subprocess.run([HELPER, "--library", SIM_CUDA, *[str(a) for a in args]], env=env,
                              capture_output=True, text=True, timeout=timeout)

    def lines(self, proc):
        """Each line as (pid, result, state), after checking its seconds read as a number."""
        out = []
        for line in proc.stdout.splitlines():
            pid, result, state, seconds = line.split(" ")
            self.assertGreaterEqual(float(seconds), 0)
            out.append((int(pid), result, state))
        return out

    def step(self, step, *pids, exit_code=0):
        proc = self.helper(step, *pids)
        self.assertEqual(proc.returncode, exit_code, proc.stdout + proc.stderr)
        self.assertEqual(proc.stderr, "")
        return self.lines(proc)

    def test_suspend_and_resume_in_the_drivers_order(self):
        pid = self.sleeper()
        self.assertEqual(self.step("state", pid), [(pid, "ok", "running")])
        self.assertEqual(self.step("lock", pid), [(pid, "ok", "locked")])
        self.assertEqual(self.step("checkpoint", pid), [(pid, "ok", "checkpointed")])
        self.assertEqual(self.step("state", pid), [(pid, "ok", "checkpointed")])
        self.assertEqual(self.step("restore", pid), [(pid, "ok", "locked")])
        self.assertEqual(self.step("unlock", pid), [(pid, "ok", "running")])
        # A lock's time limit reaches the driver; the simulated one never needs it.
        proc = self.helper("--lock-timeout-ms", 5000, "lock", pid)
        self.assertEqual((proc.returncode, self.lines(proc)), (0, [(pid, "ok", "locked")]))

    def test_every_step_out_of_order_is_refused_and_changes_nothing(self):
        pid = self.sleeper()
        allowed = {"running": "lock", "locked": "checkpoint", "checkpointed": "restore"}
        for state, to_reach in [("running", []), ("locked", ["lock"]), ("checkpointed", ["lock", "checkpoint"])]:
            for step in to_reach:
                self.step(step, pid)
            for step in ("lock", "checkpoint", "restore", "unlock"):
                if step == allowed[state] or (state == "locked" and step == "unlock"):
                    continue
                with self.subTest(state=state, step=step):
                    self.assertEqual(self.step(step, pid, exit_code=1), [(pid, "CUDA_ERROR_ILLEGAL_STATE", state)])
            self.write(str(pid), "running\n")

    def test_several_processes_stop_at_the_first_refusal(self):
        first, second, third = self.sleeper(), self.sleeper(), self.sleeper()
        self.step("lock", second)
        self.assertEqual(self.step("lock", first, second, third, exit_code=1),
                         [(first, "ok", "locked"), (second, "CUDA_ERROR_ILLEGAL_STATE", "locked")])
        self.assertEqual(self.step("state", first, second, third),
                         [(first, "ok", "locked"), (second, "ok", "locked"), (third, "ok", "running")])

    def test_an_injected_failure_returns_its_code_and_keeps_the_state(self):
        pid = self.sleeper()
        self.write("fail-lock", "801\n")
        self.assertEqual(self.step("lock", pid, exit_code=1), [(pid, "CUDA_ERROR_NOT_SUPPORTED", "running")])
        # A code the driver has no name for prints as its number.
        self.write("fail-lock", "12345\n")
        self.assertEqual(self.step("lock", pid, exit_code=1), [(pid, "CUDA_ERROR_12345", "running")])
        os.remove(os.path.join(self.state, "fail-lock"))
        self.step("lock", pid)
        self.write("fail-checkpoint", "999\n")
        self.assertEqual(self.step("checkpoint", pid, exit_code=1), [(pid, "CUDA_ERROR_UNKNOWN", "locked")])

    def test_a_process_that_is_gone_is_an_invalid_value(self):
        proc = subprocess.Popen(["true"])
        proc.wait()
        self.assertEqual(self.step("lock", proc.pid, exit_code=1), [(proc.pid, "CUDA_ERROR_INVALID_VALUE", "unknown")])
        self.assertEqual(self.step("state", proc.pid, exit_code=1),
                         [(proc.pid, "CUDA_ERROR_INVALID_VALUE", "unknown")])

    def test_a_hanging_step_waits_until_released_and_can_be_killed(self):
        pid = self.sleeper()
        self.write("fail-lock", "hang")
        # Killed by a time limit, as the daemon's run_program kills it: the state stays.
        with self.assertRaises(subprocess.TimeoutExpired):
            self.helper("lock", pid, timeout=1)
        self.assertEqual(self.step("state", pid), [(pid, "ok", "running")])
        # Released, the call goes on as usual.
        hung = subprocess.Popen([HELPER, "--library", SIM_CUDA, "lock", str(pid)], text=True,
                                env=clean_env(GPUPOOL_SIM_CUDA_STATE=self.state), stdout=subprocess.PIPE)
        self.addCleanup(hung.kill)
        os.remove(os.path.join(self.state, "fail-lock"))
        out, _ = hung.communicate(timeout=60)
        self.assertEqual(hung.returncode, 0)
        self.assertRegex(out, rf"^{pid} ok locked \d+\.\d{{3}}\n$")

    def test_a_lock_file_removed_while_waited_for_is_made_again_and_locked(self):
        # The daemon removes an ended process's file while it holds its lock; a helper that had
        # opened it and waits must not go on under a lock on a file nobody else can reach.
        pid = self.sleeper()
        locks = tempfile.mkdtemp(prefix="gpupool-e2e-locks-")
        self.addCleanup(shutil.rmtree, locks)
        path = os.path.join(locks, str(pid))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.lockf(fd, fcntl.LOCK_EX)
        env = clean_env(GPUPOOL_SIM_CUDA_STATE=self.state)
        helper = subprocess.Popen([HELPER, "--library", SIM_CUDA, "--lock-dir", locks, "state", str(pid)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(helper.kill)
        inode = os.fstat(fd).st_ino
        wait_until(lambda: any(line.split()[1] == "->" and line.split()[-3].endswith(f":{inode}")
                               for line in open("/proc/locks") if len(line.split()) > 5),
                   what="the helper waiting for the lock")
        os.unlink(path)
        os.close(fd)
        out, err = helper.communicate(timeout=60)
        self.assertEqual(helper.returncode, 0, err)
        self.assertTrue(os.path.exists(path), "made again, and locked there")

    def test_the_simulated_nvml_lists_no_checkpointed_process(self):
        running, suspended = self.sleeper(), self.sleeper()
        overlay = os.path.join(self.state, "overlay.json")
        with open(overlay, "w") as f:
            json.dump({"gpus": {"0": {"processes": [
                {"pid": pid, "used_memory_mib": 500, "kind": "compute", "sm_utilization": 40}
                for pid in (running, suspended)]}}}, f)
        for step in ("lock", "checkpoint"):
            self.step(step, suspended)
        # What NVML lists, as gpupool reads it through the simulated library (as the daemon does).
        listing = gpupool("list", "--json", env={"GPUPOOL_SIM_STATE": overlay, "GPUPOOL_SIM_CUDA_STATE": self.state})
        self.assertEqual([p["pid"] for p in json.loads(listing.stdout)[0]["processes"]], [running])

    def test_without_a_state_directory_there_is_no_device(self):
        proc = self.helper("state", self.sleeper(), state_dir=False)
        self.assertEqual(proc.returncode, 4)
        self.assertEqual(proc.stdout, "")
        self.assertEqual(proc.stderr, "gpupool-cuda-checkpoint: cuInit failed: CUDA_ERROR_NO_DEVICE\n")

    def test_a_driver_without_the_checkpoint_api_is_named(self):
        # The simulated NVML is a library with no cuCheckpoint* calls, nor even cuInit; libc has
        # neither. Neither is a CUDA driver; a missing library is no driver at all.
        proc = subprocess.run([HELPER, "--library", "libc.so.6", "state", "1"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 4)
        self.assertIn("has no cuInit", proc.stderr)
        proc = subprocess.run([HELPER, "--library", "/nonexistent/libcuda.so.1", "state", "1"], capture_output=True,
                              text=True)
        self.assertEqual(proc.returncode, 4)
        self.assertRegex(proc.stderr, r"^gpupool-cuda-checkpoint: cannot load /nonexistent/libcuda\.so\.1: ")
        self.assertEqual(proc.stderr.count("\n"), 1)

    def test_usage_errors_exit_2(self):
        for args in ([], ["lock"], ["suspend", "1"], ["lock", "0"], ["lock", "-5"], ["lock", "12x"],
                     ["--lock-timeout-ms", "soon", "lock", "1"], ["--bogus", "x", "lock", "1"], ["--library"]):
            with self.subTest(args=args):
                proc = subprocess.run([HELPER, *args], capture_output=True, text=True)
                self.assertEqual(proc.returncode, 2)
                self.assertEqual(proc.stdout, "")
                self.assertIn("usage: gpupool-cuda-checkpoint", proc.stderr)


if __name__ == "__main__":
    main()
