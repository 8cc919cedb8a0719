"""Upstream names resolved on the worker's loop (c-ares), through the bench
server's --upstream with --upstream-resolver pointing at a tiny DNS server of
the test's own on a loopback UDP port.

The DNS server answers A and AAAA queries from a table the test changes as it
goes, NXDOMAIN for names it does not know, and nothing at all in its silent
mode. The upstreams are small HTTP/1.1 servers that say who they are and close
each connection, so every request makes a new one (and may look the name up
again). Checked: `localhost` from /etc/hosts; a name with a dead address first
and a live one second (the live one answers); an IPv6-only name; a new address
picked up once the old ones are older than --upstream-resolve-interval; an
unknown name answered 502 at once; a resolver that never answers answered 504
within the connect timeout, the server serving on and exiting clean."""

import socket
import struct
import subprocess
import threading
import time
import unittest

from support.harness import Conn, bench_server_path, ipv6_loopback_or_skip, start_server

A, AAAA = 1, 28


class DnsServer:
    """A DNS server on 127.0.0.1's UDP port .port answering from .records:
    {name: [(type, address)]}. silent: queries go unanswered."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.records = {}
        self.silent = False
        self.queries = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def stop(self):
        self.sock.close()

    def serve(self):
        while True:
            try:
                packet, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            answer = self.answer(packet)
            if answer:
                self.sock.sendto(answer, peer)

    def answer(self, packet):
        if len(packet) < 12:
            return None
        qid, _flags, qdcount = struct.unpack("!HHH", packet[:6])
        if qdcount != 1:
            return None
        labels, at = [], 12
        while packet[at]:
            n = packet[at]
            labels.append(packet[at + 1 : at + 1 + n].decode().lower())
            at += 1 + n
        question = packet[12 : at + 5]
        qtype = struct.unpack("!H", packet[at + 1 : at + 3])[0]
        name = ".".join(labels)
        with self.lock:
            self.queries.append((name, qtype))
            if self.silent:
                return None
            known = self.records.get(name)
        if known is None:
            return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question  # NXDOMAIN
        rrs = b""
        count = 0
        for rtype, address in known:
            if rtype != qtype:
                continue
            family = socket.AF_INET if rtype == A else socket.AF_INET6
            rdata = socket.inet_pton(family, address)
            rrs += struct.pack("!HHHIH", 0xC00C, rtype, 1, 60, len(rdata)) + rdata
            count += 1
        return struct.pack("!HHHHHH", qid, 0x8180, 1, count, 0, 0) + question + rrs


class WhoAmI:
    """An HTTP/1.1 upstream on (host, port) that answers every request with
    its name and closes the connection."""

    def __init__(self, name, host="127.0.0.1", port=0):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.name = name.encode()
        self.connections = 0
        threading.Thread(target=self.serve, daemon=True).start()

    def stop(self):
        self.sock.close()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self.one, args=(conn,), daemon=True).start()

    def one(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(4096)
                if not piece:
                    return
                data += piece
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(self.name), self.name)
            )


class ResolveTest(unittest.TestCase):
    def setUp(self):
        self.dns = DnsServer()
        self.addCleanup(self.dns.stop)

    def upstream(self, name, host="127.0.0.1", port=0):
        up = WhoAmI(name, host, port)
        self.addCleanup(up.stop)
        return up

    def proxy(self, url, *extra):
        args = ["--workers", "1", "--upstream", url, "--upstream-timeout", "1000"]
        args += ["--upstream-resolver", f"127.0.0.1:{self.dns.port}", *extra]
        return start_server(self, args)

    def get(self, server, target="/who"):
        conn = Conn(server.port)
        try:
            conn.request("GET", target)
            return conn.read_response()
        finally:
            conn.close()

    def finish(self, server):
        self.assertEqual(self.get(server, "/ping").status, 200)
        server.stop_and_check()

    def test_localhost_comes_from_etc_hosts(self):
        up = self.upstream("local")
        server = self.proxy(f"http://localhost:{up.port}")
        for _ in range(3):
            resp = self.get(server)
            self.assertEqual((resp.status, resp.body), (200, b"local"))
        self.assertEqual(self.dns.queries, [], "localhost was asked of the DNS server")
        self.finish(server)

    def test_the_addresses_of_a_name_are_tried_in_turn(self):
        up = self.upstream("live")
        # 127.0.0.2 has nothing on the port: refused, then the next address.
        self.dns.records["svc.test"] = [(A, "127.0.0.2"), (A, "127.0.0.1")]
        server = self.proxy(f"http://svc.test:{up.port}")
        for _ in range(3):
            resp = self.get(server)
            self.assertEqual((resp.status, resp.body), (200, b"live"), resp.body)
        self.assertIn(("svc.test", A), self.dns.queries)
        self.assertIn(("svc.test", AAAA), self.dns.queries)
        self.finish(server)

    def test_an_ipv6_only_name(self):
        ipv6_loopback_or_skip(self)
        up = self.upstream("six", "::1")
        self.dns.records["six.test"] = [(AAAA, "::1")]
        server = self.proxy(f"http://six.test:{up.port}")
        resp = self.get(server)
        self.assertEqual((resp.status, resp.body), (200, b"six"), resp.body)
        self.finish(server)

    def test_a_changed_address_is_picked_up_after_the_interval(self):
        first = self.upstream("first")
        second = self.upstream("second", "127.0.0.3", first.port)
        self.dns.records["moving.test"] = [(A, "127.0.0.1")]
        server = self.proxy(f"http://moving.test:{first.port}", "--upstream-resolve-interval", "200")
        self.assertEqual(self.get(server).body, b"first")
        asked = len(self.dns.queries)
        self.dns.records["moving.test"] = [(A, "127.0.0.3")]
        deadline = time.monotonic() + 5
        seen = []
        while time.monotonic() < deadline and (not seen or seen[-1] != b"second"):
            time.sleep(0.1)
            resp = self.get(server)
            self.assertEqual(resp.status, 200, resp.body)
            seen.append(resp.body)
        self.assertEqual(seen[-1], b"second", seen)
        self.assertGreater(len(self.dns.queries), asked)
        self.assertGreater(second.connections, 0)
        self.finish(server)

    def test_an_unknown_name_is_502_at_once(self):
        server = self.proxy("http://nowhere.test:80")
        start = time.monotonic()
        resp = self.get(server)
        self.assertEqual(resp.status, 502, resp.body)
        self.assertIn(b"name did not resolve", resp.body)
        self.assertLess(time.monotonic() - start, 1.0)
        self.finish(server)

    def test_a_resolver_that_never_answers_is_504_within_the_connect_timeout(self):
        self.dns.silent = True
        server = self.proxy("http://silent.test:80")
        for _ in range(2):
            start = time.monotonic()
            resp = self.get(server)
            elapsed = time.monotonic() - start
            self.assertEqual(resp.status, 504, resp.body)
            self.assertIn(b"connect timeout", resp.body)
            self.assertLess(elapsed, 3.0)
        self.assertTrue(self.dns.queries)
        self.finish(server)

    def test_a_resolver_list_that_is_no_list_of_addresses_is_refused_at_start(self):
        argv = [bench_server_path(), "0", "--upstream", "http://svc.test:80", "--upstream-resolver", "nowhere:x"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--upstream: invalid argument", done.stderr)


if __name__ == "__main__":
    unittest.main()
