"""What the proxy's tests share to play an upstream (or an auth service) of their
own: a threaded TCP server on a free loopback port, and HTTP/1.1 heads and bodies
read from its connections as a plain server reads them. Each test's handler says
what the upstream answers."""

import hashlib
import socketserver
import threading
import time

PIECE = 1 << 16  # the most one read of a body takes


class LoopbackServer(socketserver.ThreadingTCPServer):
    """A threaded server of the test's own on a free loopback port (.port), serving
    from a daemon thread from the moment it is made until stop(); .lock guards what
    its handlers count. A subclass sets its counters before calling __init__."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops SYNs when 8 connections open at once on a
    # loaded machine: a retransmitted SYN comes after 1 s, past the proxy's connect timeout.
    request_queue_size = 128

    def __init__(self, handler):
        super().__init__(("127.0.0.1", 0), handler)
        self.lock = threading.Lock()
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self):
        self.shutdown()
        self.server_close()


def read_head(f):
    """A request's method, target and fields (name, value) from f; (None, None, None)
    once the client closed."""
    line = f.readline()
    if not line:
        return None, None, None
    method, target, _ = line.decode("latin-1").split(" ", 2)
    fields = []
    while True:
        line = f.readline().decode("latin-1")
        if line in ("\r\n", ""):
            break
        name, value = line.split(":", 1)
        fields.append((name.strip(), value.strip()))
    return method, target, fields


def read_body(f, fields):
    """The whole body the fields announce (chunked, or Content-Length, or none) and
    how it was framed: "chunked" or "length N"."""
    lower = {n.lower(): v for n, v in fields}
    if lower.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b""):
                    pass
                return body, "chunked"
            body += f.read(size)
            f.readline()
    n = int(lower.get("content-length", "0"))
    return f.read(n), f"length {n}"


def read_digest(f, length, pause=0.0):
    """Reads a body of length bytes a piece at a time as it comes (pause seconds after
    each: a slow reader), hashing it: its SHA-256 and the bytes read, fewer than
    length when the peer closed first."""
    digest, got = hashlib.sha256(), 0
    while got < length:
        piece = f.read1(min(length - got, PIECE))
        if not piece:
            break
        digest.update(piece)
        got += len(piece)
        if pause:
            time.sleep(pause)
    return digest, got


def lower_fields(info):
    """The fields of an echoing upstream's JSON report, by lower-case name."""
    return {n.lower(): v for n, v in info["fields"]}
