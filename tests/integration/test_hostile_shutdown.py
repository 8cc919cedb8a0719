"""SIGTERM under load on every protocol: HTTP/1.1 (plain and TLS), HTTP/2 (h2c
and TLS) and WebSocket. Clients keep requests in flight on keep-alive
connections when the signal comes; each request is either answered whole or
refused cleanly: its connection closed before any byte of its answer (HTTP/1.1),
its stream above the GOAWAY's last stream id or reset REFUSED_STREAM (HTTP/2),
or sent after the server's close frame (WebSocket). No response is ever cut,
and the server exits 0. test_load_shutdown covers plain HTTP/1.1 with wrk."""

import signal
import socket
import ssl
import struct
import threading
import time
import unittest

from support.h2client import REFUSED_STREAM, ConnectionClosed, H2Conn, NothingInTime
from support.harness import Conn, ResponseIncomplete, ServerProcess
from support.tls_fixtures import HttpsServer, TlsConn, client_context, h2_over_tls, shared_certs
from support.wsclient import OP_BINARY, OP_CLOSE, frame as ws_frame, handshake_request

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

CLIENTS = 6
LOAD_BEFORE = 1.0  # seconds of load before the signal
SIZES = (0, 100, 16384, 200000)
GONE = (
    ConnectionRefusedError,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLError,
    socket.timeout,
    TimeoutError,
    EOFError,
    OSError,
)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.answered = self.refused = 0
        self.cut = []

    def add(self, answered=0, refused=0, cut=None):
        with self.lock:
            self.answered += answered
            self.refused += refused
            if cut:
                self.cut.append(cut)


class ShutdownUnderLoadTest(unittest.TestCase):
    def run_load(self, server, client, extra=()):
        """CLIENTS threads run client(server, tally, stop) until the server is
        gone; SIGTERM comes after LOAD_BEFORE seconds."""
        tally, stop = Tally(), threading.Event()
        threads = [threading.Thread(target=client, args=(server, tally, stop), daemon=True) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(LOAD_BEFORE)
        answered_before = tally.answered
        server.send_signal(signal.SIGTERM)
        server.assert_clean_exit(server.wait_exit(15))
        stop.set()
        for thread in threads:
            thread.join(15)
            self.assertFalse(thread.is_alive(), "a client hung after the server stopped")
        self.assertEqual(tally.cut, [], f"responses cut by the stop: {tally.cut[:5]}")
        self.assertGreater(answered_before, CLIENTS, "hardly any load before the signal")
        return tally

    # -- HTTP/1.1 --

    def http1_client(self, connect):
        def client(server, tally, stop):
            n = 0
            while not stop.is_set():
                try:
                    conn = connect(server)
                except GONE:
                    return  # no longer accepting: refused before any request was sent
                with conn:
                    while not stop.is_set():
                        size = SIZES[n % len(SIZES)]
                        n += 1
                        try:
                            conn.request("GET", f"/echo?size={size}")
                        except GONE:
                            tally.add(refused=1)
                            break
                        try:
                            resp = conn.read_response()
                        except ResponseIncomplete as err:
                            if conn.buf or "status line" not in str(err):
                                tally.add(cut=f"GET /echo?size={size}: {err}")
                            else:
                                tally.add(refused=1)
                            break
                        except GONE as err:
                            tally.add(cut=f"GET /echo?size={size}: {err!r}")
                            break
                        if resp.status != 200 or len(resp.body) != size:
                            tally.add(cut=f"GET /echo?size={size}: {resp!r}")
                            break
                        tally.add(answered=1)
                        if "close" in resp.tokens("connection"):
                            break

        return client

    def test_http1_keepalive_clients_get_whole_responses_or_a_clean_close(self):
        server = ServerProcess(["--workers", "2", "--shutdown-timeout", "10000"]).start()
        self.addCleanup(server.close)
        tally = self.run_load(server, self.http1_client(lambda s: Conn(s.port, timeout=10)))
        print(f"\nHTTP/1.1: {tally.answered} answered, {tally.refused} refused", flush=True)

    def test_https1_keepalive_clients_get_whole_responses_or_a_clean_close(self):
        server = HttpsServer(CERTS.ec, ["--workers", "2", "--shutdown-timeout", "10000"]).start()
        self.addCleanup(server.close)
        tally = self.run_load(server, self.http1_client(lambda s: TlsConn(s.port, client_context(), timeout=10)))
        print(f"\nHTTPS/1.1: {tally.answered} answered, {tally.refused} refused", flush=True)

    # -- HTTP/2 --

    def h2_client(self, connect):
        def client(server, tally, stop):
            n = 0
            while not stop.is_set():
                try:
                    conn = connect(server)
                except GONE:
                    return
                with conn:
                    while not stop.is_set():
                        streams = {}
                        try:
                            for _ in range(4):
                                size = SIZES[n % len(SIZES)]
                                n += 1
                                streams[conn.request("GET", f"/echo?size={size}")] = size
                            for stream_id in streams:
                                stream = conn.stream(stream_id)
                                conn.read_until(lambda stream=stream: stream.closed)
                        except (ConnectionClosed, NothingInTime, *GONE):
                            pass
                        if not self.h2_tally(conn, streams, tally):
                            break

        return client

    def h2_tally(self, conn, streams, tally):
        """Counts what happened to each stream; False once the connection is done."""
        last = conn.goaways[-1].goaway_last_stream() if conn.goaways else None
        for stream_id, size in streams.items():
            stream = conn.stream(stream_id)
            resp = stream.response()
            if stream.ended and resp is not None and resp.status == 200 and len(resp.body) == size:
                tally.add(answered=1)
            elif resp is None and (stream.reset_code == REFUSED_STREAM or (last is not None and stream_id > last)):
                tally.add(refused=1)
            else:
                tally.add(
                    cut=f"stream {stream_id} (size {size}): ended={stream.ended} reset="
                    f"{stream.reset_code} body {len(stream.body)} goaway last={last}"
                )
        return not (conn.eof or conn.goaways)

    def test_h2c_clients_get_whole_responses_or_streams_refused(self):
        server = ServerProcess(["--workers", "2", "--shutdown-timeout", "10000"]).start()
        self.addCleanup(server.close)
        tally = self.run_load(server, self.h2_client(lambda s: H2Conn(s.port, timeout=10)))
        print(f"\nh2c: {tally.answered} answered, {tally.refused} refused", flush=True)

    def test_https2_clients_get_whole_responses_or_streams_refused(self):
        server = HttpsServer(CERTS.ec, ["--workers", "2", "--shutdown-timeout", "10000"]).start()
        self.addCleanup(server.close)
        tally = self.run_load(server, self.h2_client(lambda s: h2_over_tls(s.port, timeout=10)))
        print(f"\nHTTPS/2: {tally.answered} answered, {tally.refused} refused", flush=True)

    # -- WebSocket --

    @staticmethod
    def ws_client(server, tally, stop):
        """Echoes messages one at a time; each is echoed whole, or the
        server's close frame (1001) comes instead."""
        try:
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        except GONE:
            return
        with sock:
            try:
                sock.sendall(handshake_request()[0])
                buf = b""
                while b"\r\n\r\n" not in buf:
                    piece = sock.recv(4096)
                    if not piece:
                        return
                    buf += piece
            except GONE:
                return
            buf = buf.split(b"\r\n\r\n", 1)[1]
            n = 0
            while not stop.is_set():
                payload = bytes([n % 251]) * SIZES[n % len(SIZES)]
                n += 1
                try:
                    sock.sendall(ws_frame(OP_BINARY, payload))
                except GONE:
                    tally.add(refused=1)
                    return
                try:
                    opcode, got, buf = read_ws_frame(sock, buf)
                except GONE as err:
                    tally.add(cut=f"message {n} ({len(payload)} bytes): no echo and no close frame: {err!r}")
                    return
                if opcode == OP_CLOSE:
                    code = struct.unpack("!H", got[:2])[0] if got else None
                    if code != 1001:
                        tally.add(cut=f"closed with {code}, not 1001")
                    tally.add(refused=1)
                    return
                if (opcode, got) != (OP_BINARY, payload):
                    tally.add(cut=f"message {n}: echo of {len(got)} bytes for {len(payload)}")
                    return
                tally.add(answered=1)

    def test_websocket_echoes_are_whole_or_replaced_by_a_1001_close(self):
        server = ServerProcess(["--workers", "2", "--shutdown-timeout", "10000"]).start()
        self.addCleanup(server.close)
        tally = self.run_load(server, self.ws_client)
        self.assertEqual(tally.refused, CLIENTS, "not every WebSocket client was told 1001")
        print(f"\nWebSocket: {tally.answered} answered, {tally.refused} closed 1001", flush=True)


def read_ws_frame(sock, buf):
    """(opcode, payload, rest) of the next unmasked server frame; EOFError when it ends first."""

    def need(n):
        nonlocal buf
        while len(buf) < n:
            piece = sock.recv(1 << 20)
            if not piece:
                raise EOFError(f"EOF with {len(buf)} of {n} bytes")
            buf += piece

    need(2)
    length, at = buf[1] & 0x7F, 2
    if length == 126:
        need(4)
        length, at = struct.unpack("!H", buf[2:4])[0], 4
    elif length == 127:
        need(10)
        length, at = struct.unpack("!Q", buf[2:10])[0], 10
    need(at + length)
    return buf[0] & 0x0F, buf[at : at + length], buf[at + length :]


if __name__ == "__main__":
    unittest.main()
