"""Unary gRPC (<xhttp/grpc.h>) as gRPC clients see it: the bench server's
GetSum method (the arena's SumRequest/SumReply, protobuf by hand) called with
Python's grpcio over h2c and over TLS, and malformed calls made frame by frame
with the raw HTTP/2 client, each answered with the status gRPC prescribes."""

import struct
import unittest

import grpc

from support.h2client import H2Conn
from support.harness import Conn, ServerTestCase
from support.tls_fixtures import HttpsTestCase, shared_certs

METHOD = "/benchmark.BenchmarkService/GetSum"
CERTS = None

setUpModule, tearDownModule = shared_certs(__name__)


def varint(value):
    """A protobuf varint; negative int32 values are sign-extended to 64 bits."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def sum_request(a, b):
    return b"\x08" + varint(a) + b"\x10" + varint(b)


def sum_reply(result):
    return b"\x08" + varint(result)


def framed(message, compressed=False):
    return struct.pack(">BI", int(compressed), len(message)) + message


def get_sum(channel):
    return channel.unary_unary(METHOD, request_serializer=lambda m: m, response_deserializer=lambda m: m)


class GrpcOverH2cTest(ServerTestCase):
    def setUp(self):
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        self.addCleanup(self.channel.close)

    def test_sum_comes_back_with_status_ok(self):
        call = get_sum(self.channel)
        self.assertEqual(call(sum_request(13, 42), timeout=10), sum_reply(55))
        self.assertEqual(call(sum_request(0, 0), timeout=10), sum_reply(0))

    def test_negative_and_wrapping_int32_values(self):
        call = get_sum(self.channel)
        self.assertEqual(call(sum_request(-5, 2), timeout=10), sum_reply(-3))
        self.assertEqual(call(sum_request(2**31 - 1, 1), timeout=10), sum_reply(-(2**31)))

    def test_many_calls_share_one_connection(self):
        call = get_sum(self.channel)
        futures = [call.future(sum_request(i, i), timeout=20) for i in range(200)]
        self.assertEqual([f.result() for f in futures], [sum_reply(2 * i) for i in range(200)])

    def test_a_message_the_method_cannot_read_is_invalid_argument(self):
        with self.assertRaises(grpc.RpcError) as caught:
            get_sum(self.channel)(b"\x0a\x01x", timeout=10)  # a length-delimited field
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("only varint fields", caught.exception.details())

    def test_an_unknown_method_is_unimplemented(self):
        call = self.channel.unary_unary("/benchmark.BenchmarkService/Nope")
        with self.assertRaises(grpc.RpcError) as caught:
            call(b"", timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


class GrpcFramingTest(ServerTestCase):
    """What goes over the wire, and what a malformed call gets."""

    def call(self, body, content_type="application/grpc"):
        with H2Conn(self.server.port) as conn:
            headers = [("content-type", content_type), ("te", "trailers")]
            return conn.fetch("POST", METHOD, headers=headers, body=body)

    def trailer(self, resp, name):
        fields = dict(resp.trailers[-1]) if resp.trailers else {}
        value = fields.get(name.encode())
        return value.decode() if value is not None else None

    def test_reply_is_one_framed_message_then_trailers(self):
        resp = self.call(framed(sum_request(1, 2)))
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header("content-type"), "application/grpc")
        self.assertEqual(resp.body, framed(sum_reply(3)))
        self.assertEqual(resp.data_frames, 1)
        self.assertEqual(self.trailer(resp, "grpc-status"), "0")

    def test_content_type_with_a_format_suffix_is_grpc(self):
        resp = self.call(framed(sum_request(1, 2)), content_type="application/grpc+proto")
        self.assertEqual(self.trailer(resp, "grpc-status"), "0")

    def test_another_content_type_is_http_415(self):
        for content_type in ("application/json", "application/grpcx", "text/plain"):
            with self.subTest(content_type=content_type):
                resp = self.call(framed(sum_request(1, 2)), content_type=content_type)
                self.assertEqual(resp.status, 415)
                self.assertEqual(resp.trailers, [])

    def test_a_compressed_message_is_unimplemented(self):
        resp = self.call(framed(sum_request(1, 2), compressed=True))
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.body, b"")
        self.assertEqual(self.trailer(resp, "grpc-status"), "12")
        self.assertEqual(self.trailer(resp, "grpc-accept-encoding"), "identity")

    def test_broken_frames_are_internal(self):
        cases = {
            "cut short": b"\x00\x00\x00",
            "no body": b"",
            "longer than the body": framed(sum_request(1, 2))[:-1],
            "two messages": framed(sum_request(1, 2)) * 2,
        }
        for name, body in cases.items():
            with self.subTest(name):
                resp = self.call(body)
                self.assertEqual(resp.status, 200)
                self.assertEqual(self.trailer(resp, "grpc-status"), "13")
                self.assertTrue(self.trailer(resp, "grpc-message"))

    def test_http11_is_505(self):
        with Conn(self.server.port) as conn:
            conn.request("POST", METHOD, headers={"Content-Type": "application/grpc"}, body=framed(sum_request(1, 2)))
            self.assertEqual(conn.read_response().status, 505)


class GrpcOverTlsTest(HttpsTestCase):
    def test_sum_over_tls_with_alpn_h2(self):
        with open(self.certs.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        with grpc.secure_channel(f"localhost:{self.server.port}", credentials) as channel:
            self.assertEqual(get_sum(channel)(sum_request(20, 22), timeout=10), sum_reply(42))


if __name__ == "__main__":
    unittest.main()
