"""gpupool doctor end to end: the real binary on simulated machines, with --root pointing at a fake
/proc, /dev and /usr tree (tests/data/doctor/). Git keeps no permission bits, so each test copies the
tree and sets the device nodes' modes itself."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import GPUPOOL, SOURCE_DIR, Daemon, clean_env, main, wait_until

TREES = os.path.join(SOURCE_DIR, "tests", "data", "doctor")


class DoctorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpupool-doctor-")
        self.root = os.path.join(self.tmp, "root")
        self.runtime = os.path.join(self.tmp, "run")
        shutil.copytree(os.path.join(TREES, "healthy"), self.root)
        self.set_nodes(1)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def set_nodes(self, gpus, mode=0o666):
        """/dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia0..gpus-1 with mode."""
        for name in ["nvidiactl", "nvidia-uvm"] + [f"nvidia{i}" for i in range(gpus)]:
            path = os.path.join(self.root, "dev", name)
            open(path, "a").close()
            os.chmod(path, mode)

    def doctor(self, *args, sim="h200-1", env=None):
        run_env = clean_env(GPUPOOL_SIM=sim, GPUPOOL_RUNTIME_DIR=self.runtime, HOME="/nonexistent", **(env or {}))
        return subprocess.run([GPUPOOL, "doctor", "--root", self.root, *args], env=run_env, capture_output=True,
                              text=True, timeout=60)

    def findings(self, *args, expect=None, **kwargs):
        """doctor --json: {check: finding}; checks the exit code against the worst status."""
        proc = self.doctor("--json", *args, **kwargs)
        out = json.loads(proc.stdout)
        self.assertEqual(proc.returncode, out["exit_code"], proc.stderr)
        worst = max((["ok", "warning", "problem"].index(f["status"]) for f in out["findings"]), default=0)
        self.assertEqual(out["exit_code"], worst)
        if expect is not None:
            self.assertEqual(proc.returncode, expect, json.dumps(out, indent=2))
        return {f["check"]: f for f in out["findings"]}

    def test_healthy_machine_is_all_ok(self):
        found = self.findings(expect=0)
        self.assertEqual(list(found), ["kernel-module", "device-nodes", "nvml", "gpus", "cuda-version", "container",
                                       "cuda-visible-devices", "persistence-mode", "ecc", "link-errors", "stray-memory", "display-server",
                                       "outside-processes", "leases", "daemon", "quarantine", "state-space", "mps", "slurm"])
        self.assertIn("580.159.04", found["kernel-module"]["summary"])
        self.assertIsNone(found["kernel-module"]["fix"])
        cuda = "\n".join(found["cuda-version"]["evidence"])
        self.assertIn("the driver supports CUDA 13.0", cuda)
        self.assertIn("dist-packages: CUDA 12.1", cuda)
        self.assertIn("/usr/local/cuda-12.4: CUDA 12.4.1", cuda)
        text = self.doctor()
        self.assertEqual(text.returncode, 0, text.stderr)
        lines = text.stdout.splitlines()
        # A healthy machine: one line per check, then the counts.
        self.assertEqual(len(lines), 19 + 3, text.stdout)
        self.assertTrue(lines[0].startswith("ok       kernel-module"), lines[0])
        self.assertTrue(lines[1].startswith("ok       device-nodes"), lines[1])
        self.assertEqual(lines[-2:], ["19 ok, 0 warning(s), 0 problem(s)", "(--verbose shows what each check read)"])
        verbose = self.doctor("--verbose").stdout.splitlines()
        self.assertIn("/proc/driver/nvidia/version: NVRM version", verbose[1])
        self.assertEqual(verbose[-1], "19 ok, 0 warning(s), 0 problem(s)")

    def test_no_kernel_module(self):
        os.remove(os.path.join(self.root, "proc", "driver", "nvidia", "version"))
        found = self.findings(expect=2)
        self.assertEqual(found["kernel-module"]["status"], "problem")
        self.assertIn("modprobe nvidia", found["kernel-module"]["fix"])
        text = self.doctor().stdout
        self.assertIn("problem  kernel-module", text)
        self.assertIn("         fix: Load it", text)

    def test_device_node_permissions(self):
        os.chmod(os.path.join(self.root, "dev", "nvidia-uvm"), 0o660)
        found = self.findings(expect=1)
        self.assertEqual(found["device-nodes"]["status"], "warning")
        self.assertIn("/dev/nvidia-uvm mode 0660", found["device-nodes"]["evidence"])
        os.chmod(os.path.join(self.root, "dev", "nvidia0"), 0o600)
        found = self.findings(expect=2)
        self.assertIn("cannot open /dev/nvidia0", found["device-nodes"]["summary"])
        os.remove(os.path.join(self.root, "dev", "nvidiactl"))
        self.assertIn("missing: /dev/nvidiactl", self.findings(expect=2)["device-nodes"]["summary"])

    def test_container(self):
        open(os.path.join(self.root, ".dockerenv"), "w").close()
        found = self.findings(env={"NVIDIA_VISIBLE_DEVICES": "all"}, expect=0)
        self.assertIn("detected: /.dockerenv exists (Docker)", found["container"]["evidence"])
        self.assertIn("injected: /dev/nvidia0", found["container"]["evidence"])
        found = self.findings(env={"NVIDIA_VISIBLE_DEVICES": "0,1"}, expect=1)
        self.assertIn("names 2 GPU(s) but 1 device node(s)", found["container"]["summary"])
        os.remove(os.path.join(self.root, "dev", "nvidia0"))
        found = self.findings(env={"NVIDIA_VISIBLE_DEVICES": "void"}, expect=2)
        self.assertEqual(found["container"]["status"], "problem")

    def test_cuda_visible_devices_traps(self):
        cases = {"0,0": "problem", "1": "warning", "GPU-": "warning", "0": "ok", "": "warning"}
        for value, status in cases.items():
            with self.subTest(value=value):
                found = self.findings(env={"CUDA_VISIBLE_DEVICES": value})
                self.assertEqual(found["cuda-visible-devices"]["status"], status, found["cuda-visible-devices"])
                self.assertIn(f"CUDA_VISIBLE_DEVICES={json.dumps(value)}", found["cuda-visible-devices"]["evidence"])
        found = self.findings(env={"CUDA_DEVICE_ORDER": "bogus"}, expect=2)
        self.assertIn("CUDA initialisation would fail", found["cuda-visible-devices"]["summary"])

    def test_mps(self):
        fake_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake-bin")
        path = os.pathsep.join(d for d in os.environ.get("PATH", os.defpath).split(os.pathsep)
                               if d and not os.path.exists(os.path.join(d, "nvidia-cuda-mps-control")))
        without = self.findings(env={"PATH": path}, expect=0)["mps"]
        self.assertEqual(without["summary"],
                         "no gpupoold answers; CUDA MPS is not installed here: one would hold memory slices with its "
                         "watchdog")
        self.assertIsNone(without["fix"])
        found = self.findings(env={"PATH": fake_bin + os.pathsep + path}, expect=0)["mps"]
        self.assertEqual(found["summary"],
                         'no gpupoold answers; CUDA MPS is installed here: one would hold slices of one GPU with it '
                         '(slice_enforcement "auto", the default, or "mps")')
        evidence = "\n".join(found["evidence"])
        self.assertIn(f"nvidia-cuda-mps-control on this shell's PATH: {fake_bin}/nvidia-cuda-mps-control", evidence)
        self.assertIn("GPU 0: compute mode default: MPS clients and other programs share it", evidence)
        self.assertIn("gpupool changes neither", evidence)
        # A running daemon that found no control program on its own PATH says so, whatever ours has.
        with Daemon(sim="h200-1", env={"PATH": path}) as daemon:
            self.runtime = daemon.runtime_dir
            found = self.findings(env={"PATH": fake_bin + os.pathsep + path}, expect=0)["mps"]
            self.assertEqual(found["summary"], "gpupoold holds memory slices with its watchdog, not with CUDA MPS")

    def test_slurm(self):
        slurm = {"SLURM_JOB_ID": "812", "SLURM_JOB_GPUS": "0", "GPU_DEVICE_ORDINAL": "0"}
        self.assertIn("CUDA_VISIBLE_DEVICES is unset", self.findings(env=slurm, expect=1)["slurm"]["summary"])
        self.assertEqual(self.findings(env=dict(slurm, CUDA_VISIBLE_DEVICES="0"), expect=0)["slurm"]["status"], "ok")

    def test_lease_held_for_a_dead_process(self):
        # A real lease, taken by `gpupool run`; its job's pid does not exist in the fake /proc, as a
        # holder that died while something it left behind keeps the lock.
        env = clean_env(GPUPOOL_SIM="h200-1", GPUPOOL_RUNTIME_DIR=self.runtime)
        job = subprocess.Popen([GPUPOOL, "run", "-q", "--name", "ghost", "--", "sleep", "30"], env=env)
        try:
            def leased():  # once it names the job: first it names `gpupool run`, then its child
                out = subprocess.run([GPUPOOL, "leases", "--json"], env=env, capture_output=True, text=True)
                return out.returncode == 0 and [l for l in json.loads(out.stdout) if l["pid"] != job.pid]
            lease = wait_until(leased, what="the lease")[0]
            found = self.findings(expect=2)
            self.assertEqual(found["leases"]["status"], "problem")
            self.assertIn(f"GPU 0 (pid {lease['pid']})", found["leases"]["summary"])
            self.assertIn(f"{self.runtime}/locks/UUID.lock", found["leases"]["fix"])
            # The lease is gpupool's: the job's GPU use is not counted as outside.
            self.assertEqual(found["outside-processes"]["status"], "ok")
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=30)
        self.assertEqual(self.findings(expect=0)["leases"]["summary"], "no GPU is leased")

    def test_a_slices_memory_is_not_taken_for_an_outside_process(self):
        # A 20 GiB slice whose process NVML lists under a pid this namespace cannot see, or does not
        # list at all (another container's view): its memory is the slice's, not someone else's.
        state = os.path.join(self.tmp, "state.json")
        env = clean_env(GPUPOOL_SIM="h200-1", GPUPOOL_RUNTIME_DIR=self.runtime, GPUPOOL_SIM_STATE=state)

        def gpu0(memory_used_mib, processes=()):
            with open(state, "w") as f:
                json.dump({"gpus": {"0": {"memory_used_mib": memory_used_mib, "processes": list(processes)}}}, f)

        gpu0(0)
        job = subprocess.Popen([GPUPOOL, "run", "-q", "--mem", "20G", "--", "sleep", "60"], env=env)
        try:
            def leased():
                out = subprocess.run([GPUPOOL, "leases", "--json"], env=env, capture_output=True, text=True)
                return out.returncode == 0 and json.loads(out.stdout)
            wait_until(leased, what="the slice's lease")
            for processes in ([], [{"pid": 3999999, "used_memory_mib": 18432, "kind": "compute"}]):
                gpu0(18432, processes)
                found = self.findings(env={"GPUPOOL_SIM_STATE": state})
                self.assertEqual(found["outside-processes"]["status"], "ok", found["outside-processes"])
            # 30 GiB in use beside a 20 GiB slice: the 10 GiB over it is someone else's.
            gpu0(30720)
            found = self.findings(env={"GPUPOOL_SIM_STATE": state})
            self.assertEqual(found["outside-processes"]["status"], "warning")
            self.assertIn("GPU 0: ", found["outside-processes"]["evidence"][0])
            self.assertIn("10240 MiB used by processes not visible here", found["outside-processes"]["evidence"][0])
        finally:
            job.send_signal(signal.SIGTERM)
            job.wait(timeout=30)

    def test_pid_against_its_environment(self):
        # pcie-4gpu: 4 GPUs. pid 4242 asked for GPU 1 but holds all four (set after cuInit); pid 4343
        # asked for GPU 0 and runs on GPU 2. Their /proc entries come from tests/data/doctor/processes.
        shutil.copytree(os.path.join(TREES, "processes"), self.root, dirs_exist_ok=True)
        self.set_nodes(4)
        state = os.path.join(self.tmp, "state.json")
        gpus = {str(i): {"processes": [{"pid": 4242, "used_memory_mib": 500, "kind": "compute"}]} for i in range(4)}
        gpus["2"]["processes"].append({"pid": 4343, "used_memory_mib": 700, "kind": "compute"})
        with open(state, "w") as f:
            json.dump({"gpus": gpus}, f)
        env = {"GPUPOOL_SIM_STATE": state}
        found = self.findings("--pid", "4242", sim="pcie-4gpu", env=env, expect=2)
        self.assertEqual(found["process-environment"]["status"], "ok")
        self.assertIn('CUDA_VISIBLE_DEVICES="1"', found["process-environment"]["evidence"])
        self.assertIn("every GPU", found["process-gpus"]["summary"])
        self.assertIn("outside any lease", found["process-leases"]["summary"])
        found = self.findings("--pid", "4343", sim="pcie-4gpu", env=env, expect=2)
        self.assertIn("uses GPU 2, outside", found["process-gpus"]["summary"])
        found = self.findings("--pid", "9999", sim="pcie-4gpu", env=env, expect=2)
        self.assertEqual(found["process-environment"]["status"], "problem")
        self.assertNotIn("process-gpus", found)

    def test_memory_repairs(self):
        state = os.path.join(self.tmp, "state.json")
        with open(state, "w") as f:
            json.dump({"gpus": {"0": {"remapped_rows": 1, "row_remapping_pending": True}}}, f)
        found = self.findings(env={"GPUPOOL_SIM_STATE": state}, expect=1)
        self.assertIn("waits for a reset on GPU 0", found["ecc"]["summary"])
        self.assertIn("retired pages n/a (pending n/a); remapped rows 1 (pending yes, failed no)",
                      found["ecc"]["evidence"][0])

    def test_display_server_on_a_gpu(self):
        # mixed-workstation runs pids 1873 and 2290 as graphics processes on GPU 0; name one Xorg.
        os.makedirs(os.path.join(self.root, "proc", "1873"))
        with open(os.path.join(self.root, "proc", "1873", "status"), "w") as f:
            f.write("Name:\tXorg\nUid:\t0\t0\t0\t0\n")
        with open(os.path.join(self.root, "proc", "1873", "cmdline"), "w") as f:
            f.write("/usr/lib/xorg/Xorg\0vt1\0")
        self.set_nodes(2)
        found = self.findings(sim="mixed-workstation")
        self.assertEqual(found["display-server"]["status"], "warning")
        self.assertIn("GPU 0: pid 1873 /usr/lib/xorg/Xorg vt1 (graphics)", found["display-server"]["evidence"])

    def test_daemon(self):
        with Daemon(sim="h200-1") as daemon:
            self.runtime = daemon.runtime_dir
            found = self.findings(expect=0)
            self.assertEqual(found["daemon"]["summary"], "gpupoold answers")
        # Something that is not the daemon's socket where the socket belongs.
        self.runtime = os.path.join(self.tmp, "run")
        os.makedirs(self.runtime, exist_ok=True)
        open(os.path.join(self.runtime, "gpupoold.sock"), "w").close()
        found = self.findings(expect=2)
        self.assertEqual(found["daemon"]["status"], "problem")
        self.assertIn("journalctl", found["daemon"]["fix"])

    def test_bad_command_line(self):
        for args in (["--pid", "abc"], ["--root", os.path.join(self.tmp, "missing")], ["--bogus"]):
            with self.subTest(args=args):
                proc = subprocess.run([GPUPOOL, "doctor", *args], env=clean_env(GPUPOOL_SIM="h200-1"),
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 2)
                self.assertEqual(proc.stdout, "")
                self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
                self.assertTrue(proc.stderr.startswith("gpupool: "), proc.stderr)


if __name__ == "__main__":
    main()
