"""Shared helpers for the end-to-end tests: run the built binaries on simulated machines."""
import fcntl
import json
import os
import pwd
import queue
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BIN_DIR = os.environ.get("GPUPOOL_BIN_DIR", "build/dev/bin")
SOURCE_DIR = os.environ.get("GPUPOOL_SOURCE_DIR", ".")
GPUPOOL = os.path.join(BIN_DIR, "gpupool")
TEST_FIXTURES = os.path.join(SOURCE_DIR, "tests", "data", "fixtures")
SHIPPED_FIXTURES = ["dgx1-v100", "dgx-a100", "hgx-h200", "pcie-4gpu", "mixed-workstation", "h200-1",
                    "dgx-a100-mig", "hgx-h200-mig", "a100-mig-mixed"]


def clean_env(**overrides):
    """The environment of a user on the simulated machine, with nothing gpupool-specific leaking in,
    nor the GPU selection of the machine the tests run on (which may be a GPU container)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPOOL_")
           and k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES")}
    env.update({k: v for k, v in overrides.items() if v is not None})
    return env


def gpupool(*args, sim="hgx-h200", env=None, check=True, input=None):
    """Runs gpupool; returns the CompletedProcess (text mode)."""
    run_env = clean_env(GPUPOOL_SIM=sim, **(env or {}))
    proc = subprocess.run([GPUPOOL, *args], env=run_env, capture_output=True, text=True, input=input,
                          timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"gpupool {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def gpupool_json(*args, **kwargs):
    return json.loads(gpupool(*args, **kwargs).stdout)


def main():
    unittest.main()


# --- gpupoold -----------------------------------------------------------------------------------

GPUPOOLD = os.path.join(BIN_DIR, "gpupoold")
# Fast sampling and a short grace period keep the tests quick; docs/configuration.md.
DAEMON_CONFIG = "[daemon]\nsample_interval_s = 0.2\nkill_grace_s = 0.5\n"


def wait_until(condition, timeout=30, interval=0.05, what="the condition"):
    """Polls condition() until it returns something true, which it returns; fails after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(interval)


def read_records(path):
    """The start/end records that jobs append with job_record_script(): {job: (start, end, [gpus])}."""
    jobs = {}
    if not os.path.exists(path):
        return jobs
    with open(path) as f:
        for line in f:
            words = line.split()
            if len(words) < 3:
                continue
            start, end, gpus = jobs.get(words[1], (None, None, []))
            if words[0] == "start":
                start = float(words[2])
                gpus = [int(g) if g.isdigit() else g for g in words[3].split(",")] if len(words) > 3 else []
            elif words[0] == "end":
                end = float(words[2])
            jobs[words[1]] = (start, end, gpus)
    return jobs


def job_record_script(records, body="sleep 0.3", gpus="$GPUPOOL_GPUS"):
    """A shell command that appends `start JOB TIME GPUS`, runs body (in a subshell, so that it may
    `exit`), then appends `end JOB TIME` and exits with body's status. A SIGTERM (cancel, time
    limit) ends it too, with its end recorded; the job's GPUs are free only after that. GPUS is
    the indices, or what gpus says (e.g. "$CUDA_VISIBLE_DEVICES": the UUIDs the job sees)."""
    end = f'echo "end $GPUPOOL_JOB $(date +%s.%N)" >> {records}'
    return (f"trap '{end}; exit 143' TERM; "
            f'echo "start $GPUPOOL_JOB $(date +%s.%N) {gpus}" >> {records}; ({body}); code=$?; '
            f'{end}; exit $code')


def read_if_there(path):
    """The file's text, or None while it does not exist."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return None


def until_exists(path):
    """A shell loop that waits for path to exist: a job that ends when the test says so."""
    return f"while [ ! -e {path} ]; do sleep 0.05; done"


def overlaps(records):
    """Pairs of jobs whose recorded runs overlap on a GPU, and the most jobs that ran at once.
    A run without an end (cut short) counts as lasting for ever."""
    records = {job: (start, float("inf") if end is None else end, gpus)
               for job, (start, end, gpus) in records.items() if start is not None}
    clashes = []
    items = sorted(records.items(), key=lambda item: item[1][0])
    for i, (a, (a_start, a_end, a_gpus)) in enumerate(items):
        for b, (b_start, b_end, b_gpus) in items[i + 1:]:
            if b_start < a_end and set(a_gpus) & set(b_gpus):
                clashes.append((a, b, sorted(set(a_gpus) & set(b_gpus))))
    events = sorted([(s, 1) for s, _, _ in records.values()] + [(e, -1) for _, e, _ in records.values()])
    most = running = 0
    for _, step in events:  # an end at the same instant as a start counts first (-1 < 1)
        running += step
        most = max(most, running)
    return clashes, most


def process_gone(pid):
    """True when pid no longer runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def in_process_of(uid, function):
    """function()'s result (anything JSON can carry), computed in a child process of another uid
    (root only): another user as the daemon sees it, without an account."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            outcome = {"value": function()}
        except BaseException as e:  # told to the parent, which raises it
            outcome = {"error": f"{type(e).__name__}: {e}"}
        finally:
            try:
                os.write(writer, json.dumps(outcome).encode())
            finally:
                os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as f:
        answer = f.read()
    os.waitpid(pid, 0)
    outcome = json.loads(answer) if answer else {"error": "it died"}
    if "error" in outcome:
        raise AssertionError(f"as uid {uid}: {outcome['error']}")
    return outcome["value"]


def request_as(d, uid, message):
    """d.request(message) from a process of another uid (root only)."""
    return in_process_of(uid, lambda: d.request(message))


def as_user(user, argv, env):
    """argv and environment to run argv as user (name), with the user's groups, from root. setpriv
    rather than runuser: no PAM session, so it is quick."""
    entry = pwd.getpwnam(user)
    command = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "--", *argv]
    return command, dict(env, HOME=entry.pw_dir, USER=user, LOGNAME=user)


def processes_under(root):
    """Processes (but this one) whose environment names a runtime directory under root, or whose
    working directory or an open file is under it: what a daemon or a demo there started and left
    behind. (pid, command line) pairs."""
    marker = f"GPUPOOL_RUNTIME_DIR={root}/".encode()
    under = lambda path: path == root or path.startswith(root + "/")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid() or process_gone(int(entry)):
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                ours = any(v.startswith(marker) for v in f.read().split(b"\0"))
            ours = ours or under(os.readlink(f"/proc/{entry}/cwd"))
            for fd in [] if ours else os.listdir(f"/proc/{entry}/fd"):
                try:
                    if under(os.readlink(f"/proc/{entry}/fd/{fd}")):
                        ours = True
                        break
                except OSError:
                    pass
            if ours:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found.append((int(entry), f.read().replace(b"\0", b" ").decode(errors="replace").strip()))
        except OSError:
            continue
    return found


def has_socket(pid):
    """Whether the process has a socket open (a gpupool that has connected to the daemon)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in fds)
    except OSError:
        return False


def one_line(proc):
    """True when the command said exactly one line on stderr."""
    return len(proc.stderr.strip().splitlines()) == 1


CAN_ADD_USERS = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("useradd", "userdel", "groupadd",
                                                                          "groupdel", "setpriv"))


class ThrowawayUsers:
    """For test classes (skipUnless CAN_ADD_USERS) that create users and groups in setUpClass;
    class cleanups remove them, users before their groups (last added, first removed)."""

    @classmethod
    def add_group(cls, name):
        subprocess.run(["groupadd", name], check=True, capture_output=True)
        cls.addClassCleanup(subprocess.run, ["groupdel", name], capture_output=True)
        return name

    @classmethod
    def add_user(cls, name, *groups):
        extra = ["-G", ",".join(groups)] if groups else []
        subprocess.run(["useradd", "-M", "-N", "-s", "/bin/sh", *extra, name], check=True, capture_output=True)
        # --force: plain userdel refuses while any process of the user is left, even one a moment
        # from its end, and a user left behind breaks the next run's useradd.
        cls.addClassCleanup(subprocess.run, ["userdel", "--force", name], capture_output=True)
        return name

    @classmethod
    def require_gpupool_runs_as(cls, user):
        """Skips the class when `user` cannot run the built gpupool (an unreadable build tree)."""
        probe = cls.run_as(user, GPUPOOL, "--version")
        if probe.returncode != 0:
            raise unittest.SkipTest(f"{GPUPOOL} cannot be run by other users (is the build directory "
                                    f"readable?): {probe.stderr.strip()}")

    @staticmethod
    def run_as(user, *argv, env=None, cwd="/"):
        command, run_env = as_user(user, list(argv), env or os.environ)
        return subprocess.run(command, env=run_env, cwd=cwd, capture_output=True, text=True, timeout=60)


class LineReader:
    """Reads a pipe's lines on a thread of its own, so that a test can wait for the next one
    with a time limit instead of hanging when it never comes."""

    def __init__(self, stream):
        self.lines = queue.Queue()
        threading.Thread(target=self.pump, args=(stream,), daemon=True).start()

    def pump(self, stream):
        for line in stream:
            self.lines.put(line)
        self.lines.put("")  # end of file

    def readline(self, timeout=30):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout} s") from None


class RawConnection:
    """One connection to gpupoold that speaks docs/protocol.md itself: the hello, then one answer
    per request, however long. For what the Python client does not offer: the tests' cheap
    queries of the queue, a benchmark's round trips."""

    def __init__(self, socket_path, timeout=None, software="gpupool e2e tests", protocol=1):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(socket_path)
            self.lines = self.sock.makefile("rwb", buffering=1 << 20)
            self.request({"hello": "gpupool", "protocol": protocol, "software": software, "user": ""})
        except BaseException:
            self.sock.close()
            raise

    def send(self, message):
        self.lines.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.lines.flush()

    def receive(self):
        """The next answer as it came: one line of JSON."""
        answer = self.lines.readline()
        if not answer:
            raise AssertionError("gpupoold closed the connection instead of answering")
        return answer

    def exchange(self, message):
        """Sends message; returns the answer, also a refusal."""
        self.send(message)
        return json.loads(self.receive())

    def request(self, message):
        """The answer to message; a refusal raises AssertionError."""
        answer = self.exchange(message)
        if answer.get("ok") is False:
            raise AssertionError(f"gpupoold refused {message}: {answer.get('error')}")
        return answer

    def close(self):
        self.lines.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Daemon:
    """gpupoold serving a simulated machine, with a runtime directory (socket, leases), a state
    directory (database, logs), a configuration file and a work directory of its own, all under
    one temporary root. Use as a context manager: on exit it cancels what is left, stops the
    daemon and checks that nothing leaked (no process left behind, no lease held).
    The daemon runs as root, or as `user` (a personal daemon, which owns the whole root then);
    mode is that of the root and work directories (0755 to let other users in).
    http is gpupoold's --http: off unless a test asks (many daemons run at once); "127.0.0.1:0"
    takes any free port, which self.http_address() reads from the daemon's log.
    Benchmarks and the GPU-machine verification use it too: sim=None serves the real GPUs,
    bin_dir names another build's programs, base_config replaces the tests' fast sampling,
    parent_dir puts the root elsewhere than $TMPDIR and keep_root leaves it there for a person to
    read (the logs, the database)."""

    def __init__(self, sim="hgx-h200", config="", mode=0o700, user=None, http="off", env=None, bin_dir=BIN_DIR,
                 base_config=DAEMON_CONFIG, parent_dir=None, keep_root=False):
        self.user = user
        self.keep_root = keep_root
        self.http = http
        self.gpupool = os.path.join(bin_dir, "gpupool")
        self.gpupoold = os.path.join(bin_dir, "gpupoold")
        self.root = tempfile.mkdtemp(prefix="gpupool-e2e-", dir=parent_dir)
        os.chmod(self.root, mode)
        self.runtime_dir = os.path.join(self.root, "run")
        self.state_dir = os.path.join(self.root, "state")
        self.work = os.path.join(self.root, "work")
        os.mkdir(self.work)
        os.chmod(self.work, mode)
        self.config = os.path.join(self.root, "gpupool.toml")
        with open(self.config, "w") as f:
            f.write(base_config + config)
        os.chmod(self.config, 0o644)
        self.log = os.path.join(self.root, "gpupoold.log")
        self.socket = os.path.join(self.runtime_dir, "gpupoold.sock")
        self.env = clean_env(GPUPOOL_SIM=sim, GPUPOOL_RUNTIME_DIR=self.runtime_dir,
                             GPUPOOL_STATE_DIR=self.state_dir, GPUPOOL_CONFIG=self.config, **(env or {}))
        self.proc = None
        # What the tests' own requests speak (docs/protocol.md): 1 unless a test needs more.
        self.protocol = 1
        if user:
            entry = pwd.getpwnam(user)
            for path in (self.root, self.work, self.config):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    # life cycle

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, kind, value, traceback):
        problems = self.shutdown()
        if kind is not None:
            sys.stderr.write(f"--- gpupoold's log ({self.log}):\n{self.log_text()[-6000:]}\n")
            for problem in problems:
                sys.stderr.write(f"--- also: {problem}\n")
        if not self.keep_root:
            shutil.rmtree(self.root, ignore_errors=True)
        if kind is None and problems:
            raise AssertionError("; ".join(problems))
        return False

    def popen(self, *args):
        """gpupoold ARGS in the background, its stderr appended to self.log."""
        argv, env = [self.gpupoold, *args], self.env
        if self.user:
            argv, env = as_user(self.user, argv, env)
        with open(self.log, "a") as log:
            return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def start(self, timeout=30):
        """Starts gpupoold and waits until it answers on its socket."""
        self.proc = self.popen("--http", self.http)

        def serving():
            if self.proc.poll() is not None:
                raise AssertionError(f"gpupoold exited {self.proc.returncode}: {self.log_text()[-2000:]}")
            # This very daemon: after a kill -9, the old listening socket may live on for a moment
            # in a child forked just before (until it closes what it inherited).
            status = self.status()
            return status is not None and status.get("pid") == self.proc.pid
        # Polled often: daemon_bench reports how long the start took.
        wait_until(serving, timeout, interval=0.01, what="gpupoold answering on its socket")
        return self.proc

    def http_address(self, starts=1):
        """HOST:PORT of the daemon's HTTP server, from the line it logs when it listens; `starts`
        is the how-manieth start of the daemon (a restarted one logs a new address)."""
        def logged():
            addresses = re.findall(r"HTTP on http://([^/]+)/", self.log_text())
            return len(addresses) >= starts and addresses[starts - 1]
        return wait_until(logged, 10, what="gpupoold's HTTP address in its log")

    def request(self, message, timeout=60):
        """Sends one request to the daemon over its socket as docs/protocol.md says, as this process's
        user, and returns the answer. Cheaper than a gpupool process (which costs a second under
        ASan), so the tests watch the queue this way and run gpupool for what they test."""
        with RawConnection(self.socket, timeout, protocol=self.protocol) as connection:
            return connection.request(message)

    def status(self):
        """The daemon's `status` (software, pid, drained, queued...), or None when none comes."""
        try:
            return self.request({"op": "status"}, timeout=2)["status"]
        except (OSError, AssertionError, ValueError):
            return None

    def wait_for_samples(self, count=2, timeout=30):
        """Waits until the daemon has acted on `count` more readings of the GPUs (its status counts
        them), each followed by a scheduling pass: what a test waits for before it checks that
        something did not happen. Two by default, as the first may have been read from the GPUs
        before the caller's precondition held."""
        def samples():
            return self.request({"op": "status"})["status"]["samples"]
        first = samples()
        wait_until(lambda: samples() >= first + count, timeout, what=f"gpupoold acting on {count} more samples")

    def answers(self):
        """True when something accepts connections on the daemon's socket."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def kill(self):
        """kill -9 of the daemon alone: its supervisors and jobs live on, its socket stays."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self, timeout=30):
        """SIGTERM, as systemd stops it; returns its exit status."""
        self.proc.terminate()
        return self.proc.wait(timeout=timeout)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def shutdown(self):
        """Cancels unfinished jobs, stops the daemon, and lists what leaked (killing it)."""
        problems = []
        if self.running():
            try:
                unfinished = [j["id"] for j in self.jobs()]
                if unfinished:
                    self.request({"op": "cancel", "ids": unfinished})
                    self.finish(*unfinished)
            except (AssertionError, OSError, ValueError) as e:
                problems.append(f"could not end the jobs left: {e}")
            try:
                code = self.stop()
                if code != 0:
                    problems.append(f"gpupoold exited {code} on SIGTERM")
                if os.path.exists(self.socket):
                    problems.append("gpupoold left its socket behind")
            except subprocess.TimeoutExpired:
                problems.append("gpupoold did not stop on SIGTERM")
                self.kill()
        try:
            wait_until(lambda: not self.leftovers(), 10, what="the jobs' processes ending")
        except AssertionError:
            left = self.leftovers()
            problems.append("processes left behind: " + "; ".join(f"{pid} {cmd}" for pid, cmd in left))
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        held = self.held_gpus()
        if held:
            problems.append(f"leases left held on {held}")
        return problems

    def leftovers(self):
        """Processes (but this one) that belong to this daemon's world (processes_under)."""
        return processes_under(self.root)

    def under_root(self, path):
        return path == self.root or path.startswith(self.root + "/")

    def log_text(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # clients

    def command(self, args, user=None):
        """argv and environment of gpupool ARGS, run as user (by default the daemon's) when one is
        named (root only)."""
        user = user or self.user
        if not user:
            return [self.gpupool, *args], dict(self.env)
        return as_user(user, [self.gpupool, *args], self.env)

    def gp(self, *args, user=None, env=None, cwd=None, check=False, timeout=60, input=None, umask=-1):
        """gpupool ARGS against this daemon; returns the CompletedProcess (text mode)."""
        argv, run_env = self.command(args, user)
        proc = subprocess.run(argv, env=dict(run_env, **(env or {})), cwd=cwd or self.work,
                              capture_output=True, text=True, timeout=timeout, input=input, umask=umask)
        if check and proc.returncode != 0:
            raise AssertionError(f"gpupool {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def gp_json(self, *args, **kwargs):
        return json.loads(self.gp(*args, check=True, **kwargs).stdout)

    def background(self, *args, user=None, env=None, cwd=None, **popen):
        """gpupool ARGS started in the background (Popen, text mode)."""
        argv, run_env = self.command(args, user)
        return subprocess.Popen(argv, env=dict(run_env, **(env or {})), cwd=cwd or self.work, text=True,
                                **popen)

    def submit(self, *args, **kwargs):
        """gpupool submit ARGS; checks it succeeded and printed nothing but the id, which it returns."""
        proc = self.gp("submit", *args, check=True, **kwargs)
        if not re.fullmatch(r"[1-9][0-9]*\n", proc.stdout):
            raise AssertionError(f"submit printed {proc.stdout!r}, not an id")
        return int(proc.stdout)

    def job_spec(self, command, gpus=1, **spec):
        """A batch job as a submit request carries it: command (argv) in the work directory with
        this daemon's environment; spec holds further job spec fields (docs/protocol.md)."""
        return {"command": command, "cwd": self.work, "environment": [f"{k}={v}" for k, v in self.env.items()],
                "gpu_count": gpus, "kind": "batch", "umask": 0o022, **spec}

    def enqueue(self, command, gpus=1, uid=None, **spec):
        """Submits a batch job (job_spec) through the protocol rather than `gpupool submit` (for
        tests that submit many); uid submits as that uid (request_as). Returns its id."""
        message = {"op": "submit", "job": self.job_spec(command, gpus, **spec)}
        return (self.request(message) if uid is None else request_as(self, uid, message))["id"]

    def jobs(self, finished=False, state=None, user=None):
        """The queue as `gpupool jobs --json` lists it (with finished jobs too: --all), page by page."""
        jobs, after = [], 0
        while True:
            page = self.request({"op": "jobs", "all": finished, "state": state, "user": user, "after_id": after})
            jobs += page["jobs"]
            if not page.get("more") or not page["jobs"]:
                return jobs
            after = page["jobs"][-1]["id"]

    def all_jobs(self):
        return self.jobs(finished=True)

    def show(self, job):
        """The job as `gpupool show --json` prints it (for this process's user)."""
        return self.request({"op": "show", "id": job})["jobs"][0]

    def job_state(self, job):
        return self.show(job)["state"]

    def finish(self, *jobs, timeout=120):
        """Waits until the jobs have ended (a `wait` request); returns them."""
        return self.request({"op": "wait", "ids": list(jobs)}, timeout=timeout)["jobs"]

    def wait(self, *jobs, timeout=120, **kwargs):
        """gpupool wait JOBS: the CompletedProcess."""
        return self.gp("wait", *[str(j) for j in jobs], timeout=timeout, **kwargs)

    def wait_state(self, job, *states, timeout=30):
        """Waits until the job is in one of states; returns it."""
        def reached():
            shown = self.show(job)
            return shown if shown["state"] in states else None
        return wait_until(reached, timeout, what=f"job {job} becoming {'/'.join(states)}")

    def leases(self):
        """gpupool leases --json."""
        return self.gp_json("leases", "--json")

    def held_gpus(self):
        """UUIDs of the GPUs whose lease lock someone holds (docs/leases.md), asked of the kernel
        directly: the cheap way to watch leases come and go."""
        locks = os.path.join(self.runtime_dir, "locks")
        held = []
        for name in sorted(os.listdir(locks)) if os.path.isdir(locks) else []:
            with open(os.path.join(locks, name), "rb") as f:
                probe = struct.pack("hhxxxxqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
                kind = struct.unpack("hhxxxxqqixxxx", fcntl.fcntl(f, fcntl.F_GETLK, probe))[0]
            if kind != fcntl.F_UNLCK:
                held.append(name[:-len(".lock")])
        return held

    def gpu_uuids(self):
        return [gpu["uuid"] for gpu in self.gp_json("list", "--json")]

    def path(self, *parts):
        """A path in the work directory."""
        return os.path.join(self.work, *parts)

    def touch(self, name):
        """Creates a file in the work directory: the signal that an until_exists() job waits for."""
        open(self.path(name), "w").close()
