"""Request bodies the proxy splices (conf.splice_min, <xhttp/proxy.h>): a large
Content-Length body on a streaming route (the bench server's /upstream/*) goes
from the client's socket to the upstream's through a pipe, never copied into
the server. Checked as a client and an upstream see it, on both backends:

bodies of sizes around the 32 KiB threshold arrive byte-exact; Expect:
100-continue, a client that sends its body in pieces, and requests pipelined
behind a spliced body are served in order; a client that leaves mid-body and
an upstream that closes mid-body are answered (or not) as a streamed body
is (nothing, and 502), and leave no descriptor behind, spliced or not (--upstream-splice-min 0);
the server's descriptors show the spare pipe after a spliced body, and none with
--upstream-splice-min 0; a 1 MiB body streamed but not spliced goes through on fresh
servers (a dozen), where the upstream connection is still being made as it comes;
splice(2) moves an 8 MiB body, all but what the server held in memory already
(strace -c), and none with --upstream-splice-min 0."""

import hashlib
import json
import os
import socketserver
import threading
import time
import unittest

from support.harness import Conn, fds_of, start_server
from support.upstream import LoopbackServer, read_body, read_digest, read_head
from test_proxy_splice_down import splice_calls_during

THRESHOLD = 32 << 10
MIB = 1 << 20


class Upstream(LoopbackServer):
    """An HTTP/1.1 upstream on a free loopback port that reads each request's
    body (Content-Length, or chunked) and answers its length and SHA-256 as
    JSON; for /close-mid it reads 64 KiB of the body and closes the connection."""

    def __init__(self):
        self.cut_short = 0  # bodies that ended before their Content-Length
        super().__init__(Handler)


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            while True:
                method, target, fields = read_head(self.rfile)
                if method is None:
                    return
                lower = {n.lower(): v for n, v in fields}
                if lower.get("transfer-encoding", "").lower() == "chunked":
                    self.answer(read_body(self.rfile, fields)[0], target)
                    continue
                left = int(lower.get("content-length", "0"))
                if target.endswith("/close-mid"):
                    self.rfile.read(min(left, 65536))
                    return
                digest, got = read_digest(self.rfile, left)
                if got < left:
                    with self.server.lock:
                        self.server.cut_short += 1
                    return
                self.answer_digest(got, digest, target)
        except (ConnectionError, OSError, ValueError):
            return

    def answer(self, body, target):
        self.answer_digest(len(body), hashlib.sha256(body), target)

    def answer_digest(self, length, digest, target):
        out = json.dumps({"len": length, "sha256": digest.hexdigest(), "target": target}).encode()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(out), out))
        self.wfile.flush()


def post_head(target, length, extra=b""):
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n" % (target.encode(), length, extra)


class SpliceTest(unittest.TestCase):
    def setUp(self):
        self.upstream = Upstream()  # one each: a case's failures stay its own
        self.addCleanup(self.upstream.stop)

    def proxy(self, *extra, timeout_ms=10000):
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.upstream.port}"]
        args += ["--upstream-timeout", str(timeout_ms)]
        return start_server(self, [*args, *extra])

    def assert_echoed(self, resp, body, target=None):
        self.assertEqual(resp.status, 200, resp.body[:200])
        info = json.loads(resp.body)
        self.assertEqual((info["len"], info["sha256"]), (len(body), hashlib.sha256(body).hexdigest()))
        if target:
            self.assertEqual(info["target"], target)

    def settle(self, server):
        """The fd count once the pools a first spliced request makes exist."""
        with Conn(server.port) as conn:
            body = os.urandom(THRESHOLD * 2)
            conn.request("POST", "/upstream/warm", body=body)
            self.assert_echoed(conn.read_response(), body)
        return server.settle_fd_baseline()

    def test_bodies_around_the_threshold_arrive_byte_exact_on_one_connection(self):
        server = self.proxy()
        sizes = [THRESHOLD - 1, THRESHOLD, THRESHOLD + 1, 64 << 10, MIB + 1, 5 * MIB + 3]
        with Conn(server.port) as conn:
            for size in sizes + sizes[::-1]:
                body = os.urandom(size)
                conn.request("POST", f"/upstream/{size}", body=body)
                self.assert_echoed(conn.read_response(), body, f"/upstream/{size}")
                # A request read whole (not a streaming route) in between, on the same connection.
                conn.request("POST", "/whole", body=body[:1000])
                self.assert_echoed(conn.read_response(), body[:1000], "/whole")
        server.stop_and_check()

    def test_the_spare_pipe_shows_and_the_setting_turns_splicing_off(self):
        body = os.urandom(64 << 10)
        for extra, pipes in (((), 2), (("--upstream-splice-min", "0"), 0)):
            server = self.proxy(*extra)
            before = fds_of(server.pid, "pipe:")
            with Conn(server.port) as conn:
                conn.request("POST", "/upstream/p", body=body)
                try:
                    resp = conn.read_response()
                except AssertionError as e:
                    raise AssertionError(f"{extra}: {e}") from None
                self.assert_echoed(resp, body)
            # A spliced body leaves its pipe (both ends) with the worker's spares.
            self.assertEqual(fds_of(server.pid, "pipe:") - before, pipes, extra)
            server.stop_and_check()

    def test_splice_moves_the_body(self):
        """An 8 MiB body arrives whole, and splice(2) moved most of it: each
        call moves a pipe's worth (256 KiB) at most, one way, so 4 MiB take 32.
        Only bytes already in the server's memory are written instead: what
        came with the head, and on io_uring what the loop had received ahead
        before the head was read (up to its ring of buffers, 2 MiB); none of
        it with splicing off."""
        body = os.urandom(8 * MIB)
        for extra, least in (((), 32), (("--upstream-splice-min", "0"), 0)):
            server = self.proxy(*extra)

            def send(server=server):
                with Conn(server.port, timeout=60) as conn:
                    conn.request("POST", "/upstream/big", body=body)
                    self.assert_echoed(conn.read_response(), body)

            spliced = splice_calls_during(self, server, send)
            print(f"{extra}: splice calls: {spliced}")
            if least:
                self.assertGreaterEqual(spliced, least, extra)
            else:
                self.assertEqual(spliced, 0, extra)
            server.stop_and_check()

    def test_a_streamed_body_not_spliced_goes_through_on_fresh_servers(self):
        # The body that came while the upstream connection was being made
        # (a fresh server has none pooled) is past BODY_HIGH: the client is
        # held back until it is sent, which must then resume it, however the
        # socket took it (at once, or after filling). A missed resume is a
        # 504 after the upstream's send timeout, so that is kept short.
        # A chunked body is never spliced: it goes up chunked, streamed.
        body = os.urandom(MIB + 1)
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:MIB], body[MIB:])) + b"0\r\n\r\n"
        sent = {
            "length": post_head("/upstream/fresh", len(body)) + body,
            "chunked": b"POST /upstream/fresh HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
        }
        for framing, raw in sent.items():
            for attempt in range(12):
                server = self.proxy("--upstream-splice-min", "0", timeout_ms=3000)
                with Conn(server.port) as conn:
                    conn.send(raw)
                    resp = conn.read_response()
                self.assertEqual(resp.status, 200, f"{framing}, attempt {attempt}: {resp.body[:200]}")
                self.assert_echoed(resp, body, "/upstream/fresh")
                server.stop_and_check()

    def test_expect_100_continue_then_the_body(self):
        server = self.proxy()
        body = os.urandom(2 * MIB)
        with Conn(server.port) as conn:
            conn.send(post_head("/upstream/expect", len(body), b"Expect: 100-continue\r\n"))
            interim = conn.read_response(head_only=True)
            self.assertEqual(interim.status, 100)
            conn.send(body)
            self.assert_echoed(conn.read_final_response(), body, "/upstream/expect")
        server.stop_and_check()

    def test_a_slow_client_sending_its_body_in_pieces(self):
        server = self.proxy()
        body = os.urandom(300 << 10)
        with Conn(server.port) as conn:
            conn.send(post_head("/upstream/slow", len(body)))
            conn.send_in_pieces(body, 20 << 10, 0.02)
            self.assert_echoed(conn.read_response(), body, "/upstream/slow")
        server.stop_and_check()

    def test_requests_pipelined_behind_a_spliced_body_are_answered_in_order(self):
        server = self.proxy()
        first, second = os.urandom(MIB), os.urandom(200 << 10)
        with Conn(server.port) as conn:
            raw = post_head("/upstream/a", len(first)) + first
            raw += b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
            raw += post_head("/upstream/b", len(second)) + second
            raw += b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"
            conn.send(raw)
            self.assert_echoed(conn.read_response(), first, "/upstream/a")
            self.assertEqual(conn.read_response().status, 200)
            self.assert_echoed(conn.read_response(), second, "/upstream/b")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()

    def test_a_client_leaving_mid_body_leaves_nothing_behind(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            baseline = self.settle(server)
            cut_before = self.upstream.cut_short
            for _ in range(5):
                conn = Conn(server.port)
                conn.send(post_head("/upstream/leave", 8 * MIB) + os.urandom(MIB))
                time.sleep(0.1)
                conn.abort()
            # The upstream saw each body end short (its connection closed), and the server
            # holds what it held before: no connection, pipe or upstream socket left.
            deadline = time.monotonic() + 5
            while self.upstream.cut_short - cut_before < 5 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.upstream.cut_short - cut_before, 5, extra)
            self.serves_on_with_what_it_held(server, baseline, extra)

    def test_an_upstream_closing_mid_body_is_a_502(self):
        for extra in ((), ("--upstream-splice-min", "0")):
            server = self.proxy(*extra)
            baseline = self.settle(server)
            for _ in range(3):
                conn = Conn(server.port)
                body = os.urandom(16 * MIB)
                sender = threading.Thread(
                    target=self.send_ignoring_reset, args=(conn, post_head("/upstream/close-mid", len(body)) + body)
                )
                conn.sock.sendall(b"")  # connected before the thread starts
                sender.start()
                resp = conn.read_response()
                sender.join()
                conn.close()
                self.assertEqual(resp.status, 502, (extra, resp.body))
                self.assertIn(b"upstream", resp.body)
            self.serves_on_with_what_it_held(server, baseline, extra)

    def serves_on_with_what_it_held(self, server, baseline, extra):
        """A spliced request still goes through, and afterwards the server holds the
        descriptors it held after the first one (its pooled upstream connection and
        spare pipe): none was left by the failures."""
        body = os.urandom(MIB)
        with Conn(server.port) as conn:
            conn.request("POST", "/upstream/after", body=body)
            self.assert_echoed(conn.read_response(), body)
        self.assertEqual(server.wait_fd_count(baseline), baseline, extra)
        server.stop_and_check()

    @staticmethod
    def send_ignoring_reset(conn, data):
        try:
            conn.sock.sendall(data)
        except OSError:
            pass  # the front closed after its 502: the rest of the body is not wanted


if __name__ == "__main__":
    unittest.main()
