"""HTTP/3 as clients see it: https_bench_server serves h3 on the UDP port of its
TLS port's number, and aioquic (PyPI) and ngtcp2's gtlsclient (Debian
ngtcp2-client) reach the same routes and handlers HTTPS/1.1 and /2 do: whole
responses from memory, streamed ones with trailers, static files, request
bodies whole and streamed (a held reader holds the client back through QUIC's
flow control), many requests at once on one connection. A malformed request
stream gets its RFC 9114 error code while other connections keep being served;
the access log and the metrics name the protocol; a graceful stop ends open
connections cleanly."""

import asyncio
import email.utils
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import types
import unittest
import zlib

import pylsqpack
from aioquic import tls
from aioquic.h3.connection import FrameType, encode_frame
from cryptography.hazmat.primitives.serialization import Encoding

from support.h3client import h3_connect, run
from support.tls_fixtures import (
    HttpsTestCase,
    cert_der,
    curl_https,
    current_certs,
    https_server_path,
    replace_file,
    shared_certs,
    start_https,
)

setUpModule, tearDownModule = shared_certs(__name__)

MiB = 1 << 20

# RFC 9114 §8.1.
H3_FRAME_UNEXPECTED = 0x105
H3_FRAME_ERROR = 0x106
H3_MESSAGE_ERROR = 0x10E
H3_REQUEST_INCOMPLETE = 0x10D
H3_REQUEST_CANCELLED = 0x10C
H3_NO_ERROR = 0x100
H3_STREAM_CREATION_ERROR = 0x103
H3_EXCESSIVE_LOAD = 0x107
QPACK_ENCODER_STREAM_ERROR = 0x201  # RFC 9204 §6


def prefixed_integer(high_bits, prefix_bits, value):
    """An integer of QPACK's (RFC 9204 §4.1.1, HPACK's): high_bits above a
    prefix_bits prefix, continued in 7-bit bytes."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([high_bits | value])
    out, value = [high_bits | limit], value - limit
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(out + [value])


class Http3Test(HttpsTestCase):
    """One server with static files, an access log and metrics."""

    @classmethod
    def options(cls, certs):
        cls.static_dir = tempfile.mkdtemp()
        cls.big = os.urandom(3 * MiB + 17)
        with open(os.path.join(cls.static_dir, "big.bin"), "wb") as out:
            out.write(cls.big)
        cls.log_path = os.path.join(cls.static_dir, "access.log")
        return ["--workers", "1", "--static", cls.static_dir, "--metrics", "--access-log", cls.log_path]

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.static_dir, ignore_errors=True)

    def connect(self):
        return h3_connect("127.0.0.1", self.server.port, ca_file=self.certs.ca)

    def test_get_index_matches_what_https_serves(self):
        async def go():
            async with self.connect() as h3:
                return await h3.request("GET", "/")

        response = run(go())
        self.assertEqual(response.status, 200)
        self.assertTrue(response.body.startswith(b"xKit bench server"), response.body[:60])
        self.assertEqual(int(response.headers["content-length"]), len(response.body))
        self.assertEqual(response.headers["server"], "xkit")
        self.assertIn("date", response.headers)

    def test_post_body_is_echoed_whole(self):
        body = os.urandom(300_000)

        async def go():
            async with self.connect() as h3:
                return await h3.request("POST", "/echo", body=body)

        response = run(go())
        self.assertEqual(response.status, 200)
        self.assertEqual(response.body, body)

    def test_large_response_from_memory_arrives_whole(self):
        async def go():
            async with self.connect() as h3:
                return await h3.request("GET", "/echo?size=5000000")

        response = run(go())
        self.assertEqual(response.status, 200)
        self.assertEqual(response.body, b"x" * 5_000_000)

    def test_static_file_arrives_whole(self):
        # (aioquic holds a HEAD response's content-length against its empty body, so HEAD is
        # left to the HTTP/1.1 and HTTP/2 tests: the exchange answers it the same way.)
        async def go():
            async with self.connect() as h3:
                return await h3.request("GET", "/static/big.bin")

        got = run(go())
        self.assertEqual(got.status, 200)
        self.assertEqual(int(got.headers["content-length"]), len(self.big))
        self.assertEqual(got.body, self.big)

    def test_concurrent_streams_on_one_connection(self):
        async def go():
            async with self.connect() as h3:
                return await asyncio.gather(
                    *[h3.request("GET", "/ping") for _ in range(80)],
                    *[h3.request("GET", f"/echo?size={1000 * i}") for i in range(20)],
                )

        responses = run(go())
        self.assertEqual([r.body for r in responses[:80]], [b"pong"] * 80)
        self.assertEqual([len(r.body) for r in responses[80:]], [1000 * i for i in range(20)])

    # A request's field section sent again byte for byte is QPACK's kept section, and its
    # streams share one decoded head: every handler still reads its own request, however
    # late, whatever came after, whether the client's encoder uses the dynamic table
    # (aioquic's, in the table the server allows) or not (Required Insert Count 0).

    def late_echoes(self, table):
        """Streams of one section three times, another section three times, and the
        first again, all in flight at once, each handler reading its request 300 ms on."""

        async def go():
            async with self.connect() as h3:
                tags = ["first"] * 3 + ["second"] * 3 + ["first"] * 3
                asked = [
                    h3.request("GET", "/delay?ms=300", headers=[("x-echo", tag), ("x-n", "1")], table=table)
                    for tag in tags
                ]
                asked.append(h3.request("GET", "/delay?ms=300", headers=[("x-echo", "third")], table=table))
                return tags + ["third"], await asyncio.gather(*asked)

        tags, responses = run(go())
        for tag, response in zip(tags, responses, strict=True):
            n = "x-n: 1\n" if tag != "third" else ""
            self.assertEqual(response.status, 200)
            self.assertEqual(response.body.decode(), f"GET /delay\nx-echo: {tag}\n{n}host: localhost\n")

    def test_repeated_sections_with_the_table_are_each_answered_from_their_own_fields(self):
        self.late_echoes(table=True)

    def test_repeated_sections_without_the_table_are_each_answered_from_their_own_fields(self):
        self.late_echoes(table=False)

    def test_each_repeated_section_goes_where_the_router_sends_it(self):
        sent = [("GET", "/ping", 200)] * 3 + [("GET", "/nowhere", 404)] * 3
        sent += [("POST", "/ping", 405)] * 3 + [("GET", "/ping", 200)] * 3
        sent += [("GET", "/whoami?q=a", 200)] * 3 + [("GET", "/whoami?q=b", 200)] * 3

        async def go(table):
            async with self.connect() as h3:
                return [await h3.request(method, path, table=table) for method, path, _ in sent]

        for table in (True, False):
            for (method, path, status), response in zip(sent, run(go(table)), strict=True):
                self.assertEqual(response.status, status, f"{method} {path} table={table}")
                if path.startswith("/whoami"):
                    self.assertEqual(json.loads(response.body)["q"], path[-1], response.body)

    def test_a_shared_heads_content_length_holds_each_streams_body(self):
        async def go(table):
            async with self.connect() as h3:
                asked = [("content-length", "5")]
                whole = [await h3.request("POST", "/echo", body=b"hello", headers=asked, table=table) for _ in range(4)]
                return whole, await h3.request("POST", "/echo", body=b"hi", headers=asked, table=table)

        for table in (True, False):
            whole, short = run(go(table))
            self.assertEqual([(r.status, r.body) for r in whole], [(200, b"hello")] * 4)
            self.assertEqual(short.reset_code, H3_MESSAGE_ERROR, f"table={table}")

    def test_requests_alike_but_for_a_cookie_each_see_their_own(self):
        # Streams of one field section share a decoded head; a cookie more, less or of
        # another value (the same length) is another section, with the client's table
        # and without, and a handler's own Server beside ours is another response head.
        plan = [None] * 3 + ["id=aaaa"] * 3 + ["id=bbbb"] * 3 + [None] * 2 + ["id=aaaa"] * 2

        async def go(table):
            async with self.connect() as h3:
                asked = []
                for cookie in plan + plan:
                    headers = [("cookie", cookie)] if cookie else []
                    asked.append(await h3.request("GET", "/whoami", headers=headers, table=table))
                for server in ("abcd", None, "wxyz", "wxyz", None, None):
                    path = "/text?size=4" + (f"&server={server}" if server else "")
                    asked.append(await h3.request("GET", path, table=table))
                return asked

        for table in (True, False):
            with self.subTest(table=table):
                asked = run(go(table))
                cookies = [json.loads(r.body)["cookie"] for r in asked[: 2 * len(plan)]]
                self.assertEqual(cookies, [c and c[3:] for c in plan + plan])
                servers = [r.headers["server"] for r in asked[2 * len(plan) :]]
                self.assertEqual(servers, ["abcd", "xkit", "wxyz", "wxyz", "xkit", "xkit"])

    def test_a_repeated_section_is_read_again_once_its_insert_count_means_another_entry(self):
        # A request stream whose field section is the bytes of the kept one shares its
        # decoded head while the table is as it was. The same bytes can mean another
        # entry: Required Insert Count is sent modulo twice the table's entries
        # (RFC 9204 §4.5.1.1), so after that many inserts "the newest entry" of the same
        # prefix is the new cookie, which the handler must see.
        async def go():
            async with self.connect() as h3:
                first = await h3.request("GET", "/whoami", table=False)  # the settings are in
                capacity = h3.h3._received_settings[0x1]  # SETTINGS_QPACK_MAX_TABLE_CAPACITY
                self.assertGreaterEqual(capacity, 64)
                full_range = 2 * (capacity // 32)
                encoder_stream = h3.h3._local_encoder_stream_id
                # The server acknowledges these sections, which aioquic's encoder never
                # wrote: its decoder stream is not aioquic's to read here.
                h3.h3._encoder = types.SimpleNamespace(feed_decoder=lambda data: None)
                fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost")]
                _, static = pylsqpack.Encoder().encode(0, fields + [(b":path", b"/whoami")])
                # Required Insert Count 1 (encoded 2), Base 1, then the newest entry.
                section = encode_frame(FrameType.HEADERS, b"\x02\x00" + static[2:] + b"\x80")

                def insert(name, value):  # Insert With Literal Name, no Huffman
                    return bytes([0x40 | len(name)]) + name + bytes([len(value)]) + value

                async def ask():
                    stream_id = h3._quic.get_next_available_stream_id()
                    future = h3._expect(stream_id)
                    h3._quic.send_stream_data(stream_id, section, end_stream=True)
                    h3.transmit()
                    return json.loads((await asyncio.wait_for(future, 30)).body)["cookie"]

                set_capacity = prefixed_integer(0x20, 5, capacity)  # Set Dynamic Table Capacity
                h3._quic.send_stream_data(encoder_stream, set_capacity + insert(b"cookie", b"id=aaaa"))
                before = [await ask() for _ in range(3)]
                fillers = b"".join(insert(b"x", b"") for _ in range(full_range - 1))
                h3._quic.send_stream_data(encoder_stream, fillers + insert(b"cookie", b"id=bbbb"))
                after = [await ask() for _ in range(3)]
                return first, before, after

        first, before, after = run(go())
        self.assertEqual(first.status, 200)
        self.assertEqual((before, after), (["aaaa"] * 3, ["bbbb"] * 3))

    def test_each_response_head_is_its_own_when_heads_repeat(self):
        # A connection copies the response head it wrote last when the next one's status,
        # fields and length are alike and its second is the same: a type of the same length
        # but other letters, another length, another status each get their own head, and a
        # second later the same response's date moves.
        plan = [(200, "text/aaa", 4)] * 3 + [(200, "text/bbb", 4)] * 2 + [(200, "text/bbb", 5), (201, "text/bbb", 5)]
        plan += [(200, "text/aaa", 4), (404, "text/aaa", 4), (200, "text/aaa", 4)]

        def path(status, kind, size):
            return f"/text?size={size}&type={kind}" + (f"&status={status}" if status != 200 else "")

        async def go():
            async with self.connect() as h3:
                responses = [await h3.request("GET", path(*asked)) for asked in plan]
                await asyncio.sleep(1.1)
                return responses, await h3.request("GET", path(*plan[-1]))

        responses, later = run(go())
        for (status, kind, size), response in zip(plan + [plan[-1]], responses + [later], strict=True):
            seen = (response.status, response.headers["content-type"], int(response.headers["content-length"]))
            self.assertEqual(seen, (status, kind, size))
            self.assertEqual((len(response.body), response.headers["server"]), (size, "xkit"))
        first = email.utils.parsedate_to_datetime(responses[-1].headers["date"])
        self.assertGreaterEqual((email.utils.parsedate_to_datetime(later.headers["date"]) - first).total_seconds(), 1)

    def test_repeated_heads_hold_through_qpack_tables_that_evict(self):
        # A copied response head refers to server and date in the client's QPACK table:
        # with tables too small for both (an insert must evict), for only one, or none,
        # in bursts of streams in flight at once and across a second (the same head
        # before and after), every head must decode (aioquic's decoder closes the
        # connection on an entry it lacks) and carry its own fields and date.
        plan = ["/ping"] * 3 + ["/text?size=4&type=text/aaa", "/text?size=4&type=text/bbb"] * 2

        def check(path, response):
            if path == "/ping":
                self.assertEqual((response.status, response.body), (200, b"pong"))
            else:
                self.assertEqual(response.headers["content-type"], path.rsplit("=", 1)[1])
                self.assertEqual((response.status, len(response.body)), (200, 4))
            self.assertEqual(response.headers["server"], "xkit")
            return email.utils.parsedate_to_datetime(response.headers["date"])

        async def go(capacity):
            async with h3_connect("127.0.0.1", self.server.port, ca_file=self.certs.ca, qpack_capacity=capacity) as h3:
                seen = [(plan[0], await h3.request("GET", plan[0]))]
                if capacity:
                    # aioquic's decoder acknowledges no insert by itself (no Insert Count
                    # Increment), so the server's heads would never refer to the table:
                    # acknowledge the first, server, which every table here holds.
                    h3._quic.send_stream_data(h3.h3._local_decoder_stream_id, b"\x01")
                seen += [(path, await h3.request("GET", path)) for path in plan]
                seen += zip(plan * 4, await asyncio.gather(*(h3.request("GET", p) for p in plan * 4)), strict=True)
                seen.append((plan[-1], await h3.request("GET", plan[-1])))
                await asyncio.sleep(1.1)
                later = [(plan[-1], await h3.request("GET", plan[-1]))]  # the same head, a second on
                later += list(
                    zip(plan * 4, await asyncio.gather(*(h3.request("GET", p) for p in plan * 4)), strict=True)
                )
                later += [(path, await h3.request("GET", path)) for path in plan]
                return seen, later

        for capacity in (0, 64, 100, 200, 4096):
            with self.subTest(capacity=capacity):
                seen, later = run(go(capacity))
                before = max(check(*pair) for pair in seen)
                after = min(check(*pair) for pair in later)
                self.assertGreaterEqual((after - before).total_seconds(), 1)

    def test_streamed_response_with_trailer(self):
        async def go():
            async with self.connect() as h3:
                return await h3.request("GET", "/stream?chunks=50&size=10000&trailer=done")

        response = run(go())
        self.assertEqual(response.status, 200)
        self.assertEqual(len(response.body), 500_000)
        self.assertEqual(response.body[:10000], b"0" * 10000)
        self.assertEqual(response.trailers.get("x-stream-trailer"), "done")

    def test_streamed_upload_held_by_its_reader_arrives_whole(self):
        body = os.urandom(4 * MiB)

        async def go():
            async with self.connect() as h3:
                started = time.monotonic()
                response = await h3.request("POST", "/upload?hold_ms=400", body=body)
                return response, time.monotonic() - started

        response, took = run(go())
        self.assertEqual(response.status, 200, response.body)
        self.assertIn(f'"bytes":{len(body)}'.encode(), response.body)
        self.assertIn(f'"crc32":"{zlib.crc32(body):08x}"'.encode(), response.body)
        # 4 MiB cannot all be in flight past a 1 MiB stream window: the reader's pause held it.
        self.assertGreaterEqual(took, 0.4)

    def test_client_cancelling_a_held_upload_leaves_the_connection_serving(self):
        async def go():
            async with self.connect() as h3:
                stream_id = h3._quic.get_next_available_stream_id()
                fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"localhost")]
                h3.h3.send_headers(stream_id, fields + [(b":path", b"/upload?hold_ms=300")])
                h3.h3.send_data(stream_id, os.urandom(200_000), end_stream=False)
                h3.transmit()
                await asyncio.sleep(0.1)
                h3._quic.reset_stream(stream_id, H3_REQUEST_CANCELLED)
                h3.transmit()
                await asyncio.sleep(0.5)  # past the hold: the handler has heard of the abort
                return await h3.request("GET", "/ping")

        self.assertEqual(run(go()).body, b"pong")

    def test_data_before_headers_closes_the_connection_with_frame_unexpected(self):
        async def go():
            async with self.connect() as other:
                async with self.connect() as h3:
                    with self.assertRaises(ConnectionError):
                        await h3.raw_stream(bytes([0x00, 0x01, 0x41]))  # DATA, one byte, first
                    closed = await h3.closed()
                # The other connection is still served.
                return closed, await other.request("GET", "/ping")

        closed, still = run(go())
        self.assertEqual(closed.error_code, H3_FRAME_UNEXPECTED)
        self.assertEqual(still.body, b"pong")

    def closing_code(self, uni_bytes=None, request_bytes=None, encoder_bytes=None):
        """Sends bytes on a new stream of the client's and returns the code the server closes with;
        a second connection is still served afterwards."""

        async def go():
            async with self.connect() as other:
                async with self.connect() as h3:
                    await h3.request("GET", "/ping")
                    if encoder_bytes is not None:
                        h3._quic.send_stream_data(h3.h3._local_encoder_stream_id, encoder_bytes)
                        h3.transmit()
                    elif uni_bytes is not None:
                        stream_id = h3._quic.get_next_available_stream_id(is_unidirectional=True)
                        h3._quic.send_stream_data(stream_id, uni_bytes)
                        h3.transmit()
                    else:
                        with self.assertRaises(ConnectionError):
                            await h3.raw_stream(request_bytes)
                    closed = await h3.closed()
                return closed.error_code, await other.request("GET", "/ping")

        code, still = run(go())
        self.assertEqual(still.body, b"pong")
        return code

    def test_second_control_stream_is_a_stream_creation_error(self):
        self.assertEqual(self.closing_code(uni_bytes=bytes([0x00, 0x04, 0x00])), H3_STREAM_CREATION_ERROR)

    def test_client_push_stream_is_a_stream_creation_error(self):
        self.assertEqual(self.closing_code(uni_bytes=bytes([0x01, 0x00])), H3_STREAM_CREATION_ERROR)

    def test_request_stream_ending_inside_a_frame_is_a_frame_error(self):
        # RFC 9114 §7.1: a HEADERS frame that promises 16 bytes, one given, then the stream's FIN.
        self.assertEqual(self.closing_code(request_bytes=bytes([0x01, 0x10, 0x00])), H3_FRAME_ERROR)

    def test_key_updates_keep_the_connection_serving(self):
        async def go():
            async with self.connect() as h3:
                await h3.request("GET", "/ping")
                crypto = h3._quic._cryptos[tls.Epoch.ONE_RTT]
                phases, bodies = [], []
                for _ in range(3):
                    h3._quic.request_key_update()
                    bodies.append((await h3.request("POST", "/echo", body=os.urandom(3000))).body != b"")
                    phases.append(crypto.recv.key_phase)  # moves only once the server sent in the new phase
                return phases, bodies

        phases, bodies = run(go())
        self.assertEqual(phases, [1, 0, 1])
        self.assertEqual(bodies, [True] * 3)

    def test_no_session_ticket_is_issued_so_no_0rtt_by_default(self):
        # 0-RTT is off by default: without a ticket a client cannot resume, let alone send early data.
        tickets = []

        async def go():
            async with h3_connect(
                "127.0.0.1", self.server.port, ca_file=self.certs.ca, session_ticket_handler=tickets.append
            ) as h3:
                body = (await h3.request("GET", "/ping")).body
                await asyncio.sleep(0.3)  # a ticket would follow the handshake by now
                return body

        self.assertEqual(run(go()), b"pong")
        self.assertEqual(tickets, [])

    def test_a_packet_for_a_forgotten_connection_gets_the_stateless_reset_it_was_promised(self):
        # The client keeps the reset token the server gave with each connection ID (RFC 9000 §10.3);
        # once the server has forgotten the connection, a packet to one of those IDs is answered by
        # a stateless reset ending in that token, and while it knows it, by nothing.
        def probe(cid, wait):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.settimeout(wait)
                sent = bytes([0x40 | 0x3F & os.urandom(1)[0]]) + cid + os.urandom(80)
                udp.sendto(sent, ("127.0.0.1", self.server.port))
                try:
                    return sent, udp.recv(2048)
                except TimeoutError:
                    return sent, None

        async def go():
            async with self.connect() as h3:
                await h3.request("GET", "/ping")
                promised = [(c.cid, c.stateless_reset_token) for c in h3._quic._peer_cid_available]
                self.assertTrue(promised)
                self.assertIsNone(probe(promised[0][0], 0.3)[1])  # its connection is alive: dropped
            return promised

        promised = run(go())
        cid, token = promised[-1]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the server keeps a closed connection for its draining period
            sent, reply = probe(cid, 0.5)
            if reply:
                break
        self.assertIsNotNone(reply)
        self.assertEqual(reply[0] & 0xC0, 0x40)  # looks like a short-header packet
        self.assertLess(len(reply), len(sent))
        self.assertGreaterEqual(len(reply), 21)
        self.assertEqual(reply[-16:], token)

    def test_settings_on_a_request_stream_is_frame_unexpected(self):
        self.assertEqual(self.closing_code(request_bytes=bytes([0x04, 0x00])), H3_FRAME_UNEXPECTED)

    def test_encoder_stream_garbage_is_a_qpack_encoder_stream_error(self):
        # Set Dynamic Table Capacity beyond what our SETTINGS allowed (RFC 9204 §4.3.1).
        code = self.closing_code(encoder_bytes=bytes([0x3F, 0xE1, 0xFF, 0x03]))
        self.assertEqual(code, QPACK_ENCODER_STREAM_ERROR)

    def test_fields_over_max_header_size_get_431_and_a_huge_headers_frame_closes(self):
        letters = "".join(chr(ord("a") + i % 26) for i in range(10_000))

        async def over_limit():
            async with self.connect() as h3:
                return await h3.request("GET", "/ping", headers=[("x-big", letters)])

        self.assertEqual(run(over_limit()).status, 431)

        async def huge():
            async with self.connect() as other:
                async with self.connect() as h3:
                    with self.assertRaises(ConnectionError):
                        await h3.request("GET", "/ping", headers=[("x-big", letters * 3)])
                    closed = await h3.closed()
                return closed.error_code, await other.request("GET", "/ping")

        code, still = run(huge())
        self.assertEqual(code, H3_EXCESSIVE_LOAD)
        self.assertEqual(still.body, b"pong")

    def test_request_without_path_is_reset_as_malformed(self):
        async def go():
            async with self.connect() as h3:
                stream_id = h3._quic.get_next_available_stream_id()
                future = h3._expect(stream_id)
                h3.h3.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https")], end_stream=True)
                h3.transmit()
                reset = await asyncio.wait_for(future, 10)
                return reset, await h3.request("GET", "/ping")

        reset, after = run(go())
        self.assertEqual(reset.reset_code, H3_MESSAGE_ERROR)
        self.assertEqual(after.body, b"pong")

    def test_unknown_frame_types_are_skipped(self):
        # A reserved frame type (0x1f * 7 + 0x21 = 0x10a) with a payload, then a whole request.
        async def go():
            async with self.connect() as h3:
                encoded = h3.h3._encoder.encode(
                    0,
                    [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost"), (b":path", b"/ping")],
                )
                headers = bytes([0x01, len(encoded[1])]) + encoded[1]
                reserved = bytes([0x41, 0x0A, 0x03]) + b"abc"
                return await h3.raw_stream(reserved + headers)

        response = run(go())
        self.assertEqual(response.reset_code, None)

    def test_access_log_and_metrics_name_http3(self):
        async def go():
            async with self.connect() as h3:
                await h3.request("GET", "/ping?logged=h3")
                return await h3.request("GET", "/metrics")

        metrics = run(go())
        self.assertEqual(metrics.status, 200)
        self.assertRegex(metrics.body.decode(), r'protocol="http/3"[^\n]*\} [1-9]')
        deadline = time.monotonic() + 5
        text = ""
        while time.monotonic() < deadline and "logged=h3" not in text:
            time.sleep(0.1)
            with open(self.log_path) as log:
                text = log.read()
        line = next(line for line in text.splitlines() if "logged=h3" in line)
        self.assertIn('"GET /ping?logged=h3 HTTP/3" 200', line)

    def test_tcp_responses_advertise_h3_and_h3_ones_do_not(self):
        for http in ("1.1", "2"):
            result, body, version, status = curl_https(self.server, "/ping", "-D", "-", http=http)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn(f'alt-svc: h3=":{self.server.port}"', result.stdout.decode().lower())

        async def go():
            async with self.connect() as h3:
                return await h3.request("GET", "/ping")

        self.assertNotIn("alt-svc", run(go()).headers)

    def test_gtlsclient_finds_the_path_ecn_capable(self):
        # ngtcp2's client validates ECN (RFC 9000 §13.4.2): our packets must carry the marking
        # its stack asked for, and our acknowledgments count what its packets carried.
        argv = ["gtlsclient", "--exit-on-all-streams-close", "--timeout=10s", "--no-http-dump"]
        argv += ["127.0.0.1", str(self.server.port), f"https://localhost:{self.server.port}/ping"]
        done = subprocess.run(argv, capture_output=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])
        self.assertIn(b"path is ECN capable", done.stderr)

    def test_gtlsclient_gets_ping_and_index(self):
        with tempfile.TemporaryDirectory() as folder:
            argv = ["gtlsclient", "-q", "--exit-on-all-streams-close", "--download", folder, "--timeout=10s"]
            argv += ["127.0.0.1", str(self.server.port)]
            argv += [f"https://localhost:{self.server.port}/ping", f"https://localhost:{self.server.port}/"]
            done = subprocess.run(argv, capture_output=True, timeout=30)
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            with open(os.path.join(folder, "ping"), "rb") as ping:
                self.assertEqual(ping.read(), b"pong")
            with open(os.path.join(folder, "index.html"), "rb") as index:
                self.assertTrue(index.read().startswith(b"xKit bench server"))


class Http3StopTest(unittest.TestCase):
    def test_graceful_stop_closes_an_idle_connection_with_no_error(self):
        server = start_https(self, current_certs().rsa, "--workers", "1")

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                first = await h3.request("GET", "/ping")
                server.send_signal(15)
                return first, await h3.closed(timeout=10)

        first, closed = run(go())
        self.assertEqual(first.body, b"pong")
        self.assertEqual(closed.error_code, H3_NO_ERROR)
        server.assert_clean_exit(server.wait_exit(10))

    def test_ipv6_listener_serves_h3(self):
        server = start_https(self, current_certs().rsa, "--workers", "1", "--host", "::1")

        async def go():
            async with h3_connect("::1", server.port, ca_file=current_certs().ca) as h3:
                return await h3.request("POST", "/echo", body=b"over IPv6")

        self.assertEqual(run(go()).body, b"over IPv6")
        server.stop_and_check()

    def test_each_connection_stays_with_its_worker(self):
        # Two workers, two sockets on the port: the kernel hashes each client's address and port
        # to one of them, and connection IDs name the worker that owns the connection.
        server = start_https(self, current_certs().rsa, "--workers", "2")

        async def one():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                bodies = []
                for _ in range(5):
                    bodies.append((await h3.request("GET", "/echo?size=70000")).body)
                return bodies

        async def go():
            return await asyncio.gather(*[one() for _ in range(12)])

        for bodies in run(go()):
            self.assertEqual(bodies, [b"x" * 70000] * 5)

    def test_connection_keeps_being_served_from_new_client_ports_with_four_workers(self):
        # Each move gives the client a new port, which the kernel's hash alone would send to any of
        # the four workers' sockets: the steering program sends it to the connection's own.
        server = start_https(self, current_certs().rsa, "--workers", "4")

        async def go():
            loop = asyncio.get_running_loop()
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                ports, bodies = [], []
                for _ in range(6):
                    bodies.append((await h3.request("GET", "/ping")).body)
                    ports.append(h3._transport.get_extra_info("sockname")[1])
                    h3.change_connection_id()
                    old = h3._transport
                    await loop.create_datagram_endpoint(lambda: h3, local_addr=("::", 0))
                    old.close()
                bodies.append((await h3.request("GET", "/ping")).body)
                return ports, bodies

        ports, bodies = run(go())
        self.assertEqual(len(set(ports)), 6)
        self.assertEqual(bodies, [b"pong"] * 7)
        server.stop_and_check()

    def test_sighup_reloads_the_h3_certificate(self):
        certs = current_certs()
        pair = certs.copy(certs.ec, "h3-reload")
        server = start_https(self, pair, "--workers", "1")

        async def served_der():
            async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca) as h3:
                await h3.request("GET", "/ping")
                return h3._quic.tls._peer_certificate.public_bytes(Encoding.DER)

        self.assertEqual(run(served_der()), cert_der(certs.ec.cert))
        replace_file(pair.cert, certs.ec_next.cert)
        replace_file(pair.key, certs.ec_next.key)
        server.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while run(served_der()) != cert_der(certs.ec_next.cert):
            self.assertLess(time.monotonic(), deadline, "the h3 certificate was not reloaded")
            time.sleep(0.1)
        server.stop_and_check()

    def test_a_taken_udp_port_refuses_to_start(self):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
            taken.bind(("0.0.0.0", 0))
            port = taken.getsockname()[1]
            pair = current_certs().rsa
            argv = [https_server_path(), str(port), pair.cert, pair.key, "--workers", "1"]
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(f"cannot listen on 0.0.0.0:{port}", done.stderr.decode())

    def test_graceful_stop_finishes_responses_under_way(self):
        server = start_https(self, current_certs().rsa, "--workers", "1")

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                downloads = [asyncio.ensure_future(h3.request("GET", "/echo?size=2000000")) for _ in range(3)]
                # Under way means answering: the signal comes once every head is back (a fixed
                # pause could let it come before a loaded server had read the requests at all).
                deadline = time.monotonic() + 10
                await asyncio.sleep(0)
                while not all(response.status for _, response in h3.pending.values()):
                    self.assertLess(time.monotonic(), deadline, "the downloads' heads did not come")
                    await asyncio.sleep(0.01)
                server.send_signal(signal.SIGTERM)
                responses = await asyncio.gather(*downloads)
                return responses, await h3.closed(timeout=10)

        responses, closed = run(go())
        self.assertEqual([len(r.body) for r in responses], [2_000_000] * 3)
        self.assertEqual(closed.error_code, H3_NO_ERROR)
        server.assert_clean_exit(server.wait_exit(10))

    def test_a_request_head_that_stops_arriving_closes_its_connection(self):
        server = start_https(self, current_certs().rsa, "--workers", "1", "--header-timeout", "600")

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                await h3.request("GET", "/ping")
                await asyncio.sleep(1.0)  # idle between requests is not a stalled request
                await h3.request("GET", "/ping")
                stream_id = h3._quic.get_next_available_stream_id()
                h3._quic.send_stream_data(stream_id, bytes([0x01, 0x20, 0x00, 0x00, 0xD1]))  # 3 of 32 bytes
                h3.transmit()
                started = time.monotonic()
                closed = await h3.closed(timeout=10)
                return closed, time.monotonic() - started

        closed, after = run(go())
        self.assertEqual(closed.error_code, H3_REQUEST_INCOMPLETE)
        self.assertGreaterEqual(after, 0.5)
        server.stop_and_check()

    def test_a_request_body_that_stops_arriving_closes_its_connection(self):
        server = start_https(self, current_certs().rsa, "--workers", "1", "--body-timeout", "600")

        async def go():
            async with h3_connect("127.0.0.1", server.port, ca_file=current_certs().ca) as h3:
                stream_id = h3._quic.get_next_available_stream_id()
                fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"localhost")]
                fields += [(b":path", b"/echo"), (b"content-length", b"1000")]
                h3.h3.send_headers(stream_id, fields)
                h3.h3.send_data(stream_id, b"0123456789", end_stream=False)
                h3.transmit()
                return await h3.closed(timeout=10)

        self.assertEqual(run(go()).error_code, H3_REQUEST_INCOMPLETE)
        server.stop_and_check()

    def test_required_client_certificates_hold_on_h3_too(self):
        certs = current_certs()
        server = start_https(self, certs.ec, "--workers", "1", "--client-ca", certs.ca, "--verify-client", "required")

        async def tls_info(client):
            async with h3_connect("127.0.0.1", server.port, ca_file=certs.ca, client=client) as h3:
                return json.loads((await h3.request("GET", "/tls")).body)

        info = run(tls_info(certs.client))
        self.assertEqual((info["protocol"], info["alpn"], info["version"]), ("HTTP/3", "h3", "TLSv1.3"))
        self.assertTrue(info["client_verified"])
        self.assertIn("xKit Test Client", info["client_subject"])
        for refused in (None, certs.other_client):
            with self.assertRaises(ConnectionError):
                run(tls_info(refused))
        server.stop_and_check()

    def test_no_h3_serves_no_udp_and_advertises_nothing(self):
        server = start_https(self, current_certs().rsa, "--workers", "1", "--no-h3")
        result, body, version, status = curl_https(server, "/ping", "-D", "-")
        self.assertEqual(status, 200)
        self.assertNotIn("alt-svc", result.stdout.decode().lower())
        with open("/proc/net/udp") as udp:
            ports = {int(re.split(r"\s+", line.strip())[1].split(":")[1], 16) for line in list(udp)[1:]}
        self.assertNotIn(server.port, ports)


if __name__ == "__main__":
    unittest.main()
