"""What a handler learns of its client, seen through GET /whoami on the real
bench servers: the peer's address and port (the client socket's own), the
port it reached (the listener's, per listener), the scheme, a query value
percent-decoded and a cookie, over IPv4 and IPv6, HTTP/1.1, h2c and HTTPS."""

import json
import unittest
import urllib.parse

from support.h2client import H2Conn
from support.harness import Conn, ServerTestCase, ipv6_loopback_or_skip, run_client, start_server
from support.tls_fixtures import TlsConn, client_context, h2_over_tls, shared_certs, start_https

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)


def whoami_http1(conn, target="/whoami", headers=None):
    conn.request("GET", target, headers=headers or {})
    resp = conn.read_response()
    if resp.status != 200:
        raise AssertionError(f"GET {target}: {resp.status} {resp.body!r}")
    return json.loads(resp.body)


def whoami_h2(conn, target="/whoami", headers=()):
    resp = conn.fetch("GET", target, headers=headers)
    if resp.status != 200:
        raise AssertionError(f"GET {target} over HTTP/2: {resp.status} {resp.body!r}")
    return json.loads(resp.body)


class ClientDetailsTestCase(unittest.TestCase):
    def assert_client(self, info, sock, server_port, family, scheme, protocol):
        """info describes the client that sock is, connected to server_port."""
        local = sock.getsockname()
        self.assertEqual(info["family"], family)
        self.assertEqual(info["address"], local[0])
        self.assertEqual(info["port"], local[1], "the peer port is the client socket's own")
        self.assertEqual(info["local_port"], server_port, "the local port is the listener's")
        self.assertEqual((info["scheme"], info["protocol"]), (scheme, protocol))


class ClientDetailsCleartextTest(ServerTestCase, ClientDetailsTestCase):
    """One plain server on every IPv4 address (h2c Upgrade on, to see its peer too)."""

    server_args = ("--h2c-upgrade",)

    def test_http1_reports_the_ipv4_peer_and_ports(self):
        with Conn(self.server.port) as conn:
            info = whoami_http1(conn)
            self.assert_client(info, conn.sock, self.server.port, "ipv4", "http", "HTTP/1.1")
            self.assertIsNone(info["q"])
            self.assertIsNone(info["cookie"])
            # The same answer for the next request on the connection.
            self.assertEqual(whoami_http1(conn), info)

    def test_each_connection_reports_its_own_port(self):
        with Conn(self.server.port) as first, Conn(self.server.port) as second:
            a, b = whoami_http1(first), whoami_http1(second)
            self.assertNotEqual(a["port"], b["port"])
            self.assertEqual(b["port"], second.sock.getsockname()[1])

    def test_h2c_reports_the_ipv4_peer_and_ports(self):
        with H2Conn(self.server.port) as conn:
            info = whoami_h2(conn)
            self.assert_client(info, conn.sock, self.server.port, "ipv4", "http", "HTTP/2")

    def test_h2c_by_upgrade_reports_the_same_connection(self):
        with H2Conn(self.server.port, handshake=False) as conn:
            conn.upgrade("/whoami")
            resp = conn.read_response(1)
            info = json.loads(resp.body)
            self.assert_client(info, conn.sock, self.server.port, "ipv4", "http", "HTTP/2")

    def test_query_value_is_percent_decoded_with_plus_as_space(self):
        with Conn(self.server.port) as conn:
            value = 'caf\u00e9 & "co" +/%'
            query = urllib.parse.urlencode({"q": value})  # spaces become '+'
            self.assertIn("+", query)
            self.assertEqual(whoami_http1(conn, "/whoami?" + query)["q"], value)
            self.assertEqual(whoami_http1(conn, "/whoami?q=a%2Bb+c")["q"], "a+b c")
            self.assertEqual(whoami_http1(conn, "/whoami?q=")["q"], "")

    def test_malformed_query_escapes_are_refused_not_kept(self):
        with Conn(self.server.port) as conn:
            for q in ("%G1", "%4", "abc%"):
                with self.subTest(q=q):
                    self.assertIs(whoami_http1(conn, "/whoami?q=" + q)["q"], False)

    def test_cookie_is_found_among_pairs_with_quotes_removed(self):
        with Conn(self.server.port) as conn:
            cookie = 'identity=no; id_x=no; id="abc 1"; id=second'
            self.assertEqual(whoami_http1(conn, headers={"Cookie": cookie})["cookie"], "abc 1")
            info = whoami_http1(conn, "/whoami?cookie=identity", headers={"Cookie": cookie})
            self.assertEqual(info["cookie"], "no")
            info = whoami_http1(conn, "/whoami?cookie=missing", headers={"Cookie": cookie})
            self.assertIsNone(info["cookie"])
            self.assertEqual(whoami_http1(conn, headers={"Cookie": "id="})["cookie"], "")

    def test_cookie_is_found_in_any_of_several_http1_cookie_fields(self):
        with Conn(self.server.port) as conn:
            conn.send(b"GET /whoami?cookie=b HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n")
            resp = conn.read_response()
            self.assertEqual(json.loads(resp.body)["cookie"], "2")

    def test_cookie_crumbs_of_http2_are_all_searched(self):
        with H2Conn(self.server.port) as conn:
            crumbs = [("cookie", "a=1"), ("cookie", "id=xyz"), ("cookie", "b=2")]
            self.assertEqual(whoami_h2(conn, headers=crumbs)["cookie"], "xyz")
            self.assertEqual(whoami_h2(conn, "/whoami?cookie=b", headers=crumbs)["cookie"], "2")

    def test_curl_sees_the_same_details(self):
        for http in ("--http1.1", "--http2-prior-knowledge"):
            with self.subTest(http=http):
                result = run_client(
                    [
                        "curl",
                        "-sS",
                        "--max-time",
                        "10",
                        http,
                        "-b",
                        "id=c; x=y",
                        "-w",
                        "\n%{local_port}",
                        self.server.url("/whoami?q=hello+world%21"),
                    ]
                )
                self.assertEqual(result.returncode, 0, result.stderr)
                body, local_port = result.stdout.rsplit(b"\n", 1)
                info = json.loads(body)
                self.assertEqual(info["port"], int(local_port))
                self.assertEqual(info["local_port"], self.server.port)
                self.assertEqual((info["q"], info["cookie"], info["scheme"]), ("hello world!", "c", "http"))


class ClientDetailsIpv6Test(ClientDetailsTestCase):
    def test_ipv6_loopback_client_is_reported_as_ipv6(self):
        ipv6_loopback_or_skip(self)
        server = start_server(self, ["--workers", "1", "--host", "::1"])
        with Conn(server.port, "::1") as conn:
            self.assert_client(whoami_http1(conn), conn.sock, server.port, "ipv6", "http", "HTTP/1.1")
        with H2Conn(server.port, "::1") as conn:
            self.assert_client(whoami_h2(conn), conn.sock, server.port, "ipv6", "http", "HTTP/2")
        server.stop_and_check()

    def test_ipv4_client_of_a_dual_stack_listener_is_reported_as_ipv4(self):
        ipv6_loopback_or_skip(self)
        server = start_server(self, ["--workers", "1", "--host", "::"])
        with Conn(server.port, "127.0.0.1") as conn:
            info = whoami_http1(conn)
            self.assert_client(info, conn.sock, server.port, "ipv4", "http", "HTTP/1.1")
            self.assertEqual(info["address"], "127.0.0.1")  # not ::ffff:127.0.0.1
        with Conn(server.port, "::1") as conn:
            self.assert_client(whoami_http1(conn), conn.sock, server.port, "ipv6", "http", "HTTP/1.1")
        server.stop_and_check()


class ClientDetailsHttpsTest(ClientDetailsTestCase):
    def test_https_reports_scheme_https_over_http1_and_h2(self):
        server = start_https(self, CERTS.rsa, "--workers", "1")
        with TlsConn(server.port, client_context()) as conn:
            self.assert_client(whoami_http1(conn), conn.sock, server.port, "ipv4", "https", "HTTP/1.1")
        with h2_over_tls(server.port) as conn:
            self.assert_client(whoami_h2(conn), conn.sock, server.port, "ipv4", "https", "HTTP/2")
        server.stop_and_check()

    def test_each_listener_reports_its_own_port_and_scheme(self):
        server = start_https(self, CERTS.rsa, "--workers", "2", "--plain-port", "0")
        self.assertNotEqual(server.plain_port, server.port)
        with Conn(server.plain_port) as conn:
            self.assert_client(whoami_http1(conn), conn.sock, server.plain_port, "ipv4", "http", "HTTP/1.1")
        with TlsConn(server.port, client_context()) as conn:
            info = whoami_http1(conn, "/whoami?q=%C3%A9t%C3%A9", headers={"Cookie": "id=tls"})
            self.assert_client(info, conn.sock, server.port, "ipv4", "https", "HTTP/1.1")
            self.assertEqual((info["q"], info["cookie"]), ("\u00e9t\u00e9", "tls"))
        server.stop_and_check()

    def test_https_over_ipv6_reports_the_ipv6_peer(self):
        ipv6_loopback_or_skip(self)
        server = start_https(self, CERTS.rsa, "--workers", "1", "--host", "::1")
        with TlsConn(server.port, client_context(), host="::1") as conn:
            self.assert_client(whoami_http1(conn), conn.sock, server.port, "ipv6", "https", "HTTP/1.1")
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
