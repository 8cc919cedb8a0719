"""HTTP/2 frame by frame, as xKit's own framing, stream states, flow control
and request checks must treat it (RFC 9113, RFC 7541, RFC 8441): every frame
type with bad lengths, ids and flags; padding; the stream states; window
overflow; SETTINGS edge values; malformed requests; HPACK that must keep the
decoder in step. Raw frames from support/h2client.py on the shared server."""

import struct
import unittest

from support.h2client import (
    CANCEL,
    COMPRESSION_ERROR,
    DATA,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    HEADER_TABLE_SIZE,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    H2ServerTestCase,
    continuation_frame,
    data_frame,
    encode_integer,
    error_name,
    frame,
    headers_frame,
    hpack_encode,
    ping_frame,
    priority_frame,
    request_headers,
    rst_stream_frame,
    settings_frame,
    window_update_frame,
)

ENABLE_CONNECT_PROTOCOL = 0x8
NO_RFC7540_PRIORITIES = 0x9
UNKNOWN_FRAME_TYPE = 0xFA


def block(method="GET", path="/ping", headers=()):
    return hpack_encode(request_headers(method, path, headers=headers))


class FrameTestCase(H2ServerTestCase):
    def assert_connection_error(self, conn, code, frames):
        """frames make the server end the connection with GOAWAY(code)."""
        conn.send(frames)
        conn.read_until_closed()
        self.assertEqual([error_name(g.error_code()) for g in conn.goaways][-1:], [error_name(code)], conn.goaways)

    def assert_stream_error(self, conn, stream_id, code, frames):
        """frames make the server reset stream_id with code; the connection
        goes on serving."""
        conn.send(frames)
        stream = conn.stream(stream_id)
        conn.read_until(lambda: stream.reset_code is not None, f"RST_STREAM on {stream_id}")
        self.assertEqual(error_name(stream.reset_code), error_name(code))
        self.assert_still_serves(conn)

    def assert_still_serves(self, conn):
        conn.next_stream_id = max(conn.streams, default=-1) + 2
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(conn.goaways, [])


class BadFramesTest(FrameTestCase):
    """Each frame type with a bad length, stream id or flags."""

    def test_data_on_stream_0_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, data_frame(0, b"x"))

    def test_data_padding_as_long_as_the_frame_is_a_protocol_error(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False)
        self.assert_connection_error(conn, PROTOCOL_ERROR, opened + frame(DATA, PADDED, 1, b"\x05abcd"))

    def test_data_with_a_pad_length_and_nothing_else_is_a_protocol_error(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False)
        self.assert_connection_error(conn, PROTOCOL_ERROR, opened + frame(DATA, PADDED, 1, b""))

    def test_headers_on_stream_0_or_an_even_id_is_a_protocol_error(self):
        for stream_id in (0, 2):
            with self.subTest(stream_id=stream_id):
                self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, headers_frame(stream_id, block()))

    def test_headers_padding_past_the_block_is_a_protocol_error(self):
        payload = bytes([200]) + block()
        self.assert_connection_error(
            self.h2connect(), PROTOCOL_ERROR, frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, payload)
        )

    def test_headers_with_priority_too_short_is_a_protocol_error(self):
        self.assert_connection_error(
            self.h2connect(), PROTOCOL_ERROR, frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, b"\0\0")
        )

    def test_priority_of_the_wrong_length_resets_its_stream(self):
        conn = self.h2connect()
        self.assert_stream_error(conn, 1, FRAME_SIZE_ERROR, frame(PRIORITY, 0, 1, b"\0\0\0\0"))

    def test_priority_on_stream_0_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, priority_frame(0, 1))

    def test_priority_depending_on_itself_resets_its_stream(self):
        self.assert_stream_error(self.h2connect(), 3, PROTOCOL_ERROR, priority_frame(3, 3))

    def test_headers_depending_on_itself_resets_the_stream_and_keeps_hpack_in_step(self):
        conn = self.h2connect()
        payload = struct.pack(">IB", 1, 15) + block()
        self.assert_stream_error(
            conn, 1, PROTOCOL_ERROR, frame(HEADERS, END_HEADERS | END_STREAM | PRIORITY_FLAG, 1, payload)
        )

    def test_priority_on_an_idle_stream_is_accepted_and_opens_nothing(self):
        conn = self.h2connect()
        conn.send(priority_frame(9, 0))
        conn.next_stream_id = 1
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assertEqual(conn.goaways, [])

    def test_rst_stream_of_the_wrong_length_is_a_frame_size_error(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=1000"))
        self.assert_connection_error(conn, FRAME_SIZE_ERROR, opened + frame(RST_STREAM, 0, 1, b"\0\0\0"))

    def test_rst_stream_on_stream_0_or_an_idle_stream_is_a_protocol_error(self):
        for stream_id in (0, 5):
            with self.subTest(stream_id=stream_id):
                self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, rst_stream_frame(stream_id, CANCEL))

    def test_settings_of_a_length_not_a_multiple_of_6_is_a_frame_size_error(self):
        self.assert_connection_error(self.h2connect(), FRAME_SIZE_ERROR, frame(SETTINGS, 0, 0, b"\0\4\0\0\0"))

    def test_settings_ack_with_a_payload_is_a_frame_size_error(self):
        self.assert_connection_error(self.h2connect(), FRAME_SIZE_ERROR, frame(SETTINGS, 1, 0, b"\0\4\0\0\0\1"))

    def test_settings_on_a_stream_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, frame(SETTINGS, 0, 1, b""))

    def test_ping_of_the_wrong_length_is_a_frame_size_error(self):
        self.assert_connection_error(self.h2connect(), FRAME_SIZE_ERROR, frame(PING, 0, 0, b"1234567"))

    def test_ping_on_a_stream_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, frame(PING, 0, 1, b"12345678"))

    def test_ping_ack_gets_no_answer_and_a_ping_gets_its_payload_back(self):
        conn = self.h2connect()
        conn.send(ping_frame(b"ackonly!", ack=True) + ping_frame(b"answerme"))
        conn.read_until(lambda: conn.ping_acks, "a PING ACK")
        self.assertEqual(conn.ping_acks, [b"answerme"])

    def test_goaway_on_a_stream_or_too_short_is_an_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, frame(7, 0, 1, b"\0" * 8))
        self.assert_connection_error(self.h2connect(), FRAME_SIZE_ERROR, frame(7, 0, 0, b"\0" * 7))

    def test_window_update_of_the_wrong_length_is_a_frame_size_error(self):
        self.assert_connection_error(self.h2connect(), FRAME_SIZE_ERROR, frame(WINDOW_UPDATE, 0, 0, b"\0\0\1"))

    def test_window_update_of_zero_on_the_connection_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, window_update_frame(0, 0))

    def test_window_update_of_zero_on_a_stream_resets_it(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=500"))
        self.assert_stream_error(conn, 1, PROTOCOL_ERROR, opened + window_update_frame(1, 0))

    def test_window_update_on_an_idle_stream_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, window_update_frame(7, 1))

    def test_continuation_without_headers_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, continuation_frame(1, block()))

    def test_continuation_on_another_stream_is_a_protocol_error(self):
        whole = block()
        frames = headers_frame(1, whole[:4], end_headers=False) + continuation_frame(3, whole[4:])
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, frames)

    def test_another_frame_inside_a_header_block_is_a_protocol_error(self):
        whole = block()
        frames = headers_frame(1, whole[:4], end_headers=False) + ping_frame() + continuation_frame(1, whole[4:])
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, frames)

    def test_push_promise_from_a_client_is_a_protocol_error(self):
        self.assert_connection_error(
            self.h2connect(), PROTOCOL_ERROR, frame(PUSH_PROMISE, END_HEADERS, 1, b"\0\0\0\2" + block())
        )

    def test_a_frame_over_16kib_is_a_frame_size_error(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False)
        self.assert_connection_error(conn, FRAME_SIZE_ERROR, opened + data_frame(1, b"x" * 16385))

    def test_unknown_frame_types_and_flags_are_ignored(self):
        conn = self.h2connect()
        conn.send(frame(UNKNOWN_FRAME_TYPE, 0xFF, 0, b"whatever") + frame(UNKNOWN_FRAME_TYPE, 0, 3, b""))
        conn.send(frame(HEADERS, END_HEADERS | END_STREAM | 0xC2, 1, block()))
        conn.next_stream_id = 3
        self.assertEqual(conn.read_response(1).body, b"pong")
        self.assert_still_serves(conn)


class PaddingTest(FrameTestCase):
    def test_padded_headers_and_data_are_read_without_their_padding(self):
        conn = self.h2connect()
        head = bytes([10]) + block("POST", "/echo") + b"\0" * 10
        conn.send(frame(HEADERS, END_HEADERS | PADDED, 1, head))
        conn.send(data_frame(1, b"hello ", padding=255) + data_frame(1, b"world", end_stream=True, padding=1))
        resp = conn.read_response(1)
        self.assertEqual((resp.status, resp.body), (200, b"hello world"))

    def test_padding_counts_against_flow_control_and_is_given_back(self):
        conn = self.h2connect()
        stream_id = conn.request("POST", "/echo", end_stream=False)
        body = b"p" * 100
        for _ in range(400):  # 400 * 356 bytes of frames: past half the default window, padding mostly
            conn.send(data_frame(stream_id, body, padding=255))
        conn.send(data_frame(stream_id, b"", end_stream=True))
        resp = conn.read_response(stream_id)
        self.assertEqual(resp.body, body * 400)


class StreamStatesTest(FrameTestCase):
    def test_data_on_an_idle_stream_is_a_protocol_error(self):
        self.assert_connection_error(self.h2connect(), PROTOCOL_ERROR, data_frame(1, b"x"))

    def test_data_after_the_clients_end_stream_resets_with_stream_closed(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=500"))
        self.assert_stream_error(conn, 1, STREAM_CLOSED, opened + data_frame(1, b"late"))

    def test_headers_after_the_clients_end_stream_resets_with_stream_closed(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=500"))
        self.assert_stream_error(conn, 1, STREAM_CLOSED, opened + headers_frame(1, hpack_encode([("x", "y")])))

    def test_data_on_a_stream_the_client_reset_gets_stream_closed(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False)
        conn.send(opened + rst_stream_frame(1, CANCEL))
        self.assert_stream_error(conn, 1, STREAM_CLOSED, data_frame(1, b"after"))

    def test_headers_on_a_finished_stream_is_a_connection_error_stream_closed(self):
        conn = self.h2connect()
        self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        self.assert_connection_error(conn, STREAM_CLOSED, headers_frame(1, block()))

    def test_a_new_stream_below_a_skipped_id_is_a_protocol_error(self):
        conn = self.h2connect()
        conn.send(headers_frame(5, block()))
        conn.read_response(5)
        self.assert_connection_error(conn, PROTOCOL_ERROR, headers_frame(3, block()))

    def test_trailers_without_end_stream_reset_the_stream(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False) + data_frame(1, b"abc")
        trailers = headers_frame(1, hpack_encode([("x-t", "1")]), end_stream=False)
        self.assert_stream_error(conn, 1, PROTOCOL_ERROR, opened + trailers)

    def test_trailers_that_end_the_body_are_accepted(self):
        conn = self.h2connect()
        conn.send(
            headers_frame(1, block("POST", "/echo"), end_stream=False)
            + data_frame(1, b"abc")
            + headers_frame(1, hpack_encode([("x-t", "1")]))
        )
        self.assertEqual(conn.read_response(1).body, b"abc")

    def test_frames_on_a_stream_we_reset_are_dropped_quietly(self):
        conn = self.h2connect()
        # A declared body over the limit is answered (413) at once and waved off.
        conn.send(headers_frame(1, block("POST", "/echo", [("content-length", 1 << 30)]), end_stream=False))
        conn.read_until(lambda: conn.stream(1).reset_code is not None, "RST_STREAM(NO_ERROR)")
        self.assertEqual(conn.stream(1).reset_code, NO_ERROR)
        conn.send(data_frame(1, b"in flight") + window_update_frame(1, 10))
        self.assert_still_serves(conn)


class FlowControlTest(FrameTestCase):
    def test_connection_window_past_2_31_minus_1_is_a_flow_control_error(self):
        self.assert_connection_error(self.h2connect(), FLOW_CONTROL_ERROR, window_update_frame(0, MAX_WINDOW))

    def test_stream_window_past_2_31_minus_1_resets_the_stream(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=500"))
        self.assert_stream_error(conn, 1, FLOW_CONTROL_ERROR, opened + window_update_frame(1, MAX_WINDOW))

    def test_initial_window_change_that_overflows_an_open_stream_is_a_flow_control_error(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("GET", "/delay?ms=500")) + window_update_frame(1, MAX_WINDOW - (1 << 24))
        frames = opened + settings_frame({INITIAL_WINDOW_SIZE: MAX_WINDOW})
        self.assert_connection_error(conn, FLOW_CONTROL_ERROR, frames)

    def test_initial_window_changes_apply_to_streams_already_open(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 0}, auto_window=False)
        stream_id = conn.request("GET", "/echo?size=1000")
        conn.read_until(lambda: conn.stream(stream_id).response() is not None, "the response head")
        conn.pump(0.2)
        self.assertEqual(len(conn.stream(stream_id).body), 0, "DATA sent into a zero window")
        conn.send(settings_frame({INITIAL_WINDOW_SIZE: 600}))
        conn.read_until(lambda: len(conn.stream(stream_id).body) == 600, "600 bytes")
        conn.send(settings_frame({INITIAL_WINDOW_SIZE: 1000}))
        conn.read_until(lambda: conn.stream(stream_id).ended, "the rest")
        self.assertEqual(len(conn.stream(stream_id).body), 1000)

    def test_a_negative_stream_window_waits_for_updates(self):
        conn = self.h2connect(settings={INITIAL_WINDOW_SIZE: 100}, auto_window=False)
        stream_id = conn.request("GET", "/echo?size=300")
        conn.read_until(lambda: len(conn.stream(stream_id).body) == 100, "the first 100 bytes")
        conn.send(settings_frame({INITIAL_WINDOW_SIZE: 0}) + window_update_frame(stream_id, 50))
        conn.pump(0.2)
        self.assertEqual(len(conn.stream(stream_id).body), 100, "sent with a window of -50")
        conn.send(window_update_frame(stream_id, 250))
        conn.read_until(lambda: conn.stream(stream_id).ended, "the rest")
        self.assertEqual(len(conn.stream(stream_id).body), 300)


class SettingsTest(FrameTestCase):
    def test_our_settings_announce_extended_connect_and_no_rfc7540_priorities(self):
        conn = self.h2connect()
        self.assertEqual(conn.peer_settings.get(ENABLE_CONNECT_PROTOCOL), 1, conn.peer_settings)
        self.assertEqual(conn.peer_settings.get(NO_RFC7540_PRIORITIES), 1, conn.peer_settings)

    def test_values_out_of_range_are_connection_errors(self):
        cases = [
            (ENABLE_PUSH, 2, PROTOCOL_ERROR),
            (MAX_FRAME_SIZE, 16383, PROTOCOL_ERROR),
            (MAX_FRAME_SIZE, 1 << 24, PROTOCOL_ERROR),
            (INITIAL_WINDOW_SIZE, 1 << 31, FLOW_CONTROL_ERROR),
            (ENABLE_CONNECT_PROTOCOL, 2, PROTOCOL_ERROR),
        ]
        for setting, value, code in cases:
            with self.subTest(setting=setting, value=value):
                self.assert_connection_error(self.h2connect(), code, settings_frame({setting: value}))

    def test_values_at_the_edges_are_accepted_and_acknowledged(self):
        cases = [
            (ENABLE_PUSH, 0),
            (ENABLE_PUSH, 1),
            (MAX_FRAME_SIZE, 16384),
            (MAX_FRAME_SIZE, (1 << 24) - 1),
            (INITIAL_WINDOW_SIZE, MAX_WINDOW),
            (HEADER_TABLE_SIZE, 0),
            (0x4242, 7),
        ]
        for setting, value in cases:
            with self.subTest(setting=setting, value=value):
                conn = self.h2connect()
                acks = conn.settings_acks
                conn.send(settings_frame({setting: value}))
                conn.read_until(lambda: conn.settings_acks > acks, "the SETTINGS ACK")  # noqa: B023 (called here, in this iteration)
                self.assert_still_serves(conn)

    def test_a_header_table_size_of_0_is_honoured_in_our_responses(self):
        conn = self.h2connect(settings={HEADER_TABLE_SIZE: 0})
        for _ in range(3):
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")


class RequestChecksTest(FrameTestCase):
    """Malformed requests (RFC 9113 §8.1.1) are reset with PROTOCOL_ERROR."""

    def malformed(self, fields):
        conn = self.h2connect()
        self.assert_stream_error(conn, 1, PROTOCOL_ERROR, headers_frame(1, hpack_encode(fields)))

    def test_malformed_requests_are_reset(self):
        base = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/ping")]
        cases = {
            "upper-case name": base + [("X-Upper", "1")],
            "connection": base + [("connection", "close")],
            "keep-alive": base + [("keep-alive", "5")],
            "proxy-connection": base + [("proxy-connection", "x")],
            "transfer-encoding": base + [("transfer-encoding", "chunked")],
            "upgrade": base + [("upgrade", "h2c")],
            "te gzip": base + [("te", "gzip")],
            "no :path": base[:3],
            "no :method": base[1:],
            "no :scheme": [base[0], *base[2:]],
            "empty :path": base[:3] + [(":path", "")],
            "relative :path": base[:3] + [(":path", "ping")],
            "duplicate :method": base + [(":method", "GET")],
            "unknown pseudo-header": base + [(":foo", "bar")],
            ":status in a request": base + [(":status", "200")],
            "pseudo after regular": base[:3] + [("x-a", "1"), (":path", "/ping")],
            "no authority nor host": base[:2] + base[3:],
            "two hosts": base[:2] + base[3:] + [("host", "a"), ("host", "b")],
            "value with a newline": base + [("x-a", "1\n2")],
            "value with a leading space": base + [("x-a", " 1")],
            "name with a space": base + [("x a", "1")],
            "empty name": base + [("", "1")],
            "content-length not digits": base + [("content-length", "1x")],
            "two content-lengths": base + [("content-length", "0"), ("content-length", "0")],
            ":protocol without CONNECT": base + [(":protocol", "websocket")],
            "CONNECT with :path": [(":method", "CONNECT"), (":authority", "localhost:1"), (":path", "/")],
            "method with a space": [(":method", "G T")] + base[1:],
        }
        for name, fields in cases.items():
            with self.subTest(name):
                self.malformed(fields)

    def test_te_trailers_and_host_without_authority_are_accepted(self):
        conn = self.h2connect()
        fields = [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/ping"),
            ("host", "localhost"),
            ("te", "trailers"),
        ]
        conn.send(headers_frame(1, hpack_encode(fields)))
        self.assertEqual(conn.read_response(1).body, b"pong")

    def test_content_length_above_the_data_resets_the_stream(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo", [("content-length", "10")]), end_stream=False)
        self.assert_stream_error(conn, 1, PROTOCOL_ERROR, opened + data_frame(1, b"short", end_stream=True))

    def test_content_length_below_the_data_resets_the_stream(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo", [("content-length", "2")]), end_stream=False)
        self.assert_stream_error(conn, 1, PROTOCOL_ERROR, opened + data_frame(1, b"longer"))

    def test_extended_connect_without_a_tunnel_route_is_answered_at_once(self):
        conn = self.h2connect()
        fields = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "http"),
            (":path", "/ping"),
            (":authority", "localhost"),
            ("sec-websocket-version", "13"),
        ]
        conn.send(headers_frame(1, hpack_encode(fields), end_stream=False))
        resp = conn.read_response(1)
        self.assertIn(resp.status, (404, 405))

    def test_plain_connect_reaches_the_router(self):
        conn = self.h2connect()
        conn.send(headers_frame(1, hpack_encode([(":method", "CONNECT"), (":authority", "localhost:1")])))
        self.assertIn(conn.read_response(1).status, (400, 404, 405))


class HpackInStepTest(FrameTestCase):
    def test_a_size_update_over_our_limit_is_a_compression_error(self):
        update = encode_integer(8192, 5, 0x20)
        self.assert_connection_error(self.h2connect(), COMPRESSION_ERROR, headers_frame(1, update + block()))

    def test_a_size_update_after_a_field_is_a_compression_error(self):
        frames = headers_frame(1, block() + encode_integer(0, 5, 0x20))
        self.assert_connection_error(self.h2connect(), COMPRESSION_ERROR, frames)

    def test_an_index_past_the_tables_is_a_compression_error(self):
        self.assert_connection_error(self.h2connect(), COMPRESSION_ERROR, headers_frame(1, block() + b"\xff\x10"))

    def test_an_oversized_list_gets_431_and_what_it_indexed_stays_usable(self):
        conn = self.h2connect()
        indexed = b"\x40" + encode_integer(6, 7) + b"x-keep" + encode_integer(4, 7) + b"kept"
        big = hpack_encode([(f"x-big{i}", "b" * 1000) for i in range(9)])
        conn.send(headers_frame(1, block() + indexed + big))
        self.assertEqual(conn.read_response(1).status, 431)
        conn.send(headers_frame(3, block() + b"\xbe"))  # index 62: x-keep: kept
        resp = conn.read_response(3)
        self.assertEqual((resp.status, resp.body), (200, b"pong"))
        self.assertEqual(conn.goaways, [])


class RepeatedBlockTest(FrameTestCase):
    """A header block sent again is the decoder's remembered one, and its
    streams share one copy of the request's head: every handler still reads
    its own request, however late it reads it and whatever came after."""

    def delayed_echo(self, conn, tag, times):
        """times streams of one block, /delay with X-Echo: tag; their ids."""
        ids = [conn.new_stream_id() for _ in range(times)]
        echo = block("GET", "/delay?ms=300", headers=[("x-echo", tag), ("x-n", "1")])
        conn.send(b"".join(headers_frame(i, echo) for i in ids))
        return [(i, tag) for i in ids]

    def test_late_handlers_read_their_own_fields_after_other_blocks(self):
        conn = self.h2connect()
        # A block once decoded, once remembered and checked, then shared; another
        # block that replaces it in the decoder's memory; the first again.
        sent = self.delayed_echo(conn, "first", 3)
        sent += self.delayed_echo(conn, "second", 3)
        # A field the table takes changes it: the same block is decoded anew.
        indexed = b"\x40" + encode_integer(6, 7) + b"x-keep" + encode_integer(4, 7) + b"kept"
        stream_id = conn.new_stream_id()
        conn.send(headers_frame(stream_id, block() + indexed))
        sent += self.delayed_echo(conn, "first", 3)
        for stream_id, tag in sent:
            resp = conn.read_response(stream_id)
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.body.decode(), f"GET /delay\nx-echo: {tag}\nx-n: 1\nhost: localhost\n")
        self.assertEqual(conn.goaways, [])

    def test_each_block_again_goes_where_the_router_sends_it(self):
        conn = self.h2connect()
        sent = [("GET", "/ping", 200)] * 3 + [("GET", "/nowhere", 404)] * 3
        sent += [("POST", "/ping", 405)] * 3 + [("GET", "/ping", 200)] * 3
        for method, path, status in sent:
            stream_id = conn.new_stream_id()
            conn.send(headers_frame(stream_id, block(method, path)))
            self.assertEqual(conn.read_response(stream_id).status, status, f"{method} {path}")

    def test_a_shared_heads_content_length_holds_each_streams_body(self):
        conn = self.h2connect()
        opened = block("POST", "/echo", [("content-length", "5")])
        for stream_id in (1, 3, 5, 7):
            conn.send(headers_frame(stream_id, opened, end_stream=False) + data_frame(stream_id, b"hello", True))
            resp = conn.read_response(stream_id)
            self.assertEqual((resp.status, resp.body), (200, b"hello"))
        # The fourth block was the shared head's: its declared length still binds.
        short = headers_frame(9, opened, end_stream=False) + data_frame(9, b"hi", end_stream=True)
        self.assert_stream_error(conn, 9, PROTOCOL_ERROR, short)


class FloodTest(FrameTestCase):
    """The rest of the 2019 set (CVE-2019-9514, 9518): frames that cost the
    server work or owed replies but carry nothing."""

    def test_a_flood_of_empty_data_frames_gets_enhance_your_calm(self):
        conn = self.h2connect()
        opened = headers_frame(1, block("POST", "/echo"), end_stream=False)
        conn.flood(opened + data_frame(1, b"") * 100000)
        self.assertEqual([error_name(g.error_code()) for g in conn.goaways][-1:], ["ENHANCE_YOUR_CALM"])
        self.assert_serves_both()

    def test_resets_owed_to_a_client_that_does_not_read_are_bounded(self):
        # DATA after the client ended its side: each earns RST_STREAM(STREAM_CLOSED).
        conn = self.h2connect(rcvbuf=4096, auto_ack=False)
        conn.flood(
            b"".join(headers_frame(sid, block()) + data_frame(sid, b"x") for sid in range(1, 2000001, 2)), quiet=3
        )
        self.assertTrue(conn.eof, "still open")
        self.assertEqual([error_name(g.error_code()) for g in conn.goaways][-1:], ["ENHANCE_YOUR_CALM"])
        self.assert_serves_both()

    def test_empty_header_blocks_are_reset_and_then_cut_off(self):
        conn = self.h2connect(rcvbuf=4096, auto_ack=False)
        conn.flood(b"".join(headers_frame(sid, b"") for sid in range(1, 400001, 2)), quiet=3)
        self.assertTrue(conn.eof, "still open")
        self.assertEqual([error_name(g.error_code()) for g in conn.goaways][-1:], ["ENHANCE_YOUR_CALM"])
        self.assert_serves_both()


if __name__ == "__main__":
    unittest.main()
