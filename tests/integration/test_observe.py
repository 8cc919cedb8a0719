"""Access logs and metrics on the real bench servers: a line per request in the
common, combined and JSON formats over HTTP/1.0, HTTP/1.1, h2c and TLS, with
every field checked against what the client did; hostile targets and user
agents that cannot forge a field or a line; rotation by SIGUSR1; lines kept
back until a graceful stop still written; and the counters served at
/metrics in the Prometheus text format."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from support.h2client import H2Conn
from support.harness import Conn, http_request, start_server
from support.tls_fixtures import TlsConn, client_context, h2_over_tls, shared_certs, start_https
from support.wsclient import OP_BINARY, OP_CLOSE, OP_TEXT, WsConn, close_payload, frame
from test_websocket_h2 import ENABLE_CONNECT_PROTOCOL, WsStream

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

CLF_ESCAPED = r'(?:[^"\\\x00-\x1f\x7f-\xff]|\\x[0-9a-f]{2})*'
CLF_TIME = r"\[(\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\]"
COMMON_RE = re.compile(rf'^(\S+) - - {CLF_TIME} "({CLF_ESCAPED})" (\d{{3}}) (\d+)$')
COMBINED_RE = re.compile(
    rf'^(\S+) - - {CLF_TIME} "({CLF_ESCAPED})" (\d{{3}}) (\d+) '
    rf'"({CLF_ESCAPED})" "({CLF_ESCAPED})"$'
)
ISO_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[+-]\d{2}:\d{2}$")
JSON_KEYS = [
    "time",
    "remote_addr",
    "remote_port",
    "method",
    "target",
    "protocol",
    "status",
    "bytes",
    "duration_ms",
    "duration_us",
    "referer",
    "user_agent",
    "tls",
]
SAMPLE_RE = re.compile(r"^([a-z_0-9]+)(?:\{([^}]*)\})? (\d+)$")


def clf_unescape(text):
    """The bytes a common-format field stands for."""
    return re.sub(rb"\\x([0-9a-f]{2})", lambda m: bytes([int(m.group(1), 16)]), text.encode("latin-1"))


def wait_for_lines(path, count, timeout=5.0):
    """The log's lines once it holds at least count (the workers write in batches)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = read_lines(path)
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def read_lines(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    assert data == b"" or data.endswith(b"\n"), f"a line was cut: {data[-200:]!r}"
    return data.decode("latin-1").splitlines()


def get(conn, target, headers=None, version="HTTP/1.1"):
    conn.request("GET", target, headers=headers or {}, version=version)
    return conn.read_response()


def metrics(port):
    """The /metrics samples as {(name, labels): value}, checked for HELP and TYPE."""
    with Conn(port) as conn:
        resp = get(conn, "/metrics")
    assert resp.status == 200, resp
    assert resp.header("Content-Type").startswith("text/plain; version=0.0.4"), resp.headers
    samples, described = {}, set()
    for line in resp.body.decode().splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            described.add((line[2:6], line.split()[2]))
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a sample line: {line!r}"
        assert ("HELP", m.group(1)) in described and ("TYPE", m.group(1)) in described, line
        labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
        samples[(m.group(1), labels)] = int(m.group(3))
    return samples


def requests_total(samples, protocol, status):
    return samples[("xkit_requests_total", (("protocol", protocol), ("status", status)))]


class LogTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="xk-observe-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.log = os.path.join(self.dir, "access.log")

    def start(self, fmt, *extra, workers=1):
        """One worker unless asked: then lines keep the order of the requests, which
        workers that write their own batches would not."""
        self.server = start_server(
            self, ["--access-log", self.log, "--log-format", fmt, "--workers", str(workers), *extra]
        )
        return self.server

    def stop(self):
        self.server.stop_and_check()


class AccessLogFormatsTest(LogTestCase):
    def assert_json_line(
        self, line, client, method, target, protocol, status, nbytes, user_agent=None, referer=None, tls=None
    ):
        rec = json.loads(line)
        self.assertEqual(list(rec), JSON_KEYS)
        self.assertRegex(rec["time"], ISO_TIME_RE)
        self.assertEqual((rec["remote_addr"], rec["remote_port"]), client[:2])
        self.assertEqual((rec["method"], rec["target"], rec["protocol"]), (method, target, protocol))
        self.assertEqual((rec["status"], rec["bytes"]), (status, nbytes))
        self.assertIsInstance(rec["duration_us"], int)
        self.assertGreaterEqual(rec["duration_us"], 0)
        self.assertEqual(rec["duration_ms"], rec["duration_us"] // 1000)
        self.assertEqual((rec["user_agent"], rec["referer"], rec["tls"]), (user_agent, referer, tls))
        return rec

    def test_json_lines_for_http1_http10_and_h2c(self):
        self.start("json", "--h2c-upgrade")
        with Conn(self.server.port) as conn:
            get(conn, "/echo?size=5", {"User-Agent": "tester/1.0", "Referer": "http://r.example/p"})
            get(conn, "/nowhere")
            conn.request("HEAD", "/ping")
            conn.read_response(head_only=True)
            c11 = conn.sock.getsockname()
        with Conn(self.server.port) as conn:
            get(conn, "/ping", version="HTTP/1.0")
            c10 = conn.sock.getsockname()
        with H2Conn(self.server.port) as conn:
            resp = conn.fetch("GET", "/echo?size=7", headers=[("user-agent", "h2 tester")])
            self.assertEqual(resp.status, 200)
            h2 = conn.sock.getsockname()
        with H2Conn(self.server.port, handshake=False) as conn:
            conn.upgrade("/ping", headers=[("User-Agent", "upgrader")])
            self.assertEqual(conn.read_response(1).status, 200)
            up = conn.sock.getsockname()
        lines = wait_for_lines(self.log, 6)
        self.assertEqual(len(lines), 6, lines)
        self.assert_json_line(
            lines[0], c11, "GET", "/echo?size=5", "HTTP/1.1", 200, 5, "tester/1.0", "http://r.example/p"
        )
        self.assert_json_line(lines[1], c11, "GET", "/nowhere", "HTTP/1.1", 404, len(b"Not Found\n"))
        self.assert_json_line(lines[2], c11, "HEAD", "/ping", "HTTP/1.1", 200, 0)
        self.assert_json_line(lines[3], c10, "GET", "/ping", "HTTP/1.0", 200, 4)
        self.assert_json_line(lines[4], h2, "GET", "/echo?size=7", "HTTP/2", 200, 7, "h2 tester")
        self.assert_json_line(lines[5], up, "GET", "/ping", "HTTP/2", 200, 4, "upgrader")
        self.stop()

    def test_common_lines_have_exactly_the_seven_fields(self):
        self.start("common")
        with Conn(self.server.port) as conn:
            get(conn, "/echo?size=3", {"User-Agent": "ignored"})
            get(conn, "/nowhere")
        with H2Conn(self.server.port) as h2:
            h2.fetch("GET", "/ping")
        # Every client is 127.0.0.1; the JSON test checks ports.
        lines = wait_for_lines(self.log, 3)
        self.assertEqual(len(lines), 3, lines)
        want = [
            ("GET /echo?size=3 HTTP/1.1", "200", "3"),
            ("GET /nowhere HTTP/1.1", "404", "10"),
            ("GET /ping HTTP/2", "200", "4"),
        ]
        for line, fields in zip(lines, want, strict=True):
            m = COMMON_RE.match(line)
            self.assertIsNotNone(m, line)
            self.assertEqual(m.group(1), "127.0.0.1")
            time.strptime(m.group(2), "%d/%b/%Y:%H:%M:%S %z")
            self.assertEqual(m.groups()[2:], fields)
        self.stop()

    def test_combined_lines_add_referer_and_user_agent(self):
        self.start("combined")
        with Conn(self.server.port) as conn:
            get(conn, "/ping", {"User-Agent": "Mozilla/5.0 (X11; Linux)", "Referer": "https://a.example/x?y"})
            get(conn, "/ping")
        lines = wait_for_lines(self.log, 2)
        self.assertEqual(len(lines), 2, lines)
        first, second = (COMBINED_RE.match(line) for line in lines)
        self.assertEqual(
            first.groups()[2:], ("GET /ping HTTP/1.1", "200", "4", "https://a.example/x?y", "Mozilla/5.0 (X11; Linux)")
        )
        self.assertEqual(second.groups()[5:], ("-", "-"))
        self.stop()


class HostileInputTest(LogTestCase):
    """Whatever a client puts in its target or user agent stays inside its field."""

    # What the parsers let through to a handler: HTTP/1.1 takes quotes and backslashes in a
    # target, and any byte but controls in a field value; HTTP/2 (nghttp2) takes bytes from
    # 0x80 in :path too. Controls and newlines never get that far (the unit test has them).
    H1_TARGETS = [b'/a"b', b"/back\\slash", b"/%22%0a%00", b'/x?a=\\"', b'/x?"]"-"']
    H1_AGENTS = [
        b'a" "b',
        b"tab\there",
        b'\\"\\',
        b"\xff\xfe not utf-8",
        b"caf\xc3\xa9 \xf0\x9f\x98\x80",
        b'x" 200 0 "-" "-"\tq',
    ]
    H2_REQUESTS = [
        (b"/\xc3\xa9\xff\x80", b'"quoted"\\'),
        (b'/q?"\\', b"\xc0\xaf overlong"),
        (b"/ping", b'x" 200 0 "-" "-'),
    ]

    def hostile_requests(self):
        sent = []
        with Conn(self.server.port) as conn:
            for target in self.H1_TARGETS:
                conn.send(b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertEqual(conn.read_response().status, 404)
                sent.append((target, None))
            for agent in self.H1_AGENTS:
                conn.send(b"GET /ping HTTP/1.1\r\nHost: x\r\nUser-Agent: " + agent + b"\r\n\r\n")
                self.assertEqual(conn.read_response().status, 200)
                sent.append((b"/ping", agent))
        with H2Conn(self.server.port) as h2:
            for target, agent in self.H2_REQUESTS:
                h2.fetch("GET", target, headers=[(b"user-agent", agent)])
                sent.append((target, agent))
        return sent

    def test_json_lines_parse_and_keep_what_was_sent(self):
        self.start("json")
        sent = self.hostile_requests()
        lines = wait_for_lines(self.log, len(sent))
        self.assertEqual(len(lines), len(sent), lines)
        for line, (target, agent) in zip(lines, sent, strict=True):
            rec = json.loads(line.encode("latin-1").decode("utf-8"))  # valid UTF-8 or it fails
            self.assertEqual(list(rec), JSON_KEYS)
            self.assertEqual(rec["target"], _logged_text(target))
            self.assertEqual(rec["user_agent"], None if agent is None else _logged_text(agent))
        self.stop()

    def test_combined_lines_have_exactly_their_fields(self):
        self.start("combined")
        sent = self.hostile_requests()
        lines = wait_for_lines(self.log, len(sent))
        self.assertEqual(len(lines), len(sent), lines)
        for line, (target, agent) in zip(lines, sent, strict=True):
            m = COMBINED_RE.match(line)
            self.assertIsNotNone(m, line)
            request = clf_unescape(m.group(3))
            self.assertTrue(request.startswith(b"GET " + target + b" HTTP/"), (request, target))
            self.assertEqual(clf_unescape(m.group(7)), b"-" if agent is None else agent)
        self.stop()


def _logged_text(raw):
    """What the JSON log holds for raw: valid UTF-8 as it was; any other byte as the code point of its number."""
    return raw.decode("utf-8") if _is_utf8(raw) else _mixed_decode(raw)


def _is_utf8(raw):
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _mixed_decode(raw):
    """What the log makes of raw: valid UTF-8 sequences kept, other bytes as U+00XX."""
    out, i = [], 0
    while i < len(raw):
        for n in (4, 3, 2, 1):
            try:
                out.append(raw[i : i + n].decode("utf-8"))
                i += n
                break
            except UnicodeDecodeError:
                continue
        else:
            out.append(chr(raw[i]))
            i += 1
    return "".join(out)


class RefusedRequestsTest(LogTestCase):
    """Requests the HTTP/1.1 parser refuses are what an operator looks for in a log:
    each is answered, counted by status class and logged, with what its head gave."""

    def raw(self, request):
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return int(data.split(b" ", 2)[1])

    def test_each_refusal_is_counted_and_logged(self):
        self.start("json", "--metrics", "--max-header-size", "1024", "--max-body", "1000", "--header-timeout", "600")
        before = metrics(self.server.port)
        refused = [
            (b"GET /a HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400),
            (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
            (b"GET /b HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 2000 + b"\r\n\r\n", 431),
            (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n", 413),
            (b"GET /stalled HTTP/1.1\r\nHost: x\r\n", 408),  # a head that stops: the header timeout
        ]
        for request, status in refused:
            self.assertEqual(self.raw(request), status, request[:40])
        after = metrics(self.server.port)
        delta = requests_total(after, "http/1.1", "4xx") - requests_total(before, "http/1.1", "4xx")
        self.assertEqual(delta, len(refused))
        lines = [json.loads(line) for line in wait_for_lines(self.log, 2 + len(refused))]
        refusals = [rec for rec in lines if rec["target"] != "/metrics"]
        self.assertEqual([rec["status"] for rec in refusals], [status for _, status in refused])
        for rec in refusals:
            self.assertEqual(rec["protocol"], "HTTP/1.1")
            self.assertGreater(rec["bytes"], 0)  # the reason, as text
        # The body was refused after a head that parsed: its method and target are known.
        self.assertEqual((refusals[3]["method"], refusals[3]["target"]), ("POST", "/echo"))
        # The stalled head waited out its timeout, counted from its first byte.
        self.assertGreaterEqual(refusals[4]["duration_ms"], 500)
        self.stop()


class WebSocketSessionTest(LogTestCase):
    """A WebSocket session is one request: its 101 (or, over HTTP/2, its 200) is
    counted and logged when the session ends, with its duration and what went
    each way, as any other response is when it ends."""

    MESSAGES = [(OP_TEXT, b"hello"), (OP_BINARY, bytes(range(200))), (OP_TEXT, b"x" * 300)]

    def echo_session(self, send_frame, read_frame):
        """Sends MESSAGES and reads each echo; the client's and the server's frame bytes."""
        sent = received = 0
        for opcode, payload in self.MESSAGES:
            data = frame(opcode, payload)
            send_frame(data)
            sent += len(data)
            got_opcode, got = read_frame()
            self.assertEqual((got_opcode, got), (opcode, payload))
            received += len(frame(opcode, payload, mask=False))
        return sent, received

    def test_a_session_over_http1_is_one_101_logged_when_it_ends(self):
        self.start("json", "--metrics")
        before = metrics(self.server.port)
        ws = WsConn(self.server.port, extra="User-Agent: ws tester/2\r\n")
        self.assertIn(" 101 ", ws.status_line)
        # Framed as any response: the server's own fields are there.
        self.assertEqual(ws.headers.get("server"), "xkit")
        self.assertRegex(ws.headers.get("date", ""), r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} ")
        time.sleep(0.05)  # a duration to see

        def read():
            _, _, opcode, payload = ws.read_frame()
            return opcode, payload

        sent, received = self.echo_session(lambda data: ws.send(data), read)
        lines = wait_for_lines(self.log, 2, timeout=0.3)  # the /metrics request's, and no other
        self.assertEqual([line for line in lines if '"/ws"' in line], [], "logged before the session ended")
        close = frame(OP_CLOSE, close_payload(1000))
        ws.send(close)
        self.assertEqual(ws.read_close(), 1000)
        self.assertTrue(ws.at_eof())
        ws.close()
        after = metrics(self.server.port)
        self.assertEqual(requests_total(after, "http/1.1", "1xx") - requests_total(before, "http/1.1", "1xx"), 1)
        rec = next(json.loads(line) for line in wait_for_lines(self.log, 3) if '"/ws"' in line)
        self.assertEqual(
            (rec["method"], rec["target"], rec["protocol"], rec["status"]), ("GET", "/ws", "HTTP/1.1", 101)
        )
        self.assertEqual(rec["user_agent"], "ws tester/2")
        self.assertGreaterEqual(rec["duration_ms"], 50)
        server_close = len(frame(OP_CLOSE, close_payload(1000), mask=False))
        self.assertEqual(
            rec["websocket"],
            {
                "messages_in": len(self.MESSAGES),
                "messages_out": len(self.MESSAGES),
                "bytes_in": sent + len(close),
                "bytes_out": received + server_close,
            },
        )
        self.assertEqual(rec["bytes"], received + server_close)
        self.stop()

    def test_a_session_over_http2_is_its_200_logged_when_it_ends(self):
        self.start("json", "--metrics")
        with H2Conn(self.server.port) as conn:
            self.assertEqual(conn.peer_settings.get(ENABLE_CONNECT_PROTOCOL), 1)
            ws = WsStream(conn, "/ws")
            self.assertEqual(ws.response.status, 200)

            def read():
                (_, opcode, payload) = ws.read()[0]
                return opcode, payload

            sent, received = self.echo_session(lambda data: conn.send_data(ws.id, data, end_stream=False), read)
            close = frame(OP_CLOSE, close_payload(1000))
            conn.send_data(ws.id, close, end_stream=False)
            self.assertEqual(ws.read()[0][1], OP_CLOSE)
            conn.read_until(lambda: ws.stream.closed, "the end of the tunnel's stream")
        rec = next(json.loads(line) for line in wait_for_lines(self.log, 2) if '"/ws"' in line)
        self.assertEqual(
            (rec["method"], rec["target"], rec["protocol"], rec["status"]), ("CONNECT", "/ws", "HTTP/2", 200)
        )
        server_close = len(frame(OP_CLOSE, close_payload(1000), mask=False))
        self.assertEqual(
            rec["websocket"],
            {
                "messages_in": len(self.MESSAGES),
                "messages_out": len(self.MESSAGES),
                "bytes_in": sent + len(close),
                "bytes_out": received + server_close,
            },
        )
        self.stop()

    def test_a_refused_session_is_logged_at_once_with_its_status(self):
        self.start("json", "--test-routes")
        ws = WsConn(self.server.port, path="/ws-test?refuse=403")
        self.assertIn(" 403 ", ws.status_line)
        self.assertEqual(ws.headers.get("server"), "xkit")
        ws.close()
        rec = json.loads(wait_for_lines(self.log, 1)[0])
        self.assertEqual((rec["target"], rec["status"]), ("/ws-test?refuse=403", 403))
        self.assertNotIn("websocket", rec)
        self.stop()


class RotationAndStopTest(LogTestCase):
    def test_sigusr1_reopens_the_path_and_loses_nothing(self):
        self.start("json", workers=2)
        for i in range(6):
            with Conn(self.server.port) as conn:
                get(conn, f"/ping?before={i}")
        rotated = self.log + ".1"
        os.rename(self.log, rotated)
        self.server.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not os.path.exists(self.log) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(self.log), "SIGUSR1 did not reopen the log's path")
        time.sleep(0.3)  # every worker's reopen, posted to its loop, has run
        for i in range(6):
            with Conn(self.server.port) as conn:
                get(conn, f"/ping?after={i}")
        new = wait_for_lines(self.log, 6)
        self.stop()
        old_targets = sorted(json.loads(line)["target"] for line in read_lines(rotated))
        new_targets = sorted(json.loads(line)["target"] for line in read_lines(self.log))
        self.assertEqual(old_targets, [f"/ping?before={i}" for i in range(6)])
        self.assertEqual(new_targets, [f"/ping?after={i}" for i in range(6)])
        self.assertEqual(len(new), 6)

    def test_lines_held_back_are_written_at_a_graceful_stop(self):
        self.start("common", "--log-flush-ms", "600000")
        for i in range(20):
            with Conn(self.server.port) as conn:
                get(conn, f"/ping?n={i}")
        time.sleep(0.3)
        self.assertEqual(read_lines(self.log), [], "lines were written before the buffer filled")
        self.stop()
        lines = read_lines(self.log)
        self.assertEqual(
            sorted(COMMON_RE.match(line).group(3) for line in lines),
            sorted(f"GET /ping?n={i} HTTP/1.1" for i in range(20)),
        )

    def test_an_unopenable_path_stops_the_server_at_start(self):
        server_path = os.environ["XK_BENCH_SERVER"]
        done = subprocess.run(
            [server_path, "0", "--access-log", os.path.join(self.dir, "no/such/dir/log")],
            capture_output=True,
            timeout=30,
        )
        self.assertEqual(done.returncode, 1)
        self.assertIn(b"access log: cannot open", done.stderr)


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.server = start_server(self, ["--metrics"])

    def raw_exchange(self, request):
        """Sends request (Connection: close) and returns the raw response bytes."""
        with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return data

    def test_requests_by_protocol_and_status_class(self):
        before = metrics(self.server.port)
        with Conn(self.server.port) as conn:
            for _ in range(3):
                self.assertEqual(get(conn, "/ping").status, 200)
            for _ in range(2):
                self.assertEqual(get(conn, "/nowhere").status, 404)
            conn.request("DELETE", "/ping")
            self.assertEqual(conn.read_response().status, 405)
        with Conn(self.server.port) as conn:
            self.assertEqual(get(conn, "/ping", version="HTTP/1.0").status, 200)
        with H2Conn(self.server.port) as h2:
            for target in ("/ping", "/echo?size=10", "/nope"):
                h2.fetch("GET", target)
        after = metrics(self.server.port)

        def delta(protocol, status):
            return requests_total(after, protocol, status) - requests_total(before, protocol, status)

        # The first /metrics response itself ended after its snapshot: one more 2xx.
        self.assertEqual(delta("http/1.1", "2xx"), 3 + 1)
        self.assertEqual(delta("http/1.1", "4xx"), 3)
        self.assertEqual(delta("http/1.0", "2xx"), 1)
        self.assertEqual((delta("http/2", "2xx"), delta("http/2", "4xx")), (2, 1))
        for protocol in ("http/1.0", "http/1.1", "http/2"):
            for status in ("1xx", "3xx", "5xx"):
                self.assertEqual(delta(protocol, status), 0)
        streams = after[("xkit_http2_streams_total", ())] - before[("xkit_http2_streams_total", ())]
        self.assertEqual(streams, 3)

    def test_bytes_in_and_out_count_every_byte(self):
        first = http_request("GET", "/metrics", headers={"Connection": "close"})
        before_raw = self.raw_exchange(first)
        requests = [
            http_request("GET", "/echo?size=1000", headers={"Connection": "close"}),
            http_request("POST", "/echo", body=b"x" * 5000, headers={"Connection": "close"}),
            http_request("GET", "/nowhere", headers={"Connection": "close"}),
        ]
        answers = [self.raw_exchange(r) for r in requests]
        second = http_request("GET", "/metrics", headers={"Connection": "close", "X-Pad": "abc"})
        after_raw = self.raw_exchange(second)

        def parse(raw):
            return {
                tuple(line.split(" ")[:1]): int(line.split(" ")[-1])
                for line in raw.split(b"\r\n\r\n", 1)[1].decode().splitlines()
                if line.startswith("xkit_") and "{" not in line
            }

        before, after = parse(before_raw), parse(after_raw)
        received = after[("xkit_received_bytes_total",)] - before[("xkit_received_bytes_total",)]
        sent = after[("xkit_sent_bytes_total",)] - before[("xkit_sent_bytes_total",)]
        # Counted as they cross the socket: the first /metrics answer went out after its
        # snapshot, the second request came in before.
        self.assertEqual(received, sum(map(len, requests)) + len(second))
        self.assertEqual(sent, len(before_raw) + sum(map(len, answers)))
        self.assertEqual(len(answers[0].split(b"\r\n\r\n", 1)[1]), 1000)
        accepted = after[("xkit_connections_accepted_total",)] - before[("xkit_connections_accepted_total",)]
        self.assertEqual(accepted, 4)

    def open_connections_reach(self, expected):
        """The open-connection gauge once it reads expected, or its last reading after 5 s.
        Each reading is a new connection; the one before it may not be seen closed yet
        (a loaded server can take the next request first), so one reading proves nothing."""
        deadline = time.monotonic() + 5
        while True:
            seen = metrics(self.server.port)[("xkit_connections_open", ())]
            if seen == expected or time.monotonic() > deadline:
                return seen
            time.sleep(0.05)

    def test_open_connections_go_up_and_down(self):
        base = metrics(self.server.port)[("xkit_connections_open", ())]
        conns = [Conn(self.server.port) for _ in range(4)]
        for conn in conns:
            self.assertEqual(get(conn, "/ping").status, 200)  # accepted and served
        self.assertEqual(self.open_connections_reach(base + 4), base + 4)
        for conn in conns:
            conn.close()
        self.assertEqual(self.open_connections_reach(base), base)
        self.server.stop_and_check()


class TlsLogAndMetricsTest(unittest.TestCase):
    def test_tls_lines_carry_the_version_and_handshakes_are_counted(self):
        tmp = tempfile.mkdtemp(prefix="xk-observe-tls-")
        self.addCleanup(shutil.rmtree, tmp, True)
        log = os.path.join(tmp, "access.log")
        server = start_https(
            self, CERTS.rsa, "--access-log", log, "--log-format", "json", "--metrics", "--workers", "1"
        )
        before = _metrics_over_tls(server.port)
        with TlsConn(server.port, client_context()) as c11:
            self.assertEqual(get(c11, "/echo?size=9", {"User-Agent": "tls tester"}).status, 200)
            version11 = c11.sock.version()
        h2 = h2_over_tls(server.port)
        try:
            self.assertEqual(h2.fetch("GET", "/ping", headers=[("user-agent", "h2 tls")]).status, 200)
            version2 = h2.sock.version()
        finally:
            h2.close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record that is no ClientHello
            raw.recv(4096)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            raw.sendall(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")  # plain HTTP on the TLS port
            answer = b""
            while chunk := raw.recv(4096):
                answer += chunk
        self.assertTrue(answer.startswith(b"HTTP/1.1 400 "), answer)
        self.assertIn(b"\r\nServer: xkit\r\n", answer)
        self.assertTrue(answer.endswith(b"\r\n\r\nThis port expects HTTPS, not HTTP.\n"), answer)
        after = _metrics_over_tls(server.port)

        def handshakes(m, result):
            return m[("xkit_tls_handshakes_total", (("result", result),))]

        # The two served connections and the second /metrics fetch's own.
        self.assertEqual(handshakes(after, "ok") - handshakes(before, "ok"), 3)
        self.assertEqual(handshakes(after, "failed") - handshakes(before, "failed"), 1)
        server.stop_and_check()
        recs = [json.loads(line) for line in read_lines(log)]
        ours = [r for r in recs if r["target"] != "/metrics"]
        self.assertEqual(
            [
                (r["method"], r["target"], r["protocol"], r["status"], r["bytes"], r["user_agent"], r["tls"])
                for r in ours
            ],
            [
                ("GET", "/echo?size=9", "HTTP/1.1", 200, 9, "tls tester", version11),
                ("GET", "/ping", "HTTP/2", 200, 4, "h2 tls", version2),
                # Refused as any request: counted, and logged without a TLS version.
                ("GET", "/plain", "HTTP/1.1", 400, len(b"This port expects HTTPS, not HTTP.\n"), None, None),
            ],
        )
        self.assertEqual(requests_total(after, "http/1.1", "4xx") - requests_total(before, "http/1.1", "4xx"), 1)
        self.assertTrue(all(r["remote_addr"] == "127.0.0.1" for r in recs))


def _metrics_over_tls(port):
    with TlsConn(port, client_context()) as conn:
        resp = get(conn, "/metrics")
    samples = {}
    for line in resp.body.decode().splitlines():
        m = SAMPLE_RE.match(line)
        if m:
            samples[(m.group(1), tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))))] = int(m.group(3))
    return samples


if __name__ == "__main__":
    unittest.main()
