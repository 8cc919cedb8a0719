"""Streams an HTTP/2 upstream refused, retried (RFC 9113 §8.7): through the
bench server's --upstream-h2, to an HTTP/2 upstream of the test's own (the
h2 package, answering by path) that refuses as told, and to an xKit server
that takes one stream at a time.

Checked as the client sees it: a POST whose stream was refused
(RST_STREAM REFUSED_STREAM) is answered 200 by its second try, and the
upstream read its body whole that time; one past a GOAWAY's last stream id
goes again on a new connection; a request after a graceful GOAWAY goes on a
new connection at once, not after the old one's last stream; one refused
every time is 502 after a few tries; a POST reset with another code is 502
and not tried again; and 20
POSTs at once to an xKit upstream's /upload with --max-streams 1, whose
SETTINGS a relay holds back (the streams sent before they came are
refused), all get 200 with their own answer. And an answer whose body is
longer or shorter than its Content-Length is 502."""

import hashlib
import json
import os
import socketserver
import struct
import threading
import time
import unittest
import zlib
from concurrent.futures import ThreadPoolExecutor

import h2.config
import h2.connection
import h2.errors
import h2.events

from support.harness import Conn, ServerProcess, bench_server_path, start_owned, start_server
from support.upstream import LoopbackServer
from test_upstream_h2 import Relay

DRAIN_DELAY = 1.5  # seconds a /drain/ answer waits after its GOAWAY


class RefusingUpstream(LoopbackServer):
    """h2c by prior knowledge on a free loopback port. By path: /refuse-once/*
    refuses its first stream, /refuse-always/* every one, /goaway-once/*
    answers its first stream with a GOAWAY whose last stream id is below it
    (then closes), /drain/* answers with a graceful GOAWAY naming its stream,
    then the answer DRAIN_DELAY later, /reset/* resets with INTERNAL_ERROR,
    /length/D/S says Content-Length D and sends S bytes; anything else gets
    200 and a JSON of the body's length and sha256. .tries counts the
    streams seen per path, .connections the accepts."""

    def __init__(self):
        self.tries = {}
        self.connections = 0
        super().__init__(H2Handler)


class H2Handler(socketserver.BaseRequestHandler):
    def handle(self):
        server = self.server
        with server.lock:
            server.connections += 1
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        sock = self.request
        sock.sendall(conn.data_to_send())
        paths, bodies = {}, {}
        delayed = {}  # stream id -> when its answer is due (/drain/)
        sock.settimeout(0.05)
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                data = None
            except OSError:
                return
            if data == b"":
                return
            for stream_id, due in list(delayed.items()):
                if time.monotonic() >= due:
                    del delayed[stream_id]
                    self.answer(conn, stream_id, bodies.pop(stream_id))
            for event in conn.receive_data(data) if data else ():
                if isinstance(event, h2.events.RequestReceived):
                    path = dict(event.headers)[b":path"].decode()
                    paths[event.stream_id], bodies[event.stream_id] = path, b""
                    with server.lock:
                        tries = server.tries[path] = server.tries.get(path, 0) + 1
                    if path.startswith("/refuse-always/") or (path.startswith("/refuse-once/") and tries == 1):
                        conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                        del paths[event.stream_id]
                    elif path.startswith("/reset/"):
                        conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.INTERNAL_ERROR)
                        del paths[event.stream_id]
                    elif path.startswith("/drain/"):  # a graceful GOAWAY naming this stream, answered later
                        sock.sendall(
                            struct.pack(">I", 8)[1:] + b"\x07\x00" + struct.pack(">III", 0, event.stream_id, 0)
                        )
                        delayed[event.stream_id] = time.monotonic() + DRAIN_DELAY
                        del paths[event.stream_id]
                    elif path.startswith("/goaway-once/") and tries == 1:
                        conn.close_connection(last_stream_id=event.stream_id - 2)
                        sock.sendall(conn.data_to_send())
                        sock.close()
                        return
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if event.stream_id in bodies:
                        bodies[event.stream_id] += event.data
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in paths:
                    body = bodies.pop(event.stream_id)
                    if paths[event.stream_id].startswith("/length/"):  # /length/DECLARED/SENT
                        declared, sent = paths[event.stream_id].split("/")[2:4]
                        fields = [(":status", "200"), ("content-length", declared)]
                        conn.send_headers(event.stream_id, fields)
                        conn.send_data(event.stream_id, b"x" * int(sent), end_stream=True)
                        del paths[event.stream_id]
                        continue
                    self.answer(conn, event.stream_id, body)
                    del paths[event.stream_id]
            try:
                sock.sendall(conn.data_to_send())
            except OSError:
                return

    @staticmethod
    def answer(conn, stream_id, body):
        """200 and a JSON of the body's length and sha256."""
        answer = json.dumps({"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}).encode()
        fields = [(":status", "200"), ("content-type", "application/json"), ("content-length", str(len(answer)))]
        conn.send_headers(stream_id, fields)
        conn.send_data(stream_id, answer, end_stream=True)


def post(port, target, body):
    conn = Conn(port)
    try:
        conn.request("POST", target, body=body, headers={"Content-Type": "application/octet-stream"})
        return conn.read_response()
    finally:
        conn.close()


def front_for(test, upstream_port):
    args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{upstream_port}", "--upstream-h2"]
    args += ["--upstream-timeout", "5000"]
    return start_owned(test, ServerProcess(argv=[bench_server_path(), "0", *args]))


class RefusedStreamsTest(unittest.TestCase):
    def setUp(self):
        self.up = RefusingUpstream()
        self.addCleanup(self.up.stop)
        self.front = front_for(self, self.up.port)

    def assert_whole(self, resp, body):
        self.assertEqual(resp.status, 200, resp.body)
        got = json.loads(resp.body)
        self.assertEqual((got["bytes"], got["sha256"]), (len(body), hashlib.sha256(body).hexdigest()))

    def test_a_refused_post_is_retried_with_its_body(self):
        body = os.urandom(40000)
        self.assert_whole(post(self.front.port, "/refuse-once/a", body), body)
        self.assertEqual(self.up.tries["/refuse-once/a"], 2)
        self.assertEqual(self.up.connections, 1)
        self.front.stop_and_check()

    def test_a_post_past_a_goaway_goes_again_on_a_new_connection(self):
        body = os.urandom(3000)
        self.assert_whole(post(self.front.port, "/plain/first", b"x"), b"x")  # stream 1 on connection 1
        self.assert_whole(post(self.front.port, "/goaway-once/b", body), body)  # stream 3: GOAWAY(last 1)
        self.assertEqual(self.up.tries["/goaway-once/b"], 2)
        self.assertEqual(self.up.connections, 2)
        self.front.stop_and_check()

    def test_a_request_after_a_graceful_goaway_does_not_wait_for_the_draining_connection(self):
        order = []

        def draining():
            order.append(("drain", post(self.front.port, "/drain/a", b"a").status))

        thread = threading.Thread(target=draining)
        thread.start()
        for _ in range(500):  # until the upstream has the stream it answers late
            if "/drain/a" in self.up.tries:
                break
            time.sleep(0.01)
        order.append(("next", post(self.front.port, "/plain/b", b"b").status))
        thread.join()
        self.assertEqual(order, [("next", 200), ("drain", 200)])
        self.assertEqual(self.up.connections, 2)
        self.front.stop_and_check()

    def test_refused_every_time_is_502_after_a_few_tries(self):
        resp = post(self.front.port, "/refuse-always/c", b"y" * 100)
        self.assertEqual(resp.status, 502, resp.body)
        self.assertEqual(self.up.tries["/refuse-always/c"], 4)  # the first and three retries
        self.front.stop_and_check()

    def test_a_post_reset_otherwise_is_not_retried(self):
        resp = post(self.front.port, "/reset/d", b"z" * 100)
        self.assertEqual(resp.status, 502, resp.body)
        self.assertEqual(self.up.tries["/reset/d"], 1)
        self.front.stop_and_check()


class LateSettingsRelay(Relay):
    """A relay that holds what the upstream says for its first HOLD seconds:
    the front, not yet told the upstream's SETTINGS, opens streams as its
    default allows, and the upstream refuses those beyond its limit."""

    HOLD = 0.5

    def pipe(self, src, dst):
        if src.getpeername()[1] == self.target:
            time.sleep(self.HOLD)
        super().pipe(src, dst)


class OneStreamAtATimeTest(unittest.TestCase):
    def test_posts_refused_before_the_upstream_settings_came_are_all_answered(self):
        upstream = start_server(self, ["--workers", "1", "--max-streams", "1"])
        relay = LateSettingsRelay(upstream.port)
        self.addCleanup(relay.stop)
        front = front_for(self, relay.port)
        bodies = [os.urandom(1000 + i) for i in range(20)]
        with ThreadPoolExecutor(max_workers=20) as pool:
            answers = list(pool.map(lambda b: post(front.port, "/upload", b), bodies))
        for body, resp in zip(bodies, answers, strict=True):
            self.assertEqual(resp.status, 200, resp.body)
            got = json.loads(resp.body)
            self.assertEqual((got["bytes"], got["crc32"]), (len(body), f"{zlib.crc32(body):08x}"))
        front.stop_and_check()
        upstream.stop_and_check()


class BrokenLengthsTest(unittest.TestCase):
    """An answer whose DATA is longer or shorter than its own Content-Length
    is malformed (RFC 9113 §8.1.1): 502, never passed on as whole."""

    def test_a_body_longer_or_shorter_than_its_length_is_502(self):
        up = RefusingUpstream()
        self.addCleanup(up.stop)
        front = front_for(self, up.port)
        for declared, sent in ((5, 10), (10, 5), (5, 5)):
            conn = Conn(front.port)
            try:
                conn.request("GET", f"/length/{declared}/{sent}")
                resp = conn.read_response()
            finally:
                conn.close()
            if declared == sent:
                self.assertEqual((resp.status, resp.body), (200, b"x" * sent))
            else:
                self.assertEqual(resp.status, 502, (declared, sent, resp.body))
        front.stop_and_check()


if __name__ == "__main__":
    unittest.main()
