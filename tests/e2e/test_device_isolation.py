"""Device isolation (docs/daemon.md, "Device isolation"): a batch job runs in a cgroup of its own
that may not open the /dev/nvidiaN nodes of the GPUs it does not lease, whatever it does with
CUDA_VISIBLE_DEVICES.

The test makes its own device nodes with mknod (195:N, N the fixture's minor numbers, which are
the indices on hgx-h200): opening one fails with EPERM where the cgroup denies it. Where it is
allowed, it fails with ENXIO without the NVIDIA driver (nothing answers behind it), with ENODEV
where the driver has no GPU of that minor, and opens where a real GPU has it. Runs with the mechanism the daemon picks (cgroup v1's devices controller, else a cgroup v2
eBPF filter). Needs root, a kernel that lets the daemon isolate (it says so in its log), and a
directory where device nodes can be opened (not a nodev mount)."""
import errno
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
import unittest

from harness import GPUPOOLD, Daemon, clean_env, main, wait_until

GPUS = 8  # hgx-h200
ISOLATING = re.compile(r"device isolation: (cgroup v1 devices controller|cgroup v2 eBPF device filter) "
                       r"\(job cgroups in (\S+)\)")

# Opens every node; prints {"minor": errno or 0} and the job's cgroups (v1 devices, v2).
OPEN_ALL = r"""
import errno, json, os, sys
result = {}
for minor in range(int(sys.argv[2])):
    try:
        os.close(os.open(os.path.join(sys.argv[1], f"nvidia{minor}"), os.O_RDWR))
        result[minor] = 0
    except OSError as e:
        result[minor] = e.errno
cgroups = {}
for line in open("/proc/self/cgroup").read().splitlines():
    hierarchy, controllers, path = line.split(":", 2)
    if "devices" in controllers.split(","):
        cgroups["v1"] = path
    elif hierarchy == "0":
        cgroups["v2"] = path
print(json.dumps({"open": result, "cgroups": cgroups}))
"""


# The MIG capability nodes of hgx-h200-mig's devices, and the driver's own two.
CAPS_MAJOR = 240  # for local use: nothing answers it here, so an allowed open fails with ENXIO
MIG_CAPS = {"config": 1, "monitor": 2, "gpu0/gi1/access": 12, "gpu0/gi1/ci0/access": 13,
            "gpu0/gi2/access": 21, "gpu0/gi2/ci0/access": 22}

# Opens the capability nodes named in argv[2] ({name: minor}); prints {"name": errno or 0} and
# the job's GPUPOOL_MIG_UUID.
OPEN_CAPS = r"""
import json, os, sys
result = {}
for name, minor in json.loads(sys.argv[2]).items():
    try:
        os.close(os.open(os.path.join(sys.argv[1], f"nvidia-cap{minor}"), os.O_RDONLY))
        result[name] = 0
    except OSError as e:
        result[name] = e.errno
print(json.dumps({"open": result, "mig": os.environ.get("GPUPOOL_MIG_UUID")}))
"""

ALLOWED = (0, errno.ENXIO, errno.ENODEV)  # what opening a node gives where the cgroup allows it


def verdicts(opened):
    """{"minor": "allowed" or "denied"} from the script's {"minor": errno or 0}."""
    def verdict(error):
        if error == errno.EPERM:
            return "denied"
        if error in ALLOWED:
            return "allowed"
        raise AssertionError(f"opening a device node failed with errno {error}")
    return {minor: verdict(error) for minor, error in opened.items()}


def node_directory():
    """A directory in which device nodes can be opened, or None. /tmp may be mounted nodev (then
    open fails with EACCES)."""
    for parent in ("/tmp", "/dev/shm"):
        path = tempfile.mkdtemp(prefix="gpupool-devnodes-", dir=parent)
        node = os.path.join(path, "probe")
        try:
            os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(195, 200))  # no GPU has this minor
            os.close(os.open(node, os.O_RDWR))
            error = 0
        except OSError as e:
            error = e.errno
        if error in ALLOWED:
            os.unlink(node)
            return path
        shutil.rmtree(path, ignore_errors=True)
    return None


@unittest.skipIf(os.geteuid() != 0, "needs root to make cgroups and device nodes")
class DeviceIsolationTest(unittest.TestCase):
    def setUp(self):
        self.nodes = node_directory()
        if self.nodes is None:
            self.skipTest("no directory (/tmp, /dev/shm) where device nodes can be opened")
        self.addCleanup(shutil.rmtree, self.nodes, ignore_errors=True)
        for minor in range(GPUS):
            os.mknod(os.path.join(self.nodes, f"nvidia{minor}"), stat.S_IFCHR | 0o666, os.makedev(195, minor))

    def isolating(self, daemon):
        """(mechanism "v1" or "v2", the directory of the daemon's job cgroups) from its start-up
        line; skips the test where the kernel does not let it isolate."""
        found = ISOLATING.search(daemon.log_text())
        if not found:
            off = re.search(r"device isolation off: (.*)", daemon.log_text())
            self.assertIsNotNone(off, daemon.log_text())
            self.skipTest(f"the daemon cannot isolate here: {off.group(1)}")
        return ("v1" if "v1" in found.group(1) else "v2"), found.group(2)

    def probe_job(self, daemon, *options):
        """Submits the opening script; returns (the job as shown, what the script printed, with
        "open" as verdicts())."""
        job = daemon.submit(*options, "--", "python3", "-c", OPEN_ALL, self.nodes, str(GPUS))
        [shown] = daemon.finish(job)
        self.assertEqual(shown["state"], "done", shown)
        with open(os.path.join(daemon.state_dir, "logs", f"{job}.out")) as f:
            seen = json.loads(f.read())
        seen["open"] = verdicts(seen["open"])
        return shown, seen

    def test_a_job_opens_its_gpu_and_no_other(self):
        # The watchdog, not MPS, holds the slice below: a machine with MPS installed would
        # otherwise start a real control daemon for a simulated GPU.
        with Daemon(config='slice_enforcement = "watch"\n') as daemon:
            mechanism, base = self.isolating(daemon)
            shown, seen = self.probe_job(daemon)
            [own] = shown["gpus"]
            expected = {str(minor): "allowed" if minor == own else "denied" for minor in range(GPUS)}
            self.assertEqual(seen["open"], expected)
            # The job ran in its attempt's cgroup, which is gone now that it has ended.
            group = seen["cgroups"][mechanism]
            self.assertTrue(base.endswith(os.path.dirname(group)), (base, group))
            self.assertEqual(os.path.basename(group), f"job-{shown['id']}.1")
            self.assertTrue(os.path.isdir(base))
            # The daemon removes it once the supervisor has exited, or soon after where the kernel
            # still counts what has just exited in it.
            wait_until(lambda: not os.path.exists(os.path.join(base, f"job-{shown['id']}.1")), timeout=10,
                       what="the ended job's cgroup's removal")

            # Two GPUs; and a memory slice counts as leasing its GPU.
            shown, seen = self.probe_job(daemon, "-g", "2")
            allowed = {str(i) for i in shown["gpus"]}
            self.assertEqual({m for m, v in seen["open"].items() if v == "allowed"}, allowed)
            self.assertEqual({m for m, v in seen["open"].items() if v == "denied"},
                             {str(i) for i in range(GPUS)} - allowed)
            shown, seen = self.probe_job(daemon, "--mem", "10G")
            [own] = shown["gpus"]
            self.assertEqual([m for m, v in seen["open"].items() if v == "allowed"], [str(own)])
        # The daemon's own directory goes when it stops with no job left.
        self.assertFalse(os.path.exists(base))

    def test_leftover_cgroups_are_removed_at_start_and_running_jobs_keep_theirs(self):
        with Daemon() as daemon:
            _, base = self.isolating(daemon)
            # What a supervisor killed with kill -9 leaves behind.
            os.mkdir(os.path.join(base, "job-99.1"))
            release = os.path.join(daemon.work, "release")
            job = daemon.submit("--", "sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done")
            group = os.path.join(base, f"job-{job}.1")
            wait_until(lambda: os.path.exists(group), what="the job's cgroup")
            daemon.kill()
            daemon.start()
            self.assertEqual(self.isolating(daemon)[1], base)
            self.assertFalse(os.path.exists(os.path.join(base, "job-99.1")))
            self.assertTrue(os.path.exists(group))  # its job still runs in it
            with open(release, "w"):
                pass
            [shown] = daemon.finish(job)
            self.assertEqual(shown["state"], "done", shown)
            # An adopted supervisor is init's child: its cgroup empties when init has reaped it.
            wait_until(lambda: not os.path.exists(group), timeout=10, what="the adopted job's cgroup's removal")

    def straggling_job(self, daemon, base):
        """A job that leaves a process of its own session behind: the SIGKILL to the job's process
        group misses it, and it keeps the attempt's cgroup in use after the job has ended (the job
        ends once it has its session). Returns the cgroup and the file that ends the straggler."""
        release = os.path.join(daemon.work, "release-straggler")
        started = os.path.join(daemon.work, "straggler-started")
        job = daemon.submit("--", "sh", "-c",
                            f"setsid sh -c 'touch {started}; while [ ! -e {release} ]; do sleep 0.05; done' "
                            f"</dev/null >/dev/null 2>&1 & while [ ! -e {started} ]; do sleep 0.01; done")
        [shown] = daemon.finish(job)
        self.assertEqual(shown["state"], "done", shown)
        group = os.path.join(base, f"job-{job}.1")
        self.assertTrue(os.path.exists(group), "the straggler keeps its cgroup")
        return group, release

    def test_a_group_kept_busy_by_what_the_job_left_goes_once_that_ends(self):
        with Daemon() as daemon:
            _, base = self.isolating(daemon)
            group, release = self.straggling_job(daemon, base)
            with open(release, "w"):
                pass
            wait_until(lambda: not os.path.exists(group), timeout=10, what="the emptied cgroup's removal")

    def test_a_group_kept_busy_for_long_still_goes_once_it_empties(self):
        # Past the doubling pauses (50 ms, 100 ms, ... to 10 s: the first 25.5 s) the daemon still
        # looks: no other job's end comes back for this group, as each removes only its own.
        with Daemon() as daemon:
            _, base = self.isolating(daemon)
            group, release = self.straggling_job(daemon, base)
            time.sleep(27)
            self.assertEqual(daemon.finish(daemon.submit("--", "true"))[0]["state"], "done")
            self.assertTrue(os.path.exists(group), "the straggler still keeps its cgroup")
            with open(release, "w"):
                pass
            wait_until(lambda: not os.path.exists(group), timeout=12, what="the emptied cgroup's removal")

    def mig_host_root(self):
        """A host root (GPUPOOL_HOST_ROOT) whose driver has MIG capability nodes, numbered as the
        driver numbers them, with CAPS_MAJOR for nvidia-caps; and those nodes in self.nodes."""
        root = tempfile.mkdtemp(prefix="gpupool-host-root-")
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        os.makedirs(os.path.join(root, "proc/driver/nvidia-caps"))
        with open(os.path.join(root, "proc/devices"), "w") as f:
            f.write(f"Character devices:\n  1 mem\n195 nvidia-frontend\n{CAPS_MAJOR} nvidia-caps\n\n"
                    "Block devices:\n  7 loop\n")
        lines = ["config 1", "monitor 2"]
        for gpu in range(GPUS):
            for gi in range(15):
                base = 3 + gpu * 135 + gi * 9
                lines.append(f"gpu{gpu}/gi{gi}/access {base}")
                lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {base + 1 + ci}" for ci in range(8)]
        with open(os.path.join(root, "proc/driver/nvidia-caps/mig-minors"), "w") as f:
            f.write("\n".join(lines) + "\n")
        for minor in MIG_CAPS.values():
            os.mknod(os.path.join(self.nodes, f"nvidia-cap{minor}"), stat.S_IFCHR | 0o666,
                     os.makedev(CAPS_MAJOR, minor))
        return root

    def caps_job(self, daemon, *options):
        """Submits a job that opens every MIG capability node of MIG_CAPS; returns (the job as shown,
        {name: "allowed" or "denied"}, its GPUPOOL_MIG_UUID)."""
        job = daemon.submit(*options, "--", "python3", "-c", OPEN_CAPS, self.nodes, json.dumps(MIG_CAPS))
        [shown] = daemon.finish(job)
        self.assertEqual(shown["state"], "done", shown)
        with open(os.path.join(daemon.state_dir, "logs", f"{job}.out")) as f:
            seen = json.loads(f.read())
        return shown, verdicts(seen["open"]), seen["mig"]

    def test_a_mig_job_opens_its_own_mig_device_and_no_other(self):
        # hgx-h200-mig: GPU 0 (minor 0) as GPU instances 1 and 2, each with compute instance 0.
        with Daemon(sim="hgx-h200-mig", env={"GPUPOOL_HOST_ROOT": self.mig_host_root()}) as daemon:
            self.isolating(daemon)
            self.assertIn(f"each MIG job opens only its own MIG device's capability nodes (nvidia-caps, major {CAPS_MAJOR})",
                          daemon.log_text())
            owners = {}
            for profile in ("4g.71gb", "3g.71gb"):
                _, opened, mig = self.caps_job(daemon, "--mig", profile)
                owners[mig] = opened
                own = {name for name, verdict in opened.items() if verdict == "allowed"}
                # Its GPU instance's node and its compute instance's: gi1 or gi2 alone.
                self.assertIn(own, ({"gpu0/gi1/access", "gpu0/gi1/ci0/access"},
                                    {"gpu0/gi2/access", "gpu0/gi2/ci0/access"}), opened)
            self.assertEqual(len(owners), 2, "the two profiles are two devices")
            allowed = [frozenset(n for n, v in o.items() if v == "allowed") for o in owners.values()]
            self.assertNotEqual(allowed[0], allowed[1])
            # A whole GPU's job opens no MIG device, nor the driver's config and monitor nodes.
            shown, opened, mig = self.caps_job(daemon, "-g", "1")
            self.assertNotEqual(shown["gpus"], [0])
            self.assertEqual(mig, None)
            self.assertEqual(set(opened.values()), {"denied"}, opened)

    def test_off_leaves_every_gpu_open(self):
        with Daemon(config='device_isolation = "off"\n') as daemon:
            self.assertIn('device isolation off (device_isolation = "off")', daemon.log_text())
            _, seen = self.probe_job(daemon)
            self.assertEqual(set(seen["open"].values()), {"allowed"})

    @unittest.skipUnless(shutil.which("setpriv"), "needs setpriv to run a daemon as nobody")
    def test_on_refuses_to_start_where_it_cannot_isolate(self):
        # A daemon that is not root cannot make cgroups.
        root = tempfile.mkdtemp(prefix="gpupool-e2e-")
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        os.chmod(root, 0o755)
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        config = os.path.join(root, "gpupool.toml")
        daemon = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--",
                  GPUPOOLD, "--config", config, "--state-dir", os.path.join(root, "state"),
                  "--runtime-dir", os.path.join(root, "run"), "--http", "off"]
        with open(config, "w") as f:
            f.write('[daemon]\ndevice_isolation = "on"\n')
        proc = subprocess.run(daemon, env=clean_env(GPUPOOL_SIM="hgx-h200"), capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        [line] = proc.stderr.splitlines()
        self.assertTrue(line.startswith('gpupoold: device_isolation = "on", but jobs cannot be kept from other '
                                        "GPUs' device nodes: "), line)
        # Its socket was open by then; left behind, clients would be refused by a daemon not there.
        self.assertNotIn("gpupoold.sock", os.listdir(os.path.join(root, "run")))


if __name__ == "__main__":
    main()
