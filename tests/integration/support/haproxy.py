"""HAProxy (Debian's) in front of servers under test: a configuration written to a
temporary folder, the process started on a free loopback port and always stopped, and
its servers' health as its stats socket reports it. HAProxy comes from
scripts/install-deps.sh; a missing one fails the test."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

from support.harness import require_tool
from support.ports import free_port  # noqa: F401  (callers import it from here)

START_TIMEOUT = 10.0


def haproxy_path(test):
    """HAProxy's path: on PATH, or in /usr/sbin, which a user's PATH may leave out."""
    path = shutil.which("haproxy") or "/usr/sbin/haproxy"
    return path if os.path.exists(path) else require_tool(test, "haproxy")


class Haproxy:
    """A running HAProxy: frontend `edge` on 127.0.0.1:port, backend `xkit`."""

    def __init__(self, proc, port, stats_path):
        self.proc, self.port, self.stats_path = proc, port, stats_path
        self.log = None

    def log_text(self):
        """What HAProxy has logged so far: its warnings and, one line each, the sessions that
        ended in an error (dontlog-normal leaves out the rest), for a failing test's message."""
        if self.log is None:
            return ""
        with open(self.log.name, "rb") as f:
            return f.read().decode(errors="replace")[-6000:]

    def server_status(self, server):
        """`UP`, `DOWN`, ... of backend xkit's server as HAProxy sees it now."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.stats_path)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        names = lines[0].lstrip("# ").split(",")
        for line in lines[1:]:
            row = dict(zip(names, line.split(","), strict=False))
            if row.get("pxname") == "xkit" and row.get("svname") == server:
                return row["status"]
        raise AssertionError(f"haproxy reports no server {server}: {data!r}")

    def wait_status(self, server, wanted, timeout=10.0):
        deadline = time.monotonic() + timeout
        status = self.server_status(server)
        while not status.startswith(wanted):
            if time.monotonic() > deadline:
                raise AssertionError(f"haproxy still sees server {server} {status}, not {wanted}, after {timeout} s")
            time.sleep(0.05)
            status = self.server_status(server)


def start_haproxy(test, backend, frontend=(), defaults=(), mode="http"):
    """HAProxy with frontend `edge` (its lines `frontend`) passing to backend `xkit`
    (its lines `backend`, the servers among them), `defaults` added to the defaults
    section; stopped at test's cleanup. Returns a Haproxy once it listens."""
    haproxy = haproxy_path(test)
    top = tempfile.mkdtemp(prefix="xk-haproxy-")
    test.addCleanup(shutil.rmtree, top, True)
    port = free_port()
    stats = os.path.join(top, "stats.sock")
    conf = os.path.join(top, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(
            "global\n"
            f"    stats socket {stats} level admin\n"
            "    log stdout format raw local0\n"
            "defaults\n"
            f"    mode {mode}\n"
            "    log global\n"
            f"    option {'httplog' if mode == 'http' else 'tcplog'}\n"
            "    option dontlog-normal\n"
            "    timeout connect 5s\n"
            "    timeout client 10s\n"
            "    timeout server 10s\n" + "".join(f"    {line}\n" for line in defaults) + "frontend edge\n"
            f"    bind 127.0.0.1:{port}\n"
            + "".join(f"    {line}\n" for line in frontend)
            + "    default_backend xkit\n"
            "backend xkit\n" + "".join(f"    {line}\n" for line in backend)
        )
    log = open(os.path.join(top, "haproxy.log"), "w+b")
    proc = subprocess.Popen([haproxy, "-db", "-f", conf], stdout=log, stderr=subprocess.STDOUT)

    def stop():
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    test.addCleanup(stop)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"haproxy exited with {proc.returncode}:\n{log.read().decode()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            edge = Haproxy(proc, port, stats)
            edge.log = log
            return edge
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"haproxy is not listening on {port} after {START_TIMEOUT} s") from None
            time.sleep(0.05)
