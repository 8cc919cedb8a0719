"""WebSocket over HTTP/2 (RFC 8441) against http_bench_server's /ws (echo) and
/ws-test, and https_bench_server's /ws: extended CONNECT built frame by frame
with support/h2client.py, masked WebSocket frames in the stream's DATA, the
handshake's refusals, several WebSockets and requests on one connection, the
close handshake, resets mid-message, flow control both ways, a graceful stop,
and Python's h2 package as an independent client."""

import signal
import socket
import struct
import unittest

import h2.config
import h2.connection
import h2.events
import h2.settings

from support.h2client import (
    CANCEL,
    INITIAL_WINDOW_SIZE,
    PROTOCOL_ERROR,
    H2Conn,
    H2ServerTestCase,
    data_frame,
    error_name,
    headers_frame,
    hpack_encode,
    rst_stream_frame,
    window_update_frame,
)
from support.harness import ServerProcess
from support.tls_fixtures import client_context, shared_certs, start_https
from support.wsclient import OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, close_payload, frame, parse_frames

CERTS = None  # set by setUpModule (shared_certs)
setUpModule, tearDownModule = shared_certs(__name__)

ENABLE_CONNECT_PROTOCOL = 0x8  # RFC 8441 §3


def connect_fields(path="/ws", protocol="websocket", version="13", extra=(), scheme="http"):
    fields = [
        (":method", "CONNECT"),
        (":protocol", protocol),
        (":scheme", scheme),
        (":path", path),
        (":authority", "localhost"),
    ]
    if version is not None:
        fields.append(("sec-websocket-version", version))
    return fields + list(extra)


class WsStream:
    """One WebSocket on an HTTP/2 stream of an H2Conn."""

    def __init__(self, conn, path="/ws", **kwargs):
        self.conn = conn
        self.id = conn.new_stream_id()
        conn.send_headers(self.id, connect_fields(path, **kwargs), end_stream=False)
        self.stream = conn.stream(self.id)
        self.response = (
            conn.read_until(lambda: self.stream.response() is not None, "the CONNECT answer") or self.stream.response()
        )

    def send(self, opcode, payload=b"", end_stream=False, **kwargs):
        self.conn.send_data(self.id, frame(opcode, payload, **kwargs), end_stream=end_stream)

    def frames(self):
        return parse_frames(self.stream.body)[0]

    def read(self, count=1):
        """The next `count` frames not yet returned by read."""
        taken = getattr(self, "_taken", 0)
        self.conn.read_until(lambda: len(self.frames()) >= taken + count, f"{count} WebSocket frame(s)")
        self._taken = taken + count
        return self.frames()[taken : taken + count]


class Http2WebSocketTest(H2ServerTestCase):
    server_args = ("--workers", "1")

    def open(self, conn=None, path="/ws", **kwargs):
        conn = conn or self.h2connect()
        ws = WsStream(conn, path, **kwargs)
        return conn, ws

    def test_the_server_announces_extended_connect(self):
        self.assertEqual(self.h2connect().peer_settings.get(ENABLE_CONNECT_PROTOCOL), 1)

    def test_connect_is_accepted_with_200_and_no_accept_key(self):
        _, ws = self.open()
        resp = ws.stream.response()
        self.assertEqual(resp.status, 200)
        self.assertIsNone(resp.header("sec-websocket-accept"))
        self.assertFalse(ws.stream.closed)

    def test_connect_in_the_read_that_begins_a_large_frame(self):
        # The server compacts its input, and grows it for a frame larger than
        # the room left, before it dispatches the requests of that read: the
        # :protocol the route checks must be the stream's copy by then (the
        # HTTP/2 fuzzer found it read from the freed block).
        conn = self.h2connect()
        sid = conn.new_stream_id()
        stream = conn.stream(sid)
        message = frame(OP_BINARY, b"x" * (16384 - 8))  # one DATA frame of 16,384 bytes
        self.assertEqual(len(message), 16384)
        whole = data_frame(sid, message)
        conn.send(headers_frame(sid, hpack_encode(connect_fields()), end_stream=False) + whole[: 9 + 100])
        conn.read_until(lambda: stream.response() is not None, "the CONNECT answer")
        self.assertEqual(stream.response().status, 200)
        conn.send(whole[9 + 100 :])
        conn.read_until(lambda: parse_frames(stream.body)[0], "the echo")
        self.assertEqual(parse_frames(stream.body)[0][0], (True, OP_BINARY, b"x" * (16384 - 8)))

    def test_masked_frames_in_data_are_echoed(self):
        _, ws = self.open()
        for opcode, payload in ((OP_TEXT, b"hello over h2"), (OP_BINARY, bytes(range(256)) * 300)):
            ws.send(opcode, payload)
            self.assertEqual(ws.read(), [(True, opcode, payload)])

    def test_a_ping_gets_a_pong(self):
        _, ws = self.open()
        ws.send(OP_PING, b"are you there")
        self.assertEqual(ws.read(), [(True, OP_PONG, b"are you there")])

    def test_subprotocol_and_deflate_are_negotiated_as_on_http1(self):
        _, ws = self.open(path="/ws-test", extra=[("sec-websocket-protocol", "superchat, chat")])
        self.assertEqual(ws.stream.response().header("sec-websocket-protocol"), "chat")
        ws.send(OP_TEXT, b"protocol")
        self.assertEqual(ws.read(), [(True, OP_TEXT, b"chat")])

    def test_another_version_is_400_naming_13(self):
        _, ws = self.open(version="8")
        resp = ws.stream.response()
        self.assertEqual(resp.status, 400)
        self.assertEqual(resp.header("sec-websocket-version"), "13")
        _, ws = self.open(version=None)
        self.assertEqual(ws.stream.response().status, 400)

    def test_connect_without_protocol_but_with_a_path_is_malformed(self):
        conn = self.h2connect()
        fields = [f for f in connect_fields() if f[0] != ":protocol"]
        conn.send(headers_frame(1, hpack_encode(fields), end_stream=False))
        conn.read_until(lambda: conn.stream(1).reset_code is not None, "RST_STREAM")
        self.assertEqual(error_name(conn.stream(1).reset_code), error_name(PROTOCOL_ERROR))

    def test_unknown_protocol_is_501_and_unknown_route_404(self):
        _, ws = self.open(protocol="chat-over-h2")
        self.assertEqual(ws.stream.response().status, 501)
        _, ws = self.open(path="/nowhere")
        self.assertEqual(ws.stream.response().status, 404)
        _, ws = self.open(path="/ping")
        self.assertIn(ws.stream.response().status, (404, 405))

    def test_on_open_refusal_is_the_streams_status(self):
        _, ws = self.open(path="/ws-test?refuse=403")
        self.assertEqual(ws.stream.response().status, 403)

    def test_a_plain_get_to_the_route_over_http2_is_still_426(self):
        resp = self.h2connect().fetch("GET", "/ws")
        self.assertEqual(resp.status, 426)
        self.assertIsNone(resp.header("upgrade"))

    def test_two_websockets_and_requests_share_one_connection(self):
        conn, first = self.open()
        _, second = self.open(conn)
        first.send(OP_TEXT, b"one")
        second.send(OP_TEXT, b"two")
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(first.read(), [(True, OP_TEXT, b"one")])
        self.assertEqual(second.read(), [(True, OP_TEXT, b"two")])
        second.send(OP_TEXT, b"again")
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(second.read(), [(True, OP_TEXT, b"again")])

    def test_close_handshake_then_end_stream(self):
        conn, ws = self.open()
        ws.send(OP_CLOSE, close_payload(1000, b"done"))
        self.assertEqual(ws.read(), [(True, OP_CLOSE, close_payload(1000, b"done"))])
        conn.read_until(lambda: ws.stream.closed, "END_STREAM")
        self.assertTrue(ws.stream.ended)
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_server_initiated_close(self):
        conn, ws = self.open(path="/ws-test")
        ws.send(OP_TEXT, b"close")
        self.assertEqual(ws.read(), [(True, OP_CLOSE, close_payload(4000, b"bye"))])
        ws.send(OP_CLOSE, close_payload(4000), end_stream=True)
        conn.read_until(lambda: ws.stream.ended, "END_STREAM")

    def test_a_broken_frame_closes_1002(self):
        _, ws = self.open()
        ws.send(OP_TEXT, b"unmasked", mask=False)
        self.assertEqual(ws.read()[0][:2], (True, OP_CLOSE))
        self.assertEqual(ws.frames()[0][2][:2], struct.pack("!H", 1002))

    def test_reset_mid_message_leaves_the_connection_serving(self):
        conn, ws = self.open()
        partial = frame(OP_BINARY, b"x" * 5000)[:3000]
        conn.send(data_frame(ws.id, partial) + rst_stream_frame(ws.id, CANCEL))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        _, other = self.open(conn)
        other.send(OP_TEXT, b"still here")
        self.assertEqual(other.read(), [(True, OP_TEXT, b"still here")])

    def test_connection_loss_mid_message_leaves_the_server_serving(self):
        conn, ws = self.open()
        conn.send(data_frame(ws.id, frame(OP_TEXT, b"y" * 4000)[:100]))
        conn.abort()
        self.assertEqual(self.h2connect().fetch("GET", "/ping").body, b"pong")

    def test_a_small_client_window_still_gets_everything_in_order(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 1000}, auto_window=False)
        ws = WsStream(conn)
        messages = [bytes([i]) * (3000 + i) for i in range(20)]
        for m in messages:
            ws.send(OP_BINARY, m)
        got = []
        while len(got) < len(messages):
            conn.read_until(lambda: ws.stream.unacked > 0 or len(ws.frames()) > len(got), "echoed DATA")  # noqa: B023 (called here, in this iteration)
            got = ws.frames()
            if ws.stream.unacked:
                conn.send(window_update_frame(ws.id, ws.stream.unacked))
                ws.stream.unacked = 0
        self.assertEqual([p for _, _, p in got], messages)

    def test_a_client_that_does_not_read_holds_its_stream_window(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 0}, auto_window=False)
        ws = WsStream(conn)
        sent, cap = 0, 2000
        payload = b"z" * 16000
        # Echoes pile up behind a zero window; past max_pending the server
        # stops reading the stream, so the stream's window (16 MiB) runs out
        # instead of being reopened.
        while min(ws.stream.send_window, conn.send_window) >= len(payload) + 14 and sent < cap:
            ws.send(OP_BINARY, payload)
            sent += 1
            if sent % 64 == 0:
                conn.pump(0.01)
        self.assertLess(sent, cap, "the server kept reading a stream whose echoes nobody took")
        conn.send(window_update_frame(ws.id, 1 << 30))  # the connection window is open already
        conn.auto_window = True
        conn.read_until(lambda: len(ws.frames()) >= sent, "every echo once the window opened")
        self.assertTrue(all(p == payload for _, _, p in ws.frames()))
        ws.send(OP_TEXT, b"after")
        self.assertEqual(ws.read(sent + 1)[-1], (True, OP_TEXT, b"after"))


class Http2WebSocketStopTest(unittest.TestCase):
    def test_a_graceful_stop_closes_each_websocket_with_1001(self):
        server = ServerProcess(["--workers", "1"]).start()
        self.addCleanup(server.close)
        conn = H2Conn(server.port, server.connect_host)
        self.addCleanup(conn.close)
        sockets = [WsStream(conn), WsStream(conn)]
        for ws in sockets:
            ws.send(OP_TEXT, b"before")
            self.assertEqual(ws.read(), [(True, OP_TEXT, b"before")])
        server.send_signal(signal.SIGTERM)
        for ws in sockets:
            ((fin, opcode, payload),) = ws.read()
            self.assertEqual((opcode, payload[:2]), (OP_CLOSE, struct.pack("!H", 1001)))
            ws.send(OP_CLOSE, close_payload(1001), end_stream=True)
        conn.read_until(lambda: all(ws.stream.ended for ws in sockets), "END_STREAM on each")
        server.assert_clean_exit(server.wait_exit(15))


def tls_h2conn(test, port):
    """An H2Conn over TLS with ALPN h2."""
    conn = H2Conn(port, "127.0.0.1", handshake=False)
    test.addCleanup(conn.close)
    conn.sock = client_context(alpn=("h2",)).wrap_socket(conn.sock, server_hostname="localhost")
    test.assertEqual(conn.sock.selected_alpn_protocol(), "h2")
    conn.handshake()
    return conn


class TlsTest(unittest.TestCase):
    def test_websocket_over_http2_over_tls(self):
        server = start_https(self, CERTS.rsa, "--workers", "1")
        conn = tls_h2conn(self, server.port)
        self.assertEqual(conn.peer_settings.get(ENABLE_CONNECT_PROTOCOL), 1)
        ws = WsStream(conn, scheme="https")
        self.assertEqual(ws.stream.response().status, 200)
        for opcode, payload in ((OP_TEXT, b"hello over TLS"), (OP_BINARY, b"\x01" * 100000)):
            ws.send(opcode, payload)
            self.assertEqual(ws.read(), [(True, opcode, payload)])
        ws.send(OP_CLOSE, close_payload(1000), end_stream=True)
        self.assertEqual(ws.read()[0][1], OP_CLOSE)
        conn.read_until(lambda: ws.stream.ended, "END_STREAM")
        server.stop_and_check()


class H2PackageClientTest(H2ServerTestCase):
    """Python's h2 package (RFC 8441 support of its own) drives the CONNECT."""

    server_args = ("--workers", "1")

    def test_h2_package_opens_and_echoes(self):
        sock = socket.create_connection((self.server.connect_host, self.server.port), timeout=10)
        self.addCleanup(sock.close)
        h2conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        h2conn.initiate_connection()
        sock.sendall(h2conn.data_to_send())
        events = []

        def pump_until(done):
            while not done():
                data = sock.recv(65536)
                self.assertTrue(data, "the server closed the connection")
                events.extend(h2conn.receive_data(data))
                sock.sendall(h2conn.data_to_send())

        pump_until(lambda: h2conn.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1)
        stream_id = h2conn.get_next_available_stream_id()
        h2conn.send_headers(
            stream_id,
            [
                (":method", "CONNECT"),
                (":protocol", "websocket"),
                (":scheme", "http"),
                (":path", "/ws"),
                (":authority", "localhost"),
                ("sec-websocket-version", "13"),
            ],
        )
        h2conn.send_data(stream_id, frame(OP_TEXT, b"from the h2 package"))
        sock.sendall(h2conn.data_to_send())
        body = bytearray()

        def received():
            for ev in events:
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id == stream_id and ev.data:
                    body.extend(ev.data)
                    h2conn.acknowledge_received_data(ev.flow_controlled_length, stream_id)
            events.clear()
            return parse_frames(body)[0]

        pump_until(lambda: received())
        self.assertEqual(parse_frames(body)[0], [(True, OP_TEXT, b"from the h2 package")])
