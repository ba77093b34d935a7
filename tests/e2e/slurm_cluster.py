"""A throwaway single-node Slurm for the end-to-end tests: Debian's munge, slurmctld and slurmd,
started as root without systemd, every file under one temporary directory, stopped by the pids
it started (never by name: other tests and people may run Slurm on the same machine).

The node's GPUs are character devices (major 195, like /dev/nvidiaN) made with mknod in the
temporary directory: Slurm sets CUDA_VISIBLE_DEVICES only for GPUs whose File= is a device.
Its gres.conf is what `gpupool slurm gres-conf` writes for the simulated machine, so the tests
also prove that Slurm accepts our generated configuration."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from harness import GPUPOOL, clean_env, wait_until

SLURM_PROGRAMS = ["munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sacct"]
NODE = "gpupool-node"


def require_slurm():
    """Skips the calling test where Slurm cannot run here: not root, or the packages missing."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("a throwaway Slurm runs as root")
    missing = [p for p in SLURM_PROGRAMS if shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if missing:
        raise unittest.SkipTest(f"Slurm is not installed (missing {', '.join(missing)}); scripts/install-deps")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_text(path):
    with open(path) as f:
        return f.read()


def program(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin")


class SlurmCluster:
    """`with SlurmCluster(sim="hgx-h200") as slurm:` one node with the fixture's GPUs.

    cpus: the node's CPUs as Slurm counts them (declared, not probed: config_overrides), so many
    one-CPU jobs run at once even on a 2-core machine. fast: the scheduling settings that start
    short batch jobs at once (no batch_sched_delay, a no-op Epilog); off, Slurm's stock pace.
    shard_mib: GPU shards (gres "shard") besides the GPUs, one per that many MiB of each GPU's memory,
    as `gpupool slurm gres-conf --shard-mib` and `node-conf --shard-mib` write them."""

    def __init__(self, sim="hgx-h200", cpus=64, fast=True, extra_conf="", shard_mib=None):
        require_slurm()
        self.sim = sim
        self.cpus = cpus
        self.fast = fast
        self.extra_conf = extra_conf
        self.shard_mib = shard_mib
        self.root = None
        self.pids = {}

    # --- life -----------------------------------------------------------------------------------

    def __enter__(self):
        self.root = tempfile.mkdtemp(prefix="gpupool-slurm-")
        try:
            self._configure()
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def _configure(self):
        for d in ("etc", "munge", "state", "spool", "log", "run", "dev", "jobs"):
            os.makedirs(self.path(d), mode=0o700)
        os.chmod(self.path("jobs"), 0o1777)  # job output, written by the jobs' owners
        os.chmod(self.root, 0o755)  # jobs of other users read the configuration
        os.chmod(self.path("etc"), 0o755)
        os.chmod(self.path("dev"), 0o755)
        # The munge socket's directory is root's alone; clients only need to reach the socket.
        os.chmod(self.path("munge"), 0o711)
        with open(self.path("munge", "munge.key"), "wb") as key:
            key.write(os.urandom(1024))
        os.chmod(self.path("munge", "munge.key"), 0o400)

        shards = ["--shard-mib", str(self.shard_mib)] if self.shard_mib else []
        gres = subprocess.run([GPUPOOL, "slurm", "gres-conf", "--device-dir", self.path("dev"), *shards],
                              env=clean_env(GPUPOOL_SIM=self.sim), capture_output=True, text=True, check=True)
        self.gres_conf = gres.stdout
        for line in self.gres_conf.splitlines():
            if not line.startswith("Name=gpu "):  # a shard line names its GPU's file again
                continue
            for field in line.split():
                if field.startswith("File="):
                    minor = int(field.rsplit("nvidia", 1)[1])
                    os.mknod(field[len("File="):], 0o666 | 0o020000, os.makedev(195, minor))
        with open(self.path("etc", "gres.conf"), "w") as f:
            f.write(self.gres_conf)
        node = subprocess.run([GPUPOOL, "slurm", "node-conf", "--name", NODE, *shards],
                              env=clean_env(GPUPOOL_SIM=self.sim), capture_output=True, text=True,
                              check=True).stdout.strip()
        self.node_line = node
        scheduling = "SchedulerParameters=batch_sched_delay=0\nEpilog=/bin/true\n" if self.fast else ""
        conf = f"""ClusterName=gpupool-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.path("munge", "munge.socket")}
CredType=cred/munge
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("run", "slurmctld.pid")}
SlurmdPidFile={self.path("run", "slurmd.pid")}
SlurmctldLogFile={self.path("log", "slurmctld.log")}
SlurmdLogFile={self.path("log", "slurmd.log")}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/filetxt
JobCompLoc={self.path("log", "jobcomp.txt")}
GresTypes=gpu{",shard" if self.shard_mib else ""}
{scheduling}{self.extra_conf}
{node} NodeAddr=127.0.0.1 CPUs={self.cpus} State=UNKNOWN
PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.path("etc", "slurm.conf"), "w") as f:
            f.write(conf)

    def _start(self):
        self._daemon("munged", [program("munged"), "--key-file", self.path("munge", "munge.key"),
                                "--socket", self.path("munge", "munge.socket"),
                                "--pid-file", self.path("run", "munged.pid"),
                                "--log-file", self.path("log", "munged.log"),
                                "--seed-file", self.path("munge", "seed"), "--force"])
        self._daemon("slurmctld", [program("slurmctld"), "-f", self.conf()])
        self._daemon("slurmd", [program("slurmd"), "-f", self.conf(), "-N", NODE])
        wait_until(lambda: "idle" in self.run("sinfo", "-h", "-o", "%T", check=False).stdout,
                   timeout=30, what="the Slurm node to be idle")

    def _daemon(self, name, argv):
        """Starts a daemon that forks into the background and waits for its pid file."""
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise AssertionError(f"{name} did not start ({proc.returncode}): {proc.stderr.strip()}\n{self.logs()}")
        pid_file = self.path("run", f"{name}.pid")
        wait_until(lambda: os.path.exists(pid_file) and read_text(pid_file).strip(), timeout=15,
                   what=f"{name}'s pid file")
        self.pids[name] = int(read_text(pid_file).strip())

    def stop(self):
        """Cancels every job, then stops the three daemons by the pids they wrote, in reverse."""
        if "slurmctld" in self.pids:
            self.run("scancel", "--full", "--user", "root", check=False)
            self.run("scancel", "--full", "--state", "PENDING", check=False)
            try:
                wait_until(lambda: not self.run("squeue", "-h", check=False).stdout.strip(), timeout=20,
                           what="every Slurm job to end")
            except AssertionError:
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
                time.sleep(0.05)
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGKILL)
        if self.root and not os.environ.get("GPUPOOL_KEEP_SLURM"):
            shutil.rmtree(self.root, ignore_errors=True)

    # --- using it -------------------------------------------------------------------------------

    def conf(self):
        return self.path("etc", "slurm.conf")

    def env(self, **overrides):
        """A user's environment on the node: SLURM_CONF points at this cluster, PATH has sbin."""
        env = clean_env(**overrides)
        env["SLURM_CONF"] = self.conf()
        env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin"
        return env

    def run(self, *argv, check=True, env=None, timeout=60):
        proc = subprocess.run(list(argv), env=env or self.env(), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def sbatch(self, *args, env=None):
        """Submits a batch job; returns its id."""
        return self.run("sbatch", "--parsable", *args, env=env).stdout.strip().split(";")[0]

    def job(self, job_id):
        """scontrol's fields of a job it still knows, as a dict ({} once it has forgotten it)."""
        proc = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        fields = {}
        for token in proc.stdout.split():
            key, _, value = token.partition("=")
            fields[key] = value
        return fields if proc.returncode == 0 else {}

    def wait_job(self, job_id, timeout=60):
        """Waits until the job has ended; returns its scontrol fields."""
        def ended():
            fields = self.job(job_id)
            return fields if fields.get("JobState") not in (None, "PENDING", "RUNNING", "CONFIGURING",
                                                            "COMPLETING") else None
        return wait_until(ended, timeout=timeout, interval=0.1, what=f"Slurm job {job_id} to end")

    def logs(self):
        text = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = self.path("log", name)
            if self.root and os.path.exists(path):
                text.append(f"--- {name} (last lines)\n" + "".join(read_text(path).splitlines(True)[-15:]))
        return "\n".join(text)
