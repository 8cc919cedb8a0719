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
ctest runs it on both backends."""

import hashlib
import json
import os
import unittest

from support.harness import Conn, start_server
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


if __name__ == "__main__":
    unittest.main()
