"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe), with
the standard library only: the protocol browser-automation libraries speak, without installing
one. Messages are JSON objects separated by NUL bytes; the browser reads fd 3 and writes fd 4."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium():
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, width=1280, height=1600):
        binary = find_chromium()
        if binary is None:
            raise RuntimeError("no chromium on PATH (scripts/install-deps installs it)")
        self.profile = tempfile.mkdtemp(prefix="gpupool-chromium-")
        to_browser_read, self.to_browser = os.pipe()
        self.from_browser, from_browser_write = os.pipe()

        def child_fds():
            # The browser's ends at 3 and 4, where --remote-debugging-pipe expects them (copied
            # first: either may already sit at 3 or 4). Fds 3 and 4 are in pass_fds, so they stay.
            reads, writes = os.dup(to_browser_read), os.dup(from_browser_write)
            os.dup2(reads, 3)
            os.dup2(writes, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_browser_read)
        os.close(from_browser_write)
        self.buffer = b""
        self.next_id = 0
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self.to_browser, self.from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method, session=False, timeout=30, **params):
        """Sends one command and returns its result (events that arrive meanwhile are dropped)."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self.read_message(deadline)
            if reply.get("id") != self.next_id:
                continue
            if "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            return reply["result"]

    def read_message(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("the browser did not answer")
            chunk = os.read(self.from_browser, 65536)
            if not chunk:
                raise RuntimeError(f"the browser exited ({self.proc.poll()})")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def navigate(self, url):
        self.call("Page.navigate", session=True, url=url)

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30, what=None):
        """Polls a JavaScript expression until it is truthy; returns its value. An expression that
        throws (the page is still loading) counts as not yet."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value, problem = self.evaluate(expression), None
            except RuntimeError as error:
                value, problem = None, error
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or expression}" + (f" ({problem})" if problem else ""))
            time.sleep(0.2)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
