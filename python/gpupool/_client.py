"""The queue requests: submit, jobs, show, cancel, hold, release, wait, status (docs/protocol.md)."""
import os
import time

from ._connection import Connection, ConnectionLost, Error
from ._units import memory_mib, seconds

_JOBS_PAGE = 1000  # jobs per `jobs` request: the protocol's largest page
_WAIT_BATCH = 500  # ids per `wait` request, as `gpupool wait` sends, so each answer fits a message
_STATES = ("queued", "held", "running", "done", "failed", "cancelled")


def _ids(ids):
    checked = []
    for job in ids:
        if isinstance(job, bool) or not isinstance(job, int) or job < 1:
            raise Error(f"invalid job id {job!r}: expected a number like 42")
        checked.append(job)
    if not checked:
        raise Error("no job ids given")
    return checked


def _argv(command):
    if isinstance(command, (str, bytes)) or not all(isinstance(word, str) for word in command):
        raise Error("the command must be a list of strings (its argv); for a shell line use ['sh', '-c', LINE]")
    return list(command)


def _comeback_seconds():
    """How long a client that lost its daemon waits for the next one: GPUPOOL_RECONNECT_S, as
    for the command-line tool, else a minute."""
    configured = os.environ.get("GPUPOOL_RECONNECT_S", "")
    return seconds(configured, "GPUPOOL_RECONNECT_S") if configured else 60.0


_EVENTS_PAGE = 1000
_LATEST_EVENTS = 20


class Client:
    """A connection to gpupoold. Every method sends one request (or a few, for paging) and
    raises gpupool.Error with the daemon's line when it refuses. A refusal leaves the connection
    usable; a restart of the daemon does too: a request whose connection is lost is sent again
    once a daemon answers on the socket (within GPUPOOL_RECONNECT_S, default 60 s), except a
    submission or a cancel, hold or release that may have reached the daemon, which raises
    instead (it may have been carried out)."""

    def __init__(self, socket_path=None):
        self._socket_path = socket_path
        self._connection = Connection(socket_path)

    @property
    def user(self):
        """Who the daemon takes this process to be."""
        return self._connection.user

    def close(self):
        self._connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _request(self, message, may_repeat=True):
        while True:
            try:
                return self._connection.request(message)
            except ConnectionLost as lost:
                if lost.sent and not may_repeat:
                    raise Error(f"{lost}, after the request was sent: it may have been carried out "
                                "(look with `gpupool jobs` before sending it again)") from None
                self._reconnect(lost)

    def _reconnect(self, lost):
        self._connection.close()
        give_up = time.monotonic() + _comeback_seconds()
        while True:
            try:
                self._connection = Connection(self._socket_path)
                return
            except Error as e:
                if time.monotonic() >= give_up:
                    raise Error(f"lost gpupoold ({lost}), and none answered again: {e}") from None
            time.sleep(0.1)

    def submit(self, command, gpus=1, mem=None, name=None, priority=0, after=(), retries=0, time_limit=None,
               hold=False, env=None, cwd=None, sm=None, mig=None):
        """Queues a batch job, as `gpupool submit` does; returns its id. By default the job gets
        this process's environment, working directory and umask. sm: with mem, the slice's share
        of each GPU's multiprocessors in percent (`--sm`). mig: one MIG device of this profile
        (e.g. "1g.18gb", or "any"; with mem, one with at least that much memory) instead of GPUs,
        as `--mig`."""
        if mig is not None and (not isinstance(mig, str) or not mig):
            raise Error(f"invalid MIG profile {mig!r}: expected e.g. '1g.18gb' or 'any'")
        environment = os.environ if env is None else env
        mask = os.umask(0)
        os.umask(mask)
        job = {
            "kind": "batch",
            "command": _argv(command),
            "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
            "environment": [f"{key}={value}" for key, value in environment.items()],
            "umask": mask,
            "gpu_count": gpus,
            "mem_mib": memory_mib(mem) if mig is None else None,
            "mig_profile": None if mig is None else "" if mig == "any" else mig,
            "mig_min_mib": memory_mib(mem) if mig is not None else None,
            "name": name or "",
            "priority": priority,
            "after": _ids([after] if isinstance(after, int) else after) if after else [],
            "retries": retries,
            "time_limit_s": seconds(time_limit, "time limit"),
            "sm_percent": sm,
        }
        if job["time_limit_s"] == 0:
            raise Error(f"invalid time limit '{time_limit}': must be more than 0")
        return self._request({"op": "submit", "job": job, "hold": bool(hold)}, may_repeat=False)["id"]

    def jobs(self, all=False, user=None, state=None):  # noqa: A002 - the protocol's and the CLI's name
        """The queue (queued, held and running jobs; with all=True finished ones too), oldest
        first, every page of it. user and state filter; state overrides all."""
        if state is not None and state not in _STATES:
            raise Error(f"invalid state '{state}': use one of {', '.join(_STATES)}")
        listed, after = [], 0
        while True:
            page = self._request({"op": "jobs", "all": bool(all), "user": user, "state": state,
                                  "after_id": after, "limit": _JOBS_PAGE})
            listed += page["jobs"]
            if not page.get("more") or not page["jobs"]:
                return listed
            after = page["jobs"][-1]["id"]

    def show(self, job):
        """Everything about one job, as `gpupool show --json` prints it."""
        jobs = self._request({"op": "show", "id": _ids([job])[0]})["jobs"]
        if not jobs:
            raise Error(f"no job {job}")
        return jobs[0]

    def _act(self, op, ids):
        outcomes = self._request({"op": op, "ids": _ids(ids)}, may_repeat=False)["outcomes"]
        problems = [outcome["error"] for outcome in outcomes if outcome.get("error")]
        if problems:
            raise Error("; ".join(problems))
        return outcomes

    def cancel(self, *ids):
        """Cancels jobs (running ones get SIGTERM, then SIGKILL); returns the outcomes. Every id is
        acted on; if any could not be, Error names them all afterwards."""
        return self._act("cancel", ids)

    def hold(self, *ids):
        """Keeps queued jobs from starting; returns the outcomes."""
        return self._act("hold", ids)

    def release(self, *ids):
        """Lets held jobs start again; returns the outcomes."""
        return self._act("release", ids)

    def wait(self, *ids):
        """Blocks until every job has ended; returns them (as show() does)."""
        ids = _ids(ids)
        ended = []
        for first in range(0, len(ids), _WAIT_BATCH):
            ended += self._request({"op": "wait", "ids": ids[first:first + _WAIT_BATCH]})["jobs"]
        return ended

    def events(self, since=None, job=None, user=None, kinds=(), latest=None):
        """What happened to jobs and GPUs (docs/events.md), oldest first, each as `gpupool events
        --json` prints it: every event at or after `since` (Unix seconds), or without it the latest
        `latest` (default 20). job, user and kinds (event names) filter."""
        request = self._events_request(job, user, kinds)
        if since is None:
            return self._request(dict(request, latest=True, limit=latest or _LATEST_EVENTS))["events"]
        listed, after = [], 0
        while True:
            page = self._request(dict(request, since=since, after=after, limit=_EVENTS_PAGE))
            listed += page["events"]
            if not page.get("more"):
                return listed
            after = page["last"]

    def follow(self, after=None, job=None, user=None, kinds=()):
        """Yields each event as it happens, forever: those numbered above `after` (an event's
        "seq"; default: from now on), across restarts of the daemon, none twice, none missed."""
        request = self._events_request(job, user, kinds)
        if after is None:
            after = self._request(dict(request, latest=True, limit=1))["last"]
        while True:
            page = self._request(dict(request, after=after, limit=_EVENTS_PAGE, wait=True))
            yield from page["events"]
            after = page["last"]

    @staticmethod
    def _events_request(job, user, kinds):
        if isinstance(kinds, str):
            kinds = [kinds]
        return {"op": "events", "job": _ids([job])[0] if job is not None else None, "user": user,
                "kinds": list(kinds)}

    def status(self):
        """The daemon's status, as docs/protocol.md lists it: software, pid, drained, machine, gpus,
        the jobs queued, held and running, and samples (the readings of the GPUs it has acted on)."""
        return self._request({"op": "status"})["status"]
