"""The HTTP side cannot be exhausted (docs/security.md, "The HTTP side"): a header line of
megabytes is refused at the head cap with the daemon's memory unchanged, a head trickled a line a
second is cut off at the head deadline while other clients are served, one address cannot hold
more than its share of connections, a flood of connections from many addresses never takes the
descriptors the job side needs (while it lasts, HTTP clients beyond the total are refused), and kept-alive pollers block nobody. Each attack prints the
daemon's memory and a normal request's answer time under it (the figures in docs/security.md)."""
import json
import os
import resource
import select
import socket
import threading
import time
import unittest

from harness import Daemon, main, wait_until

# src/daemon/http_server.h, HttpLimits
MAX_HEAD_BYTES = 16 * 1024
HEAD_TIMEOUT_S = 10
IDLE_TIMEOUT_S = 5
PER_PEER = 8
TOTAL = 64
# Room for a loaded 2-core machine (and ASan) beyond each deadline.
MARGIN_S = 8


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0])


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def open_from(address, peer, timeout=30):
    """A TCP connection to the daemon from the loopback address `peer` (all of 127/8 is this machine)."""
    host, port = address.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((peer, 0))
    s.connect((host, int(port)))
    return s


def read_answer(s):
    """Status and JSON-or-text body of one answer on `s`; reads by Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError(f"closed before an answer: {data!r}")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("closed in the middle of an answer")
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_by_daemon(s, timeout):
    """True when the daemon closes `s` (end of file or a reset) within `timeout` seconds."""
    ready, _, _ = select.select([s], [], [], timeout)
    if not ready:
        return False
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def timed_get(address, path="/metrics", peer="127.0.0.1"):
    """Seconds a fresh client waits for a whole 200 answer."""
    began = time.monotonic()
    with open_from(address, peer) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        status, _, _ = read_answer(s)
    assert status == 200, status
    return time.monotonic() - began


def served(address, peer):
    try:
        return timed_get(address, peer=peer) is not None
    except (OSError, AssertionError):
        return False


def report(attack, d, seconds):
    print(f"\n  figure: {attack}: daemon VmRSS {rss_kib(d.proc.pid) / 1024:.1f} MiB, "
          f"GET /metrics answered in {seconds * 1000:.1f} ms", flush=True)


class HttpLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(http="127.0.0.1:0").__enter__()
        cls.address = cls.d.http_address()
        wait_until(lambda: timed_get(cls.address), what="a first answer")
        report("no attack", cls.d, timed_get(cls.address))

    @classmethod
    def tearDownClass(cls):
        cls.d.__exit__(None, None, None)

    def test_a_header_line_of_megabytes_is_refused_at_the_cap(self):
        before = rss_kib(self.d.proc.pid)
        line = b"GET / HTTP/1.1\r\nX-Long: " + b"a" * (8 << 20)
        with open_from(self.address, "127.0.0.10") as s:
            # The daemon stops reading at the cap and answers; what it still gets is dropped unread.
            sender = threading.Thread(target=lambda: self.send_ignoring_reset(s, line))
            sender.start()
            status, headers, body = read_answer(s)
            self.assertEqual(status, 431)
            self.assertEqual(headers["connection"], "close")
            self.assertEqual(json.loads(body), {"error": f"the request head is longer than {MAX_HEAD_BYTES} bytes"})
            self.assertTrue(closed_by_daemon(s, 30))
            sender.join(30)
        report("8 MiB header line", self.d, timed_get(self.address))
        # A buffered line would have added its 8 MiB at least.
        self.assertLess(rss_kib(self.d.proc.pid) - before, 4096)

    @staticmethod
    def send_ignoring_reset(s, data):
        try:
            s.sendall(data)
        except OSError:
            pass

    def test_a_trickled_head_is_cut_off_at_the_deadline_and_others_are_served(self):
        slow = [open_from(self.address, "127.0.0.11") for _ in range(PER_PEER)]
        began = time.monotonic()
        answers = {}

        def trickle(s):
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            # A header line a second, until the daemon answers: the answer is what is waited for.
            while not select.select([s], [], [], 1)[0]:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    break
            answers[s.fileno()] = (read_answer(s), time.monotonic() - began)
        threads = [threading.Thread(target=trickle, args=(s,)) for s in slow]
        for t in threads:
            t.start()
        try:
            # Meanwhile every slot of that address is taken, yet another client is served at once.
            latencies = [timed_get(self.address) for _ in range(20)]
            report(f"slowloris, {PER_PEER} connections a header line a second", self.d, max(latencies))
            self.assertLess(max(latencies), 2)
            for t in threads:
                t.join(HEAD_TIMEOUT_S + MARGIN_S)
            self.assertEqual(len(answers), PER_PEER)
            for (status, headers, body), after in answers.values():
                self.assertEqual(status, 408)
                self.assertIn("did not arrive within 10 s", json.loads(body)["error"])
                self.assertGreater(after, HEAD_TIMEOUT_S - 1)  # the head deadline, not the idle one
                self.assertLess(after, HEAD_TIMEOUT_S + MARGIN_S)
        finally:
            for s in slow:
                s.close()

    def test_one_address_holds_at_most_its_share(self):
        peer = "127.0.0.12"
        held = []
        try:
            for _ in range(PER_PEER):
                s = open_from(self.address, peer)
                s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(read_answer(s)[0], 200)  # admitted, and kept alive
                held.append(s)
            with open_from(self.address, peer) as extra:
                extra.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertTrue(closed_by_daemon(extra, 30), "the connection over the cap was served")
            report(f"{PER_PEER} connections held by one address", self.d, timed_get(self.address))
            # Kept-alive connections that send nothing are closed after the idle time; the room comes back.
            began = time.monotonic()
            for s in held:
                self.assertTrue(closed_by_daemon(s, IDLE_TIMEOUT_S + MARGIN_S))
            self.assertGreater(time.monotonic() - began, IDLE_TIMEOUT_S - 2)
            wait_until(lambda: served(self.address, peer), what="the address served again")
        finally:
            for s in held:
                s.close()

    def test_a_flood_of_connections_leaves_the_job_side_its_descriptors(self):
        pid = self.d.proc.pid
        baseline = descriptors(pid)
        # Leave the daemon only its own descriptors, the HTTP cap and a little room for one job: a
        # server that held every connection would now run out before the job could start.
        room = 48
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (baseline + TOTAL + room, hard))
        flood = []
        try:
            peers = [f"127.0.1.{i}" for i in range(1, 41)]
            for peer in peers:
                for _ in range(PER_PEER):
                    s = open_from(self.address, peer)
                    s.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head begun, never finished
                    flood.append(s)
            closed = set()

            def over_the_cap_closed():
                closed.update(i for i, s in enumerate(flood) if i not in closed and closed_by_daemon(s, 0))
                return len(closed) >= len(flood) - TOTAL
            wait_until(over_the_cap_closed, 60, what="the connections over the total cap closed")
            self.assertEqual(len(closed), len(flood) - TOTAL)
            self.assertLessEqual(descriptors(pid), baseline + TOTAL + 2)
            # While the cap is full a newcomer is closed at once too: the total bounds the daemon, not the attacker.
            self.assertFalse(served(self.address, "127.0.0.1"))
            job = self.d.enqueue(["true"], gpus=1, name="under-flood")
            self.d.finish(job)
            self.assertEqual(self.d.show(job)["state"], "done")
        finally:
            for s in flood:
                s.close()
            # The next test starts with the server's room back.
            wait_until(lambda: descriptors(pid) <= baseline + 2, 30, what="the flood's connections closed")
            report(f"after {len(flood)} connections from {len(peers)} addresses", self.d, timed_get(self.address))
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))

    def test_kept_alive_pollers_block_nobody(self):
        pollers = [open_from(self.address, f"127.0.2.{i // 4 + 1}") for i in range(16)]
        try:
            for s in pollers:
                s.sendall(b"GET /api/dashboard?seconds=60 HTTP/1.1\r\nHost: x\r\n\r\n")
                status, headers, body = read_answer(s)
                self.assertEqual(status, 200)
                self.assertEqual(set(json.loads(body)), {"gpus", "jobs", "history"})
                self.assertNotIn("connection", headers)  # kept alive
            latencies = [timed_get(self.address) for _ in range(20)]
            report(f"{len(pollers)} kept-alive pollers", self.d, max(latencies))
            self.assertLess(max(latencies), 2)
            for s in pollers:  # and they are still served on their connection
                s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(read_answer(s)[0], 200)
        finally:
            for s in pollers:
                s.close()


if __name__ == "__main__":
    main()
