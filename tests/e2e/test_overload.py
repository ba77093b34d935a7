"""Overload: a flood of submissions from one user meets the per-user limit (every one answered,
accepted or refused with one clear line, and the daemon's memory stays bounded), and clients that
misbehave on the socket (garbage, a partial message, silence, a line over the size limit) are
dropped or ignored without slowing a well-behaved client (docs/security.md, "Chaos and overload")."""
import json
import os
import socket
import statistics
import sys
import threading
import time
import unittest

from harness import Daemon, in_process_of, main, wait_until

FLOOD = 10_000
CONNECTIONS = 8
LIMIT = 1000
MAX_CONNECTIONS = 512  # src/daemon/daemon.cc, kMaxConnectionsPerUser
MAX_MESSAGE_BYTES = 1 << 20  # src/protocol/messages.h, kMaxMessageBytes
HELLO = json.dumps({"hello": "gpupool", "protocol": 1, "software": "gpupool e2e tests", "user": ""}).encode()
# The bound on the well-behaved client's p99 while bad clients are connected. A daemon that
# waited on a silent client would stall for as long as that client stays silent (the whole
# measurement, seconds); one that merely shares the CPUs answers in well under a millisecond
# alone, and measured up to about 50 ms of p99 on a 2-core machine running three other
# end-to-end tests beside a debug build. 250 ms tells the two apart with room to spare.
P99_BOUND_S = 0.25


def memory_kib(pid):
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def connect(d, timeout=60):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(d.socket)
    return s


class Client:
    """One greeted connection that sends requests and reads their answers."""

    def __init__(self, d, timeout=60):
        self.socket = connect(d, timeout)
        self.lines = self.socket.makefile("rwb")
        self.hello = self.ask_raw(HELLO)
        assert "hello" in self.hello, self.hello

    def ask_raw(self, line):
        self.lines.write(line + b"\n")
        self.lines.flush()
        return self.answer()

    def answer(self):
        line = self.lines.readline()
        if not line:
            raise AssertionError("gpupoold closed the connection instead of answering")
        return json.loads(line)

    def ask(self, message):
        return self.ask_raw(json.dumps(message).encode())

    def close(self):
        self.lines.close()
        self.socket.close()


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))]


def status_latencies(client, count):
    latencies = []
    for _ in range(count):
        began = time.perf_counter()
        assert "status" in client.ask({"op": "status"})
        latencies.append(time.perf_counter() - began)
    return latencies


def read_until_closed(s, timeout=30):
    """What the daemon sends before it closes the connection; fails if it does not close."""
    s.settimeout(timeout)
    received = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return received
        except socket.timeout:
            raise AssertionError(f"gpupoold kept the connection open after {received!r}") from None
        if not chunk:
            return received
        received += chunk


class OverloadTest(unittest.TestCase):
    def test_a_flood_of_submissions_meets_the_per_user_limit(self):
        config = f"[scheduler]\nmax_queued_jobs_per_user = {LIMIT}\n"
        with Daemon(config=config) as d:
            # Drained, so that no job starts and frees its place in the queue: exactly LIMIT fit.
            admin = Client(d)
            self.assertIsNot(admin.ask({"op": "drain"}).get("ok"), False)
            before = memory_kib(d.proc.pid)
            job = {"command": ["true"], "cwd": d.work, "environment": [f"{k}={v}" for k, v in d.env.items()],
                   "gpu_count": 1, "kind": "batch"}
            line = json.dumps({"op": "submit", "job": job}).encode() + b"\n"
            answers = [[] for _ in range(CONNECTIONS)]
            failures = []

            def flood(n):
                # Everything written at once, then read: the daemon faces a backlog, not a dialogue.
                try:
                    client = Client(d, timeout=120)
                    share = FLOOD // CONNECTIONS
                    writer = threading.Thread(target=lambda: (client.lines.write(line * share), client.lines.flush()))
                    writer.start()
                    for _ in range(share):
                        answers[n].append(client.answer())
                    writer.join()
                    client.close()
                except (AssertionError, OSError, ValueError) as e:
                    failures.append(f"connection {n}: {e!r}")

            began = time.monotonic()
            threads = [threading.Thread(target=flood, args=(n,)) for n in range(CONNECTIONS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            took = time.monotonic() - began
            self.assertEqual(failures, [])
            everything = [answer for share in answers for answer in share]
            self.assertEqual(len(everything), FLOOD)
            accepted = [answer["id"] for answer in everything if answer.get("ok") is not False]
            errors = {answer["error"] for answer in everything if answer.get("ok") is False}
            user = admin.hello["user"]
            self.assertEqual(len(accepted), LIMIT)
            self.assertEqual(len(set(accepted)), LIMIT)
            self.assertEqual(errors, {f"user {user} already has {LIMIT} jobs queued "
                                      f"(max_queued_jobs_per_user = {LIMIT})"})
            self.assertEqual(d.status()["queued"], LIMIT)
            after = memory_kib(d.proc.pid)
            print(f"overload: {FLOOD} submissions on {CONNECTIONS} connections in {took:.1f} s "
                  f"({FLOOD / took:.0f}/s): {len(accepted)} accepted, {FLOOD - len(accepted)} refused; "
                  f"gpupoold RSS {before[0] // 1024} MiB before, {after[0] // 1024} MiB after, "
                  f"peak {after[1] // 1024} MiB", file=sys.stderr)
            # The accepted jobs take about 6.5 KiB each in memory (7 MiB); the refused ones must leave
            # nothing behind. 32 MiB leaves room for the allocator and SQLite's page cache. Under
            # ASan freed blocks wait in its quarantine (256 MiB), so the bound means nothing there.
            if not os.environ.get("GPUPOOL_TEST_SANITIZED"):
                self.assertLess(after[1] - before[0], 32 * 1024, "the flood grew gpupoold by more than 32 MiB")
            # Room again once jobs leave the queue.
            self.assertIsNot(admin.ask({"op": "cancel", "ids": accepted[:1]}).get("ok"), False)
            self.assertIn("id", admin.ask({"op": "submit", "job": job}))
            admin.close()

    def test_bad_clients_are_dropped_or_ignored_without_slowing_others(self):
        with Daemon() as d:
            good = Client(d)
            status_latencies(good, 50)  # warm up
            quiet = status_latencies(good, 500)

            silent, partial = [], []
            dropped = {}  # what: (socket, whether it sent a hello first)
            for n in range(15):
                s = connect(d)  # (c) connects and says nothing
                silent.append(s)
                s = connect(d)  # (b) half a hello, and then nothing
                s.sendall(HELLO[:len(HELLO) // 2])
                partial.append(s)
            answered = []
            for n in range(15):
                # (a) garbage: in place of the hello (dropped), or of a request (refused; the line
                # ended where it should, so the next one can be read: the connection stays)
                s = connect(d)
                if n % 2:
                    s.sendall(HELLO + b"\n")
                    answered.append(s)
                else:
                    dropped[f"garbage {n}"] = (s, False)
                s.sendall(os.urandom(200).replace(b"\n", b"") + b"\n")
            oversized = []
            for n in range(5):  # (d) a line longer than the protocol allows, with or without a hello
                s = connect(d)
                if n % 2:
                    s.sendall(HELLO + b"\n")
                dropped[f"oversized {n}"] = (s, n % 2 == 1)
                sender = threading.Thread(target=self.send_oversized, args=(s,))
                sender.start()
                oversized.append(sender)

            loaded = status_latencies(good, 500)
            for what, (s, greeted) in dropped.items():
                with self.subTest(what):
                    received = read_until_closed(s)
                    lines = received.splitlines()
                    if greeted:  # the daemon's hello comes first
                        self.assertIn(b'"hello"', lines.pop(0) if lines else b"")
                    self.assertLessEqual(len(lines), 1, received[:300])
                    for line in lines:
                        answer = json.loads(line)
                        self.assertIs(answer["ok"], False)
                        self.assertEqual(len(answer["error"].splitlines()), 1)
                    s.close()
            for s in answered:
                lines = s.makefile("rb")
                self.assertIn(b'"hello"', lines.readline())
                refused = json.loads(lines.readline())
                self.assertIs(refused["ok"], False)
                self.assertTrue(refused["error"].startswith("bad request: "), refused)
                s.sendall(json.dumps({"op": "status"}).encode() + b"\n")
                self.assertIn("status", json.loads(lines.readline()), "served after a bad request")
                lines.close()
                s.close()
            for sender in oversized:
                sender.join(timeout=60)
            # The silent ones are still connected, and harm nobody: a new client is served at once.
            for s in silent + partial:
                s.setblocking(False)
                with self.assertRaises(BlockingIOError, msg="the daemon closed a silent connection"):
                    s.recv(1)
            after = Client(d)
            self.assertIn("status", after.ask({"op": "status"}))
            ms = {name: (1000 * statistics.median(v), 1000 * percentile(v, 99))
                  for name, v in (("alone", quiet), ("with 50 bad clients", loaded))}
            print("overload: status round trip " + ", ".join(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                                                             for name, (p50, p99) in ms.items()),
                  file=sys.stderr)
            self.assertLess(percentile(loaded, 99), P99_BOUND_S, "the bad clients slowed a good one down")
            for s in silent + partial:
                s.close()
            good.close()
            after.close()
            wait_until(lambda: d.status() is not None, what="gpupoold still answering")

    def test_one_user_may_hold_at_most_512_connections(self):
        with Daemon(mode=0o755) as d:
            # As another user when root (root's connections are not counted), with the same checks.
            outcome = (in_process_of(54421, lambda: self.fill_connections(d)) if os.geteuid() == 0
                       else self.fill_connections(d))
            self.assertEqual(outcome["refused"], [f"user {outcome['user']} already has {MAX_CONNECTIONS} "
                                                  f"connections open to gpupoold"], outcome)
            self.assertTrue(outcome["served after one closed"])
            self.assertIsNotNone(d.status(), "others are still served")

    @staticmethod
    def fill_connections(d):
        held = [connect(d) for _ in range(MAX_CONNECTIONS)]
        one_more = connect(d)
        one_more.sendall(HELLO + b"\n")
        refused = [json.loads(line)["error"] for line in read_until_closed(one_more).splitlines()]
        one_more.close()
        held.pop().close()
        # Counted out once the daemon has seen it close: then a new connection is served.
        def served():
            try:
                client = Client(d, timeout=10)
                client.close()
                return client.hello["user"]
            except (AssertionError, OSError, ValueError):
                return None
        user = wait_until(served, 30, what="a connection served once one closed")
        for s in held:
            s.close()
        return {"refused": refused, "served after one closed": True, "user": user}

    @staticmethod
    def send_oversized(s):
        try:
            s.sendall(b"x" * (MAX_MESSAGE_BYTES + 4096))
        except OSError:
            pass  # closed by the daemon before it had all: as it should


if __name__ == "__main__":
    main()
