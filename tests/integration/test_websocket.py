"""WebSocket (RFC 6455, RFC 7692) against http_bench_server's /ws (echo) and
/ws-test, and https_bench_server's /ws: the handshake and its refusals, frames
built by hand (every opcode, masks, lengths, fragments, control frames in
between, close codes, bad UTF-8), Python's websockets package and Go's
gorilla/websocket as clients, permessage-deflate with several windows,
backpressure, 10,000 connections, and clients that vanish mid-message."""

import asyncio
import glob
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest

import websockets

import test_keepalive_pipelining as pipelining
from support.harness import (
    SOCKET_TIMEOUT,
    Conn,
    ServerProcess,
    ServerTestCase,
    raise_fd_limit,
    require_tool,
    run_client,
)
from support.tls_fixtures import client_context, shared_certs, start_https
from support.wsclient import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    WsConn,
    accept_for,
    close_payload,
    frame,
    handshake_request,
)

CERTS = None  # set by setUpModule (shared_certs)
setUpModule, tearDownModule = shared_certs(__name__)

SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
GO_DIR = os.path.join(SOURCE_DIR, "bench", "peers", "go")


def go_binary():
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise AssertionError("Go is needed for the gorilla/websocket client (scripts/install-deps.sh)")
    return go


def build_ws_load(test):
    """bench/peers/go/ws_load (gorilla/websocket), built into a temporary folder."""
    out = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, out, True)
    path = os.path.join(out, "ws_load")
    done = subprocess.run([go_binary(), "build", "-o", path, "./ws_load"], cwd=GO_DIR, capture_output=True, timeout=300)
    test.assertEqual(done.returncode, 0, done.stderr.decode())
    return path


class HandshakeTest(ServerTestCase):
    server_args = ("--workers", "1")

    def raw(self, request):
        with Conn(self.server.port) as conn:
            conn.send(request)
            return conn.read_response()

    def test_upgrade_answers_101_with_the_accept_key(self):
        ws = WsConn(self.server.port)
        self.addCleanup(ws.close)
        self.assertIn(" 101 ", ws.status_line)
        self.assertEqual(ws.headers["upgrade"].lower(), "websocket")
        self.assertEqual(ws.headers["connection"].lower(), "upgrade")
        self.assertNotIn("sec-websocket-extensions", ws.headers)  # off unless enabled

    def test_the_accept_key_matches_rfc_6455_example(self):
        request, _ = handshake_request(key="dGhlIHNhbXBsZSBub25jZQ==")
        with Conn(self.server.port) as conn:
            conn.send(request)
            resp = conn.read_response(head_only=True)
        self.assertEqual(resp.status, 101)
        self.assertEqual(resp.header("Sec-WebSocket-Accept"), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")
        self.assertEqual(accept_for("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")

    def test_plain_get_to_a_websocket_route_is_426_with_upgrade(self):
        resp = self.fetch("GET", "/ws")
        self.assertEqual(resp.status, 426)
        self.assertEqual(resp.header("Upgrade"), "websocket")

    def test_websocket_route_over_http2_is_426_without_an_upgrade_header(self):
        # Over HTTP/2 a WebSocket opens with an extended CONNECT (test_websocket_h2.py); a GET is
        # told so, in a valid HTTP/2 answer.
        result = run_client(
            ["curl", "-sS", "--http2-prior-knowledge", "-D", "-", "-o", "/dev/null", self.server.url("/ws")], timeout=30
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        head = result.stdout.decode().lower()
        self.assertTrue(head.startswith("http/2 426"), head)
        self.assertNotIn("\nupgrade:", head)

    def test_other_version_is_426_naming_13(self):
        resp = self.raw(handshake_request(version="8")[0])
        self.assertEqual(resp.status, 426)
        self.assertEqual(resp.header("Sec-WebSocket-Version"), "13")

    def test_bad_or_missing_key_is_400(self):
        for key in ("", "short", "dGhlIHNhbXBsZSBub25jZQ=", "dGhlIHNhbXBsZSBub25jZQ==x", "!!!!!!!!!!!!!!!!!!!!!!=="):
            with self.subTest(key=key):
                self.assertEqual(self.raw(handshake_request(key=key)[0]).status, 400)

    def test_on_open_refuses_with_its_status_and_http_goes_on(self):
        request, _ = handshake_request("/ws-test?refuse=403")
        with Conn(self.server.port) as conn:
            conn.send(request + b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(conn.read_response().status, 403)
            self.assertEqual(conn.read_response().status, 200)

    def test_subprotocol_offered_and_chosen(self):
        ws = WsConn(self.server.port, "/ws-test", extra="Sec-WebSocket-Protocol: superchat, chat\r\n")
        self.addCleanup(ws.close)
        self.assertEqual(ws.headers["sec-websocket-protocol"], "chat")
        ws.send_frame(OP_TEXT, b"protocol")
        self.assertEqual(ws.read_frame(), (True, 0, OP_TEXT, b"chat"))

    def test_unknown_path_is_404(self):
        self.assertEqual(self.raw(handshake_request("/nowhere")[0]).status, 404)


class FramesTest(ServerTestCase):
    server_args = ("--workers", "1")

    def ws(self, path="/ws"):
        ws = WsConn(self.server.port, path)
        self.addCleanup(ws.close)
        return ws

    def assert_fails(self, code, *frames, path="/ws"):
        ws = self.ws(path)
        for f in frames:
            ws.send(f)
        self.assertEqual(ws.read_close(), code)
        self.assertTrue(ws.at_eof(), "the connection stays open after the server failed it")

    def test_text_and_binary_echo_with_7_16_and_64_bit_lengths(self):
        ws = self.ws()
        for size in (0, 1, 125, 126, 65535, 65536, 200000):
            for opcode in (OP_TEXT, OP_BINARY):
                payload = (b"a" if opcode == OP_TEXT else b"\x00\xff") * (size // (1 if opcode == OP_TEXT else 2))
                ws.send_frame(opcode, payload)
                self.assertEqual(ws.read_frame(), (True, 0, opcode, payload), size)

    def test_64_bit_length_for_a_short_payload_is_accepted(self):
        ws = self.ws()
        f = frame(OP_TEXT, b"hi")
        key = f[2:6]
        ws.send(bytes([0x81, 0x80 | 127]) + struct.pack("!Q", 2) + key + f[6:])
        self.assertEqual(ws.read_frame()[3], b"hi")

    def test_fragments_are_reassembled_with_control_frames_between(self):
        ws = self.ws()
        ws.send_frame(OP_TEXT, b"Hel", fin=False)
        ws.send_frame(OP_PING, b"p1")
        ws.send_frame(OP_CONT, b"lo, ", fin=False)
        ws.send_frame(OP_PONG, b"unasked")
        ws.send_frame(OP_CONT, b"world")
        self.assertEqual(ws.read_frame(), (True, 0, OP_PONG, b"p1"))
        self.assertEqual(ws.read_frame(), (True, 0, OP_TEXT, b"Hello, world"))

    def test_utf8_split_across_fragments_is_accepted(self):
        ws = self.ws()
        text = "κόσμε €𐍈".encode()
        for cut in range(1, len(text)):
            ws.send_frame(OP_TEXT, text[:cut], fin=False)
            ws.send_frame(OP_CONT, text[cut:])
            self.assertEqual(ws.read_frame()[3], text)

    def test_bad_utf8_split_across_fragments_closes_1007(self):
        self.assert_fails(1007, frame(OP_TEXT, b"ok \xce", fin=False), frame(OP_CONT, b"\xff"))

    def test_bad_utf8_fails_before_the_message_ends(self):
        ws = self.ws()
        ws.send_frame(OP_TEXT, b"\xed\xa0\x80", fin=False)  # a surrogate: no continuation can save it
        self.assertEqual(ws.read_close(), 1007)

    def test_truncated_utf8_at_the_end_closes_1007(self):
        self.assert_fails(1007, frame(OP_TEXT, b"abc\xe2\x82"))

    def test_binary_need_not_be_utf8(self):
        ws = self.ws()
        ws.send_frame(OP_BINARY, b"\xff\xfe", fin=False)
        ws.send_frame(OP_CONT, b"\xc0")
        self.assertEqual(ws.read_frame()[2:], (OP_BINARY, b"\xff\xfe\xc0"))

    def test_unmasked_frames_close_1002(self):
        self.assert_fails(1002, frame(OP_TEXT, b"hello", mask=False))

    def test_reserved_bits_and_opcodes_close_1002(self):
        for bad in (
            frame(OP_TEXT, b"x", rsv=4),
            frame(OP_TEXT, b"x", rsv=2),
            frame(OP_TEXT, b"x", rsv=1),
            frame(0x3, b"x"),
            frame(0x7, b""),
            frame(0xB, b""),
            frame(0xF, b"x"),
        ):
            with self.subTest(frame=bad[:2].hex()):
                self.assert_fails(1002, bad)

    def test_control_frames_over_125_bytes_or_fragmented_close_1002(self):
        self.assert_fails(1002, frame(OP_PING, b"x" * 126))
        self.assert_fails(1002, frame(OP_PING, b"x", fin=False))
        self.assert_fails(1002, frame(OP_CLOSE, close_payload(1000), fin=False))

    def test_continuation_without_a_message_and_new_message_inside_one_close_1002(self):
        self.assert_fails(1002, frame(OP_CONT, b"x"))
        self.assert_fails(1002, frame(OP_TEXT, b"a", fin=False), frame(OP_BINARY, b"b"))

    def test_64_bit_length_with_the_top_bit_closes_1002(self):
        ws = self.ws()
        ws.send(bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 63) + b"mask")
        self.assertEqual(ws.read_close(), 1002)

    def test_oversized_frames_and_messages_close_1009(self):
        self.assert_fails(1009, frame(OP_BINARY, b"x" * 65537), path="/ws-test")
        self.assert_fails(
            1009, frame(OP_BINARY, b"x" * 40000, fin=False), frame(OP_CONT, b"y" * 40000), path="/ws-test"
        )
        ws = self.ws()  # a 2^62-byte frame is refused from its header alone
        ws.send(bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 62) + b"mask")
        self.assertEqual(ws.read_close(), 1009)

    def test_ping_is_answered_with_its_payload(self):
        ws = self.ws()
        for payload in (b"", b"ping!", b"z" * 125):
            ws.send_frame(OP_PING, payload)
            self.assertEqual(ws.read_frame(), (True, 0, OP_PONG, payload))

    def test_client_close_is_echoed_and_the_server_closes_tcp(self):
        for payload, want in (
            (close_payload(1000, b"bye"), 1000),
            (close_payload(3000), 3000),
            (close_payload(4999), 4999),
            (b"", None),
        ):
            with self.subTest(want=want):
                ws = self.ws()
                ws.send_frame(OP_CLOSE, payload)
                self.assertEqual(ws.read_close(), want)
                self.assertTrue(ws.at_eof())

    def test_bad_close_frames_close_1002_or_1007(self):
        for payload in (
            b"\x03",
            close_payload(1005),
            close_payload(1006),
            close_payload(999),
            close_payload(2000),
            close_payload(1016),
            close_payload(5000),
        ):
            with self.subTest(payload=payload.hex()):
                self.assert_fails(1002, frame(OP_CLOSE, payload))
        self.assert_fails(1007, frame(OP_CLOSE, close_payload(1000, b"\xc3\x28")))

    def test_server_close_waits_for_the_client_then_ends(self):
        ws = self.ws("/ws-test")
        ws.send_frame(OP_TEXT, b"close")
        self.assertEqual(ws.read_close(), 4000)
        ws.send_frame(OP_TEXT, b"ignored after the close")
        ws.send_frame(OP_CLOSE, close_payload(4000))
        self.assertTrue(ws.at_eof())

    def test_server_close_times_out_on_a_silent_client(self):
        ws = self.ws("/ws-test")  # close_timeout_ms 1000 there
        ws.send_frame(OP_TEXT, b"close")
        self.assertEqual(ws.read_close(), 4000)
        started = time.monotonic()
        self.assertTrue(ws.at_eof())
        self.assertLess(time.monotonic() - started, 8)

    def test_reply_sent_later_from_the_loop(self):
        ws = self.ws("/ws-test")
        ws.send(frame(OP_TEXT, b"later:after a while") + frame(OP_TEXT, b"now"))
        self.assertEqual(ws.read_frame()[3], b"now")
        self.assertEqual(ws.read_frame()[3], b"after a while")

    def test_client_gone_before_a_later_reply(self):
        ws = WsConn(self.server.port, "/ws-test")
        ws.send_frame(OP_TEXT, b"later:nobody hears this")
        ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        ws.close()
        time.sleep(0.1)
        self.test_reply_sent_later_from_the_loop()

    def test_frames_sent_with_the_handshake_are_served(self):
        request, _ = handshake_request()
        sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=SOCKET_TIMEOUT)
        sock.sendall(request + frame(OP_TEXT, b"early") + frame(OP_PING, b"p"))
        ws = WsConn.__new__(WsConn)
        ws.sock, ws.buf = sock, b""
        self.addCleanup(ws.close)
        self.assertIn(b" 101 ", ws.read_head())
        self.assertEqual(ws.read_frame(), (True, 0, OP_TEXT, b"early"))
        self.assertEqual(ws.read_frame(), (True, 0, OP_PONG, b"p"))

    def test_a_silent_client_is_pinged_then_closed_1001(self):
        ws = self.ws("/ws-idle")  # pings after 200 ms of silence, closes after 1000 ms
        started = time.monotonic()
        self.assertEqual(ws.read_frame()[2], OP_PING)
        self.assertEqual(ws.read_close(), 1001)
        self.assertGreater(time.monotonic() - started, 0.9)
        self.assertTrue(ws.at_eof())

    def test_a_client_that_answers_pings_stays(self):
        ws = self.ws("/ws-idle")
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            _, _, opcode, payload = ws.read_frame()
            self.assertEqual(opcode, OP_PING)
            ws.send_frame(OP_PONG, payload)
        ws.send_frame(OP_TEXT, b"alive")
        while (frame_ := ws.read_frame())[2] == OP_PING:
            pass
        self.assertEqual(frame_[3], b"alive")

    def test_frames_from_one_read_are_answered_in_one_write(self):
        # Counted with strace as for pipelined HTTP/1.1: no more writes than
        # reads that brought frames (only this connection is busy meanwhile).
        strace = require_tool(self, "strace")
        ws = self.ws()
        ws.send_frame(OP_TEXT, b"warm")
        self.assertEqual(ws.read_frame()[3], b"warm")
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        errors = open(os.path.join(tmp, "stderr"), "w+")
        self.addCleanup(errors.close)
        tracer = subprocess.Popen(
            [
                strace,
                "-qq",
                "-ff",
                "-s",
                "8",
                "-o",
                os.path.join(tmp, "t"),
                "-e",
                "trace=" + ",".join(pipelining.IO_CALLS),
                "-p",
                str(self.server.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        self.addCleanup(tracer.wait, 10)
        self.addCleanup(tracer.kill)
        if not pipelining.KeepAlivePipeliningTest.wait_traced(self, tracer):
            errors.seek(0)
            said = errors.read().strip()
            if "Operation not permitted" in said:  # the machine's ptrace policy, as there
                self.skipTest(f"this machine does not allow ptrace, so strace cannot count writes: {said}")
            self.fail(f"strace did not attach to every server thread: {said or 'it said nothing'}")
        frames = b"".join(frame(OP_TEXT, b"m%d" % i) for i in range(50))
        ws.send(frames)
        self.assertEqual([ws.read_frame()[3] for _ in range(50)], [b"m%d" % i for i in range(50)])
        tracer.send_signal(signal.SIGTERM)
        tracer.wait(10)
        reads = writes = 0
        for path in glob.glob(os.path.join(tmp, "t.*")):
            with open(path, errors="replace") as f:
                for match in filter(None, map(pipelining.IO_CALL_RE.match, f)):
                    if int(match.group(3)) > 0:
                        reads += match.group(1).startswith(("read", "recv"))
                        writes += match.group(1).startswith(("write", "send"))
        if "io: io_uring" in self.server.stderr_text():
            # The frames arrive as receive completions into 4 KiB buffers, and the echoes leave as
            # send requests handed in with the loop's waits, neither of which any strace line
            # shows: no more writes (the rest of a send the socket did not take whole) than
            # buffers the frames filled.
            reads = -(-len(frames) // 4096)
        self.assertGreaterEqual(reads, 1, "strace saw no read of the frames")
        self.assertLessEqual(writes, reads, f"{writes} writes answered frames from {reads} reads")

    def test_fifty_frames_in_one_write_are_echoed_in_order(self):
        ws = self.ws()
        ws.send(b"".join(frame(OP_TEXT, b"m%d" % i) for i in range(50)))
        got = [ws.read_frame()[3] for _ in range(50)]
        self.assertEqual(got, [b"m%d" % i for i in range(50)])

    def test_abrupt_disconnects_mid_message_leave_the_server_serving(self):
        for cut in ("header", "payload", "fragment", "reset"):
            ws = WsConn(self.server.port)
            if cut == "header":
                ws.send(frame(OP_BINARY, b"x" * 300)[:3])
            elif cut == "payload":
                ws.send(frame(OP_BINARY, b"x" * 100000)[:50000])
            else:
                ws.send_frame(OP_TEXT, b"part one", fin=False)
                ws.send(frame(OP_CONT, b"y" * 5000, fin=False)[:1000])
            if cut == "reset":
                ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.close()
        time.sleep(0.2)
        ws = self.ws()
        ws.send_frame(OP_TEXT, b"still here")
        self.assertEqual(ws.read_frame()[3], b"still here")


class BackpressureTest(unittest.TestCase):
    def test_a_client_that_does_not_read_is_not_read_from_then_dropped(self):
        server = ServerProcess(["--workers", "1", "--send-timeout", "1500"]).start()
        self.addCleanup(server.close)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=SOCKET_TIMEOUT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ws = WsConn(server.port, sock=sock)
        self.addCleanup(ws.close)
        message = frame(OP_BINARY, b"b" * 65536)
        ws.sock.settimeout(0.5)  # well inside the send timeout
        sent = 0
        with self.assertRaises(socket.timeout, msg="the server read everything a non-reader sent"):
            for _ in range(2000):  # 128 MiB if nothing pushed back
                ws.sock.sendall(message)
                sent += 1
        self.assertLess(sent, 200)
        rss = server.rss_kib()
        self.assertLess(rss, 400 * 1024, "queued output is not bounded")
        time.sleep(2.5)  # past the send timeout: the server gives up on us
        ws.sock.settimeout(SOCKET_TIMEOUT)
        self.assertTrue(ws.at_eof(), "a client that takes nothing was not dropped")
        server.assert_running()
        server.stop_and_check()


class SendsTest(ServerTestCase):
    server_args = ("--workers", "1")

    def test_a_message_sent_by_reference_arrives_whole_and_pending_counts_it(self):
        ws = WsConn(self.server.port, "/ws-test")
        self.addCleanup(ws.close)
        ws.send_frame(OP_TEXT, b"big:4096")  # 4 MiB by reference, then what was still queued
        fin, _, opcode, payload = ws.read_frame()
        self.assertEqual((fin, opcode, len(payload)), (True, OP_BINARY, 4 << 20))
        self.assertEqual(payload, bytes(i % 251 for i in range(4 << 20)))
        _, _, opcode, line = ws.read_frame()
        self.assertEqual(opcode, OP_TEXT)
        pending = int(line.decode().removeprefix("pending="))
        self.assertGreater(pending, 1 << 20, "the 4 MiB queued in the same batch is not counted")
        self.assertLessEqual(pending, (4 << 20) + 16)


class ShutdownTest(unittest.TestCase):
    def test_a_graceful_stop_closes_open_websockets_with_1001(self):
        server = ServerProcess(["--workers", "1"]).start()
        self.addCleanup(server.close)
        ws = WsConn(server.port)
        self.addCleanup(ws.close)
        ws.send_frame(OP_TEXT, b"before")
        self.assertEqual(ws.read_frame()[3], b"before")
        server.send_signal(signal.SIGTERM)
        self.assertEqual(ws.read_close(), 1001)
        ws.send_frame(OP_CLOSE, close_payload(1001))
        self.assertTrue(ws.at_eof())
        server.assert_clean_exit(server.wait_exit(15))


class PythonClientTest(ServerTestCase):
    server_args = ("--workers", "1", "--ws-deflate")

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 60))

    def test_echo_without_compression(self):
        async def go():
            async with websockets.connect(f"ws://127.0.0.1:{self.server.port}/ws", compression=None) as ws:
                self.assertIsNone(ws.response.headers.get("Sec-WebSocket-Extensions"))
                for message in ("hello", "ünïcode", b"\x00" * 70000, "x" * 300000):
                    await ws.send(message)
                    self.assertEqual(await ws.recv(), message)

        self.run_async(go())

    def test_permessage_deflate_with_several_windows(self):
        from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

        text = "the quick brown fox jumps over the lazy dog " * 4000
        for server_bits, client_bits, no_takeover in (
            (None, None, False),
            (9, 9, False),
            (10, 12, True),
            (15, 15, False),
            (12, None, True),
        ):
            factory = ClientPerMessageDeflateFactory(
                server_max_window_bits=server_bits,
                client_max_window_bits=client_bits or True,
                server_no_context_takeover=no_takeover,
                client_no_context_takeover=no_takeover,
            )

            async def go(factory, server_bits):
                async with websockets.connect(
                    f"ws://127.0.0.1:{self.server.port}/ws", extensions=[factory], compression=None, max_size=None
                ) as ws:
                    ext = ws.response.headers.get("Sec-WebSocket-Extensions")
                    self.assertTrue(ext.startswith("permessage-deflate"), ext)
                    if server_bits:
                        self.assertIn(f"server_max_window_bits={server_bits}", ext)
                    for message in (text, text.encode(), "short", "", os.urandom(5000)):
                        await ws.send(message)
                        self.assertEqual(await ws.recv(), message)

            with self.subTest(server=server_bits, client=client_bits, no_takeover=no_takeover):
                self.run_async(go(factory, server_bits))

    def test_compressed_wire_bytes_are_smaller(self):
        ws = WsConn(self.server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
        self.addCleanup(ws.close)
        self.assertEqual(ws.headers["sec-websocket-extensions"], "permessage-deflate")
        ws.send_frame(OP_TEXT, b"a" * 10000)  # uncompressed from us is allowed
        fin, rsv, opcode, payload = ws.read_frame()
        self.assertEqual((fin, rsv, opcode), (True, 4, OP_TEXT))
        self.assertLess(len(payload), 200)

    def test_compressed_garbage_closes_1007(self):
        ws = WsConn(self.server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
        self.addCleanup(ws.close)
        ws.send_frame(OP_TEXT, b"\xff\xff\xff\xff", rsv=4)
        self.assertEqual(ws.read_close(), 1007)

    def test_clients_vanishing_with_compression_state_leave_the_server_serving(self):
        # The class's clean stop (ASan's leak check included) covers what they held.
        for cut in (False, True):
            ws = WsConn(self.server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
            ws.send_frame(OP_TEXT, b"b" * 20000)
            self.assertEqual(ws.read_frame()[1], 4)  # a compressed echo: both zlib streams exist
            ws.send(
                frame(OP_TEXT, b"\xf2\x48\xcd\xc9\xc9\x07\x00" * 50, rsv=4, fin=False)[:200]
                if cut
                else frame(OP_TEXT, b"\xf2\x48", rsv=4, fin=False)
            )
            ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            ws.close()
        time.sleep(0.2)
        ws = WsConn(self.server.port, extra="Sec-WebSocket-Extensions: permessage-deflate\r\n")
        self.addCleanup(ws.close)
        ws.send_frame(OP_TEXT, b"still here")
        self.assertEqual(ws.read_frame()[1], 4)

    def test_unacceptable_offer_is_declined_not_failed(self):
        ws = WsConn(self.server.port, extra="Sec-WebSocket-Extensions: permessage-deflate; bogus=1, x-other\r\n")
        self.addCleanup(ws.close)
        self.assertIn(" 101 ", ws.status_line)
        self.assertNotIn("sec-websocket-extensions", ws.headers)


class GorillaClientTest(ServerTestCase):
    server_args = ("--workers", "1", "--ws-deflate")

    def test_gorilla_echo_checked_with_and_without_compression(self):
        load = build_ws_load(self)
        for extra in ([], ["-compress"], ["-reupgrade", "10"]):
            with self.subTest(extra=extra):
                result = run_client(
                    [
                        load,
                        "-url",
                        f"ws://127.0.0.1:{self.server.port}/ws",
                        "-conns",
                        "20",
                        "-inflight",
                        "4",
                        "-duration",
                        "1s",
                        "-size",
                        "3000",
                        *extra,
                    ],
                    timeout=120,
                )
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertRegex(result.stdout.decode(), r"messages=[1-9]")


class TlsTest(unittest.TestCase):
    def test_websocket_over_tls(self):
        server = start_https(self, CERTS.rsa, "--workers", "1", "--ws-deflate")
        context = client_context(alpn=("http/1.1",))

        async def go():
            async with websockets.connect(f"wss://localhost:{server.port}/ws", ssl=context) as ws:
                for message in ("hello over TLS", b"\x01" * 100000):
                    await ws.send(message)
                    self.assertEqual(await ws.recv(), message)

        asyncio.run(asyncio.wait_for(go(), 60))
        server.stop_and_check()


class ManyConnectionsTest(unittest.TestCase):
    COUNT = 10000

    def test_ten_thousand_concurrent_connections_each_echo(self):
        limit = raise_fd_limit(self.COUNT + 500)
        self.assertGreaterEqual(limit, self.COUNT + 100, "RLIMIT_NOFILE cannot be raised enough")
        server = ServerProcess(["--workers", "1"]).start()
        self.addCleanup(server.close)

        async def one(i, sem, opened, release):
            async with sem:  # open them a few hundred at a time
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(handshake_request()[0])
                head = await reader.readuntil(b"\r\n\r\n")
                self.assertIn(b" 101 ", head.split(b"\r\n", 1)[0])
            opened.append(i)
            await release.wait()  # every connection is open at once
            writer.write(frame(OP_TEXT, b"n%d" % i))
            got = await reader.readexactly(2 + len(b"n%d" % i))
            writer.close()
            return got[2:]

        async def go():
            opened, release, sem = [], asyncio.Event(), asyncio.Semaphore(300)
            tasks = [asyncio.ensure_future(one(i, sem, opened, release)) for i in range(self.COUNT)]
            while len(opened) < self.COUNT:
                failed = [t for t in tasks if t.done() and t.exception()]
                if failed:
                    raise failed[0].exception()
                await asyncio.sleep(0.05)
            self.assertGreaterEqual(server.fd_count(), self.COUNT)
            release.set()
            return await asyncio.gather(*tasks)

        got = asyncio.run(asyncio.wait_for(go(), 240))
        self.assertEqual(got, [b"n%d" % i for i in range(self.COUNT)])
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
