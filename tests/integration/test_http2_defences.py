"""HTTP/2 attacks and peers that misbehave: each meets the reaction the server
promises (GOAWAY, RST_STREAM, 431 or a close), takes a bounded share of the
server, and leaves it serving everyone else on HTTP/1.1 and HTTP/2 with its
file descriptors back at their baseline."""

import time
import unittest

from support.h2client import (
    CANCEL,
    ENHANCE_YOUR_CALM,
    INITIAL_WINDOW_SIZE,
    INTERNAL_ERROR,
    MAX_CONCURRENT_STREAMS,
    NO_ERROR,
    ConnectionClosed,
    H2ServerTestCase,
    continuation_frame,
    error_name,
    headers_frame,
    hpack_encode,
    ping_frame,
    request_headers,
    rst_stream_frame,
    settings_frame,
)

MiB = 1 << 20
# Floods big enough to outrun every buffer between us and nghttp2's queue
# (our small receive buffer, the server's socket buffer, its 1 MiB output
# high-water mark) many times over.
FLOOD_FRAMES = 400000


class H2DefenceTestCase(H2ServerTestCase):
    def setUp(self):
        super().setUp()
        self.baseline = self.server.settle_fd_baseline()

    def assert_recovered(self, *conns):
        """Fresh HTTP/1.1 and HTTP/2 connections are served, and once our side
        let go, the server holds no more fds than before the test."""
        for conn in conns:
            conn.close()
        self.assert_serves_both()
        self.assertEqual(self.server.wait_fd_count(self.baseline), self.baseline)

    def flood_conn(self, **kwargs):
        """A connection for an attack: it reads nothing while it floods, and a
        small receive buffer makes the server's answers back up quickly."""
        return self.h2connect(rcvbuf=4096, auto_ack=False, **kwargs)


class FloodDefencesTest(H2DefenceTestCase):
    """Default limits; one worker, so the attacked loop is the one that must
    keep serving others."""

    server_args = ["--workers", "1"]

    def test_rapid_reset_gets_goaway_and_close_long_before_the_flood_ends(self):
        conn = self.h2connect()
        block = hpack_encode(request_headers("GET", "/delay?ms=10000"))
        count = 20000
        conn.flood(
            b"".join(headers_frame(sid, block) + rst_stream_frame(sid, CANCEL) for sid in range(1, 2 * count, 2))
        )
        goaway = conn.last_goaway()
        self.assertIsNotNone(goaway, f"closed without GOAWAY after {count} rapid resets")
        self.assertIn(goaway.error_code(), (ENHANCE_YOUR_CALM, INTERNAL_ERROR), goaway)
        self.assertLess(
            goaway.goaway_last_stream(),
            count,  # ids run to 2 * count
            "the server took more than half the resets before stopping",
        )
        self.assertEqual([s.id for s in conn.streams.values() if s.response()], [], "reset streams were answered")
        self.assert_recovered(conn)

    def test_a_hundred_client_resets_are_tolerated(self):
        conn = self.h2connect()
        block = hpack_encode(request_headers("GET", "/delay?ms=10000"))
        conn.send(b"".join(headers_frame(sid, block) + rst_stream_frame(sid, CANCEL) for sid in range(1, 201, 2)))
        conn.next_stream_id = 201
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(conn.goaways, [])
        self.assert_recovered(conn)

    def continuation_flood(self, fragment):
        """HEADERS without END_HEADERS, then CONTINUATIONs carrying fragment,
        16 MiB in all: the server must hang up without answering, its memory
        not growing by what it was sent."""
        conn = self.h2connect()
        frames = continuation_frame(1, fragment, end_headers=False)
        flood = headers_frame(1, hpack_encode(request_headers("GET", "/ping")), end_headers=False) + frames * (
            16 * MiB // len(frames)
        )
        rss_before = self.server.rss_kib()
        conn.flood(flood)
        self.assertLess(self.server.rss_kib() - rss_before, 8 * 1024, "server memory grew with the flood")
        flooded = conn.streams.get(1)
        self.assertIsNone(flooded and flooded.response(), "the flooded request was answered")
        codes = [g.error_code() for g in conn.goaways]
        self.assertNotIn(NO_ERROR, codes, conn.goaways)
        self.assert_recovered(conn)

    def test_continuation_flood_of_header_fields_is_cut_off(self):
        self.continuation_flood(hpack_encode([(f"x-flood-{i}", "v" * 40) for i in range(20)]))

    def test_continuation_flood_of_empty_frames_is_cut_off(self):
        self.continuation_flood(b"")

    def test_a_header_list_over_8kib_gets_431_or_a_stream_reset(self):
        conn = self.h2connect()
        cases = {
            "one 10 KiB field": [("x-big", "a" * 10240)],
            "twelve 1 KiB fields": [(f"x-f{i}", "b" * 1024) for i in range(12)],
            "150 small fields": [(f"x-s{i}", "c") for i in range(150)],
            "20 KiB over continuations": [(f"x-c{i}", "d" * 1000) for i in range(20)],
        }
        for name, fields in cases.items():
            with self.subTest(name):
                stream_id = conn.request("GET", "/ping", headers=fields)
                resp = conn.read_response(stream_id)
                if resp is not None:
                    self.assertEqual(resp.status, 431)
                else:
                    self.assertNotEqual(conn.streams[stream_id].reset_code, NO_ERROR)
                self.assertEqual(
                    conn.fetch("GET", "/ping").body, b"pong", "the connection was not kept after a stream-level refusal"
                )
        self.assertEqual(conn.goaways, [])
        self.assert_recovered(conn)

    def test_a_header_list_under_the_limit_is_served(self):
        conn = self.h2connect()
        resp = conn.fetch("GET", "/ping", headers=[(f"x-f{i}", "e" * 1000) for i in range(6)])
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
        self.assert_recovered(conn)

    def assert_closed_for_flooding(self, conn):
        codes = [g.error_code() for g in conn.goaways]
        self.assertTrue(conn.eof, "still open")
        self.assertEqual(codes[-1:], [ENHANCE_YOUR_CALM], f"expected GOAWAY ENHANCE_YOUR_CALM, got {conn.goaways}")

    def test_ping_flood_with_acks_left_unread_gets_goaway_enhance_your_calm(self):
        conn = self.flood_conn()
        conn.flood(ping_frame(b"floodpng") * FLOOD_FRAMES, quiet=3)
        self.assert_closed_for_flooding(conn)
        self.assert_recovered(conn)

    def test_settings_flood_with_acks_left_unread_gets_goaway_enhance_your_calm(self):
        conn = self.flood_conn()
        conn.flood(settings_frame() * FLOOD_FRAMES, quiet=3)
        self.assert_closed_for_flooding(conn)
        self.assert_recovered(conn)

    def test_many_pings_whose_acks_are_read_are_answered(self):
        conn = self.h2connect()
        for _ in range(20):
            conn.send(ping_frame(b"polite!!") * 500)
            conn.read_until(lambda: len(conn.ping_acks) >= 500, "500 PING ACKs")
            conn.ping_acks.clear()
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(conn.goaways, [])
        self.assert_recovered(conn)

    def test_streams_over_max_concurrent_streams_are_refused(self):
        # RFC 9113 §5.1.2 makes the excess a stream error (REFUSED_STREAM or
        # PROTOCOL_ERROR); §5.4.1 lets an endpoint treat any stream error as
        # a connection error, which is what nghttp2 does (GOAWAY
        # PROTOCOL_ERROR). Either way no stream within the limit is reset, no
        # excess stream is answered, and everyone else is still served.
        conn = self.h2connect()
        limit = conn.peer_settings[MAX_CONCURRENT_STREAMS]
        block = hpack_encode(request_headers("GET", "/delay?ms=300"))
        ids = list(range(1, 2 * (limit + 8), 2))
        conn.send(b"".join(headers_frame(sid, block) for sid in ids))
        conn.next_stream_id = ids[-1] + 2
        admitted, excess = ids[:limit], ids[limit:]
        try:
            conn.read_until(lambda: all(conn.stream(sid).closed for sid in ids), f"{len(ids)} streams to end")
        except ConnectionClosed:
            self.assertEqual([error_name(g.error_code()) for g in conn.goaways], ["PROTOCOL_ERROR"])
            self.assertLessEqual(conn.goaways[0].goaway_last_stream(), admitted[-1])
        else:
            codes = {error_name(conn.streams[sid].reset_code) for sid in excess}
            self.assertLessEqual(codes, {"REFUSED_STREAM", "PROTOCOL_ERROR"}, codes)
            self.assertEqual({conn.streams[sid].response().status for sid in admitted}, {200})
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual([sid for sid in admitted if conn.stream(sid).reset_code is not None], [])
        self.assertEqual([sid for sid in excess if conn.stream(sid).response()], [])
        self.assert_recovered(conn)


class StalledPeerTest(H2DefenceTestCase):
    """Peers that take none of what they asked for are dropped after
    --send-timeout, while others are served."""

    server_args = ["--workers", "1", "--send-timeout", "500"]

    def test_a_peer_that_keeps_its_window_shut_is_dropped_after_the_send_timeout(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 0}, auto_window=False)
        stream_id = conn.request("GET", "/echo?size=16777216")
        started = time.monotonic()
        self.assert_serves_both()
        # Chatting (PINGs) is no progress: the timeout still runs.
        while not conn.eof and time.monotonic() - started < 3:
            try:
                conn.send(ping_frame(b"stillup!"))
            except (BrokenPipeError, ConnectionResetError):
                conn.pump(1)  # the server hung up; take what it sent first
                break
            conn.pump(0.1)
        elapsed = time.monotonic() - started
        self.assertTrue(conn.eof, "not dropped within 3 s, six send timeouts")
        self.assertGreaterEqual(elapsed, 0.4, "dropped before the send timeout")
        resp = conn.streams[stream_id].response()
        self.assertEqual(resp and resp.status, 200, "the response was never begun")
        self.assertEqual(len(conn.streams[stream_id].body), 0)
        self.assertFalse(conn.streams[stream_id].ended)
        self.assert_recovered(conn)

    def test_a_peer_that_stops_reading_its_socket_is_dropped_after_the_send_timeout(self):
        conn = self.h2connect(rcvbuf=4096, auto_window=False)
        stream_id = conn.request("GET", "/echo?size=16777216")
        started = time.monotonic()
        self.assert_serves_both()
        time.sleep(1.5)
        conn.read_until_closed(5)
        self.assertLess(time.monotonic() - started, 3, "not dropped within the send timeout")
        stream = conn.streams[stream_id]
        self.assertEqual(stream.response() and stream.response().status, 200, "the response was never begun")
        self.assertGreater(len(stream.body), 0)
        self.assertLess(len(stream.body), 16 * MiB)
        self.assertFalse(stream.ended)
        self.assert_recovered(conn)

    def test_peers_that_vanish_mid_response_are_released(self):
        conns = []
        for _ in range(20):
            conn = self.h2connect(rcvbuf=4096)
            conn.request("GET", "/echo?size=16777216")
            conn.request("GET", "/delay?ms=2000")
            conn.request("POST", "/echo", headers=[("content-length", 100000)], body=b"a" * 5000, end_stream=False)
            conns.append(conn)
        time.sleep(0.3)
        for conn in conns:
            conn.abort()
        self.assert_recovered()

    def test_a_slow_but_steady_reader_gets_all_of_its_response(self):
        # 2 MiB in 64 KiB windows, a 0.1 s pause after each: 3 s in all, six
        # send timeouts, but never one without progress.
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 65535})
        stream_id = conn.request("GET", "/echo?size=2097152")
        stream = conn.streams[stream_id]
        while not stream.closed:
            conn.read_frame()
            if stream.data_frames and stream.data_frames % 4 == 0:
                time.sleep(0.1)
        self.assertEqual(len(stream.body), 2 * MiB)
        self.assert_recovered(conn)


class QuietPeerTest(H2DefenceTestCase):
    """Peers that go quiet: an idle connection, a header block or a request
    body that stops coming. Each is given up after its timeout."""

    server_args = ["--workers", "1", "--idle-timeout", "500", "--header-timeout", "500", "--body-timeout", "500"]

    def wait_given_up(self, conn, stream_id):
        """Seconds until the server ended the stream (RST_STREAM or a 408) or
        the connection; fails if it did neither within 3 s."""
        stream = conn.stream(stream_id)
        started = time.monotonic()
        while not conn.eof and not stream.closed and time.monotonic() - started < 3:
            conn.pump(0.05)
        elapsed = time.monotonic() - started
        self.assertTrue(conn.eof or stream.closed, f"stream {stream_id} still open after 3 s")
        if stream.closed and stream.response() is not None:
            self.assertEqual(stream.response().status, 408)
        self.assertGreaterEqual(elapsed, 0.4, "given up before the timeout")
        return elapsed

    def test_an_idle_connection_gets_goaway_after_the_idle_timeout(self):
        conn = self.h2connect()
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        started = time.monotonic()
        conn.read_until_closed(3)
        self.assertGreaterEqual(time.monotonic() - started, 0.4)
        self.assertEqual([g.error_code() for g in conn.goaways], [NO_ERROR])
        self.assert_recovered(conn)

    def test_a_header_block_that_never_ends_is_given_up_after_the_header_timeout(self):
        conn = self.h2connect()
        conn.send(headers_frame(1, hpack_encode(request_headers("GET", "/ping")), end_headers=False))
        self.wait_given_up(conn, 1)
        self.assert_recovered(conn)

    def test_a_body_that_stops_coming_is_given_up_after_the_body_timeout(self):
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", headers=[("content-length", 100)], end_stream=False)
        conn.send_data(stream_id, b"a" * 10, end_stream=False)
        self.wait_given_up(conn, stream_id)
        self.assert_recovered(conn)

    def test_a_slow_but_steady_body_is_received_whole(self):
        # Ten pieces 0.2 s apart: 2 s in all, four body timeouts, no gap of one.
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", end_stream=False)
        for i in range(10):
            conn.send_data(stream_id, bytes([65 + i]) * 1000, end_stream=i == 9)
            time.sleep(0.2)
        resp = conn.read_response(stream_id)
        self.assertEqual((resp.status, resp.body), (200, b"".join(bytes([65 + i]) * 1000 for i in range(10))))
        self.assert_recovered(conn)


if __name__ == "__main__":
    unittest.main()
