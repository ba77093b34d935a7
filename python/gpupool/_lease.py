"""gpupool.acquire(): GPUs leased for this Python process, as `gpupool run` leases them for a program."""
import atexit
import ctypes
import os
import shutil
import socket
import subprocess
import sys
import warnings
from time import monotonic

from ._connection import Connection, Error, NoDaemon, check
from ._units import memory_mib, seconds

_CUDA_ERROR_NOT_INITIALIZED = 3
_held = None  # this process's lease: one at a time, since CUDA reads the variables only once


def _cuda_driver_initialised():
    """The path of the CUDA driver library when it is loaded here and cuInit has run, else None.
    cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED before cuInit and initialises nothing,
    so asking cannot do the harm it looks for."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    for path in sorted(p for p in paths if os.path.basename(p).startswith("libcuda.so")):
        try:
            driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            count = ctypes.c_int(0)
            if driver.cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED:
                return path
        except (OSError, AttributeError):
            continue
    return None


def _refuse_if_cuda_started():
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    if callable(is_initialized) and is_initialized():
        raise Error("torch has already initialised CUDA in this process, which has read CUDA_VISIBLE_DEVICES: "
                    "call gpupool.acquire() before the first use of torch.cuda")
    driver = _cuda_driver_initialised()
    if driver:
        raise Error(f"the CUDA driver ({driver}) is already initialised in this process and has read "
                    "CUDA_VISIBLE_DEVICES: call gpupool.acquire() before anything uses CUDA "
                    "(torch.cuda.is_available() and device_count() count)")


def _environment(job, gpus, uuids, mem_mib):
    """What `gpupool run` sets for its program (gpu_environment in src/sched/allocation.cc)."""
    env = {
        # Full UUIDs: they name the same card under any CUDA_DEVICE_ORDER and inside containers.
        "CUDA_VISIBLE_DEVICES": ",".join(uuids),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPUPOOL_JOB": job,
        "GPUPOOL_GPUS": ",".join(str(gpu) for gpu in gpus),
        "GPUPOOL_GPU_UUIDS": ",".join(uuids),
    }
    if mem_mib is not None:
        env["GPUPOOL_MEM_MIB"] = str(mem_mib)
    return env


def _limit_torch_memory(device_count, mem_mib):
    """A slice's share of each leased card as torch's own limit, when the program has imported
    torch already (acquire() never imports it): past it, torch raises out-of-memory in this
    process instead of taking a neighbour's memory. Asking the cards' sizes initialises CUDA,
    after CUDA_VISIBLE_DEVICES names the leased GPUs."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if mem_mib is None or not callable(getattr(cuda, "set_per_process_memory_fraction", None)):
        return
    try:
        for device in range(device_count):
            total = cuda.get_device_properties(device).total_memory
            cuda.set_per_process_memory_fraction(min(1.0, mem_mib * 2**20 / total), device)
    except Exception as e:  # a torch without CUDA, or a driver that refuses: the lease still holds
        warnings.warn(f"gpupool: could not limit torch to the {mem_mib} MiB slice: {e}", RuntimeWarning, stacklevel=3)


class Lease:
    """GPUs held by this process: `id` (the job's), `gpus` (nvidia-smi indices), `uuids`,
    `mem_mib` (the slice per GPU, None for whole GPUs), `environment` (what was set).
    The lock descriptors stay open until release(); so do the GPUs."""

    def __init__(self, connection, granted, descriptors, job_name, helper=None):
        self.id = granted["id"]  # None without gpupoold
        self.gpus = list(granted["gpus"])
        self.uuids = list(granted.get("uuids") or [])
        self.mem_mib = granted.get("mem_mib")
        self.environment = _environment(job_name or str(self.id), self.gpus, self.uuids, self.mem_mib)
        # An MPS slice's client settings and a MIG device's variables, from gpupoold (or `gpupool
        # acquire`): before CUDA starts, as for the GPUs.
        self.environment.update(entry.split("=", 1) for entry in granted.get("environment") or [] if "=" in entry)
        self._connection = connection
        self._descriptors = descriptors
        self._helper = helper  # `gpupool acquire`, which took the leases when no gpupoold ran
        self._pid = os.getpid()
        self._saved = {key: os.environ.get(key) for key in self.environment}
        os.environ.update(self.environment)
        _limit_torch_memory(len(self.gpus), self.mem_mib)

    @property
    def job(self):
        """gpupoold's job id, or the lease's name when no daemon granted it."""
        return self.id if self.id is not None else self.environment["GPUPOOL_JOB"]

    @property
    def held(self):
        return self._connection is not None

    def release(self, exit_code=0):
        """Gives the GPUs back and tells gpupoold how the work ended (exit_code 0 to 255, as a
        program's), then restores the variables acquire() set. Doing it twice does nothing."""
        global _held
        if self._connection is None:
            return
        connection, self._connection = self._connection, None
        for fd in self._descriptors:
            os.close(fd)
        self._descriptors = []
        try:
            # A forked child has copies of the socket and descriptors: only the process that
            # acquired reports.
            if os.getpid() == self._pid:
                connection.send({"op": "finished", "exit_code": exit_code, "signal": None})
                check(connection.receive_line()[0])
        except Error:
            pass  # the daemon may have gone away meanwhile; the work still ran, the locks are gone
        finally:
            connection.close()
            if os.getpid() == self._pid:
                if self._helper is not None:
                    self._helper.wait()  # it releases and ends once told, or once the connection is gone
                for key, value in self._saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
                if _held is self:
                    _held = None
                atexit.unregister(self._at_exit)

    def _at_exit(self):
        # sys.last_value is set when an uncaught exception is ending the program; an exit code
        # given to sys.exit() cannot be seen here (release(exit_code) says it).
        self.release(1 if getattr(sys, "last_value", None) is not None else 0)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            code = 0
        elif issubclass(kind, SystemExit):
            code = value.code if isinstance(value.code, int) and 0 <= value.code <= 255 else (0 if value.code is None else 1)
        else:
            code = 1
        self.release(code)
        return False

    def __repr__(self):
        state = "held" if self.held else "released"
        return f"<gpupool.Lease job {self.job} gpus {self.gpus} {state}>"


def acquire(n=1, mem=None, timeout=None, name=None, on_wait=None, socket_path=None, time=None, sm=None, mig=None):
    """Leases n GPUs (mem: a slice of each, e.g. "20G" or MiB; sm: with mem, at most this percentage
    of each GPU's multiprocessors, held by CUDA MPS; mig: one MIG device of this profile instead,
    e.g. "1g.18gb" or "any", with at least mem of memory when mem is given) from gpupoold for this process,
    waiting in the queue like `gpupool run` (timeout: give up after this many seconds; None waits
    as long as it takes), then sets CUDA_VISIBLE_DEVICES and the GPUPOOL_* variables exactly as
    `gpupool run` sets them for its program. on_wait(text) hears why the request waits. time: a
    time limit (seconds, or e.g. "30m"), as `gpupool run --time`: the job may then start beside
    GPUs reserved for a wider one; past it and the daemon's grace period, the process gets
    SIGTERM, as a `gpupool cancel` sends it. Without a running daemon (and socket_path not given)
    it leases straight from the lease directory, as `gpupool run` does without one."""
    if _held is not None and _held.held and _held._pid == os.getpid():
        raise Error(f"this process holds job {_held.job}'s GPUs already: release() that lease first")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
        raise Error(f"invalid GPU count {n!r}: expected a whole number from 1 to 1024")
    limit = seconds(timeout, "timeout")
    time_limit = seconds(time, "time limit")
    if time_limit == 0:
        raise Error(f"invalid time limit {time!r}: must be more than 0")
    if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int) or not 1 <= sm <= 100):
        raise Error(f"invalid compute share {sm!r}: expected a whole percentage from 1 to 100")
    if mig is not None:
        if not isinstance(mig, str) or not mig:
            raise Error(f"invalid MIG profile {mig!r}: expected e.g. '1g.18gb' or 'any'")
        if n != 1:
            raise Error("mig gives one MIG device: CUDA runs a process on one MIG device only")
        if sm is not None:
            raise Error("sm is a share of a whole GPU's multiprocessors; a MIG device has its own")
    elif sm is not None and mem is None:
        raise Error("sm needs mem: a compute share is a share of a GPU that slices share")
    _refuse_if_cuda_started()
    command = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = "/"
    job = {"kind": "interactive", "command": command, "cwd": cwd, "gpu_count": n,
           "mem_mib": memory_mib(mem) if mig is None else None, "name": name or "", "time_limit_s": time_limit,
           "sm_percent": sm}
    if mig is not None:
        job.update(mig_profile="" if mig == "any" else mig, mig_min_mib=memory_mib(mem) or 0)
    try:
        connection = Connection(socket_path)
    except NoDaemon as no_daemon:
        if socket_path is not None:
            raise
        return _acquire_without_daemon(job, limit, on_wait, str(no_daemon))
    deadline = None if limit is None else monotonic() + limit
    try:
        connection.send({"op": "lease", "job": job})
        answered = False
        while True:
            # The daemon answers a lease request at once (queued or granted): the time limit is
            # for the wait in the queue after that, so timeout=0 means "only if free now".
            if answered and deadline is not None:
                connection.sock.settimeout(max(0.001, deadline - monotonic()))
            try:
                answer, fds = connection.receive_line()
            except socket.timeout:
                # Closing the connection takes the request out of the queue.
                unit = "" if isinstance(timeout, str) else " s"
                raise Error(f"gave up waiting after {timeout}{unit}") from None
            answered = True
            if answer is None:
                raise Error("gpupoold closed the connection before granting the lease")
            if answer.get("event") == "granted":
                if len(fds) != answer.get("descriptors", 0):
                    _close(fds)
                    raise Error(f"gpupoold granted {answer.get('descriptors', 0)} leases but {len(fds)} arrived")
                connection.sock.settimeout(None)
                return _hold(Lease(connection, answer, fds, name))
            _close(fds)
            check(answer)
            if answer.get("event") != "queued":
                raise Error(f"gpupoold sent an unexpected answer: {answer}")
            if on_wait is not None:
                on_wait(f"job {answer['id']} queued: {answer.get('reason', '')}")
    except BaseException:
        connection.close()
        raise


def _hold(lease):
    """The lease this process holds from now on, released at exit if not before."""
    global _held
    _held = lease
    atexit.register(lease._at_exit)
    return lease


def _close(fds):
    for fd in fds:
        os.close(fd)


def _acquire_without_daemon(job, limit, on_wait, no_daemon):
    """As `gpupool run` leases without a daemon: `gpupool acquire` waits in the same line, names
    this process as the holder and hands it the lock descriptors over a socket pair; it keeps its
    own copies until release() (or the end of this process), then removes the holder records."""
    command = os.environ.get("GPUPOOL_CLI") or shutil.which("gpupool")
    if not command:
        raise Error(f"{no_daemon}; the gpupool command, which leases GPUs without it, is not on PATH either")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    argv = [command, "acquire", "--fd", str(theirs.fileno()), "-g", str(job["gpu_count"])]
    if job["mem_mib"] is not None:
        argv += ["--mem", f"{job['mem_mib']}M"]
    if job["sm_percent"] is not None:
        argv += ["--sm", str(job["sm_percent"])]
    if "mig_profile" in job:
        argv += ["--mig", job["mig_profile"] or "any"]
        if job["mig_min_mib"]:
            argv += ["--mem", f"{job['mig_min_mib']}M"]
    if job["name"]:
        argv += ["--name", job["name"]]
    if limit is not None:
        argv.append(f"--wait={round(limit * 1000)}ms")
    if job["time_limit_s"] is not None:
        argv += ["--time", f"{round(job['time_limit_s'] * 1000)}ms"]
    try:
        # Its own session: a Ctrl-C meant for this program does not end the lease under it.
        helper = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        ours.close()
        raise Error(f"cannot start {command}: {e.strerror}") from None
    finally:
        theirs.close()
    connection = Connection.over(ours)
    try:
        while True:
            answer, fds = connection.receive_line()
            if answer is None:
                raise Error(f"gpupool acquire ended (exit code {helper.wait()}) without leasing GPUs")
            if answer.get("event") == "granted" and len(fds) == answer.get("descriptors"):
                return _hold(Lease(connection, answer, fds, answer.get("job"), helper))
            _close(fds)
            check(answer)
            if answer.get("event") != "waiting":
                raise Error(f"gpupool acquire sent an unexpected answer: {answer}")
            if on_wait is not None:
                on_wait(answer.get("reason", ""))
    except BaseException:
        connection.close()
        helper.kill()
        helper.wait()
        raise
