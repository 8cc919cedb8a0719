"""Tools for the hostile-client tests: many raw sockets driven from one epoll
loop, and a latency probe that runs in its own process so the hostile loop's
work in this process never shows up in the latency it measures."""

import errno
import json
import os
import select
import socket
import subprocess
import sys
import time

# Runs in a child process: fresh connections, one GET /ping each, for SECONDS;
# prints the latencies (s) and the failures as JSON.
_PROBE = r"""
import json, socket, sys, time
port, seconds, pause = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
latencies, failures = [], []
end = time.monotonic() + seconds
while time.monotonic() < end:
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while not got.endswith(b"pong"):
                piece = s.recv(4096)
                if not piece:
                    break
                got += piece
        if not (got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"pong")):
            failures.append(repr(got[:100]))
        else:
            latencies.append(time.monotonic() - started)
    except OSError as err:
        failures.append(repr(err))
    time.sleep(pause)
print(json.dumps({"latencies": latencies, "failures": failures}))
"""


class LatencyProbe:
    """GET /ping on a fresh connection every `pause` seconds for `seconds`, from
    a child process; result() gives (sorted latencies, failures)."""

    def __init__(self, port, seconds, pause=0.05):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE, str(port), str(seconds), str(pause)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.seconds = seconds

    def result(self):
        try:
            out, err = self.proc.communicate(timeout=self.seconds + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError("the latency probe hung") from None
        if self.proc.returncode != 0:
            raise AssertionError(f"the latency probe failed: {err.decode(errors='replace')}")
        data = json.loads(out)
        return sorted(data["latencies"]), data["failures"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def median(values):
    return values[len(values) // 2] if values else float("nan")


def percentile(values, fraction):
    return values[min(len(values) - 1, int(len(values) * fraction))] if values else float("nan")


def open_many(port, count, batch=500, timeout=30.0):
    """`count` connected non-blocking sockets, opened `batch` at a time so the
    listen backlog never overflows (a dropped SYN costs a second's retry).
    Returns them with the monotonic time each connect completed."""
    socks, connected_at = [], []
    deadline = time.monotonic() + timeout
    poller = select.epoll()
    try:
        while len(socks) < count:
            pending = {}
            for _ in range(min(batch, count - len(socks) - len(pending))):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                code = sock.connect_ex(("127.0.0.1", port))
                if code not in (0, errno.EINPROGRESS):
                    sock.close()
                    raise AssertionError(f"connect failed: {os.strerror(code)}")
                pending[sock.fileno()] = sock
                poller.register(sock.fileno(), select.EPOLLOUT)
            while pending:
                if time.monotonic() > deadline:
                    raise AssertionError(f"only {len(socks)} of {count} connections opened in {timeout}s")
                for fd, _ in poller.poll(1.0):
                    sock = pending.pop(fd)
                    poller.unregister(fd)
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        sock.close()
                        raise AssertionError(f"connect failed: {os.strerror(code)}")
                    socks.append(sock)
                    connected_at.append(time.monotonic())
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    finally:
        poller.close()
    return socks, connected_at


def is_closed_by_peer(sock):
    """True when the peer closed (EOF or reset); False while it stays open. Any
    bytes the server sent first are read and dropped."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def close_all(socks):
    for sock in socks:
        sock.close()


class FloodResult:
    def __init__(self):
        self.sent = 0  # bytes the kernel took
        self.received = bytearray()  # the first KEEP bytes the server sent
        self.closed_at = None  # when the server closed (EOF, reset or hang-up)
        self.last_taken = None  # when the kernel last took bytes


KEEP = 1 << 16


def flood(socks, payload, read=True, seconds=10.0, until_closed=True):
    """Sends `payload` on every socket at once from one epoll loop, for at most
    `seconds`: as fast as the server takes it, reading what it answers when
    `read` (else never: a client that does not read). Returns a FloodResult per
    socket; closed_at is None for a connection the server still holds. Without
    until_closed it returns once every payload is sent."""
    view = memoryview(payload)
    results = [FloodResult() for _ in socks]
    by_fd = {}
    poller = select.epoll()
    hangup = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
    try:
        for i, sock in enumerate(socks):
            sock.setblocking(False)
            by_fd[sock.fileno()] = i
            poller.register(sock.fileno(), select.EPOLLOUT | hangup | (select.EPOLLIN if read else 0))
        open_count = unsent = len(socks)
        deadline = time.monotonic() + seconds
        while open_count and unsent and time.monotonic() < deadline:
            for fd, events in poller.poll(0.1):
                i, result = by_fd[fd], results[by_fd[fd]]
                sock = socks[i]
                if events & select.EPOLLIN:
                    try:
                        data = sock.recv(1 << 20)
                        if len(result.received) < KEEP:
                            result.received += data[: KEEP - len(result.received)]
                        if not data:
                            events |= select.EPOLLHUP
                    except BlockingIOError:
                        pass
                    except OSError:
                        events |= select.EPOLLHUP
                if events & select.EPOLLOUT and not events & (select.EPOLLHUP | select.EPOLLERR):
                    try:
                        result.sent += sock.send(view[result.sent : result.sent + (1 << 18)])
                        result.last_taken = time.monotonic()
                    except BlockingIOError:
                        pass
                    except OSError:
                        events |= select.EPOLLHUP
                    if result.sent >= len(payload):
                        poller.modify(fd, hangup | (select.EPOLLIN if read else 0))
                        if not until_closed:
                            unsent -= 1
                if events & (select.EPOLLHUP | select.EPOLLERR | select.EPOLLRDHUP):
                    result.closed_at = time.monotonic()
                    poller.unregister(fd)
                    open_count -= 1
    finally:
        poller.close()
    return results
