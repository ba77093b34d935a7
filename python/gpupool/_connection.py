"""One connection to gpupoold: the socket, the handshake and JSON lines (docs/protocol.md)."""
import array
import json
import os
import socket
import stat

from ._version import VERSION

PROTOCOL = 2  # docs/protocol.md; 2: another user's job may come with "private": true
MAX_MESSAGE_BYTES = 1 << 20
MAX_DESCRIPTORS = 253  # the most one message can carry (SCM_MAX_FD)


class Error(Exception):
    """Every failure of this package: one line for a person, as `gpupool` would print it."""


class NoDaemon(Error):
    """No gpupoold listens on the socket: acquire() then leases without it."""


class ConnectionLost(Error):
    """The connection broke or the daemon closed it (it stopped, or restarts), as opposed to the
    daemon refusing a request. `sent` says whether the request may have reached the daemon."""

    def __init__(self, message, sent):
        super().__init__(message)
        self.sent = sent


def runtime_directory():
    """Where gpupoold's socket lives, by the rules the command-line tool follows."""
    configured = os.environ.get("GPUPOOL_RUNTIME_DIR", "")
    if configured:
        return configured
    if os.path.isdir("/run/gpupool"):
        return "/run/gpupool"
    return "/tmp/gpupool"


def default_socket_path():
    return os.path.join(runtime_directory(), "gpupoold.sock")


class Connection:
    """A connected, greeted socket; one request at a time."""

    def __init__(self, socket_path=None):
        path = socket_path or default_socket_path()
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise NoDaemon(f"no gpupoold is running (no socket at {path}); start one with `gpupoold`") from None
        except OSError as e:
            raise Error(f"cannot look at {path}: {e.strerror}") from None
        # The runtime directory is world-writable: only root's or our own socket is the daemon.
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid not in (0, os.getuid()):
            raise Error(f"{path} belongs to uid {st.st_uid}, not to root or you: not trusting it as gpupoold")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(path)
        except OSError:
            self.sock.close()  # a socket left behind by a daemon that died
            raise NoDaemon(f"no gpupoold is running (no socket at {path}); start one with `gpupoold`") from None
        self._start_reading()
        try:
            self.send({"hello": "gpupool", "protocol": PROTOCOL, "software": f"gpupool-python {VERSION}", "user": ""})
            hello, _ = self.receive_line()
            if hello is None:
                raise Error("gpupoold closed the connection during the greeting")
            if hello.get("ok") is False:
                raise Error(f"gpupoold: {hello.get('error')}")
            if hello.get("hello") != "gpupool" or hello.get("protocol") != PROTOCOL:
                raise Error(f"bad hello from gpupoold: {json.dumps(hello)}")
            self.user = hello.get("user", "")
        except BaseException:
            self.close()
            raise

    @classmethod
    def over(cls, sock):
        """JSON lines over a socket connected to something other than gpupoold (no greeting)."""
        connection = cls.__new__(cls)
        connection.sock = sock
        connection.user = ""
        connection._start_reading()
        return connection

    def _start_reading(self):
        self.buffer = bytearray()
        self.marks = []  # (offset in buffer, descriptors that arrived with the byte there)

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        for _, fds in self.marks:
            for fd in fds:
                os.close(fd)
        self.marks = []

    def fileno(self):
        return self.sock.fileno()

    def send(self, message):
        line = json.dumps(message, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
        if len(line) > MAX_MESSAGE_BYTES:
            raise Error(f"the request is {len(line)} bytes, more than a message may have ({MAX_MESSAGE_BYTES})")
        if self.sock is None:
            raise ConnectionLost("the connection to gpupoold is closed", sent=False)
        try:
            self.sock.sendall(line + b"\n")
        except OSError as e:
            raise ConnectionLost(f"cannot talk to gpupoold: {e.strerror or e}", sent=False) from None

    def receive_line(self):
        """The next message (a dict) and the descriptors that came with it; (None, []) when the
        daemon has closed the connection. Raises socket.timeout when the socket's timeout passes."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                fds = [fd for offset, got in self.marks if offset <= end for fd in got]
                self.marks = [(offset - end - 1, got) for offset, got in self.marks if offset > end]
                try:
                    message = json.loads(line)
                except ValueError:
                    message = None
                if not isinstance(message, dict) or not isinstance(message.get("ok", True), bool):
                    for fd in fds:
                        os.close(fd)
                    raise Error(f"bad response from gpupoold: {line[:200].decode(errors='replace')}")
                return message, fds
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise Error("bad response from gpupoold: a message longer than 1 MiB")
            fds = array.array("i")
            try:
                data, ancillary, _, _ = self.sock.recvmsg(
                    65536, socket.CMSG_SPACE(MAX_DESCRIPTORS * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
            except socket.timeout:
                raise  # the caller's deadline, not a broken connection
            except OSError as e:
                raise ConnectionLost(f"cannot talk to gpupoold: {e.strerror or e}", sent=True) from None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
            if fds:
                # The kernel never joins bytes across a message that carries descriptors: they
                # belong to the first byte received here.
                self.marks.append((len(self.buffer), list(fds)))
            if not data:
                if self.buffer:
                    raise Error("gpupoold closed the connection in the middle of a message")
                return None, []
            self.buffer += data

    def request(self, message):
        """Sends a request and returns its one answer; an error answer raises Error with the
        daemon's line. Descriptors are not expected here and are closed."""
        self.send(message)
        answer, fds = self.receive_line()
        for fd in fds:
            os.close(fd)
        if answer is None:
            raise ConnectionLost("gpupoold closed the connection", sent=True)
        return check(answer)


def check(answer):
    if answer is None:
        raise Error("gpupoold closed the connection")
    if answer.get("ok") is False:
        raise Error(str(answer.get("error", "gpupoold refused the request")))
    return answer
