"""Starting, watching and stopping the servers under test, and what /proc says they spent."""

import contextlib
import ctypes
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .parsing import last_line

START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1
LIBC = ctypes.CDLL(None, use_errno=True)
PING_REQUEST = b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class RunFailed(Exception):
    """One measurement went wrong; it is recorded as failed and the run goes on."""


@dataclass
class Peer:
    """A server under test: how to start it on a port, given a private directory.

    tls: it speaks TLS on that port. http1_probe: GET /ping over HTTP/1.1 tells when it
    serves (nginx's cleartext HTTP/2 port speaks nothing else). workers_are_children:
    the processes that serve are the started one's children (nginx's workers; its
    master sleeps). serving_children_named: the started process serves, and so do its
    children of that name (h2o's neverbleed child, which signs handshakes; its perl crash
    helper sleeps and is left out). probe_path: what the HTTP/1.1 probe asks for (the
    arena's servers have no /ping)."""

    name: str
    command: Callable[[int, "os.PathLike"], list]
    env: dict = field(default_factory=dict)
    tls: bool = False
    http1_probe: bool = True
    workers_are_children: bool = False
    serving_children_named: str | None = None
    probe_path: str = "/ping"
    # A readiness check of its own, probe(port) -> None once it serves or why not yet: for
    # servers that listen on UDP only (HTTP/3), which neither probe above reaches.
    probe: Callable[[int], str | None] | None = None


def find_tool(name, usual_path):
    """PATH first, then where Debian or the Go tarball put it (often not on a user's PATH)."""
    return shutil.which(name) or (usual_path if os.access(usual_path, os.X_OK) else None)


def die_with_parent():
    """Runs in the child before exec: if the runner is killed outright, so is the server."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Server:
    """A started peer, pinned with taskset to cpus, logging into run_dir/server.log."""

    def __init__(self, peer, port, run_dir, cpus):
        self.peer = peer
        self.port = port
        self.cores = set(cpus)
        self.pids = None
        self.log_path = run_dir / "server.log"
        argv = pinned(peer.command(port, run_dir), cpus)
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **peer.env},
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def find_serving_pids(self):
        if self.peer.workers_are_children:
            return child_pids(self.process.pid) or [self.process.pid]
        if self.peer.serving_children_named:
            return [self.process.pid] + [
                pid for pid in child_pids(self.process.pid) if process_name(pid) == self.peer.serving_children_named
            ]
        return [self.process.pid]

    def serving_pids(self):
        """The processes that serve, fixed by wait_until_serving: one that goes away later
        (a crashed worker, even one its master replaced) fails every reading after."""
        return self.pids if self.pids is not None else self.find_serving_pids()

    def cpu_seconds(self):
        return sum(self.cpu_times())

    def cpu_times(self):
        """(user, system) seconds of the serving processes so far, each read once."""
        user = system = 0.0
        for pid in self.serving_pids():
            try:
                pid_user, pid_system = process_cpu_times(pid)
            except OSError:
                raise RunFailed(f"serving process {pid} is gone: {self.log_tail()}") from None
            user, system = user + pid_user, system + pid_system
        return user, system

    def rss_bytes(self):
        return sum(process_rss_bytes(pid) for pid in self.serving_pids())

    def exited(self):
        """Why the server is gone, or None while it runs."""
        if self.process.poll() is None:
            return None
        return f"server exited with status {self.process.returncode}: {self.log_tail()}"

    def log_tail(self):
        try:
            return last_line(self.log_path.read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def stop(self):
        """SIGTERM to the whole session (nginx's workers too), SIGKILL if it lingers."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
                return
            except subprocess.TimeoutExpired:
                continue


def start_server(peer, ports, work_dir, cpus, label=""):
    """peer started in a private directory under work_dir on the next free port, pinned to
    cpus, once it serves; the caller stops it. Raises RunFailed (or OSError) if it does not."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{peer.name}-{label}-" if label else f"{peer.name}-", dir=work_dir))
    run_dir.chmod(0o755)  # nginx's and h2o's unprivileged workers read and write in here
    server = Server(peer, ports.take(), run_dir, cpus)
    try:
        wait_until_serving(server)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running(peer, ports, work_dir, cpus, label=""):
    """start_server as a with-block that stops the server on every way out."""
    server = start_server(peer, ports, work_dir, cpus, label)
    try:
        yield server
    finally:
        server.stop()


def pinned(argv, cpus):
    """argv run by taskset on cpus (a set of CPU numbers)."""
    return ["taskset", "-c", cpu_list(cpus)] + list(argv)


def cpu_list(cpus):
    """A set of CPU numbers as a taskset list: {0, 1} -> "0,1"."""
    return ",".join(str(cpu) for cpu in sorted(cpus))


def pin_self(cpus):
    """Keeps this process (and what it starts without taskset) on cpus, off the servers'."""
    os.sched_setaffinity(0, cpus)


def raise_fd_limit(needed):
    """Servers inherit this limit, so raising ours covers idle connections on both sides.
    Raising the hard limit needs CAP_SYS_RESOURCE; without it the soft limit goes up to it."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, needed),) * 2)
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if hard < needed:
            raise RunFailed(f"{needed} open files are needed but the hard limit is {hard}") from None


def process_name(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def proc_stat_fields(pid):
    """Fields of /proc/PID/stat from field 3 (state) on; the name may hold spaces."""
    with open(f"/proc/{pid}/stat") as stat:
        text = stat.read()
    return text[text.rindex(")") + 2 :].split()


def child_pids(pid):
    """Scans /proc because /proc/PID/task/*/children is not in every kernel."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if int(proc_stat_fields(entry)[1]) == pid:
                children.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return children


def process_cpu_seconds(pid):
    """utime + stime, which for a process covers all of its threads, exited ones too."""
    return sum(process_cpu_times(pid))


def process_cpu_times(pid):
    """(utime, stime) in seconds, fields 14 and 15 of /proc/PID/stat: the time the process ran
    its own code and the time the kernel ran on its behalf (system calls, and on loopback the
    receiver's TCP path and wake-up, which run on the sending CPU)."""
    fields = proc_stat_fields(pid)
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def process_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RunFailed(f"no VmRSS for pid {pid}")


def children_cpu_seconds():
    """CPU time of this process's waited-for children: the load generator's, once it exits."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def core_seconds(cpus):
    """(busy, softirq) seconds of the given CPUs so far, from /proc/stat. Busy counts anything
    that is not idle: any process, interrupts, a hypervisor's steal."""
    busy = softirq_total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *ticks = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, ticks[:8])
                busy += user + nice + system + irq + softirq + steal
                softirq_total += softirq
    return busy / CLOCK_TICKS, softirq_total / CLOCK_TICKS


def parse_cpu_list(text):
    """A taskset list such as "1" or "2-3,5" as a set of CPU numbers; ValueError if malformed."""
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        low, high = int(first), int(last or first)
        if low < 0 or high < low:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(low, high + 1))
    return cpus


def wait_until_serving(server):
    """Waits until GET probe_path (/ping) answers 200 (or, for a peer that speaks no HTTP/1.1
    there, until the port accepts), so a server that listens but cannot yet serve fails here."""
    deadline = time.monotonic() + START_TIMEOUT
    problem = "never accepted a connection"
    while time.monotonic() < deadline:
        gone = server.exited()
        if gone:
            raise RunFailed(gone)
        try:
            if server.peer.probe:
                problem = server.peer.probe(server.port)
                if problem is None:
                    server.pids = server.find_serving_pids()
                    return
                time.sleep(0.05)
                continue
            if not server.peer.http1_probe:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
                server.pids = server.find_serving_pids()
                return
            request = f"GET {server.peer.probe_path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
            status_line = first_response_line(server.port, server.peer.tls, request)
            if status_line.startswith(b"HTTP/1.1 200"):
                server.pids = server.find_serving_pids()
                return
            problem = f"answered GET {server.peer.probe_path} with {status_line[:60]!r}"
        except OSError as error:
            problem = str(error)
        time.sleep(0.05)
    raise RunFailed(f"not serving after {START_TIMEOUT:.0f} s: {problem}")


def client_tls_context():
    """Trusts anything (the certificate is self-signed) and offers only HTTP/1.1."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    return context


def open_connection(port, tls, timeout):
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        return client_tls_context().wrap_socket(sock, server_hostname="localhost")
    return sock


def first_response_line(port, tls, request):
    with open_connection(port, tls, timeout=1) as sock:
        sock.sendall(request)
        return sock.recv(4096).split(b"\r\n", 1)[0]


class PortPicker:
    """Hands out ports below the ephemeral range, never the same one twice in a session,
    so no server inherits another's lingering sockets and clients never collide with it."""

    def __init__(self, first):
        self.next = first

    def take(self):
        for port in range(self.next, 32768):
            if port_is_free(port):
                self.next = port + 1
                return port
        raise RunFailed("no free port left below 32768")


def port_is_free(port):
    """Free on TCP and on UDP, where the servers under test speak HTTP/3."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True
