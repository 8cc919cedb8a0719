"""Shared machinery for xKit's integration tests.

The tests drive the real http_bench_server binary (XK_BENCH_SERVER) over real
sockets. This module starts and stops it, speaks HTTP/1.1 over raw sockets
with a deliberately strict response parser, and checks on the way out that the
process exited 0 with no sanitizer report, so the same suite is meaningful
under ASan+UBSan and ThreadSanitizer.

Every socket operation has a timeout and every wait on the server ends in a
kill, so a hung server fails a test instead of hanging ctest.
"""

import email.utils
import errno
import os
import re
import resource
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

# Generous per-operation limits: ASan builds on 2 shared cores can be slow.
SOCKET_TIMEOUT = 10.0
START_TIMEOUT = 15.0
STOP_TIMEOUT = 15.0

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "LeakSanitizer", "runtime error:", "WARNING: ThreadSanitizer")

# "listening on 0.0.0.0:41235 (1 workers)"; HOST may be an IPv6 literal,
# possibly bracketed, so the port is what follows the last colon.
LISTEN_RE = re.compile(r"^listening on (\S+):(\d+) \((\d+) workers?\)$")

IMF_FIXDATE_RE = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} "
    r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$"
)

MAX_RESPONSE_HEAD = 64 * 1024


def _binary_from_env(var):
    path = os.environ.get(var)
    if not path:
        raise RuntimeError(f"{var} is not set; run through ctest or set it to the binary")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{var}={path} is not an executable file")
    return path


def bench_server_path():
    return _binary_from_env("XK_BENCH_SERVER")


def hello_server_path():
    """The hello example, examples/hello_server (always built with the tests)."""
    return _binary_from_env("XK_HELLO")


def raise_fd_limit(wanted):
    """Raises this process's RLIMIT_NOFILE (and so a server started after it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def read_listening_lines(proc, patterns, what, stderr_tail, timeout=START_TIMEOUT):
    """Reads proc's stdout until each of patterns (compiled regexes; a server prints its
    lines in any order) has matched a line, and returns the matches in the patterns' order.
    A line that matches none of those still awaited, proc exiting first, or no lines within
    timeout fails, naming what (the command line) with stderr_tail() (its stderr so far)."""
    fd = proc.stdout.fileno()
    found = [None] * len(patterns)
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        *lines, data = data.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            awaited = (index for index, match in enumerate(found) if match is None)
            matched = next(((index, match) for index in awaited if (match := patterns[index].match(line))), None)
            if matched is None:
                raise AssertionError(f"unexpected line from {what}: {line!r}")
            index, match = matched
            found[index] = match
            if None not in found:
                return found
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"no listening line within {timeout}s from {what}; got {data!r}; stderr:\n{stderr_tail()}"
            )
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        piece = os.read(fd, 4096)
        if not piece:
            proc.wait(timeout=STOP_TIMEOUT)
            raise AssertionError(
                f"{what} exited with {proc.returncode} before listening; stdout {data!r}; stderr:\n{stderr_tail()}"
            )
        data += piece


def fds_of(pid, kind):
    """How many of the process's descriptors are of kind ("socket:", "pipe:")."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(kind)
        except OSError:
            pass
    return count


class ServerProcess:
    """One server process: started on port 0, its port read from stdout (or
    argv, a command line that prints the same listening line). The base of every
    server the tests run; a subclass adds what its binary needs (tls_fixtures.HttpsServer)."""

    scheme = "http"

    def __init__(self, args=(), binary=None, port=0, env=None, argv=None, pass_fds=()):
        self.env = env or {}
        self.pass_fds = tuple(pass_fds)  # descriptors the server inherits (an inherited listener)
        if argv is not None:
            # A whole command line of the caller's (a container run, say).
            self.argv = list(argv)
        else:
            binary = binary or bench_server_path()
            self.argv = [binary, str(port), *map(str, args)]
            # The bench servers register their diagnostic routes (/delay, /stream,
            # /upload, /tls) only when asked: the tests use them.
            if os.path.basename(binary) in ("http_bench_server", "https_bench_server"):
                self.argv.append("--test-routes")
        self.proc = None
        self.host = self.port = self.workers = None
        self.also_listening = []  # the matches of listening_patterns()[1:]
        self._stderr = tempfile.TemporaryFile()
        self._drainer = None

    def listening_patterns(self):
        """The lines start() waits for, LISTEN_RE first; a server that prints more adds them."""
        return [LISTEN_RE]

    def start(self):
        env = dict(os.environ, **self.env)
        # Leaks are only reported at exit; make sure nothing turned that off.
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            pass_fds=self.pass_fds,
        )
        try:
            listening, *self.also_listening = read_listening_lines(
                self.proc, self.listening_patterns(), self.argv, self.stderr_tail
            )
        except BaseException:
            self.close()
            raise
        self.host = listening.group(1).strip("[]")
        self.port = int(listening.group(2))
        self.workers = int(listening.group(3))
        # Keep draining stdout so a chatty server can never block on a full pipe.
        self._drainer = threading.Thread(target=self._drain_stdout, daemon=True)
        self._drainer.start()
        return self

    def _drain_stdout(self):
        try:
            while os.read(self.proc.stdout.fileno(), 65536):
                pass
        except (OSError, ValueError):
            return

    @property
    def pid(self):
        return self.proc.pid

    @property
    def connect_host(self):
        """Where a client should connect: wildcard addresses map to loopback."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)

    def url(self, target="/"):
        host = f"[{self.connect_host}]" if ":" in self.connect_host else self.connect_host
        return f"{self.scheme}://{host}:{self.port}{target}"

    def open_conn(self, **kwargs):
        """A client connection to the server (Conn's keyword arguments); the caller closes it."""
        return Conn(self.port, self.connect_host, **kwargs)

    def stderr_text(self):
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def stderr_tail(self, limit=6000):
        return self.stderr_text()[-limit:]

    def is_running(self):
        return self.proc is not None and self.proc.poll() is None

    def assert_running(self):
        if not self.is_running():
            raise AssertionError(f"server exited with {self.proc.returncode}; stderr:\n{self.stderr_tail()}")

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        """Waits for the process to end; kills it and fails if it does not."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"server did not exit within {timeout}s; killed it; stderr:\n{self.stderr_tail()}"
            ) from None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)

    def close(self):
        """Kills the process if still running and releases its pipes."""
        if self.proc is None or self._stderr.closed:
            return
        self.kill()
        # The drainer sees EOF once the process is gone; join it before the
        # close so it never reads a reused descriptor.
        if self._drainer is not None:
            self._drainer.join(STOP_TIMEOUT)
        self.proc.stdout.close()
        self._stderr.close()

    def sanitizer_reports(self):
        text = self.stderr_text()
        return [marker for marker in SANITIZER_MARKERS if marker in text]

    def assert_clean_exit(self, returncode):
        problems = []
        if returncode != 0:
            problems.append(f"exit status {returncode}")
        reports = self.sanitizer_reports()
        if reports:
            problems.append(f"sanitizer reports: {', '.join(reports)}")
        if problems:
            raise AssertionError(f"server stop was not clean ({'; '.join(problems)}); stderr:\n{self.stderr_tail()}")

    def stop_and_check(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Graceful stop; asserts exit 0 and a sanitizer-clean stderr."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.send_signal(sig)
        self.assert_clean_exit(self.wait_exit(timeout))

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def rss_kib(self):
        """The process's resident memory (VmRSS) in KiB."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError(f"no VmRSS in /proc/{self.pid}/status")

    def settle_fd_baseline(self, connections=4):
        """The fd count once lazily created fds exist: a few connections
        served and closed first, then the count left to settle."""
        for _ in range(connections):
            with self.open_conn() as conn:
                conn.request("GET", "/ping")
                resp = conn.read_response()
                if resp.status != 200:
                    raise AssertionError(f"warm-up /ping got {resp!r}")
        previous, count = -1, self.fd_count()
        while count != previous:
            time.sleep(0.1)
            previous, count = count, self.fd_count()
        return count

    def wait_fd_count(self, expected, timeout=5.0):
        """Polls until the server holds `expected` fds (closes are asynchronous)."""
        deadline = time.monotonic() + timeout
        count = self.fd_count()
        while count != expected and time.monotonic() < deadline:
            time.sleep(0.02)
            count = self.fd_count()
        return count


# ---- Requests ----


def http_request(method, target, headers=None, body=None, version="HTTP/1.1", host="x"):
    """Builds a request. Host is added for HTTP/1.1 unless host is None;
    Content-Length is added when body is given and headers do not frame it."""
    lines = [f"{method} {target} {version}".encode()]
    headers = list(headers.items() if isinstance(headers, dict) else headers or [])
    names = {name.lower() for name, _ in headers}
    if version == "HTTP/1.1" and host is not None and "host" not in names:
        headers.insert(0, ("Host", host))
    if body is not None and not names & {"content-length", "transfer-encoding"}:
        headers.append(("Content-Length", str(len(body))))
    for name, value in headers:
        lines.append(_to_bytes(name) + b": " + _to_bytes(value))
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


def chunked(data, piece_sizes, extension=b"", trailers=b""):
    """Frames data as chunks of the given sizes (the last one repeats)."""
    out = bytearray()
    pos = 0
    sizes = list(piece_sizes) or [len(data) or 1]
    i = 0
    while pos < len(data):
        size = min(sizes[min(i, len(sizes) - 1)], len(data) - pos)
        out += b"%x" % size + extension + b"\r\n" + data[pos : pos + size] + b"\r\n"
        pos += size
        i += 1
    out += b"0" + extension + b"\r\n" + trailers + b"\r\n"
    return bytes(out)


def _to_bytes(value):
    return value if isinstance(value, bytes) else str(value).encode("latin-1")


class Response:
    def __init__(self, version, status, reason, headers, raw_head):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # [(name, value)] in order, as str
        self.raw_head = raw_head
        self.body = b""
        self.chunk_sizes = None  # sizes on the wire when chunked
        self.trailers = []
        self.close_delimited = False  # body ran to EOF (no length, not chunked)
        self.interim = []  # 1xx responses that preceded this one

    def header_values(self, name):
        return [value for key, value in self.headers if key.lower() == name.lower()]

    def header(self, name):
        """The single value of header `name`, None when absent; a repeated one fails."""
        values = self.header_values(name)
        if len(values) > 1:
            raise AssertionError(f"response repeats {name}: {values}")
        return values[0] if values else None

    def tokens(self, name):
        """Comma-separated tokens of a header, lower-cased (Connection, Allow)."""
        return {
            token.strip().lower() for value in self.header_values(name) for token in value.split(",") if token.strip()
        }

    def __repr__(self):
        return f"<Response {self.status} {self.headers} body[{len(self.body)}]={self.body[:80]!r}>"


class ResponseIncomplete(AssertionError):
    pass


class Conn:
    """A raw client connection with a receive buffer; strict response parsing."""

    def __init__(self, port, host="127.0.0.1", timeout=SOCKET_TIMEOUT, rcvbuf=None):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if rcvbuf:
            # Fixed before connect, so autotuning cannot grow it.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        # Small writes must leave as written: fragment tests depend on it.
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock.connect((host, port))
        except BaseException:
            self.sock.close()
            raise
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False
        self.reset = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def abort(self):
        """Closes with an RST, like a client that crashed."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def send_in_pieces(self, data, piece, pause):
        for pos in range(0, len(data), piece):
            self.sock.sendall(data[pos : pos + piece])
            time.sleep(pause)

    def request(self, method, target, **kwargs):
        self.send(http_request(method, target, **kwargs))

    def _fill(self, size=1 << 20):
        if self.eof:
            return False
        try:
            piece = self.sock.recv(size)
        except ConnectionResetError:
            piece = b""
            self.reset = True
        if not piece:
            self.eof = True
            return False
        self.buf += piece
        return True

    def _incomplete(self, what):
        state = "reset" if self.reset else "closed" if self.eof else "open"
        return ResponseIncomplete(f"connection {state} while reading {what}; buffered {bytes(self.buf[:300])!r}")

    def _take_line(self, what, limit=MAX_RESPONSE_HEAD):
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[: end + 2]
                if b"\n" in line or b"\r" in line:
                    raise AssertionError(f"bare CR/LF in response {what}: {line!r}")
                return line
            if len(self.buf) > limit:
                raise AssertionError(f"response {what} longer than {limit} bytes")
            if not self._fill():
                raise self._incomplete(what)

    def read_exactly(self, n):
        while len(self.buf) < n:
            if not self._fill(min(max(n - len(self.buf), 65536), 1 << 20)):
                raise self._incomplete(f"{n} bytes")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def read_response(self, head_only=False):
        """Reads the next response, 1xx included. head_only: answer to HEAD."""
        try:
            return self._read_response(head_only)
        except TimeoutError:
            raise AssertionError(
                f"no complete response within {self.timeout}s; buffered {bytes(self.buf[:300])!r}"
            ) from None

    def read_final_response(self, head_only=False):
        """Reads past any 1xx responses; they are kept in .interim."""
        interim = []
        while True:
            resp = self.read_response(head_only)
            if resp.status >= 200:
                resp.interim = interim
                return resp
            interim.append(resp)

    def _read_response(self, head_only):
        status_line = self._take_line("status line")
        match = re.fullmatch(rb"(HTTP/1\.[01]) ([1-5]\d\d) ([^\r\n]*)", status_line)
        if not match:
            raise AssertionError(f"malformed status line {status_line!r}")
        version, status = match.group(1).decode(), int(match.group(2))
        reason = match.group(3).decode("latin-1")
        headers = []
        raw = [status_line]
        while True:
            line = self._take_line("header")
            raw.append(line)
            if not line:
                break
            name, colon, value = line.partition(b":")
            if not colon or not re.fullmatch(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", name):
                raise AssertionError(f"malformed response header line {line!r}")
            headers.append((name.decode(), value.strip(b" \t").decode("latin-1")))
        resp = Response(version, status, reason, headers, b"\r\n".join(raw) + b"\r\n")
        if head_only or status < 200 or status in (204, 304):
            return resp
        if "chunked" in resp.tokens("transfer-encoding"):
            self._read_chunked_body(resp)
        elif resp.header("content-length") is not None:
            length = resp.header("content-length")
            if not length.isdigit():
                raise AssertionError(f"malformed response Content-Length {length!r}")
            resp.body = self.read_exactly(int(length))
        else:
            while self._fill():
                pass
            resp.body = bytes(self.buf)
            self.buf.clear()
            resp.close_delimited = True
        return resp

    def _read_chunked_body(self, resp):
        body = bytearray()
        resp.chunk_sizes = []
        while True:
            line = self._take_line("chunk size")
            size_text = line.split(b";", 1)[0].strip()
            if not re.fullmatch(rb"[0-9a-fA-F]+", size_text):
                raise AssertionError(f"malformed chunk size line {line!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            resp.chunk_sizes.append(size)
            body += self.read_exactly(size)
            if self.read_exactly(2) != b"\r\n":
                raise AssertionError("chunk data not followed by CRLF")
        while True:
            line = self._take_line("trailer")
            if not line:
                break
            resp.trailers.append(line)
        resp.body = bytes(body)

    def read_until_eof(self, timeout=None):
        """Everything the server still sends before it closes; fails if it stays open."""
        self.sock.settimeout(timeout if timeout is not None else self.timeout)
        try:
            while self._fill():
                pass
        except TimeoutError:
            raise AssertionError(
                f"connection still open after {self.sock.gettimeout()}s; received {bytes(self.buf[:300])!r}"
            ) from None
        finally:
            self.sock.settimeout(self.timeout)
        data = bytes(self.buf)
        self.buf.clear()
        return data

    def stays_open_for(self, seconds):
        """True when nothing arrives and the connection is not closed for `seconds`."""
        ready, _, _ = select.select([self.sock], [], [], seconds)
        return not ready and not self.buf

    def exchange(self, raw, head_only=False):
        """Sends raw while reading the final response, for bodies too large to
        send before reading without risking a deadlock."""
        failure = []

        def sender():
            try:
                self.sock.sendall(raw)
            except OSError as err:
                failure.append(err)

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        try:
            return self.read_final_response(head_only)
        finally:
            thread.join(self.timeout)
            if failure:
                raise AssertionError(f"sending the request failed: {failure[0]!r}")


# ---- Assertions shared by the test files ----


def request_once(port, method, target, **kwargs):
    """One request (http_request's arguments) on a connection of its own; the response."""
    with Conn(port) as conn:
        conn.request(method, target, **kwargs)
        return conn.read_response()


def raw_exchange(port, data, timeout=10):
    """Sends data on a fresh connection and reads until the server closes, resets or
    stays silent for timeout seconds; the bytes it sent back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def assert_standard_headers(test, resp):
    """What every response carries: an IMF-fixdate Date near now, Server: xkit,
    and exactly one framing (Content-Length or chunked)."""
    date = resp.header("date")
    test.assertIsNotNone(date, f"no Date header in {resp!r}")
    test.assertRegex(date, IMF_FIXDATE_RE)
    skew = abs(email.utils.parsedate_to_datetime(date).timestamp() - time.time())
    test.assertLess(skew, 5, f"Date {date!r} is {skew:.0f}s off")
    test.assertEqual(resp.header("server"), "xkit")
    has_length = resp.header("content-length") is not None
    is_chunked = resp.tokens("transfer-encoding") == {"chunked"}
    test.assertTrue(
        has_length != is_chunked, f"response must carry Content-Length or chunked, not both or neither: {resp!r}"
    )


def start_owned(test, server):
    """Starts server for one test: killed and released at its cleanup. The
    test stops it itself to check the exit."""
    server.start()
    test.addCleanup(server.close)
    return server


def start_server(test, args=(), binary=None, port=0):
    """A bench (or binary) server owned by one test: start_owned."""
    return start_owned(test, ServerProcess(args, binary=binary, port=port))


MISSING_TOOL = (
    "{} is not installed (not on PATH); scripts/install-deps.sh, `make test`'s first "
    "step, installs every tool the tests run"
)


def require_tool(test, name):
    """The path of the command `name`, failing `test` when it is missing: the
    tests' tools come from scripts/install-deps.sh, so a missing one is a
    broken setup, not a reason to skip."""
    path = shutil.which(name)
    if path is None:
        test.fail(MISSING_TOOL.format(name))
    return path


def run_client(argv, timeout=60):
    """Runs curl or wrk and returns the CompletedProcess; never hangs."""
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise AssertionError(MISSING_TOOL.format(argv[0])) from None


def ipv6_loopback_or_skip(test):
    """Skips test on a machine without IPv6 loopback (disabled, or a container
    without it); any other error binding ::1 fails the test."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as e:
        if e.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            raise
        test.skipTest(f"no IPv6 loopback on this machine ({e.strerror})")


class ServerTestCase(unittest.TestCase):
    """A class that shares one server. Each test checks the server is still
    alive (so a crash is pinned on the test that caused it); the class ends
    with a graceful stop that must exit 0 with a sanitizer-clean stderr."""

    server_args = ()
    server = None

    @classmethod
    def start_shared_server(cls):
        """The class's server; a class serving another binary overrides this."""
        return ServerProcess(cls.server_args).start()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = cls.start_shared_server()

    @classmethod
    def tearDownClass(cls):
        server, cls.server = cls.server, None
        if server is not None:
            try:
                server.stop_and_check()
            finally:
                server.close()
        super().tearDownClass()

    def tearDown(self):
        self.server.assert_running()

    def connect(self, **kwargs):
        """A connection to the class's server (its open_conn), closed at the test's cleanup."""
        conn = self.server.open_conn(**kwargs)
        self.addCleanup(conn.close)
        return conn

    def fetch(self, method, target, head_only=None, **kwargs):
        """One request on a fresh connection; returns the final response."""
        with self.server.open_conn() as conn:
            conn.request(method, target, **kwargs)
            return conn.read_final_response(method == "HEAD" if head_only is None else head_only)

    def assert_serves_ping(self):
        resp = self.fetch("GET", "/ping")
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
