"""gRPC through the reverse proxy to an HTTP/2 upstream (--upstream-h2): the
bench server's GetSum method (test_grpc.py's) on an xKit upstream, called with
Python's grpcio on the front, through a relay that counts the upstream
connections.

Checked: an answer and its grpc-status 0 arrive whole; a method's error
(INVALID_ARGUMENT with its grpc-message, sent as trailers) and a
trailers-only answer (UNIMPLEMENTED) reach the client as the upstream said;
200 calls at once share one upstream connection."""

import unittest

import grpc

from support.harness import ServerProcess, bench_server_path, start_owned, start_server
from test_grpc import get_sum, sum_reply, sum_request
from test_upstream_h2 import Relay


class GrpcThroughTheProxyTest(unittest.TestCase):
    def setUp(self):
        self.upstream = start_server(self, ["--workers", "1"])
        self.relay = Relay(self.upstream.port)
        self.addCleanup(self.relay.stop)
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{self.relay.port}", "--upstream-h2"]
        args += ["--upstream-timeout", "5000"]
        # Without --test-routes, so the front has no GetSum of its own: every call is proxied.
        self.front = start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args]))
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.front.port}")
        self.addCleanup(self.channel.close)

    def finish(self):
        self.channel.close()
        self.front.stop_and_check()
        self.upstream.stop_and_check()

    def test_an_answer_and_its_status(self):
        call = get_sum(self.channel)
        reply, state = call.with_call(sum_request(13, 42), timeout=10)
        self.assertEqual(reply, sum_reply(55))
        self.assertEqual(state.code(), grpc.StatusCode.OK)
        self.finish()

    def test_errors_in_trailers_and_trailers_only(self):
        with self.assertRaises(grpc.RpcError) as caught:
            get_sum(self.channel)(b"\x0a\x01x", timeout=10)  # a length-delimited field
        self.assertEqual(caught.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("only varint fields", caught.exception.details())
        with self.assertRaises(grpc.RpcError) as caught:
            self.channel.unary_unary("/benchmark.BenchmarkService/Nope")(b"", timeout=10)
        self.assertEqual(caught.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.finish()

    def test_many_calls_share_one_upstream_connection(self):
        call = get_sum(self.channel)
        futures = [call.future(sum_request(i, i), timeout=30) for i in range(200)]
        self.assertEqual([f.result() for f in futures], [sum_reply(2 * i) for i in range(200)])
        self.assertEqual(self.relay.connections, 1)
        self.finish()


if __name__ == "__main__":
    unittest.main()
