"""More of HTTP/3 as clients see it, beside test_http3.py.

- WebSocket over HTTP/3 (RFC 9220): the server's SETTINGS enable the extended
  CONNECT, a CONNECT with :protocol websocket opens a WebSocket on its request
  stream and the session's frames ride in the stream's DATA; driven with
  aioquic and frames built by hand: echo of text and binary, the close
  handshake both ways, broken frames closed with their RFC 6455 codes, the
  handshake's refusals, other requests served meanwhile, and a graceful stop
  that closes each WebSocket with 1001. A refusal sent after the server
  stopped reading its request (413) arrives whole.
- Loss: 1 MiB up and 1 MiB down (POST /echo, ngtcp2's gtlsclient) arrive whole
  through a relay that loses 5% of the datagrams each way, delays them 50 ms
  and reorders a quarter.
- 10,000 idle QUIC connections held by bench/h3load: the server's memory per
  connection goes to the log, the server answers meanwhile.
- SIGTERM under h3 load: each connection gets a GOAWAY, every request on a
  stream below its id (what the server had taken) is answered whole, later ones
  are refused the clean ways, the server then closes with H3_NO_ERROR, and a
  new connection is refused.
- A stop with two workers, one drained while the other holds a request: new
  connections from many source ports, whichever worker's socket the kernel
  hashes them to, are all refused at once with CONNECTION_REFUSED, and the held
  request is still answered.
- A stop with three workers past its deadline, one of them waiting on blocking
  work: the held connection is closed at the deadline, new connections are
  refused with CONNECTION_REFUSED before the deadline and after it (every
  worker's UDP socket still read), and the server exits once the work is back.
"""

import asyncio
import heapq
import os
import random
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from aioquic.asyncio.client import connect
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.events import ConnectionTerminated, StreamDataReceived, StreamReset

from support.h3client import TIMEOUT, H3Protocol, client_configuration, h3_connect, run
from support.tls_fixtures import HttpsTestCase, current_certs, shared_certs, start_https
from support.wsclient import OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, close_payload, frame, parse_frames

setUpModule, tearDownModule = shared_certs(__name__)

ENABLE_CONNECT_PROTOCOL = 0x08  # RFC 9220 §3, the SETTINGS parameter RFC 8441 defined
H3_MESSAGE_ERROR = 0x10E
H3_NO_ERROR = 0x100
H3_REQUEST_REJECTED = 0x10B
CONNECTION_REFUSED = 0x2  # RFC 9000 §20.1, a transport error


class Tunnel:
    """One extended CONNECT's request stream: the response head, then the
    server's DATA as it comes (the WebSocket's frames)."""

    def __init__(self, protocol, stream_id):
        self.protocol = protocol
        self.stream_id = stream_id
        self.status = 0
        self.headers = {}
        self.data = b""
        self.ended = False
        self.reset_code = None
        self.read_at = 0  # frames of data already returned by read()
        self._changed = asyncio.Event()

    def take(self, event):
        if isinstance(event, HeadersReceived):
            fields = {k.decode(): v.decode() for k, v in event.headers}
            self.status = self.status or int(fields.pop(":status"))
            self.headers = self.headers or fields
        elif isinstance(event, DataReceived):
            self.data += event.data
        if getattr(event, "stream_ended", False):
            self.ended = True
        self._changed.set()

    def reset(self, code):
        self.reset_code = code
        self._changed.set()

    def changed(self):
        self._changed.set()

    async def until(self, done, what, timeout=TIMEOUT, or_reset=False):
        """Waits until done() holds (or the stream is reset, with or_reset); fails naming what
        when the stream or the connection ends first."""
        deadline = asyncio.get_event_loop().time() + timeout
        while not done():
            if or_reset and self.reset_code is not None:
                return
            if self.reset_code is not None or self.protocol.terminated.done():
                raise AssertionError(f"waiting for {what}: stream reset {self.reset_code}, data {self.data[-64:]!r}")
            left = deadline - asyncio.get_event_loop().time()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout}s; data {self.data[-64:]!r}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                pass

    def send_raw(self, data, end=False):
        self.protocol.h3.send_data(self.stream_id, data, end_stream=end)
        self.protocol.transmit()

    def send(self, opcode, payload=b"", end=False, **kwargs):
        """One masked client frame (wsclient.frame's keyword arguments)."""
        self.send_raw(frame(opcode, payload, **kwargs), end)

    async def read(self, count=1):
        """The next count whole frames of the server's: [(fin, opcode, payload)]."""
        await self.until(lambda: len(parse_frames(self.data)[0]) >= self.read_at + count, f"{count} frame(s)")
        frames = parse_frames(self.data)[0][self.read_at : self.read_at + count]
        self.read_at += count
        return frames

    async def end(self):
        await self.until(lambda: self.ended, "the end of the stream")


class WsH3Protocol(H3Protocol):
    """support.h3client's protocol, with extended CONNECTs: events of a tunnel's stream go to its Tunnel."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tunnels = {}
        handle = self.h3.handle_event

        def take_tunnel_events(event):
            rest = []
            for h3_event in handle(event):
                tunnel = self.tunnels.get(getattr(h3_event, "stream_id", None))
                if tunnel:
                    tunnel.take(h3_event)
                else:
                    rest.append(h3_event)
            return rest

        self.h3.handle_event = take_tunnel_events

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.tunnels:
            self.tunnels[event.stream_id].reset(event.error_code)
        if isinstance(event, ConnectionTerminated):
            for tunnel in self.tunnels.values():
                tunnel.changed()
        super().quic_event_received(event)

    async def websocket(self, path="/ws", protocol="websocket", version="13", extra=(), expect_status=200):
        """An extended CONNECT; returns its Tunnel once the response head came."""
        stream_id = self._quic.get_next_available_stream_id()
        tunnel = self.tunnels[stream_id] = Tunnel(self, stream_id)
        fields = [(b":method", b"CONNECT")]
        if protocol is not None:
            fields.append((b":protocol", protocol.encode()))
        fields += [(b":scheme", b"https"), (b":path", path.encode()), (b":authority", b"localhost")]
        if version is not None:
            fields.append((b"sec-websocket-version", version.encode()))
        fields += [(k.encode(), v.encode()) for k, v in extra]
        self.h3.send_headers(stream_id, fields, end_stream=False)
        self.transmit()
        await tunnel.until(lambda: tunnel.status or tunnel.ended, "the response head", or_reset=True)
        return tunnel


def ws_connect(port):
    configuration = client_configuration(current_certs().ca)
    return connect("127.0.0.1", port, configuration=configuration, create_protocol=WsH3Protocol)


class Http3WebSocketTest(HttpsTestCase):
    """One server's /ws (echo) and /ws-test (bench_websocket.c's test route) over HTTP/3."""

    server_options = ("--workers", "1")

    def ws_run(self, body):
        """Runs body(h3) on a fresh connection."""

        async def go():
            async with ws_connect(self.server.port) as h3:
                return await body(h3)

        return run(go())

    def test_the_server_announces_extended_connect(self):
        async def body(h3):
            await h3.request("GET", "/ping")
            return h3.h3.received_settings

        self.assertEqual(self.ws_run(body).get(ENABLE_CONNECT_PROTOCOL), 1)

    def test_text_and_binary_are_echoed(self):
        blob = bytes(range(256)) * 1200  # 300 KiB: past the session's max_pending, so backpressure runs

        async def body(h3):
            ws = await h3.websocket()
            ws.send(OP_TEXT, "héllo".encode())
            text = await ws.read()
            ws.send(OP_BINARY, b"\x00\xff" * 10)
            small = await ws.read()
            ws.send(OP_BINARY, blob)
            big = await ws.read()
            ws.send(OP_PING, b"p")
            pong = await ws.read()
            return ws, text, small, big, pong

        ws, text, small, big, pong = self.ws_run(body)
        self.assertEqual(ws.status, 200)
        self.assertNotIn("sec-websocket-accept", ws.headers)  # RFC 8441 §5, kept by RFC 9220
        self.assertEqual(text, [(True, OP_TEXT, "héllo".encode())])
        self.assertEqual(small, [(True, OP_BINARY, b"\x00\xff" * 10)])
        self.assertEqual(big, [(True, OP_BINARY, blob)])
        self.assertEqual(pong, [(True, OP_PONG, b"p")])

    def test_a_fragmented_message_is_echoed_whole(self):
        async def body(h3):
            ws = await h3.websocket()
            ws.send(OP_TEXT, b"one ", fin=False)
            ws.send(0x0, b"two ", fin=False)
            ws.send(0x0, b"three")
            return await ws.read()

        self.assertEqual(self.ws_run(body), [(True, OP_TEXT, b"one two three")])

    def test_client_close_is_answered_with_its_code_then_the_stream_ends(self):
        async def body(h3):
            ws = await h3.websocket()
            ws.send(OP_CLOSE, close_payload(1000, b"done"), end=True)
            reply = await ws.read()
            await ws.end()
            return reply

        ((fin, opcode, payload),) = self.ws_run(body)
        self.assertEqual((opcode, payload[:2]), (OP_CLOSE, struct.pack("!H", 1000)))

    def test_server_initiated_close_carries_its_code_and_reason(self):
        async def body(h3):
            ws = await h3.websocket("/ws-test")
            ws.send(OP_TEXT, b"close")
            first = await ws.read()
            ws.send(OP_CLOSE, close_payload(4000), end=True)
            await ws.end()
            return first

        self.assertEqual(self.ws_run(body), [(True, OP_CLOSE, close_payload(4000, b"bye"))])

    def broken_close_code(self, data):
        """The close code the server fails the WebSocket with on data (bytes after a good echo):
        its close frame, then the end of its stream at once (RFC 6455 §7.1.7), no reply awaited."""

        async def body(h3):
            ws = await h3.websocket()
            ws.send(OP_TEXT, b"fine")
            self.assertEqual(await ws.read(), [(True, OP_TEXT, b"fine")])
            ws.send_raw(data)
            ((fin, opcode, payload),) = await ws.read()
            self.assertEqual(opcode, OP_CLOSE)
            await ws.end()
            # The connection serves on.
            return struct.unpack("!H", payload[:2])[0], (await h3.request("GET", "/ping")).body

        code, pong = self.ws_run(body)
        self.assertEqual(pong, b"pong")
        return code

    def test_an_unmasked_frame_closes_1002(self):
        self.assertEqual(self.broken_close_code(frame(OP_TEXT, b"bare", mask=False)), 1002)

    def test_reserved_bits_close_1002(self):
        self.assertEqual(self.broken_close_code(frame(OP_TEXT, b"x", rsv=0b010)), 1002)

    def test_text_that_is_not_utf8_closes_1007(self):
        self.assertEqual(self.broken_close_code(frame(OP_TEXT, b"\xc3\x28")), 1007)

    def test_a_message_over_the_limit_closes_1009(self):
        # /ws's max_message_size is the default 1 MiB: the length alone says it is too big.
        self.assertEqual(self.broken_close_code(frame(OP_BINARY, b"", length=2 << 20)[:14]), 1009)

    def test_handshake_refusals(self):
        async def body(h3):
            version = await h3.websocket(version="8")
            unknown = await h3.websocket(protocol="chat-v9")
            missing = await h3.websocket(path="/no-such-route")
            get = await h3.request("GET", "/ws", headers=[("sec-websocket-version", "13")])
            # A CONNECT without :protocol but with a path is malformed (RFC 9114 §4.4).
            plain = await h3.websocket(protocol=None)
            return version, unknown, missing, get, plain

        version, unknown, missing, get, plain = self.ws_run(body)
        self.assertEqual((version.status, version.headers.get("sec-websocket-version")), (400, "13"))
        self.assertEqual(unknown.status, 501)
        self.assertEqual(missing.status, 404)
        self.assertEqual(get.status, 426)
        self.assertEqual(plain.reset_code, H3_MESSAGE_ERROR)

    def test_websockets_and_requests_share_a_connection_and_others_are_served(self):
        async def other_connection():
            async with ws_connect(self.server.port) as other:
                return (await other.request("POST", "/echo", body=b"meanwhile")).body

        async def body(h3):
            one = await h3.websocket()
            two = await h3.websocket("/ws-test", extra=[("sec-websocket-protocol", "chat")])
            one.send(OP_TEXT, b"first", fin=False)  # a message left open while others are served
            two.send(OP_TEXT, b"protocol")
            got = [two.headers.get("sec-websocket-protocol"), await two.read()]
            got.append((await h3.request("GET", "/ping")).body)
            got.append(await other_connection())
            one.send(0x0, b" and last")
            got.append(await one.read())
            for ws in (one, two):
                ws.send(OP_CLOSE, close_payload(1000), end=True)
                await ws.read()
                await ws.end()
            return got

        self.assertEqual(
            self.ws_run(body),
            ["chat", [(True, OP_TEXT, b"chat")], b"pong", b"meanwhile", [(True, OP_TEXT, b"first and last")]],
        )


class Http3WebSocketStopTest(unittest.TestCase):
    def test_a_graceful_stop_closes_each_websocket_with_1001(self):
        server = start_https(self, current_certs().rsa, "--workers", "1")

        async def go():
            async with ws_connect(server.port) as h3:
                sockets = [await h3.websocket(), await h3.websocket()]
                for ws in sockets:
                    ws.send(OP_TEXT, b"before")
                    self.assertEqual(await ws.read(), [(True, OP_TEXT, b"before")])
                server.send_signal(signal.SIGTERM)
                codes = []
                for ws in sockets:
                    ((fin, opcode, payload),) = await ws.read()
                    codes.append((opcode, payload[:2]))
                    ws.send(OP_CLOSE, close_payload(1001), end=True)
                for ws in sockets:
                    await ws.end()
                return codes, await h3.closed(timeout=10)

        codes, closed = run(go())
        self.assertEqual(codes, [(OP_CLOSE, struct.pack("!H", 1001))] * 2)
        self.assertEqual(closed.error_code, H3_NO_ERROR)
        server.assert_clean_exit(server.wait_exit(15))


class Http3RefusalTest(unittest.TestCase):
    def test_a_body_over_the_limit_gets_413_before_it_is_read(self):
        # The refusal goes out after the server stopped reading the request (STOP_SENDING): it
        # must arrive, not a reset of the response's side with it.
        server = start_https(self, current_certs().rsa, "--workers", "1", "--max-body", 100_000)

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                stream_id = h3._quic.get_next_available_stream_id()
                answer = h3._expect(stream_id)
                fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"localhost")]
                fields += [(b":path", b"/echo"), (b"content-length", b"2000000")]
                h3.h3.send_headers(stream_id, fields, end_stream=False)
                h3.h3.send_data(stream_id, b"x" * 10_000, end_stream=False)
                h3.transmit()
                refused = await asyncio.wait_for(answer, TIMEOUT)
                return refused, await h3.request("GET", "/ping")

        refused, after = run(go())
        self.assertEqual((refused.status, refused.reset_code), (413, None))
        self.assertEqual(after.body, b"pong")


class ImpairedPath:
    """A UDP relay between one client and the server that loses, delays and
    reorders datagrams both ways, as `tc qdisc ... netem loss 5% delay 50ms
    reorder 25%` would on each side of a link: each datagram is dropped with
    probability loss; of the rest, a share reorder goes at once and the others
    after delay, so the ones sent at once overtake those held. (netem itself
    needs the kernel's sch_netem, which containers and VM kernels such as this
    machine's often lack; the relay needs nothing and behaves the same on
    every kernel.) The random source is seeded, so a failing run can be
    replayed with its seed."""

    def __init__(self, server_port, loss=0.05, delay=0.050, reorder=0.25, seed=None):
        self.seed = seed if seed is not None else random.randrange(1 << 32)
        self.random = random.Random(self.seed)
        self.loss, self.delay, self.reorder = loss, delay, reorder
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.connect(("127.0.0.1", server_port))
        self.port = self.front.getsockname()[1]
        self.client = None
        self.held = []  # (due, order, socket, datagram, address)
        self.counts = {"relayed": 0, "dropped": 0, "reordered": 0}
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _take(self, datagram, out, address):
        if self.random.random() < self.loss:
            self.counts["dropped"] += 1
            return
        self.counts["relayed"] += 1
        now = time.monotonic()
        due = now
        if self.random.random() < self.reorder:
            self.counts["reordered"] += 1
        else:
            due = now + self.delay
        heapq.heappush(self.held, (due, self.counts["relayed"], out, datagram, address))

    def _run(self):
        while not self.stopping:
            now = time.monotonic()
            while self.held and self.held[0][0] <= now:
                _, _, out, datagram, address = heapq.heappop(self.held)
                try:
                    if address:
                        out.sendto(datagram, address)
                    else:
                        out.send(datagram)
                except OSError:  # the server gone, or the client
                    pass
            wait = min(0.05, self.held[0][0] - now) if self.held else 0.05
            ready, _, _ = select.select([self.front, self.back], [], [], max(wait, 0))
            if self.front in ready:
                datagram, self.client = self.front.recvfrom(65535)
                self._take(datagram, self.back, None)
            if self.back in ready and self.client:
                try:
                    datagram = self.back.recv(65535)
                except OSError:  # the server's port unreachable, once it stopped
                    continue
                self._take(datagram, self.front, self.client)

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.front.close()
        self.back.close()


class Http3LossTest(unittest.TestCase):
    def test_a_mebibyte_up_and_down_arrives_whole_through_loss_delay_and_reordering(self):
        server = start_https(self, current_certs().rsa, "--workers", "1")
        path = ImpairedPath(server.port)
        self.addCleanup(path.close)
        body = os.urandom(1 << 20)
        with tempfile.TemporaryDirectory() as folder:
            upload = os.path.join(folder, "upload")
            with open(upload, "wb") as out:
                out.write(body)
            download = os.path.join(folder, "download")
            os.mkdir(download)
            # ngtcp2's own client (C, so the run is bounded by the path, not by the client): the
            # file goes up as the POST's body and /echo sends it back.
            argv = ["gtlsclient", "-q", "--exit-on-all-streams-close", "--timeout=15s", "-m", "POST", "-d", upload]
            argv += ["--download", download, "127.0.0.1", str(path.port)]
            argv += [f"https://localhost:{server.port}/echo"]
            started = time.monotonic()
            try:
                done = subprocess.run(argv, capture_output=True, timeout=60)
            except subprocess.TimeoutExpired:
                self.fail(f"stalled: no answer in 60 s through the impaired path (seed {path.seed}, {path.counts})")
            took = time.monotonic() - started
            print(f"1 MiB up and down in {took:.1f} s through the impaired path: {path.counts}, seed {path.seed}")
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            with open(os.path.join(download, "echo"), "rb") as got:
                echoed = got.read()
        self.assertEqual(len(echoed), len(body))
        self.assertTrue(echoed == body, "the echo differs from what was sent")
        self.assertGreater(path.counts["dropped"], 0)
        self.assertGreater(path.counts["reordered"], 0)


def h3load_path():
    path = os.path.join(os.environ.get("XK_BUILD_DIR", "build"), "bench", "h3load")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"{path} is missing: build with -DXK_BUILD_BENCHMARKS=ON (bench/h3load)")
    return path


IDLE_CONNECTIONS = 10_000
# Both sides' idle timeout while they are held: the first connection idles until the last has
# opened, about 15 s here alone but past the default 60 s on a loaded 2-core machine (where 17
# and 134 of the first ones timed out and the count fell short), and then for the hold.
IDLE_HOLD_TIMEOUT_S = 600


class Http3IdleConnectionsTest(unittest.TestCase):
    def test_ten_thousand_idle_connections_are_held_and_the_server_answers_meanwhile(self):
        certs = current_certs()
        limits = ("--max-connections", 2 * IDLE_CONNECTIONS, "--idle-timeout", IDLE_HOLD_TIMEOUT_S * 1000)
        server = start_https(self, certs.ec, "--workers", "1", *limits)

        async def ping():
            async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca) as h3:
                return (await h3.request("GET", "/ping")).body

        self.assertEqual(run(ping()), b"pong")
        before = server.rss_kib()
        # bench/h3load (C on ngtcp2): one request on each connection, then all of them stay open
        # and idle for --hold seconds, which it tells with "all connections idle: N".
        argv = [h3load_path(), "-t1", f"-c{IDLE_CONNECTIONS}", "-m1", f"-n{IDLE_CONNECTIONS}", "--hold=8"]
        argv.append(f"--idle-timeout={IDLE_HOLD_TIMEOUT_S}")
        argv.append(f"https://127.0.0.1:{server.port}/ping")
        load = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: load.poll() is None and load.kill())
        started, lines = time.monotonic(), []
        for line in load.stdout:
            lines.append(line)
            if line.startswith("all connections idle:"):
                break
        else:
            self.fail(f"h3load ended before holding its connections: {''.join(lines)}{load.stderr.read()[-2000:]}")
        opened = time.monotonic() - started
        self.assertEqual(int(line.split(":")[1]), IDLE_CONNECTIONS)
        answered = run(ping())  # a new connection is served while 10,000 are held
        held = server.rss_kib()
        per_connection = (held - before) * 1024 / IDLE_CONNECTIONS
        print(
            f"{IDLE_CONNECTIONS} idle QUIC connections opened in {opened:.1f} s; server RSS {before} KiB -> "
            f"{held} KiB: {per_connection / 1024:.1f} KiB per connection"
            + (" (an ASan build: its shadow and quarantine count)" if os.environ.get("XK_SANITIZERS") == "ON" else "")
        )
        rest, errors = load.communicate(timeout=60)
        summary = "".join(lines) + rest
        self.assertEqual(load.returncode, 0, errors[-2000:])
        self.assertIn(f"requests: {IDLE_CONNECTIONS} total", summary)
        self.assertIn(f"{IDLE_CONNECTIONS} succeeded, 0 failed, 0 errored", summary)
        self.assertEqual(answered, b"pong")
        # Generous: the measure is printed above (about 95 KiB a connection in a Release build here,
        # 200 KiB under ASan); this only catches a connection's memory gone wild, such as a flow
        # control window's worth of buffers kept per idle connection.
        self.assertLess(per_connection, 400 * 1024)
        server.send_signal(signal.SIGTERM)
        server.assert_clean_exit(server.wait_exit(30))


H3_FRAME_GOAWAY = 0x7  # RFC 9114 §7.2.6


def varint(data, at):
    """RFC 9000 §16: (value, where the next field starts), or (None, at) when data ends first."""
    if at >= len(data) or at + (1 << (data[at] >> 6)) > len(data):
        return None, at
    length = 1 << (data[at] >> 6)
    value = data[at] & 0x3F
    for byte in data[at + 1 : at + length]:
        value = value << 8 | byte
    return value, at + length


class GoawayWatch(H3Protocol):
    """support.h3client's protocol that also reads the frames of the server's control stream,
    as aioquic drops a GOAWAY's stream id: goaways holds each GOAWAY's id, closed_after_goaway
    whether the connection's end came after one."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.goaways = []
        self.closed_after_goaway = None
        self.unidirectional = {}  # the server's stream id -> bytes not yet read; None: not its control stream

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.read_control(event.stream_id, event.data)
        if isinstance(event, ConnectionTerminated) and self.closed_after_goaway is None:
            self.closed_after_goaway = bool(self.goaways)
        super().quic_event_received(event)

    def read_control(self, stream_id, data):
        held = self.unidirectional.get(stream_id, b"")
        if held is None:
            return
        data, at = held + data, 0
        if stream_id not in self.unidirectional:  # the stream's type first: 0x00, the control stream
            kind, at = varint(data, 0)
            if kind is None:
                self.unidirectional[stream_id] = b""
                return
            if kind != 0x00:
                self.unidirectional[stream_id] = None
                return
        while True:
            kind, payload_at = varint(data, at)
            length, payload_at = varint(data, payload_at)
            if kind is None or length is None or payload_at + length > len(data):
                break
            if kind == H3_FRAME_GOAWAY:
                self.goaways.append(varint(data[payload_at : payload_at + length], 0)[0])
            at = payload_at + length
        self.unidirectional[stream_id] = data[at:]


class Http3StopUnderLoadTest(unittest.TestCase):
    """SIGTERM while clients keep requests in flight on several connections: each connection
    gets a GOAWAY, each request on a stream below its id (what the server took) is answered
    whole, the rest are refused the clean ways (REQUEST_REJECTED, or the connection closed with
    H3_NO_ERROR after the GOAWAY), and a new connection is refused."""

    DELAY_MS = 600

    def test_sigterm_under_load_loses_no_request(self):
        certs = current_certs()
        # Two workers: the late connection is refused whichever worker's socket it is hashed to,
        # one still draining or one done (Http3StopWithTwoWorkersTest tries both for sure).
        server = start_https(self, certs.ec, "--workers", "2")
        body = os.urandom(20_000)
        outcomes = []  # (started, finished, what, outcome, connection, stream id)
        connections = []
        loop_time = time.monotonic

        async def one(h3, what):
            started = loop_time()
            stream_id = h3._quic.get_next_available_stream_id()  # the one request() takes
            try:
                if what == "delay":
                    response = await h3.request("GET", f"/delay?ms={self.DELAY_MS}")
                    good = response.status == 200 and response.body == b"done"
                else:
                    response = await h3.request("POST", "/echo", body=body)
                    good = response.status == 200 and response.body == body
                if response.reset_code is not None:
                    outcome = f"reset 0x{response.reset_code:x}"
                else:
                    outcome = "answered" if good else f"wrong answer {response.status} {len(response.body)} bytes"
            except ConnectionError as closed:
                outcome = str(closed)
            outcomes.append((started, loop_time(), what, outcome, connections.index(h3), stream_id))
            return outcome == "answered"

        async def client(index):
            configuration = client_configuration(certs.ca)
            async with connect(
                "127.0.0.1", server.port, configuration=configuration, create_protocol=GoawayWatch
            ) as h3:
                connections.append(h3)

                async def stream(k):
                    what = "delay" if (index + k) % 2 else "echo"
                    if what == "delay":
                        # The 16 delay streams start spread over one delay, not all at once, so
                        # at any moment most of them have a request held by the server.
                        await asyncio.sleep(self.DELAY_MS / 1000 * (index * 4 + k // 2) / 16)
                    while await one(h3, what):
                        pass

                await asyncio.gather(*(stream(k) for k in range(8)))
                # The server closes once its last request is done: waited for, as leaving here
                # closes from this side.
                await h3.closed(timeout=20)

        async def new_connection():
            try:
                async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca) as h3:
                    return f"served: {(await h3.request('GET', '/ping')).status}"
            except ConnectionError as refused:
                return f"refused: {refused!r}"

        async def go():
            clients = [asyncio.ensure_future(client(i)) for i in range(4)]
            await asyncio.sleep(1.5)
            stop = loop_time()
            server.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.1)
            late = await asyncio.wait_for(new_connection(), 20)
            await asyncio.wait_for(asyncio.gather(*clients, return_exceptions=True), 30)
            return stop, late

        stop, late = run(go())
        self.assertEqual(len(connections), 4)
        for index, h3 in enumerate(connections):
            self.assertEqual(len(h3.goaways), 1, f"connection {index}: GOAWAY ids {h3.goaways}")
            self.assertTrue(h3.closed_after_goaway, f"connection {index} closed before its GOAWAY")
            self.assertEqual(h3.terminated.result().error_code, H3_NO_ERROR)
        goaway = [h3.goaways[0] for h3 in connections]
        taken = [o for o in outcomes if o[5] < goaway[o[4]]]
        # Held across the signal for sure: a delay the server took that was asked for less than
        # its length before the signal cannot have been answered before it.
        in_flight = [o for o in taken if o[2] == "delay" and o[0] > stop - self.DELAY_MS / 1000]
        print(
            f"{len(outcomes)} requests, {len(in_flight)} delays held at SIGTERM, GOAWAY ids {goaway}; past them: "
            f"{sorted({o[3] for o in outcomes if o[5] >= goaway[o[4]]})}; a new connection: {late}"
        )
        self.assertGreaterEqual(len(in_flight), 4)
        self.assertEqual([o for o in taken if o[3] != "answered"], [])
        refused_ways = {f"reset 0x{H3_REQUEST_REJECTED:x}", f"connection closed: 0x{H3_NO_ERROR:x}"}
        self.assertEqual([o for o in outcomes if o[5] >= goaway[o[4]] and o[3] not in refused_ways], [])
        # And the server reads what comes in while it serves: a request sent 100 ms or more before
        # the signal was taken (on loopback a datagram is read in far less).
        self.assertEqual([o for o in outcomes if o[0] < stop - 0.1 and o not in taken], [])
        self.assertTrue(late.startswith("refused"), late)
        server.assert_clean_exit(server.wait_exit(15))


class Http3StopWithTwoWorkersTest(unittest.TestCase):
    """A worker that has drained while another still holds a request goes on reading its UDP
    socket, which stays in the port's reuseport group: a new connection hashed to it is refused
    at once, as one hashed to the draining worker is, instead of waiting out its handshake."""

    HELD_MS = 6000
    NEW_CONNECTIONS = 12  # each from its own source port: all hashed to one worker 1 time in 2048

    def test_new_connections_are_refused_by_both_workers_while_one_still_drains(self):
        certs = current_certs()
        server = start_https(self, certs.ec, "--workers", "2")

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca) as holder:
                held = asyncio.ensure_future(holder.request("GET", f"/delay?ms={self.HELD_MS}"))
                await asyncio.sleep(0.5)  # the request has reached its worker
                server.send_signal(signal.SIGTERM)
                await asyncio.sleep(0.3)  # the other worker, with no connection, has drained
                newcomers = await asyncio.gather(
                    *(new_connection_fate(server.port, certs) for _ in range(self.NEW_CONNECTIONS))
                )
                still_held = not held.done()
                response = await held
                return newcomers, still_held, response

        newcomers, still_held, response = run(go())
        print(f"new connections during the stop: {newcomers}")
        self.assertTrue(still_held, "the held request ended before the new connections were tried")
        self.assertEqual((response.status, response.body), (200, b"done"))
        self.assertEqual([n for n in newcomers if n is None or n[0] != CONNECTION_REFUSED], [])
        server.assert_clean_exit(server.wait_exit(15))


async def new_connection_fate(port, certs):
    """What became of a new connection: its ConnectionTerminated's code and how long it took, or
    None when nothing came back within 3 s (the client's handshake waits far longer before it
    gives up)."""
    started = time.monotonic()
    async with connect(
        "127.0.0.1",
        port,
        configuration=client_configuration(certs.ca),
        create_protocol=H3Protocol,
        wait_connected=False,
    ) as h3:
        h3.transmit()  # the Initial: without wait_connected, connect leaves it unsent
        try:
            # aioquic tells of a close after its draining period (3 PTOs, about 0.6 s here).
            terminated = await h3.closed(timeout=3)
        except TimeoutError:
            return None
        return terminated.error_code, time.monotonic() - started


def udp_sockets_on(port):
    """How many UDP sockets on this host are bound to port (the kernel's /proc/net/udp{,6})."""
    count = 0
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with open(table) as lines:
            next(lines)  # the heading
            count += sum(int(line.split()[1].rsplit(":", 1)[1], 16) == port for line in lines)
    return count


class Http3StopPastItsDeadlineTest(unittest.TestCase):
    """With three workers, a stop whose deadline passes while one worker still waits on a
    request's blocking work: that request's connection is closed at the deadline, but no worker's
    UDP socket leaves the port's reuseport group until every worker is done (closing one would
    renumber the group the steering program indexes, sending other workers' packets to the wrong
    socket), so new connections are refused at once, not left unanswered, and the server exits
    as soon as the work is back."""

    DEADLINE_MS = 1000
    BLOCKING_MS = 4500  # past the deadline by 3.5 s: room for two rounds of new connections
    NEW_CONNECTIONS = 12  # each from its own source port: all hashed to one worker 1 time in 3^11

    def test_sockets_refuse_new_connections_past_the_deadline_and_the_server_exits_when_the_work_is_back(self):
        certs = current_certs()
        server = start_https(
            self,
            certs.ec,
            "--workers",
            "3",
            "--blocking-threads",
            "1",
            "--shutdown-timeout",
            self.DEADLINE_MS,
        )
        loop_time = time.monotonic

        async def newcomers():
            fates = await asyncio.gather(
                *(new_connection_fate(server.port, certs) for _ in range(self.NEW_CONNECTIONS))
            )
            return [fate and fate[0] for fate in fates]

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca) as holder:
                held = asyncio.ensure_future(holder.request("GET", f"/blocking?ms={self.BLOCKING_MS}"))
                await asyncio.sleep(0.5)  # the request is on the pool's thread
                serving = udp_sockets_on(server.port)
                server.send_signal(signal.SIGTERM)
                stop = loop_time()
                await asyncio.sleep(0.2)
                before = await newcomers()
                terminated = await holder.closed(timeout=10)
                closed_after = loop_time() - stop
                past_deadline = udp_sockets_on(server.port)
                after = await newcomers()
                work_still_out = loop_time() - stop < self.BLOCKING_MS / 1000 - 0.5
                try:
                    outcome = f"answered {(await held).status}"
                except ConnectionError as closed:
                    outcome = str(closed)
                sockets = (serving, past_deadline)
                return stop, before, terminated.error_code, closed_after, sockets, after, work_still_out, outcome

        stop, before, close_code, closed_after, sockets, after, work_still_out, outcome = run(go())
        returncode = server.wait_exit(15)
        exited_after = time.monotonic() - stop
        print(
            f"before the deadline: {before}; the held connection closed with 0x{close_code:x} "
            f"{closed_after:.2f} s after SIGTERM; after it: {after}; UDP sockets on the port serving and past "
            f"the deadline: {sockets}; the server exited {exited_after:.2f} s after SIGTERM"
        )
        # One per worker, all still in the group past the deadline.
        self.assertEqual(sockets, (3, 3))
        self.assertEqual([n for n in before if n != CONNECTION_REFUSED], [])
        # Closed at the deadline, with the application's no-error code, its request unanswered.
        self.assertGreaterEqual(closed_after, self.DEADLINE_MS / 1000 - 0.1)
        self.assertLess(closed_after, self.DEADLINE_MS / 1000 + 1.5)
        self.assertEqual(close_code, H3_NO_ERROR)
        self.assertTrue(outcome.startswith("connection closed"), outcome)
        self.assertTrue(work_still_out, "the blocking work was back before the second round was over")
        self.assertEqual([n for n in after if n != CONNECTION_REFUSED], [])
        # Every worker stops together once the work is back (4 s after SIGTERM), well before the
        # 15 s wait: nothing holds the stop up past it.
        self.assertLess(exited_after, self.BLOCKING_MS / 1000 + 3)
        server.assert_clean_exit(returncode)


if __name__ == "__main__":
    unittest.main()
