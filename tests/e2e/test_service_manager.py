"""gpupoold under a service manager (systemd's Type=notify, packaging/gpupoold.service.in): READY=1 once
its socket accepts clients, a status line that follows the queue, watchdog pings from its event loop,
STOPPING=1 on SIGTERM, and none of it inherited by the jobs' supervisors."""
import os
import socket
import threading
import time
import unittest

from harness import Daemon, main, wait_until


class NotificationSocket:
    """A datagram socket standing in for systemd's $NOTIFY_SOCKET, read as promptly as systemd
    reads it (its queue holds only a few datagrams); collects what arrives."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.messages = []
        self.lock = threading.Lock()
        self.open = True
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        while self.open:
            try:
                message = self.sock.recv(4096).decode()
            except (TimeoutError, socket.timeout):
                continue
            with self.lock:
                self.messages.append(message)

    def drain(self):
        with self.lock:
            return list(self.messages)

    def assignments(self, key):
        """Every value given to KEY so far, in order of arrival."""
        return [line.split("=", 1)[1] for message in self.drain() for line in message.split("\n")
                if line.startswith(key + "=")]

    def close(self):
        self.open = False
        self.reader.join()
        self.sock.close()


class ServiceManagerTest(unittest.TestCase):
    def test_readiness_status_watchdog_and_stopping(self):
        d = Daemon()
        manager = NotificationSocket(os.path.join(d.root, "notify.sock"))
        try:
            d.env = dict(d.env, NOTIFY_SOCKET=manager.path, WATCHDOG_USEC="200000")
            with d:
                wait_until(lambda: manager.assignments("READY"), 10, what="READY=1")
                # Ready means the socket already answers (d.start() waited for that too: check the order).
                self.assertTrue(d.answers())
                self.assertEqual(manager.assignments("READY"), ["1"])
                self.assertEqual(manager.drain()[0], f"READY=1\nSTATUS=serving 8 GPUs on {d.socket}")
                # Watchdog pings every 100 ms (half the interval).
                before = len(manager.assignments("WATCHDOG"))
                time.sleep(1.0)
                pings = len(manager.assignments("WATCHDOG")) - before
                self.assertGreaterEqual(pings, 5, "too few WATCHDOG=1 pings in a second")

                # The status line follows the queue; the supervisor does not inherit the socket.
                marker = os.path.join(d.work, "supervisor-environ")
                job = d.enqueue(["sh", "-c", f"cat /proc/$PPID/environ > {marker}; sleep 1"],
                                environment=["PATH=/usr/bin:/bin"])
                wait_until(lambda: "1 running, 0 queued" in manager.assignments("STATUS"), 10,
                           what="STATUS=1 running, 0 queued")
                d.finish(job)
                wait_until(lambda: manager.assignments("STATUS")[-1] == "0 running, 0 queued", 10,
                           what="STATUS=0 running, 0 queued after the job")
                with open(marker, "rb") as f:
                    supervisor_environ = f.read().split(b"\0")
                self.assertIn(f"GPUPOOL_STATE_DIR={d.state_dir}".encode(), supervisor_environ)  # the supervisor's
                self.assertFalse([v for v in supervisor_environ
                                  if v.startswith((b"NOTIFY_SOCKET=", b"WATCHDOG_"))])

                self.assertEqual(d.stop(), 0)
                wait_until(lambda: "STOPPING=1" in manager.drain(), 10, what="STOPPING=1")
                self.assertNotIn("cannot notify", d.log_text())
        finally:
            manager.close()


if __name__ == "__main__":
    main()
