"""HTTP/2 as clients see it: curl, nghttp, h2load and the raw client in
support/h2client.py, over cleartext (prior knowledge and Upgrade: h2c) on the
port that also serves HTTP/1.1."""

import email.utils
import json
import os
import signal
import tempfile
import threading
import time
import unittest

from support.h2client import (
    CANCEL,
    DEFAULT_WINDOW,
    END_STREAM,
    HEADER_TABLE_SIZE,
    HEADERS,
    HUFFMAN_CODES,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    NO_ERROR,
    PREFACE,
    H2Conn,
    H2ServerTestCase,
    HpackDecoder,
    assert_h2_response_fields,
    continuation_frame,
    curl,
    data_frame,
    error_name,
    goaway_frame,
    headers_frame,
    hpack_encode,
    hpack_insert,
    huffman_decode,
    huffman_encode,
    priority_frame,
    request_headers,
    rst_stream_frame,
    settings_frame,
)
from support.harness import Conn, run_client, start_server
from support.loadgen import h2load_report

MiB = 1 << 20


def random_file(test, size):
    """A temporary file of `size` random bytes; (path, bytes)."""
    data = os.urandom(size)
    handle = tempfile.NamedTemporaryFile(delete=False)
    test.addCleanup(os.unlink, handle.name)
    with handle:
        handle.write(data)
    return handle.name, data


class H2ClientSelfTest(unittest.TestCase):
    """The test client's HPACK decoder, so a server bug is never a client bug."""

    def test_huffman_table_is_a_complete_prefix_code_that_round_trips(self):
        self.assertEqual(len(HUFFMAN_CODES), 257)
        self.assertEqual(sum(2 ** (30 - bits) for _, bits in HUFFMAN_CODES), 2**30)
        data = bytes(range(256)) * 2
        self.assertEqual(huffman_decode(huffman_encode(data)), data)

    def test_decoder_reads_rfc7541_c6_responses_with_huffman_and_eviction(self):
        decoder = HpackDecoder(256)
        blocks = [
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff"
            "6e919d29ad171863c78f0b97c8e9ae82ae43d3",
            "4883640effc1c0bf",
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94"
            "e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c0"
            "03ed4ee5b1063d5007",
        ]
        results = [decoder.decode(bytes.fromhex(block)) for block in blocks]
        date = b"Mon, 21 Oct 2013 20:13:21 GMT"
        self.assertEqual(
            results[0],
            [
                (b":status", b"302"),
                (b"cache-control", b"private"),
                (b"date", date),
                (b"location", b"https://www.example.com"),
            ],
        )
        self.assertEqual(results[1][0], (b":status", b"307"))
        self.assertEqual(results[2][-1], (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"))
        self.assertEqual(decoder.size, 215)


class CurlAndNghttpTest(H2ServerTestCase):
    server_args = ["--workers", "2", "--h2c-upgrade"]

    def curl_h2(self, target, *args):
        """curl with prior knowledge; (CompletedProcess, http_version, status)."""
        result = curl(
            "--http2-prior-knowledge", "-w", "\n%{http_version} %{response_code}", *args, self.server.url(target)
        )
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        body, _, tail = result.stdout.rpartition(b"\n")
        version, status = tail.decode().split()
        result.stdout = body
        return result, version, int(status)

    def test_curl_with_prior_knowledge_gets_pong_over_http2(self):
        result, version, status = self.curl_h2("/ping")
        self.assertEqual((version, status, result.stdout), ("2", 200, b"pong"))

    def test_curl_upgrade_h2c_gets_101_then_the_answer_over_http2(self):
        result = curl("-v", "--http2", "-w", "\n%{http_version}", self.server.url("/ping"))
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        trace = result.stderr.decode("utf-8", "replace")
        self.assertIn("< HTTP/1.1 101", trace)
        self.assertRegex(trace, r"< HTTP/2 200")
        self.assertEqual(result.stdout, b"pong\n2")

    def test_curl_upgrade_offered_with_a_body_gets_the_body_back_either_way(self):
        # A server may ignore an Upgrade (RFC 9110 §7.8) and answer one that
        # comes with a body over HTTP/1.1, but the answer must be whole.
        path, data = random_file(self, 100000)
        result = curl("--http2", "--data-binary", f"@{path}", "-w", "%{http_version}", self.server.url("/echo"))
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertIn(result.stdout[len(data) :], (b"1.1", b"2"))
        self.assertTrue(result.stdout[: len(data)] == data, "echoed body differs")

    def test_curl_echo_get_returns_each_size_in_full(self):
        for size in (0, 1, 4096, MiB, 16 * MiB):
            with self.subTest(size=size):
                result, version, status = self.curl_h2(f"/echo?size={size}")
                self.assertEqual((version, status), ("2", 200))
                self.assertEqual(len(result.stdout), size)
                self.assertEqual(result.stdout.count(b"x"), size)

    def test_curl_post_echo_returns_random_bodies_byte_for_byte(self):
        for size in (0, 1024, MiB, 64 * MiB):
            with self.subTest(size=size):
                path, data = random_file(self, size)
                out = path + ".out"
                self.addCleanup(lambda p=out: os.path.exists(p) and os.unlink(p))
                _, version, status = self.curl_h2(
                    "/echo", "--data-binary", f"@{path}", "-H", "Content-Type: application/octet-stream", "-o", out
                )
                self.assertEqual((version, status), ("2", 200))
                with open(out, "rb") as handle:
                    echoed = handle.read()
                self.assertEqual(len(echoed), size)
                self.assertTrue(echoed == data, "echoed body differs from the one sent")

    def test_nghttp_shows_the_settings_exchange_and_the_response(self):
        result = run_client(["nghttp", "-v", self.server.url("/ping")], timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        out = result.stdout.decode("utf-8", "replace")
        self.assertRegex(out, r"recv SETTINGS frame <length=\d+, flags=0x00")
        self.assertRegex(out, r"recv SETTINGS frame <length=0, flags=0x01")
        self.assertIn(":status: 200", out)
        self.assertIn("server: xkit", out)
        self.assertIn("content-length: 4", out)
        self.assertRegex(out, r"(?m)^pong")

    def test_nghttp_upgrade_and_post_are_answered(self):
        result = run_client(["nghttp", "-u", "-v", self.server.url("/ping")], timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        out = result.stdout.decode("utf-8", "replace")
        self.assertIn("HTTP Upgrade success", out)
        self.assertIn(":status: 200", out)
        path, data = random_file(self, 300000)
        result = run_client(["nghttp", "-d", path, self.server.url("/echo")], timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr.decode())
        self.assertTrue(result.stdout == data, f"nghttp -d echoed {len(result.stdout)} bytes")

    def test_h2load_smoke_run_has_no_failures_and_only_2xx(self):
        baseline = self.server.settle_fd_baseline()
        report, text = h2load_report(
            run_client(["h2load", "-n", "20000", "-c", "10", "-m", "10", self.server.url("/ping")], timeout=120)
        )
        self.assertEqual(report.problems, [], text)  # exit 0, no failed, errored or timed-out stream, all 2xx
        self.assertEqual((report.requests, report.statuses["2xx"]), (20000, 20000), text)
        self.assertEqual(self.server.wait_fd_count(baseline), baseline)


class RawHttp2Test(H2ServerTestCase):
    server_args = ["--workers", "2", "--h2c-upgrade"]

    def test_server_settings_allow_256_streams_and_16mib_windows(self):
        conn = self.h2connect()
        self.assertTrue(conn.ping(), "no PING ACK")
        settings = conn.peer_settings_frames[0]
        self.assertGreaterEqual(settings.get(MAX_CONCURRENT_STREAMS, 0), 256, settings)
        self.assertGreaterEqual(settings.get(INITIAL_WINDOW_SIZE, DEFAULT_WINDOW), 16 * MiB - 1, settings)
        self.assertGreaterEqual(conn.send_window, 16 * MiB - 1, "connection window not raised")
        self.assertGreaterEqual(conn.settings_acks, 1, "our SETTINGS were not acknowledged")

    def test_ping_response_carries_status_date_server_type_and_length(self):
        resp = self.h2fetch("GET", "/ping")
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
        assert_h2_response_fields(self, resp)
        self.assertTrue(resp.header("content-type").startswith("text/plain"))
        self.assertEqual(resp.header("content-length"), "4")

    def test_echo_get_returns_each_size_in_full_with_its_length(self):
        conn = self.h2connect()
        for size in (0, 1, 4096, 16385, MiB, 16 * MiB):
            with self.subTest(size=size):
                resp = conn.fetch("GET", f"/echo?size={size}")
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.header("content-length"), str(size))
                self.assertEqual(len(resp.body), size)
                self.assertEqual(resp.body.count(b"x"), size)
                assert_h2_response_fields(self, resp)

    def test_post_echo_with_and_without_content_length_and_with_padding(self):
        conn = self.h2connect()
        for size in (0, 1, 16384, 65536, 3 * MiB):
            data = os.urandom(size)
            for declared in (True, False):
                with self.subTest(size=size, content_length=declared):
                    headers = [("content-length", size)] if declared else []
                    resp = conn.fetch("POST", "/echo", headers=headers, body=data)
                    self.assertEqual(resp.status, 200)
                    self.assertEqual(resp.header("content-length"), str(size))
                    self.assertTrue(resp.body == data, f"echoed {len(resp.body)} bytes")
        data = os.urandom(100000)
        stream_id = conn.request("POST", "/echo", end_stream=False)
        self.assertTrue(conn.send_data(stream_id, data, padding=200))
        resp = conn.read_response(stream_id)
        self.assertTrue((resp.status, resp.body) == (200, data), "padded DATA echoed wrong")

    def test_request_headers_split_over_continuation_frames_are_served(self):
        conn = self.h2connect()
        fields = request_headers("GET", "/ping", headers=[(f"x-part-{i}", "v" * 200) for i in range(20)])
        block = hpack_encode(fields)
        third = len(block) // 3
        conn.send(
            headers_frame(1, block[:third], end_headers=False)
            + continuation_frame(1, block[third : 2 * third], end_headers=False)
            + continuation_frame(1, block[2 * third :])
        )
        conn.next_stream_id = 3
        resp = conn.read_response(1)
        self.assertEqual((resp.status, resp.body), (200, b"pong"))

    def test_stream_route_sends_data_frames_without_content_length(self):
        resp = self.h2fetch("GET", "/stream?chunks=5&size=10000")
        self.assertEqual(resp.status, 200)
        self.assertIsNone(resp.header("content-length"))
        self.assertEqual(resp.body, b"".join(bytes([48 + i]) * 10000 for i in range(5)))
        self.assertGreaterEqual(resp.data_frames, 4)
        assert_h2_response_fields(self, resp)

    def test_streamed_trailers_arrive_in_a_last_headers_frame_that_ends_the_stream(self):
        conn = self.h2connect()
        stream_id = conn.request("GET", "/stream?chunks=3&size=100&trailer=all-good", headers=[("te", "trailers")])
        resp = conn.read_response(stream_id)
        self.assertEqual((resp.status, len(resp.body)), (200, 300))
        self.assertEqual(resp.trailers, [[(b"x-stream-trailer", b"all-good")]])
        ftype, flags = [(t, f) for t, f, sid, _ in conn.frames_seen if sid == stream_id][-1]
        self.assertEqual(ftype, HEADERS)
        self.assertTrue(flags & END_STREAM, "the trailers did not end the stream")

    def test_priority_frames_are_accepted_and_change_nothing_visible(self):
        conn = self.h2connect()
        conn.send(priority_frame(1, 0, weight=200) + priority_frame(9, 1, exclusive=True))
        streams = conn.fetch_many([("GET", "/ping"), ("GET", "/echo?size=5")])
        self.assertEqual([bytes(s.body) for s in streams], [b"pong", b"xxxxx"])
        self.assertEqual(conn.goaways, [])

    def test_client_goaway_lets_the_stream_in_flight_finish_then_the_server_closes(self):
        conn = self.h2connect()
        stream_id = conn.request("GET", "/delay?ms=300")
        conn.send(goaway_frame(0, NO_ERROR))
        resp = conn.read_response(stream_id)
        self.assertEqual((resp.status, resp.body), (200, b"done"))
        conn.read_until_closed(3)

    def test_delay_is_answered_later_while_the_same_connection_serves_others(self):
        conn = self.h2connect()
        started = time.monotonic()
        delayed = conn.request("GET", "/delay?ms=600")
        quick = conn.request("GET", "/ping")
        resp = conn.read_response(quick)
        self.assertEqual(resp.body, b"pong")
        self.assertFalse(conn.streams[delayed].closed, "the delay ended before the ping")
        self.assertLess(time.monotonic() - started, 0.5)
        resp = conn.read_response(delayed)
        self.assertEqual((resp.status, resp.body), (200, b"done"))
        self.assertGreaterEqual(time.monotonic() - started, 0.55)

    def test_repeated_and_changing_answers_on_one_connection_each_carry_their_own_head(self):
        # A connection copies a response head's block while the next one repeats it:
        # every change (length, status, HEAD, type) must still show, and so must a
        # repeat after a change.
        conn = self.h2connect()
        sequence = [("GET", "/ping")] * 3 + [("GET", "/echo?size=1")] * 3 + [("GET", "/echo?size=2")]
        sequence += [("HEAD", "/echo?size=2"), ("GET", "/nope"), ("GET", "/nope"), ("GET", "/ping")]
        sequence += [("GET", "/echo?size=1"), ("GET", "/ping"), ("GET", "/ping")]
        for round_ in range(2):
            for i, (method, target) in enumerate(sequence):
                with self.subTest(round=round_, request=i, method=method, target=target):
                    resp = conn.fetch(method, target)
                    want = {"/ping": (200, b"pong"), "/nope": (404, None)}.get(target)
                    if target.startswith("/echo"):
                        size = int(target.rsplit("=", 1)[1])
                        want = (200, b"" if method == "HEAD" else b"x" * size)
                        self.assertEqual(resp.header("content-length"), str(size))
                    self.assertEqual(resp.status, want[0])
                    if want[1] is not None:
                        self.assertEqual(resp.body, want[1])
                    if target == "/ping":
                        self.assertEqual(resp.header("content-length"), "4")
                        self.assertTrue(resp.header("content-type").startswith("text/plain"))
                    if target == "/nope":
                        self.assertEqual(resp.header("content-length"), str(len(resp.body)))
                    assert_h2_response_fields(self, resp)

    def test_repeated_heads_differing_only_in_a_value_of_the_same_length_each_carry_their_own(self):
        # The head memo compares the handler's lines byte for byte: an ETag, a type or a
        # handler's own Server of the same length but other letters, the server choice
        # (ours or the handler's), a status and a length each get their own head.
        def path(status=200, size=4, **fields):
            query = "".join(f"&{k}={v}" for k, v in fields.items())
            return f"/text?size={size}{query}" + (f"&status={status}" if status != 200 else "")

        plan = [path(type="text/aaa", etag="aa11")] * 2 + [path(type="text/aaa", etag="bb22")] * 2
        plan += [path(type="text/bbb", etag="bb22")] * 2 + [path(type="text/bbb", etag="bb22", server="abcd")] * 2
        plan += [path(type="text/bbb", etag="bb22", server="wxyz")] * 2 + [path(type="text/bbb", etag="bb22")]
        plan += [path(status=201, type="text/bbb", etag="bb22"), path(size=5, type="text/bbb", etag="bb22")]
        plan += [path(type="text/aaa", etag="aa11")]
        conn = self.h2connect()
        for i, target in enumerate(plan + plan):
            with self.subTest(request=i, target=target):
                resp = conn.fetch("GET", target)
                query = dict(part.split("=", 1) for part in target.split("?", 1)[1].split("&"))
                self.assertEqual(resp.status, int(query.get("status", 200)))
                self.assertEqual(resp.header("content-type"), query["type"])
                self.assertEqual(resp.header("etag"), query["etag"])
                self.assertEqual(resp.header("server"), query.get("server", "xkit"))
                self.assertEqual(resp.header("content-length"), query["size"])
                self.assertEqual(len(resp.body), int(query["size"]))
                self.assertEqual(sum(1 for n, _ in resp.headers if n == "server"), 1)

    def test_repeated_heads_follow_the_peers_header_table_size(self):
        # A copied head refers to entries of the dynamic table (server, date): when the
        # client's SETTINGS_HEADER_TABLE_SIZE shrinks the table, evicts entries or grows
        # it again, the next head must start with the size update and refer only to
        # entries the client's decoder holds (its decoder raises on any other index).
        conn = self.h2connect()
        for size in (4096, 0, 100, 4096, 64, 4096):
            acks = conn.settings_acks
            conn.send(settings_frame({HEADER_TABLE_SIZE: size}))
            conn.read_until(lambda: conn.settings_acks > acks, "the SETTINGS ACK")  # noqa: B023 (called here)
            for i in range(4):
                with self.subTest(size=size, request=i):
                    resp = conn.fetch("GET", "/ping")
                    self.assertEqual((resp.status, resp.body), (200, b"pong"))
                    self.assertEqual(resp.header("server"), "xkit")
                    assert_h2_response_fields(self, resp)
                    self.assertEqual(conn.decoder.max_size, size, "the size update did not come")
                    self.assertLessEqual(conn.decoder.size, size)

    def test_a_repeated_head_carries_the_date_of_its_second(self):
        conn = self.h2connect()
        first = [conn.fetch("GET", "/ping") for _ in range(3)]
        time.sleep(1.1)
        later = conn.fetch("GET", "/ping")
        dates = [email.utils.parsedate_to_datetime(r.header("date")) for r in first + [later]]
        self.assertGreaterEqual((dates[-1] - dates[-2]).total_seconds(), 1, [r.header("date") for r in first + [later]])

    def test_a_repeated_block_is_read_again_after_the_table_it_refers_to_changed(self):
        # A stream whose header block is the bytes of the last one shares its decoded
        # head; bytes that refer to the dynamic table (index 62, the newest entry) mean
        # another cookie once the client inserted another, and a block with a cookie
        # more or less is another block: each request's handler sees its own cookie.
        base = hpack_encode(request_headers("GET", "/whoami"))
        newest = b"\xbe"
        plan = (
            [(hpack_insert("cookie", "id=aaaa"), "aaaa")]
            + [(newest, "aaaa")] * 3
            + [(hpack_insert("cookie", "id=bbbb"), "bbbb")]
        )
        plan += [(newest, "bbbb")] * 2 + [(b"", None), (newest, "bbbb"), (b"", None), (b"", None)]
        plan += [(hpack_encode([("cookie", "id=cccc")]), "cccc"), (newest, "bbbb")]
        conn = self.h2connect()
        for i, (tail, cookie) in enumerate(plan):
            with self.subTest(request=i, cookie=cookie):
                stream_id = conn.new_stream_id()
                conn.stream(stream_id)
                conn.send(headers_frame(stream_id, base + tail))
                resp = conn.read_response(stream_id)
                self.assertEqual(resp.status, 200)
                self.assertEqual(json.loads(resp.body)["cookie"], cookie)

    def test_a_worker_remembers_404_and_405_per_method_and_path(self):
        # The worker's router memo keeps a 404 or a 405 with its Allow list: the same
        # path asked under other methods in turn, and other paths between, each get
        # their own answer (a path 405 under GET is routed under POST).
        plan = [("GET", "/upload", 405, "POST")] * 3 + [("POST", "/upload", 200, None)]
        plan += [("GET", "/upload", 405, "POST"), ("PUT", "/upload", 405, "POST"), ("GET", "/nope", 404, None)]
        plan += [("GET", "/nope", 404, None), ("DELETE", "/echo", 405, "GET, HEAD, POST"), ("HEAD", "/ping", 200, None)]
        plan += [("GET", "/ping", 200, None), ("PUT", "/ping", 405, "GET, HEAD"), ("POST", "/upload", 200, None)]
        conn = self.h2connect()
        for i, (method, path, status, allow) in enumerate(plan + plan):
            with self.subTest(request=i, method=method, path=path):
                resp = conn.fetch(method, path, body=b"abc" if method == "POST" else None)
                self.assertEqual((resp.status, resp.header("allow")), (status, allow))

    def test_head_has_the_length_and_no_body(self):
        resp = self.h2fetch("HEAD", "/echo?size=1000")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header("content-length"), "1000")
        self.assertEqual(resp.body, b"")
        assert_h2_response_fields(self, resp)

    def test_unknown_path_is_404_and_bad_query_400(self):
        for target, status in (("/nope", 404), ("/ping/extra", 404), ("/echo?size=abc", 400)):
            with self.subTest(target=target):
                resp = self.h2fetch("GET", target)
                self.assertEqual(resp.status, status)
                self.assertEqual(resp.header("content-length"), str(len(resp.body)))
                assert_h2_response_fields(self, resp)

    def test_wrong_method_is_405_with_allow(self):
        for method, target, allowed in (
            ("DELETE", "/ping", {"get", "head"}),
            ("PUT", "/echo", {"get", "head", "post"}),
        ):
            with self.subTest(method=method, target=target):
                resp = self.h2fetch(method, target)
                self.assertEqual(resp.status, 405)
                self.assertEqual(resp.tokens("allow"), allowed)
                assert_h2_response_fields(self, resp)

    def test_raw_upgrade_answers_stream_1_and_then_serves_more_streams(self):
        conn = self.h2connect(handshake=False)
        head = conn.upgrade("/echo?size=100000")
        self.assertIn(b"upgrade: h2c", head.lower())
        resp = conn.read_response(1)
        self.assertEqual((resp.status, len(resp.body)), (200, 100000))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_upgrade_whose_settings_are_not_base64url_pairs_is_served_over_http1(self):
        # RFC 7540 §3.2.1: HTTP2-Settings is a SETTINGS payload in base64url.
        # A value that is not (a base64 digit, padding with text after it), or
        # that cuts a setting short, is no offer: HTTP/1.1 answers, no 101.
        for value in ("AAMAAABk+AAA", "AAMAAABk==AA", "AAMAAABk====", "AAMAAABkAA"):
            with self.subTest(value=value), Conn(self.server.port) as conn:
                conn.request(
                    "GET",
                    "/ping",
                    headers=[("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"), ("HTTP2-Settings", value)],
                )
                resp = conn.read_final_response()
                self.assertEqual((resp.version, resp.status, resp.body), ("HTTP/1.1", 200, b"pong"))
                self.assertEqual(resp.interim, [], "answered 101 Switching Protocols")

    def test_a_thousand_streams_on_one_connection_are_all_answered(self):
        conn = self.h2connect()
        streams = conn.fetch_many([("GET", "/ping")] * 500 + [("GET", "/echo?size=3000")] * 500)
        self.assertEqual(len(streams), 1000)
        bad = [s.id for s in streams if s.reset_code is not None or s.response().status != 200]
        self.assertEqual(bad, [], "streams not answered 200")
        self.assertEqual({bytes(s.body) for s in streams}, {b"pong", b"x" * 3000})

    def test_upload_reset_midway_leaves_the_connection_usable(self):
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", headers=[("content-length", MiB)], end_stream=False)
        self.assertTrue(conn.send_data(stream_id, b"a" * 20000, end_stream=False))
        conn.send(rst_stream_frame(stream_id, CANCEL))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        resp = conn.fetch("POST", "/echo", body=b"b" * 5000)
        self.assertEqual(resp.body, b"b" * 5000)
        self.assertTrue(conn.ping())
        self.assertIsNone(conn.streams[stream_id].response(), "a reset upload was answered")

    def test_download_reset_after_its_first_data_leaves_the_connection_usable(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: DEFAULT_WINDOW})
        stream_id = conn.request("GET", "/echo?size=16777216")
        stream = conn.streams[stream_id]
        conn.read_until(lambda: stream.data_frames > 0, "the first DATA")
        conn.send(rst_stream_frame(stream_id, CANCEL))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertLess(len(stream.body), 16 * MiB)
        self.assertFalse(stream.ended)

    def test_body_over_64mib_declared_up_front_is_413(self):
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", headers=[("content-length", 64 * MiB + 1)], end_stream=False)
        resp = conn.read_response(stream_id)
        self.assertIsNotNone(resp, f"reset instead of 413: {error_name(conn.streams[stream_id].reset_code)}")
        self.assertEqual(resp.status, 413)
        # RFC 9113 §8.1: the answer is complete, so the rest of the body is
        # waved off without error, and what was already on its way is ignored.
        stream = conn.streams[stream_id]
        conn.read_until(lambda: stream.reset_code is not None, "RST_STREAM after the 413")
        self.assertEqual(error_name(stream.reset_code), "NO_ERROR")
        conn.send(data_frame(stream_id, b"x" * 1000))
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_early_answer_without_a_body_also_waves_the_upload_off(self):
        # HEAD's answer ends on its HEADERS frame; the reset follows it.
        conn = self.h2connect()
        stream_id = conn.request("HEAD", "/echo", headers=[("content-length", 64 * MiB + 1)], end_stream=False)
        stream = conn.streams[stream_id]
        conn.read_until(lambda: stream.reset_code is not None, "RST_STREAM after the answer")
        self.assertEqual(stream.response().status, 413)
        self.assertTrue(stream.ended, "the answer did not end before the reset")
        self.assertEqual(error_name(stream.reset_code), "NO_ERROR")
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")

    def test_body_over_64mib_undeclared_is_413_or_reset(self):
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", end_stream=False)
        sent_all = conn.send_data(stream_id, bytes(64 * MiB + 16384))
        stream = conn.streams[stream_id]
        if sent_all:
            conn.read_until(lambda: stream.closed, "an answer to 64 MiB + 16 KiB")
        resp = stream.response()
        if resp is not None:
            self.assertEqual(resp.status, 413)
        else:
            self.assertNotEqual(stream.reset_code, NO_ERROR)
        self.assert_serves_both()

    def test_http1_and_http2_clients_share_the_port_at_the_same_time(self):
        failures = []
        all_connected = threading.Barrier(8, timeout=30)

        def http1_client():
            try:
                with Conn(self.server.port) as conn:
                    all_connected.wait()
                    for _ in range(100):
                        conn.request("GET", "/echo?size=2000")
                        resp = conn.read_response()
                        if (resp.status, resp.body) != (200, b"x" * 2000):
                            failures.append(f"HTTP/1.1 got {resp!r}")
            except Exception as err:  # reported below, with the thread's protocol
                failures.append(f"HTTP/1.1 client: {err!r}")

        def http2_client():
            try:
                with H2Conn(self.server.port) as conn:
                    all_connected.wait()
                    streams = conn.fetch_many([("GET", "/echo?size=2000")] * 200, limit=20)
                    for s in streams:
                        if s.response().status != 200 or s.body != b"x" * 2000:
                            failures.append(f"HTTP/2 stream {s.id} got {s.response()!r}")
            except Exception as err:  # reported below, with the thread's protocol
                failures.append(f"HTTP/2 client: {err!r}")

        threads = [threading.Thread(target=fn) for fn in [http1_client, http2_client] * 4]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertFalse(any(t.is_alive() for t in threads), "a client thread hung")
        self.assertEqual(failures, [])


class OptionsTest(unittest.TestCase):
    """--no-http2, --http2-only and --max-streams; each test owns a server."""

    def test_h2c_upgrade_is_off_by_default_and_prior_knowledge_stays(self):
        # Off unless asked (--h2c-upgrade): a proxy that forwards Upgrade would
        # tunnel the HTTP/2 requests after a 101 past its own rules.
        server = start_server(self, ["--workers", "1"])
        result = curl("-v", "-w", "\n%{http_version}", "--http2", server.url("/ping"), timeout=20)
        self.assertEqual((result.returncode, result.stdout), (0, b"pong\n1.1"), result.stderr)
        self.assertNotIn("< HTTP/1.1 101", result.stderr.decode("utf-8", "replace"))
        with Conn(server.port) as conn:
            conn.request(
                "GET",
                "/ping",
                headers=[
                    ("Connection", "Upgrade, HTTP2-Settings"),
                    ("Upgrade", "h2c"),
                    ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
                ],
            )
            resp = conn.read_final_response()
            self.assertEqual((resp.version, resp.status, resp.body, resp.interim), ("HTTP/1.1", 200, b"pong", []))
            # The connection stays HTTP/1.1: a second request on it is served so.
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        with H2Conn(server.port) as conn:
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        server.stop_and_check()

    def test_no_http2_speaks_only_http1(self):
        # --h2c-upgrade asks for the Upgrade, which a server without HTTP/2 still refuses.
        server = start_server(self, ["--workers", "1", "--no-http2", "--h2c-upgrade"])
        result = curl("--http2-prior-knowledge", "-w", "%{http_version}", server.url("/ping"), timeout=20)
        self.assertFalse(result.returncode == 0 and result.stdout.endswith(b"2"), f"HTTP/2 was spoken: {result!r}")
        with H2Conn(server.port, handshake=False) as conn:
            conn.send(PREFACE + settings_frame())
            conn.pump(3)
            data = bytes(conn.buf)
            self.assertTrue(
                data == b"" or data.startswith(b"HTTP/1.1 "), f"answer to the HTTP/2 preface: {data[:100]!r}"
            )
        result = curl("-w", "\n%{http_version}", "--http2", server.url("/ping"), timeout=20)
        self.assertEqual((result.returncode, result.stdout), (0, b"pong\n1.1"), result.stderr)
        with Conn(server.port) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()

    def test_http2_only_refuses_http1_and_serves_http2(self):
        server = start_server(self, ["--workers", "1", "--http2-only"])
        with Conn(server.port) as conn:
            conn.request("GET", "/ping")
            data = conn.read_until_eof(5)
            self.assertNotRegex(data, rb"^HTTP/1\.1 [23]\d\d", "HTTP/1.1 was served")
            self.assertNotIn(b"pong", data)
        with H2Conn(server.port) as conn:
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        server.stop_and_check()

    def test_max_streams_is_announced_and_honoured(self):
        server = start_server(self, ["--workers", "1", "--max-streams", "1000"])
        with H2Conn(server.port) as conn:
            self.assertEqual(conn.peer_settings.get(MAX_CONCURRENT_STREAMS), 1000)
            streams = conn.fetch_many([("GET", "/delay?ms=300")] * 1000, limit=1000)
            codes = {error_name(s.reset_code) for s in streams if s.reset_code is not None}
            self.assertEqual(codes, set(), "streams within the limit were reset")
            self.assertEqual({s.response().status for s in streams}, {200})
        report, text = h2load_report(
            run_client(["h2load", "-n", "1000", "-c", "1", "-m", "1000", server.url("/ping")], timeout=60)
        )
        self.assertEqual(report.problems, [], text)
        self.assertEqual(report.statuses["2xx"], 1000, text)
        server.stop_and_check()


class GracefulStopTest(unittest.TestCase):
    def test_sigterm_sends_goaway_and_answers_inflight_streams(self):
        server = start_server(self, ["--workers", "1", "--shutdown-timeout", "5000"])
        conn = H2Conn(server.port)
        self.addCleanup(conn.close)
        long_one = conn.request("GET", "/delay?ms=1000")
        short_one = conn.request("GET", "/delay?ms=300")
        time.sleep(0.1)
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        for stream_id in (short_one, long_one):
            resp = conn.read_response(stream_id)
            self.assertIsNotNone(resp, f"stream {stream_id} reset by the stop")
            self.assertEqual((resp.status, resp.body), (200, b"done"))
        self.assertGreaterEqual(time.monotonic() - stopped, 0.8, "the delay was cut short")
        conn.read_until_closed(5)
        conn.close()  # the server need not linger for our FIN
        self.assertTrue(conn.goaways, "no GOAWAY before the close")
        self.assertEqual({g.error_code() for g in conn.goaways}, {NO_ERROR}, conn.goaways)
        self.assertGreaterEqual(conn.goaways[-1].goaway_last_stream(), long_one)
        server.assert_clean_exit(server.wait_exit(5))

    def test_sigterm_closes_idle_http2_connections_with_goaway_promptly(self):
        server = start_server(self, ["--workers", "2", "--shutdown-timeout", "10000"])
        conns = []
        for _ in range(3):
            conn = H2Conn(server.port)
            self.addCleanup(conn.close)
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
            conns.append(conn)
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        for conn in conns:
            conn.read_until_closed(3)
            conn.close()
            self.assertTrue(conn.goaways, "idle connection closed without GOAWAY")
            self.assertEqual(conn.goaways[-1].error_code(), NO_ERROR)
        server.assert_clean_exit(server.wait_exit(3))
        self.assertLess(time.monotonic() - stopped, 3)


if __name__ == "__main__":
    unittest.main()
