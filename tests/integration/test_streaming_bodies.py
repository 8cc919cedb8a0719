"""Request bodies streamed to a handler as they arrive (xHttpServerRouteStreaming),
over HTTP/1.1 and HTTP/2, through the bench server's POST /upload, which
checksums each piece and answers with the size and CRC-32 of what it took.

What a user relies on: every byte arrives once and in order whatever the
framing or size (past max_body_size too); a paused reader holds the client
back (HTTP/1.1 by not reading the socket, HTTP/2 by not reopening windows), so
the server's memory does not grow with the body; an early answer, a client that
leaves mid-body, a malformed body or one that stops coming each end cleanly,
and the server goes on serving everyone."""

import json
import os
import re
import tempfile
import time
import unittest
import zlib

from support.h2client import (
    CANCEL,
    NO_ERROR,
    WINDOW_UPDATE,
    H2ServerTestCase,
    assert_h2_response_fields,
    curl,
    data_frame,
    rst_stream_frame,
)
from support.harness import Conn, assert_standard_headers, chunked, http_request, run_client

KIB = 1024
MIB = 1024 * KIB
MAX_BODY = MIB  # the server's max_body_size: buffered routes refuse more
HOLD_MS = 1500  # how long /upload?hold_ms= takes nothing
RSS_SLACK_KIB = 16 * 1024  # what a paused 64 MiB body may cost, at most (it should cost ~0)


def upload_result(test, resp, body):
    """Checks a 200 from /upload reports exactly body; returns the report."""
    test.assertEqual(resp.status, 200, resp)
    test.assertEqual(resp.header("content-type"), "application/json")
    report = json.loads(resp.body)
    test.assertEqual(report["bytes"], len(body))
    test.assertEqual(report["crc32"], f"{zlib.crc32(body):08x}")
    return report


class UploadServerTestCase(H2ServerTestCase):
    """One server whose buffered routes stop at MAX_BODY and whose body
    timeout is 1 s, and 64 MiB of random bytes to upload."""

    server_args = ["--workers", "1", "--max-body", str(MAX_BODY), "--body-timeout", "1000"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.data = os.urandom(64 * MIB)


class StreamingBodiesHttp1Test(UploadServerTestCase):
    def test_content_length_body_of_64_mib_arrives_whole_past_max_body(self):
        body = self.data
        resp = self.connect(timeout=60).exchange(http_request("POST", "/upload", body=body))
        report = upload_result(self, resp, body)
        self.assertGreater(report["pieces"], 1, "a 64 MiB body must come in pieces, not buffered whole")
        assert_standard_headers(self, resp)
        # The buffered route still holds its limit.
        self.assertEqual(self.fetch("POST", "/echo", body=self.data[: MAX_BODY + 1]).status, 413)

    def test_chunked_body_arrives_whole_in_order(self):
        body = self.data[: 8 * MIB]
        raw = http_request("POST", "/upload", headers=[("Transfer-Encoding", "chunked")]) + chunked(
            body, [1, 2, 70 * KIB, 3, MIB, 5000], extension=b";ext=1", trailers=b"X-T: 1\r\n"
        )
        upload_result(self, self.connect(timeout=60).exchange(raw), body)

    def test_curl_upload_with_expect_continue(self):
        body = self.data[: 16 * MIB]
        with tempfile.NamedTemporaryFile() as f:
            f.write(body)
            f.flush()
            proc = curl("-H", "Expect: 100-continue", "--data-binary", "@" + f.name, self.server.url("/upload"))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        report = json.loads(proc.stdout)
        self.assertEqual((report["bytes"], report["crc32"]), (len(body), f"{zlib.crc32(body):08x}"))

    def test_100_continue_comes_when_the_handler_asks_for_the_body(self):
        conn = self.connect()
        conn.send(
            http_request("POST", "/upload?hold_ms=200", headers=[("Expect", "100-continue"), ("Content-Length", "5")])
        )
        self.assertEqual(conn.read_response().status, 100)
        conn.send(b"hello")
        upload_result(self, conn.read_response(), b"hello")

    def test_handler_answering_without_reading_sends_no_100_continue(self):
        # The handler refuses the request from its head alone: the client,
        # waiting for 100 Continue, gets the final answer instead, and the
        # body it was about to send is not invited.
        conn = self.connect()
        conn.send(
            http_request(
                "POST", "/upload?hold_ms=oops", headers=[("Expect", "100-continue"), ("Content-Length", str(MIB))]
            )
        )
        resp = conn.read_final_response()
        self.assertEqual(resp.interim, [])
        self.assertEqual(resp.status, 400)
        self.assertIn("close", resp.tokens("connection"))

    def test_empty_bodies_reach_the_reader_as_an_end(self):
        for headers in ([("Content-Length", "0")], [("Transfer-Encoding", "chunked")], []):
            with self.subTest(headers=headers):
                raw = http_request("POST", "/upload", headers=headers)
                if headers and headers[0][0] == "Transfer-Encoding":
                    raw += b"0\r\n\r\n"
                resp = self.connect().exchange(raw)
                report = upload_result(self, resp, b"")
                self.assertEqual(report["pieces"], 0)

    def test_keep_alive_and_pipelining_go_on_after_a_streamed_body(self):
        first, second = self.data[: 300 * KIB], self.data[MIB : MIB + 5]
        conn = self.connect(timeout=30)
        raw = (
            http_request("POST", "/upload", body=first)
            + http_request("POST", "/upload", headers=[("Transfer-Encoding", "chunked")])
            + chunked(second, [2, 3])
            + http_request("GET", "/ping")
        )
        conn.send(raw)
        upload_result(self, conn.read_response(), first)
        resp = conn.read_response()
        upload_result(self, resp, second)
        self.assertNotIn("close", resp.tokens("connection"))
        ping = conn.read_response()
        self.assertEqual((ping.status, ping.body), (200, b"pong"))

    def test_paused_reader_holds_the_client_back(self):
        """While /upload holds the body, the server reads nothing: the client
        can only fill the kernel's socket buffers, and the server's memory
        stays put. Once it resumes, everything arrives."""
        body = self.data
        rss_before = self.server.rss_kib()
        conn = self.connect(timeout=30)
        conn.send(http_request("POST", f"/upload?hold_ms={HOLD_MS}", headers=[("Content-Length", str(len(body)))]))
        conn.sock.setblocking(False)
        sent, deadline = 0, time.monotonic() + HOLD_MS / 2000
        while time.monotonic() < deadline:
            try:
                sent += conn.sock.send(body[sent : sent + MIB])
            except BlockingIOError:
                time.sleep(0.01)
        # Loopback socket buffers take a few MiB; the rest must wait.
        self.assertLess(sent, 24 * MIB, "the server kept reading a body its reader had paused")
        grown = self.server.rss_kib() - rss_before
        self.assertLess(grown, RSS_SLACK_KIB, f"the server grew {grown} KiB while holding a paused body")
        conn.sock.settimeout(30)
        conn.send(body[sent:])
        upload_result(self, conn.read_response(), body)

    def test_a_pause_is_not_a_body_timeout(self):
        # --body-timeout is 1 s; the reader takes nothing for 1.5 s.
        body = self.data[: 64 * KIB]
        resp = self.connect().exchange(http_request("POST", f"/upload?hold_ms={HOLD_MS}", body=body))
        upload_result(self, resp, body)

    def test_early_answer_closes_the_connection_after_it(self):
        conn = self.connect(timeout=30)
        resp = conn.exchange(http_request("POST", "/upload?reject_after=100000", body=self.data[: 8 * MIB]))
        self.assertEqual(resp.status, 413)
        self.assertIn("close", resp.tokens("connection"))
        self.assertEqual(json.loads(resp.body), {"error": "more than 100000 bytes"})
        conn.read_until_eof()
        self.assert_serves_ping()

    def test_malformed_chunked_body_mid_stream_gets_400_and_close(self):
        conn = self.connect()
        conn.send(http_request("POST", "/upload", headers=[("Transfer-Encoding", "chunked")]) + b"5\r\nhello\r\nzz\r\n")
        resp = conn.read_response()
        self.assertEqual(resp.status, 400)
        conn.read_until_eof()
        self.assert_serves_ping()

    def test_body_that_stops_coming_gets_408(self):
        conn = self.connect()
        conn.send(http_request("POST", "/upload", headers=[("Content-Length", "1000")]) + b"x" * 10)
        resp = conn.read_response()
        self.assertEqual(resp.status, 408)
        conn.read_until_eof()
        self.assert_serves_ping()

    def test_a_handler_without_abort_callback_keeps_its_request_after_a_reset(self):
        baseline = self.server.settle_fd_baseline()
        conn = Conn(self.server.port, self.server.connect_host)
        conn.send(
            http_request("POST", "/upload?hold_ms=500&no_abort_callback=1", headers=[("Content-Length", str(MIB))])
            + self.data[: 100 * KIB]
        )
        time.sleep(0.1)
        conn.abort()
        time.sleep(0.8)  # the hold ends: the handler resumes, finds the client gone, ends
        self.assertIn("upload to /upload abandoned by its client", self.server.stderr_text())
        self.assertEqual(self.server.wait_fd_count(baseline), baseline)
        self.assert_serves_ping()

    def test_client_leaving_mid_body_costs_nothing(self):
        baseline = self.server.settle_fd_baseline()
        for abort in (False, True):
            conn = Conn(self.server.port, self.server.connect_host)
            conn.send(
                http_request("POST", f"/upload?hold_ms={HOLD_MS}", headers=[("Content-Length", str(MIB))])
                + self.data[: 100 * KIB]
            )
            time.sleep(0.1)
            conn.abort() if abort else conn.close()
        self.assertEqual(self.server.wait_fd_count(baseline), baseline)
        self.assert_serves_ping()


class StreamingBodiesHttp2Test(UploadServerTestCase):
    def test_64_mib_body_over_curl_prior_knowledge(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(self.data)
            f.flush()
            proc = curl(
                "--http2-prior-knowledge", "--data-binary", "@" + f.name, self.server.url("/upload"), timeout=120
            )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        report = json.loads(proc.stdout)
        self.assertEqual((report["bytes"], report["crc32"]), (len(self.data), f"{zlib.crc32(self.data):08x}"))

    def test_concurrent_streamed_bodies_on_one_connection(self):
        conn = self.h2connect(timeout=30)
        bodies = [self.data[i * MIB : i * MIB + (i + 1) * 700 * KIB] for i in range(6)]
        ids = [conn.request("POST", "/upload", end_stream=False) for _ in bodies]
        for stream_id, body in zip(ids, bodies, strict=True):
            self.assertTrue(conn.send_data(stream_id, body))
        for stream_id, body in zip(ids, bodies, strict=True):
            resp = conn.read_response(stream_id)
            upload_result(self, resp, body)
            assert_h2_response_fields(self, resp)

    def test_paused_reader_gives_no_window_back(self):
        """The server advertises 16 MiB windows. While /upload holds the
        body, a client that spent them gets no WINDOW_UPDATE for the stream;
        once it resumes, the window reopens and the whole body arrives."""
        body = self.data
        conn = self.h2connect(timeout=30)
        conn.pump(0.2)  # the connection window's first WINDOW_UPDATE
        rss_before = self.server.rss_kib()
        stream_id = conn.request("POST", f"/upload?hold_ms={HOLD_MS}", end_stream=False)
        window = min(conn.send_window, conn.stream(stream_id).send_window)
        self.assertGreaterEqual(window, 16 * MIB)
        sent = 0
        while sent < window:
            piece = body[sent : sent + min(16 * KIB, window - sent)]
            conn.send(data_frame(stream_id, piece))
            sent += len(piece)
        conn.send_window -= sent
        conn.stream(stream_id).send_window -= sent
        seen = len(conn.frames_seen)
        conn.pump(HOLD_MS / 2000)
        updates = [f for f in conn.frames_seen[seen:] if f[0] == WINDOW_UPDATE and f[2] == stream_id]
        self.assertEqual(updates, [], "stream window given back while the reader was paused")
        grown = self.server.rss_kib() - rss_before
        # The held bytes themselves, in a buffer grown by doubling (and under
        # ASan, with freed blocks kept in quarantine): a small multiple of the
        # window, where an unbounded server would hold the whole body.
        self.assertLess(grown, 3 * 16 * 1024, f"the server grew {grown} KiB for one held stream")
        self.assertTrue(conn.send_data(stream_id, body[sent:]))
        upload_result(self, conn.read_response(stream_id), body)

    def fill_stream_window(self, conn, stream_id):
        """Sends DATA until the stream's window is spent (the connection's
        window permitting); returns the bytes sent."""
        conn.read_until(lambda: min(conn.send_window, conn.stream(stream_id).send_window) > 0, "window to send in")
        window = min(conn.send_window, conn.stream(stream_id).send_window)
        for offset in range(0, window, 16 * KIB):
            conn.send(data_frame(stream_id, self.data[offset : min(offset + 16 * KIB, window)]))
        conn.send_window -= window
        conn.stream(stream_id).send_window -= window
        return window

    def assert_window_back(self, conn, full, what, within=3.0):
        deadline = time.monotonic() + within
        while conn.send_window != full and time.monotonic() < deadline:
            conn.pump(0.05)
        self.assertEqual(conn.send_window, full, what)

    def test_one_paused_reader_does_not_stall_the_connections_other_uploads(self):
        conn = self.h2connect(timeout=30)
        conn.pump(0.2)
        held = conn.request("POST", "/upload?hold_ms=4000", end_stream=False)
        self.assertGreaterEqual(self.fill_stream_window(conn, held), 16 * MIB)
        started = time.monotonic()
        body = self.data[: 8 * MIB]
        upload_result(self, conn.read_response(conn.request("POST", "/upload", body=body)), body)
        self.assertFalse(conn.streams[held].closed)
        self.assertLess(time.monotonic() - started, 4.0, "the second upload waited for the held one")
        self.assertTrue(conn.send_data(held, b"tail"))
        self.assertEqual(conn.read_response(held).status, 200)

    def test_what_paused_readers_hold_is_bounded_per_connection(self):
        """Each paused stream may fill its own 16 MiB window, but the
        connection's window reopens for one window's worth of held bytes in
        all: a second paused stream uses that up, and nothing more comes."""
        conn = self.h2connect(timeout=30)
        conn.pump(0.2)
        rss_before = self.server.rss_kib()
        first = conn.request("POST", f"/upload?hold_ms={HOLD_MS}", end_stream=False)
        second = conn.request("POST", f"/upload?hold_ms={HOLD_MS}", end_stream=False)
        sent = self.fill_stream_window(conn, first)
        conn.read_until(lambda: conn.send_window >= 16 * MIB, "the connection's window back for the first")
        sent += self.fill_stream_window(conn, second)
        self.assertGreaterEqual(sent, 32 * MIB)
        seen = len(conn.frames_seen)
        conn.pump(HOLD_MS / 3000)
        updates = [f for f in conn.frames_seen[seen:] if f[0] == WINDOW_UPDATE]
        self.assertEqual(updates, [], "window given back past the connection's bound")
        self.assertLessEqual(conn.send_window, 0)
        grown = self.server.rss_kib() - rss_before
        self.assertLess(grown, 3 * 32 * 1024, f"the server grew {grown} KiB for two held streams")
        for stream_id in (first, second):
            self.assertTrue(conn.send_data(stream_id, b"tail"))
        for stream_id in (first, second):
            upload_result(self, conn.read_response(stream_id), self.data[: sent // 2] + b"tail")

    def full_window_connection(self):
        conn = self.h2connect(timeout=30)
        conn.read_until(lambda: conn.send_window >= 16 * MIB, "the 16 MiB connection window")
        return conn, conn.send_window

    def test_early_answer_drops_the_rest_and_gives_its_window_back(self):
        conn, full = self.full_window_connection()
        stream_id = conn.request("POST", "/upload?reject_after=100000", end_stream=False)
        conn.send_data(stream_id, self.data[: 10 * MIB], end_stream=False)
        resp = conn.read_response(stream_id)
        self.assertEqual(resp.status, 413)
        stream = conn.streams[stream_id]
        conn.read_until(lambda: stream.reset_code is not None, "RST_STREAM after the early answer")
        self.assertEqual(stream.reset_code, NO_ERROR, "the rest of the body waved off without error")
        # Dropped bytes count as consumed: nghttp2 returns them once half the
        # window is used, so at least 8 of the 10 MiB come back.
        conn.read_until(lambda: conn.send_window > full - 8 * MIB, "WINDOW_UPDATE for the dropped body")
        conn.send(data_frame(stream_id, self.data[:1000], end_stream=True))  # still in flight: ignored
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        body = self.data[: 3 * MIB]
        upload_result(self, conn.read_response(conn.request("POST", "/upload", body=body)), body)

    def test_nghttp_stops_uploading_once_answered(self):
        # nghttp sends a 32 MiB file as fast as the windows allow; waved off
        # by RST_STREAM(NO_ERROR) after the 413, it stops well short of it.
        with tempfile.NamedTemporaryFile() as f:
            f.write(self.data[: 32 * MIB])
            f.flush()
            proc = run_client(
                ["nghttp", "-nv", "-d", f.name, self.server.url("/upload?reject_after=100000")], timeout=60
            )
        out = proc.stdout.decode()
        self.assertIn(":status: 413", out)
        self.assertRegex(
            out,
            r"recv RST_STREAM frame <length=4, flags=0x00, stream_id=\d+>\s+"
            r"\(error_code=NO_ERROR\(0x00\)\)",
        )
        sent = sum(int(n) for n in re.findall(r"send DATA frame <length=(\d+)", out))
        self.assertLess(sent, 24 * MIB, "the client was let send most of the body")
        self.assertEqual(self.h2fetch("GET", "/ping").body, b"pong")

    def test_client_resets_give_the_held_window_back(self):
        # The first held stream's 16 MiB get the connection's window back on
        # arrival; the second's do not (past the bound) until it is reset.
        # The holds outlast the test, so only the server's accounting, not a
        # reader taking the bytes, can give the window back.
        conn, full = self.full_window_connection()
        first = conn.request("POST", "/upload?hold_ms=20000", end_stream=False)
        second = conn.request("POST", "/upload?hold_ms=20000", end_stream=False)
        self.fill_stream_window(conn, first)
        self.assert_window_back(conn, full, "the connection's window back for the first")
        self.fill_stream_window(conn, second)
        conn.pump(0.2)
        self.assertEqual(conn.send_window, 0, "window given back past the bound")
        conn.send(rst_stream_frame(second, CANCEL))
        self.assert_window_back(conn, full, "the second stream's window back at its reset")
        conn.send(rst_stream_frame(first, CANCEL))
        # With the first gone too, held bytes get the window back again.
        third = conn.request("POST", "/upload?hold_ms=20000", end_stream=False)
        self.fill_stream_window(conn, third)
        self.assert_window_back(conn, full, "the window back for a new held stream")
        conn.send(rst_stream_frame(third, CANCEL))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        body = self.data[: 5 * MIB]
        upload_result(self, conn.read_response(conn.request("POST", "/upload", body=body)), body)

    def test_a_reset_stream_still_held_by_its_handler_frees_its_share_of_the_window(self):
        # The handler has no abort callback, so it keeps the exchange for its
        # whole hold; the reset stream's held bytes must not pin the bound.
        conn, full = self.full_window_connection()
        first = conn.request("POST", "/upload?hold_ms=6000&no_abort_callback=1", end_stream=False)
        self.fill_stream_window(conn, first)
        self.assert_window_back(conn, full, "the connection's window back for the first")
        conn.send(rst_stream_frame(first, CANCEL))
        second = conn.request("POST", "/upload?hold_ms=20000", end_stream=False)
        self.fill_stream_window(conn, second)
        self.assert_window_back(conn, full, "the window back for a held stream after the reset", within=2.0)
        conn.send(rst_stream_frame(second, CANCEL))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_a_handler_without_abort_callback_keeps_its_request_after_a_reset(self):
        conn = self.h2connect(timeout=30)
        stream_id = conn.request("POST", "/upload?hold_ms=500&no_abort_callback=1", end_stream=False)
        conn.send_data(stream_id, self.data[:MIB], end_stream=False)
        conn.send(rst_stream_frame(stream_id, CANCEL))
        time.sleep(0.8)  # the hold ends: the handler resumes, finds the client gone, ends
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertIn("upload to /upload abandoned by its client", self.server.stderr_text())

    def test_streaming_route_sees_no_partial_buffered_body(self):
        conn = self.h2connect()
        stream_id = conn.new_stream_id()
        # Head and body in one write: the handler runs with part of the body
        # already here, which still goes only to the reader.
        conn.send_headers(
            stream_id,
            [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", b"/upload?hold_ms=100")],
            end_stream=False,
        )
        conn.send_data(stream_id, self.data[:5000])
        upload_result(self, conn.read_response(stream_id), self.data[:5000])

    def test_body_that_stops_coming_is_cancelled_alone(self):
        conn = self.h2connect(timeout=30)
        stream_id = conn.request("POST", "/upload", end_stream=False)
        conn.send_data(stream_id, b"x" * 100, end_stream=False)
        conn.read_until(lambda: conn.streams[stream_id].closed, "the stalled stream's end")
        self.assertEqual(conn.streams[stream_id].reset_code, CANCEL)
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_empty_body_and_trailers(self):
        conn = self.h2connect()
        report = upload_result(self, conn.fetch("POST", "/upload"), b"")
        self.assertEqual(report["pieces"], 0)
        stream_id = conn.request("POST", "/upload", body=b"abc", end_stream=False)
        conn.send_headers(stream_id, [(b"x-trailer", b"1")], end_stream=True)
        upload_result(self, conn.read_response(stream_id), b"abc")


if __name__ == "__main__":
    unittest.main()
