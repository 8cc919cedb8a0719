"""The PROXY protocol (HAProxy's, v1 and v2) on the real bench servers'
listeners (--proxy-protocol NETWORKS): the client a trusted proxy names is the
one GET /whoami (xHttpRequestPeer) and the access log see, over HTTP/1.1, h2c
and TLS; a trusted source must send a valid header (else it is closed), an
untrusted one is served as itself and a header from it is refused as the
protocol it reaches refuses any junk, and a header that stops part-way is
closed at the header timeout.
Then HAProxy (Debian's) in front, with `send-proxy-v2` and with `send-proxy`:
the client's own address and port arrive, not HAProxy's."""

import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest

from support.h2client import H2Conn
from support.haproxy import start_haproxy
from support.harness import Conn, start_server
from support.tls_fixtures import client_context, shared_certs, start_https

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(family, source, destination, sport, dport):
    return f"PROXY {family} {source} {destination} {sport} {dport}\r\n".encode()


def v2(command, fam, body):
    return V2_SIGNATURE + bytes([0x20 | command, fam]) + struct.pack(">H", len(body)) + body


def v2_inet(source, destination, sport, dport, tlvs=b""):
    body = socket.inet_pton(socket.AF_INET, source) + socket.inet_pton(socket.AF_INET, destination)
    return v2(1, 0x11, body + struct.pack(">HH", sport, dport) + tlvs)


def v2_inet6(source, destination, sport, dport):
    body = socket.inet_pton(socket.AF_INET6, source) + socket.inet_pton(socket.AF_INET6, destination)
    return v2(1, 0x21, body + struct.pack(">HH", sport, dport))


def whoami(conn):
    conn.request("GET", "/whoami")
    resp = conn.read_response()
    if resp.status != 200:
        raise AssertionError(f"GET /whoami: {resp.status} {resp.body!r}")
    return json.loads(resp.body)


def closed_without_answer(test, conn, timeout=5):
    """The server closes conn having sent nothing."""
    conn.sock.settimeout(timeout)
    try:
        data = conn.sock.recv(65536)
    except ConnectionResetError:
        data = b""
    test.assertEqual(data, b"", "the server answered instead of closing")


class ProxyProtocolTest(unittest.TestCase):
    """A server that trusts loopback, so every test client is a 'proxy'."""

    @classmethod
    def setUpClass(cls):
        cls.top = tempfile.mkdtemp(prefix="xk-proxy-")
        cls.log = os.path.join(cls.top, "access.log")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.top, ignore_errors=True)

    def start(self, *extra, networks="127.0.0.0/8, ::1"):
        return start_server(self, ["--workers", "1", "--proxy-protocol", networks, *extra])

    def test_v1_tcp4_and_tcp6_name_the_client(self):
        server = self.start()
        with Conn(server.port) as conn:
            conn.send(v1("TCP4", "203.0.113.7", "198.51.100.1", 41234, 443))
            info = whoami(conn)
            self.assertEqual((info["family"], info["address"], info["port"]), ("ipv4", "203.0.113.7", 41234))
            self.assertEqual(info["local_port"], server.port, "the local port stays the listener's")
            # Later requests on the connection keep the address.
            self.assertEqual(whoami(conn)["address"], "203.0.113.7")
        with Conn(server.port) as conn:
            conn.send(v1("TCP6", "2001:db8::7", "2001:db8::1", 5, 80))
            info = whoami(conn)
            self.assertEqual((info["family"], info["address"], info["port"]), ("ipv6", "2001:db8::7", 5))
        with Conn(server.port) as conn:
            conn.send(b"PROXY UNKNOWN\r\n")
            info = whoami(conn)
            self.assertEqual((info["address"], info["port"]), ("127.0.0.1", conn.sock.getsockname()[1]))
        server.stop_and_check()

    def test_v2_proxy_local_and_tlvs(self):
        server = self.start()
        with Conn(server.port) as conn:
            tlvs = b"\x01\x00\x02h2" + b"\x04\x00\x05" + b"\x00" * 5
            conn.send(v2_inet("192.0.2.44", "192.0.2.1", 65535, 80, tlvs))
            info = whoami(conn)
            self.assertEqual((info["address"], info["port"]), ("192.0.2.44", 65535))
        with Conn(server.port) as conn:
            conn.send(v2_inet6("2001:db8:1::9", "2001:db8::1", 1, 80))
            self.assertEqual(whoami(conn)["address"], "2001:db8:1::9")
        with Conn(server.port) as conn:
            conn.send(v2(0, 0x00, b""))  # LOCAL: a health check, the proxy speaking for itself
            info = whoami(conn)
            self.assertEqual((info["address"], info["port"]), ("127.0.0.1", conn.sock.getsockname()[1]))
        server.stop_and_check()

    def test_header_and_request_in_one_send_and_byte_by_byte(self):
        server = self.start()
        request = b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n"
        for header in (
            v1("TCP4", "203.0.113.8", "198.51.100.1", 1000, 80),
            v2_inet("203.0.113.8", "10.0.0.1", 1000, 80),
        ):
            with self.subTest(version=1 if header.startswith(b"PROXY") else 2):
                with Conn(server.port) as conn:
                    conn.send(header + request)
                    self.assertEqual(json.loads(conn.read_response().body)["address"], "203.0.113.8")
                with Conn(server.port) as conn:
                    for i in range(len(header)):
                        conn.send(header[i : i + 1])
                        time.sleep(0.002)
                    conn.send(request)
                    self.assertEqual(json.loads(conn.read_response().body)["port"], 1000)
        server.stop_and_check()

    def test_h2c_and_tls_after_the_header(self):
        server = self.start()
        with H2Conn(server.port, handshake=False) as conn:
            conn.send(v2_inet("198.51.100.20", "198.51.100.1", 2020, 80))
            conn.handshake()
            resp = conn.fetch("GET", "/whoami")
            self.assertEqual(
                (json.loads(resp.body)["address"], json.loads(resp.body)["protocol"]), ("198.51.100.20", "HTTP/2")
            )
        server.stop_and_check()
        tls = start_https(self, CERTS.rsa, "--workers", "1", "--proxy-protocol", "127.0.0.0/8")
        with Conn(tls.port) as conn:
            conn.send(v2_inet("198.51.100.21", "198.51.100.1", 2121, 443))
            conn.sock = client_context().wrap_socket(conn.sock, server_hostname="localhost")
            info = whoami(conn)
            self.assertEqual((info["address"], info["port"], info["scheme"]), ("198.51.100.21", 2121, "https"))
        tls.stop_and_check()

    def test_the_access_log_shows_the_header_address(self):
        server = self.start("--access-log", self.log, "--log-format", "json", "--log-flush-ms", "10")
        with Conn(server.port) as conn:
            conn.send(v1("TCP4", "203.0.113.99", "198.51.100.1", 4444, 80))
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()
        with open(self.log) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        self.assertEqual(
            [(r["remote_addr"], r["remote_port"], r["status"]) for r in lines][-1:],
            [("203.0.113.99", 4444, 200)],
            lines,
        )

    def test_trusted_source_without_a_valid_header_is_closed(self):
        server = self.start()
        bad = {
            "no header": b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n",
            "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "v1 bad port": v1("TCP4", "203.0.113.7", "198.51.100.1", 70000, 443),
            "v1 wrong family": v1("TCP4", "2001:db8::1", "198.51.100.1", 1, 443),
            "v1 no CRLF in 107 bytes": b"PROXY UNKNOWN " + b"x" * 100,
            "v2 version 1": V2_SIGNATURE + b"\x11\x11\x00\x0c" + b"\x00" * 12,
            "v2 too short for IPv6": v2(1, 0x21, b"\x00" * 12),
            "v2 longer than 512": V2_SIGNATURE + b"\x21\x11\x02\x01",
            "v2 TLV past the end": v2_inet("192.0.2.1", "192.0.2.2", 1, 2, b"\x01\x00\x09ab"),
        }
        for name, data in bad.items():
            with self.subTest(name), Conn(server.port) as conn:
                conn.send(data)
                closed_without_answer(self, conn)
        server.stop_and_check()

    def test_a_header_cut_short_is_closed_at_the_header_timeout(self):
        server = self.start("--header-timeout", "600")
        for part in (b"PROXY TCP4 203.0.113.7 198.51.", V2_SIGNATURE[:7], v2_inet("192.0.2.1", "192.0.2.2", 1, 2)[:20]):
            with self.subTest(part=part), Conn(server.port) as conn:
                conn.send(part)
                began = time.monotonic()
                closed_without_answer(self, conn, timeout=10)
                self.assertLess(time.monotonic() - began, 5, "closed by the header timeout, not later")
        server.stop_and_check()

    def test_untrusted_source_is_served_as_itself_and_its_header_is_refused(self):
        # Nothing is read for a PROXY header from elsewhere: it reaches HTTP as it is,
        # which refuses it (400, then the connection closes), never as an address.
        server = self.start(networks="10.0.0.0/8, 2001:db8::/32")
        with Conn(server.port) as conn:
            info = whoami(conn)
            self.assertEqual((info["address"], info["port"]), ("127.0.0.1", conn.sock.getsockname()[1]))
        with H2Conn(server.port) as conn:
            self.assertEqual(conn.fetch("GET", "/ping").body, b"pong")
        for header in (v1("TCP4", "10.1.2.3", "10.0.0.1", 1, 80), v2_inet("10.1.2.3", "10.0.0.1", 1, 80)):
            with self.subTest(header=header[:6]), Conn(server.port) as conn:
                conn.send(header + b"GET /whoami HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = conn.read_until_eof(5)
                self.assertRegex(answer, rb"^HTTP/1\.1 400 ")
                self.assertNotIn(b"10.1.2.3", answer)
        tls = start_https(self, CERTS.rsa, "--workers", "1", "--proxy-protocol", "10.0.0.0/8")
        with Conn(tls.port) as conn:
            conn.send(v2_inet("10.1.2.3", "10.0.0.1", 1, 443))
            with self.assertRaises((ssl.SSLError, ConnectionError)):  # its plaintext refusal, then gone
                client_context().wrap_socket(conn.sock, server_hostname="localhost")
        tls.stop_and_check()
        server.stop_and_check()

    def test_a_bad_network_list_stops_the_server_with_its_reason(self):
        for networks in ("10.0.0.1/8", "not-a-network", "10.0.0.0/33"):
            with self.subTest(networks=networks):
                binary = os.environ["XK_BENCH_SERVER"]
                done = subprocess.run([binary, "0", "--proxy-protocol", networks], capture_output=True, timeout=30)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(networks.encode(), done.stderr)


class BehindHaproxyTest(unittest.TestCase):
    """HAProxy passes the client on with send-proxy-v2 or send-proxy; the client
    connects from 127.0.0.5 while HAProxy connects from 127.0.0.1."""

    def check(self, send, mode):
        log = os.path.join(tempfile.mkdtemp(prefix="xk-proxy-log-"), "access.log")
        self.addCleanup(shutil.rmtree, os.path.dirname(log), True)
        server = start_server(
            self,
            ["--workers", "1", "--proxy-protocol", "127.0.0.1/32", "--access-log", log, "--log-flush-ms", "10"],
        )
        port = start_haproxy(self, [f"server xkit 127.0.0.1:{server.port} {send}"], mode=mode).port
        sock = socket.socket()
        sock.bind(("127.0.0.5", 0))
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        client_port = sock.getsockname()[1]
        sock.sendall(b"GET /whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"}\n" not in data:
            more = sock.recv(65536)
            if not more:
                break
            data += more
        sock.close()
        info = json.loads(data.split(b"\r\n\r\n", 1)[1])
        self.assertEqual((info["address"], info["port"]), ("127.0.0.5", client_port))
        server.stop_and_check()
        with open(log) as f:
            text = f.read()
        self.assertTrue(text.startswith("127.0.0.5 "), text)

    def test_send_proxy_v2_in_tcp_mode(self):
        self.check("send-proxy-v2", "tcp")

    def test_send_proxy_v2_in_http_mode(self):
        self.check("send-proxy-v2", "http")

    def test_send_proxy_v1_in_http_mode(self):
        self.check("send-proxy", "http")


if __name__ == "__main__":
    unittest.main()
