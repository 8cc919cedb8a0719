"""The PROXY protocol sent upstream (xHttpProxyConf.proxy_protocol, the bench
server's --upstream-proxy-protocol 1|2): the upstream is an xKit server that
reads PROXY headers from loopback (--proxy-protocol 127.0.0.1/32) and says
whom it sees (GET /whoami); the front is a bench server without test routes,
so /whoami is proxied.

Checked for both versions: the upstream sees the front's client (its address
and port), not the front; two clients on their own connections each see
their own (a kept-alive upstream connection carries one client's requests);
behind a trusted PROXY header at the front, the address that header named,
IPv4 and IPv6, goes on."""

import http.client
import json
import socket
import unittest

from support.harness import Conn, ServerProcess, bench_server_path, start_owned, start_server


class UpstreamProxyProtocolTest(unittest.TestCase):
    def upstream(self):
        return start_server(self, ["--workers", "1", "--proxy-protocol", "127.0.0.1/32"])

    def front(self, up, version, *extra):
        args = ["--workers", "1", "--upstream", f"http://127.0.0.1:{up.port}", "--upstream-timeout", "2000"]
        args += ["--upstream-proxy-protocol", str(version), *extra]
        return start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args]))

    def whoami(self, conn):
        conn.request("GET", "/whoami")
        resp = conn.read_response()
        self.assertEqual(resp.status, 200, resp.body)
        return json.loads(resp.body)

    def test_the_upstream_sees_the_client(self):
        up = self.upstream()
        for version in (1, 2):
            with self.subTest(version=version):
                front = self.front(up, version)
                first, second = Conn(front.port), Conn(front.port)
                try:
                    for _ in range(2):
                        for conn in (first, second):
                            seen = self.whoami(conn)
                            client_port = conn.sock.getsockname()[1]
                            self.assertEqual((seen["address"], seen["port"]), ("127.0.0.1", client_port), seen)
                            self.assertEqual(seen["local_port"], up.port)
                finally:
                    first.close()
                    second.close()
                front.stop_and_check()
        up.stop_and_check()

    def test_a_trusted_proxy_header_at_the_front_goes_on(self):
        up = self.upstream()
        for version in (1, 2):
            with self.subTest(version=version):
                front = self.front(up, version, "--proxy-protocol", "127.0.0.1/32")
                for header, address, port, family in (
                    (b"PROXY TCP4 203.0.113.7 127.0.0.1 4444 80\r\n", "203.0.113.7", 4444, "ipv4"),
                    (b"PROXY TCP6 2001:db8::7 ::1 5555 80\r\n", "2001:db8::7", 5555, "ipv6"),
                ):
                    sock = socket.create_connection(("127.0.0.1", front.port), timeout=10)
                    sock.sendall(header + b"GET /whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    resp = http.client.HTTPResponse(sock)
                    resp.begin()
                    body = resp.read()
                    sock.close()
                    self.assertEqual(resp.status, 200, body)
                    seen = json.loads(body)
                    self.assertEqual((seen["address"], seen["port"], seen["family"]), (address, port, family))
                front.stop_and_check()
        up.stop_and_check()


if __name__ == "__main__":
    unittest.main()
