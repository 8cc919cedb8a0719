"""Proxied uploads past the upstream client's body high-water mark
(XHTTP_CLIENT_BODY_HIGH, 256 KiB): the proxy pauses the client's body there
and resumes it once the upstream connection's queue has gone, however the
socket took it (whole at the turn's end; on io_uring whole in a send by
completion; after filling up). A resume that never comes leaves the body
waiting until the upstream's send timeout answers 504; it is kept short here.

Bodies of 300 KiB (past the mark, and taken whole by a fresh socket), 1 MiB
and 4 MiB, streamed (--upstream-splice-min 0) with a
Content-Length and chunked, and spliced, each sent by the client in one
write or in many small ones (2 KiB pieces, chunks of that size when
chunked): on fresh servers, where the body comes while the upstream
connection is being made, and one after another on a pooled connection.
And 1 MiB and 8 MiB up a WebSocket passed through (a tunnel: its bytes are queued for
the turn's end, where a socket with room takes them whole). ctest runs it on
both backends."""

import base64
import hashlib
import json
import os
import socketserver
import unittest

from support.harness import Conn, start_server
from support.upstream import LoopbackServer, read_digest, read_head
from test_proxy_splice import Upstream

MIB = 1 << 20
SMALL = 2 << 10


def chunked(body, size):
    pieces = (body[pos : pos + size] for pos in range(0, len(body), size))
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def upload(target, body, framing, piece):
    """The request's bytes, and the size of the pieces they are sent in."""
    if framing == "chunked":
        head = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % target.encode()
        return head + chunked(body, piece or MIB), piece
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (target.encode(), len(body))
    return head + body, piece


class TunnelUpstream(LoopbackServer):
    """Accepts a WebSocket handshake for /tunnel/N, then reads N raw bytes
    and answers their SHA-256 (hex, a line) and closes: the proxy relays the
    tunnel's bytes as they are."""

    def __init__(self):
        super().__init__(TunnelHandler)


class TunnelHandler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            _, target, fields = read_head(self.rfile)
            key = {n.lower(): v for n, v in fields}["sec-websocket-key"]
            accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
            self.wfile.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: %s\r\n\r\n" % accept
            )
            self.wfile.flush()
            length = int(target.rsplit("/", 1)[1])
            digest, got = read_digest(self.rfile, length)
            if got < length:
                return
            self.wfile.write(digest.hexdigest().encode() + b"\n")
            self.wfile.flush()
        except (ConnectionError, OSError, ValueError, KeyError):
            return


class UploadFlowTest(unittest.TestCase):
    # (framing, extra arguments): splicing takes a Content-Length body off the
    # client's socket into a pipe; the setting 0 turns it off.
    FRAMINGS = (
        ("length", ("--upstream-splice-min", "0")),
        ("chunked", ("--upstream-splice-min", "0")),
        ("spliced", ()),
    )
    PIECES = (("one write", 0), ("small pieces", SMALL))

    def setUp(self):
        self.upstream = Upstream()
        self.addCleanup(self.upstream.stop)

    def proxy(self, extra):
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        return start_server(self, [*args, "--upstream-timeout", "3000", *extra])

    def post(self, conn, target, body, framing, piece, what):
        raw, piece = upload(target, body, framing, piece)
        if piece:
            conn.send_in_pieces(raw, piece, 0)
        else:
            conn.send(raw)
        resp = conn.read_response()
        self.assertEqual(resp.status, 200, f"{what}: {resp.body[:200]}")
        info = json.loads(resp.body)
        self.assertEqual(
            (info["len"], info["sha256"], info["target"]),
            (len(body), hashlib.sha256(body).hexdigest(), target),
            what,
        )

    def test_bodies_coming_while_the_upstream_connection_is_made(self):
        for body in (os.urandom(300 << 10), os.urandom(MIB + 1)):
            for framing, extra in self.FRAMINGS:
                for sent, piece in self.PIECES:
                    for attempt in range(3):
                        what = f"{len(body)} bytes, {framing}, {sent}, {attempt}"
                        server = self.proxy(extra)
                        with Conn(server.port) as conn:
                            self.post(conn, "/upstream/fresh", body, framing, piece, what)
                        server.stop_and_check()

    def test_bodies_one_after_another_on_a_pooled_connection(self):
        body = os.urandom(4 * MIB + 3)
        for framing, extra in self.FRAMINGS:
            server = self.proxy(extra)
            with Conn(server.port) as conn:
                for sent, piece in self.PIECES * 3:
                    self.post(conn, "/upstream/pooled", body, framing, piece, f"{framing}, {sent}")
            server.stop_and_check()

    def test_bytes_up_a_websocket_passed_through(self):
        tunnel = TunnelUpstream()
        self.addCleanup(tunnel.stop)
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{tunnel.port}", "--upstream-timeout", "3000"]
        server = start_server(self, args)
        for size in (MIB, 8 * MIB):
            data = os.urandom(size)
            for sent, piece in self.PIECES:
                what = f"{size} bytes, {sent}"
                with Conn(server.port) as conn:
                    key = base64.b64encode(os.urandom(16))
                    conn.send(
                        b"GET /tunnel/%d HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (size, key)
                    )
                    self.assertEqual(conn.read_response().status, 101, what)
                    if piece:
                        conn.send_in_pieces(data, piece, 0)
                    else:
                        conn.send(data)
                    while b"\n" not in conn.buf:
                        try:
                            got = conn.sock.recv(4096)
                        except TimeoutError:
                            self.fail(f"{what}: no answer through the tunnel within {conn.timeout}s")
                        self.assertTrue(got, f"{what}: the tunnel closed before the upstream's answer")
                        conn.buf += got
                    self.assertEqual(bytes(conn.buf).strip().decode(), hashlib.sha256(data).hexdigest(), what)
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
