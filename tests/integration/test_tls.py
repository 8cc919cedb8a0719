"""HTTPS as clients see it: curl, nghttp, h2load, openssl s_client and Python's
ssl against https_bench_server. ALPN picks HTTP/2 or HTTP/1.1 on one port;
TLS 1.2 and 1.3 are both served unless configured away; routes and bodies
behave as over cleartext; plain and TLS listeners share a server; /tls says
how the connection is secured."""

import json
import os
import signal
import ssl
import tempfile
import time
import unittest

from support.harness import Conn, run_client
from support.loadgen import h2load_report
from support.tls_fixtures import (
    HttpsTestCase,
    InteractiveSClient,
    ManualTls,
    TlsConn,
    client_context,
    curl_https,
    h2_over_tls,
    http1_get,
    s_client,
    shared_certs,
    start_https,
)

MiB = 1 << 20
CERTS = None

# RFC 8446 §6 alert numbers, as s_client prints them ("SSL alert number N").
ALERT_HANDSHAKE_FAILURE = 40
ALERT_PROTOCOL_VERSION = 70
ALERT_NO_APPLICATION_PROTOCOL = 120


setUpModule, tearDownModule = shared_certs(__name__)


def kernel_has_ktls():
    """The tls module is loaded (or built in): only then may kTLS be reported on."""
    return os.path.isdir("/sys/module/tls")


def random_file(test, size):
    data = os.urandom(size)
    handle = tempfile.NamedTemporaryFile(delete=False)
    test.addCleanup(os.unlink, handle.name)
    with handle:
        handle.write(data)
    return handle.name, data


class HttpsClientsTest(HttpsTestCase):
    """Default settings: h2 and http/1.1 offered, TLS 1.2 and 1.3, an RSA certificate."""

    server_options = ["--workers", "2"]

    def tls_info(self, http):
        result, body, version, status = curl_https(self.server, "/tls", http=http)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(status, 200)
        return version, json.loads(body)

    def test_curl_over_http11_is_served_and_tls_reports_the_connection(self):
        version, info = self.tls_info("1.1")
        self.assertEqual(version, "1.1")
        self.assertEqual(info["tls"], True)
        self.assertEqual(info["protocol"], "HTTP/1.1")
        self.assertEqual(info["alpn"], "http/1.1")
        self.assertEqual(info["version"], "TLSv1.3")
        self.assertIn(
            info["cipher"], ("TLS_AES_256_GCM_SHA384", "TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256")
        )
        self.assertEqual(info["sni"], "localhost")
        self.assertEqual((info["resumed"], info["client_verified"], info["client_subject"]), (False, False, ""))

    def test_curl_over_http2_negotiates_h2_by_alpn(self):
        version, info = self.tls_info("2")
        self.assertEqual(version, "2")
        self.assertEqual((info["protocol"], info["alpn"]), ("HTTP/2", "h2"))

    def test_ktls_is_reported_off_where_the_kernel_has_no_tls_module(self):
        for http in ("1.1", "2"):
            _, info = self.tls_info(http)
            self.assertIsInstance(info["ktls_send"], bool)
            self.assertIsInstance(info["ktls_recv"], bool)
            if not kernel_has_ktls():
                self.assertEqual((info["ktls_send"], info["ktls_recv"]), (False, False), info)

    def test_no_ktls_keeps_records_in_user_space_on_any_kernel(self):
        server = start_https(self, CERTS.ec, "--workers", "1", "--no-ktls")
        for http in ("1.1", "2"):
            result, body, _, status = curl_https(server, "/tls", http=http)
            self.assertEqual((result.returncode, status), (0, 200), result.stderr)
            info = json.loads(body)
            self.assertEqual((info["ktls_send"], info["ktls_recv"]), (False, False), info)
        server.stop_and_check()

    def test_s_client_alpn_gets_each_protocol_it_offers_alone(self):
        for offered in ("h2", "http/1.1"):
            with self.subTest(alpn=offered):
                result = s_client(self.server.port, "-alpn", offered)
                self.assertTrue(result.handshake_done, result.text)
                self.assertEqual(result.alpn, offered, result.text)
                self.assertEqual(result.verify_code, 0, result.text)

    def test_s_client_alpn_http10_negotiates_it_and_is_served_as_nginx_does(self):
        request = b"GET /tls HTTP/1.0\r\nHost: localhost\r\n\r\n"
        result = s_client(self.server.port, "-alpn", "http/1.0", request=request)
        self.assertTrue(result.handshake_done, result.text)
        self.assertEqual(result.alpn, "http/1.0", result.text)
        self.assertTrue(result.body().startswith("HTTP/1.1 200"), result.out[-2000:])
        self.assertEqual(result.json_body()["alpn"], "http/1.0")

    def test_the_servers_preference_for_h2_wins_when_both_are_offered(self):
        for offered in ("h2,http/1.1", "http/1.1,h2"):
            with self.subTest(alpn=offered):
                self.assertEqual(s_client(self.server.port, "-alpn", offered).alpn, "h2")

    def test_a_client_without_alpn_is_served_http11(self):
        result = s_client(self.server.port, request=http1_get("/tls"))
        self.assertIsNone(result.alpn, result.text)
        self.assertIn("No ALPN negotiated", result.out)
        self.assertTrue(result.body().startswith("HTTP/1.1 200"), result.out[-2000:])
        info = result.json_body()
        self.assertEqual((info["protocol"], info["alpn"]), ("HTTP/1.1", ""))

    def test_alpn_with_no_common_protocol_is_refused_with_no_application_protocol(self):
        result = s_client(self.server.port, "-alpn", "foo")
        self.assertFalse(result.handshake_done, result.text)
        self.assertIn(ALERT_NO_APPLICATION_PROTOCOL, result.alert_numbers, result.text)
        with self.assertRaisesRegex(ssl.SSLError, "(?i)no.application.protocol"):
            TlsConn(self.server.port, client_context(alpn=("foo", "bar"))).close()
        self.assert_serves_ping()

    def test_served_certificate_is_the_configured_one_and_verifies_for_localhost(self):
        conn = self.connect()
        self.assertEqual(conn.peer_der(), self.certs.rsa.der())
        result = s_client(self.server.port, "-verify_hostname", "localhost")
        self.assertEqual(result.verify_code, 0, result.text)
        self.assertIn("Server public key is 2048 bit", result.out)

    def test_curl_by_ip_address_verifies_against_the_ip_san(self):
        result = run_client(
            [
                "curl",
                "-sS",
                "--max-time",
                "20",
                "--cacert",
                self.certs.ca,
                f"https://127.0.0.1:{self.server.port}/ping",
            ],
            timeout=30,
        )
        self.assertEqual((result.returncode, result.stdout), (0, b"pong"), result.stderr)

    def test_nghttp_fetches_over_h2_and_posts_a_body(self):
        result = run_client(["nghttp", "-v", f"https://127.0.0.1:{self.server.port}/ping"], timeout=30)
        text = result.stdout.decode(errors="replace")
        self.assertEqual(result.returncode, 0, text[-3000:])
        self.assertRegex(text, r"(?i)negotiated protocol: h2")
        self.assertIn(":status: 200", text)
        self.assertTrue(text.rstrip().endswith("pong") or "\npong" in text, text[-2000:])
        path, data = random_file(self, 300 * 1024)
        result = run_client(["nghttp", "-d", path, f"https://127.0.0.1:{self.server.port}/echo"], timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertTrue(result.stdout == data, f"nghttp -d echoed {len(result.stdout)} bytes")

    def test_h2load_over_tls_completes_every_request_with_h2_and_http11(self):
        url = f"https://127.0.0.1:{self.server.port}/ping"
        for alpn, extra in (("h2", ["-m", "10"]), ("http/1.1", ["--h1"])):
            with self.subTest(alpn=alpn):
                report, text = h2load_report(run_client(["h2load", "-n", "2000", "-c", "50", *extra, url], timeout=60))
                self.assertEqual((report.requests, report.statuses.get("2xx")), (2000, 2000), text)
                self.assertIsNotNone(report.tls, text)
                version, _cipher, spoken = report.tls
                self.assertEqual(spoken, alpn, text)
                self.assertEqual(version, "TLSv1.3", text)

    def test_bodies_round_trip_byte_for_byte_over_both_protocols(self):
        path, data = random_file(self, 3 * MiB + 17)
        for http in ("1.1", "2"):
            with self.subTest(http=http):
                result, body, version, status = curl_https(
                    self.server,
                    "/echo",
                    "--data-binary",
                    f"@{path}",
                    "-H",
                    "Content-Type: application/octet-stream",
                    http=http,
                )
                self.assertEqual((result.returncode, version, status), (0, http, 200), result.stderr)
                self.assertTrue(body == data, f"echoed {len(body)} of {len(data)} bytes")
                result, body, version, status = curl_https(self.server, "/echo?size=4194304", http=http)
                self.assertEqual((version, status, len(body)), (http, 200, 4 * MiB))
                self.assertEqual(body.count(b"x"), 4 * MiB)

    def test_a_slow_reader_gets_a_large_response_intact(self):
        # A small receive buffer makes the server's TLS writes stop and resume many times.
        conn = self.connect(rcvbuf=8192)
        conn.request("GET", "/echo?size=8388608")
        time.sleep(0.5)
        resp = conn.read_response()
        self.assertEqual(resp.status, 200)
        self.assertEqual(len(resp.body), 8 * MiB)
        self.assertEqual(resp.body.count(b"x"), 8 * MiB)
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_an_h2c_upgrade_over_tls_is_ignored(self):
        # RFC 9113 §3.1: "h2c" is HTTP/2 over cleartext; over TLS only ALPN may pick h2.
        conn = self.connect()
        conn.request(
            "GET",
            "/ping",
            headers=[
                ("Connection", "Upgrade, HTTP2-Settings"),
                ("Upgrade", "h2c"),
                ("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA"),
            ],
        )
        resp = conn.read_final_response()
        self.assertEqual((resp.version, resp.status, resp.body), ("HTTP/1.1", 200, b"pong"))
        self.assertEqual(resp.interim, [], "answered 101 Switching Protocols over TLS")
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")

    def test_keep_alive_and_pipelined_requests_over_one_connection(self):
        conn = self.connect()
        for _ in range(100):
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        conn.send(b"".join(b"GET /echo?size=%d HTTP/1.1\r\nHost: x\r\n\r\n" % size for size in range(10)))
        for size in range(10):
            self.assertEqual(conn.read_response().body, b"x" * size)

    def test_streamed_response_with_trailer_over_http11_and_h2(self):
        conn = self.connect()
        conn.request("GET", "/stream?chunks=50&size=1000&trailer=done", headers={"TE": "trailers"})
        resp = conn.read_response()
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.body, b"".join(bytes([48 + i % 10]) * 1000 for i in range(50)))
        self.assertIn(b"X-Stream-Trailer: done", resp.trailers)
        h2 = h2_over_tls(self.server.port)
        self.addCleanup(h2.close)
        h2resp = h2.fetch("GET", "/stream?chunks=50&size=1000&trailer=done")
        self.assertEqual(h2resp.body, resp.body)
        trailer_fields = [field for block in h2resp.trailers for field in block]
        self.assertIn((b"x-stream-trailer", b"done"), trailer_fields)

    def test_raw_http2_over_tls_serves_many_streams_on_one_connection(self):
        conn = h2_over_tls(self.server.port)
        self.addCleanup(conn.close)
        sizes = range(0, 20000, 100)
        streams = conn.fetch_many([("GET", f"/echo?size={size}") for size in sizes])
        for size, stream in zip(sizes, streams, strict=True):
            self.assertEqual(stream.response().status, 200)
            self.assertEqual(bytes(stream.body), b"x" * size)

    def test_tls12_and_tls13_are_both_served_by_default(self):
        for flag, version in (("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")):
            with self.subTest(version=version):
                result = s_client(self.server.port, flag, request=http1_get("/tls"))
                self.assertEqual(result.protocol, version, result.text)
                self.assertEqual(result.json_body()["version"], version)

    def test_key_updates_in_both_directions_leave_the_connection_serving(self):
        with InteractiveSClient(self.server.port, "-tls1_3") as client:
            client.wait_for("Verify return code")
            # "k" updates the client's keys; "K" asks the server to update its own too.
            for done, command in enumerate((b"k\n", b"K\n"), 1):
                client.send(command)
                client.wait_for("KEYUPDATE", count=done)
                client.send(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                client.wait_for("pong", count=done)
            client.send(http1_get("/echo?size=20000"))
            self.assertEqual(client.wait_exit(), 0, client.text[-3000:])
            self.assertIn("x" * 20000, client.text.replace("\n", ""))

    def test_client_initiated_renegotiation_is_refused(self):
        with InteractiveSClient(self.server.port, "-tls1_2") as client:
            client.wait_for("Verify return code")
            client.send(b"R\n")
            client.wait_for("RENEGOTIATING")
            client.wait_exit()
            self.assertRegex(client.text, r"no renegotiation|alert number 100|handshake failure", client.text[-3000:])
        self.assert_serves_ping()

    def test_tls11_and_older_are_refused_by_default(self):
        result = s_client(self.server.port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
        self.assertFalse(result.handshake_done, result.text)
        self.assertIn(ALERT_PROTOCOL_VERSION, result.alert_numbers, result.text)
        self.assert_serves_ping()


class VersionLimitsTest(unittest.TestCase):
    """--tls-min and --tls-max: the other version is refused with protocol_version."""

    def check(self, options, served, refused):
        server = start_https(self, CERTS.rsa, "--workers", "1", *options)
        result = s_client(server.port, request=http1_get("/tls"))
        self.assertEqual(result.protocol, served, result.text)
        self.assertEqual(result.json_body()["version"], served)
        flag = {"TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}
        result = s_client(server.port, flag[served])
        self.assertEqual(result.protocol, served, result.text)
        result = s_client(server.port, flag[refused])
        self.assertFalse(result.handshake_done, result.text)
        self.assertIn(ALERT_PROTOCOL_VERSION, result.alert_numbers, result.text)
        with TlsConn(server.port, client_context()) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()

    def test_tls_min_13_refuses_tls12(self):
        self.check(["--tls-min", "1.3"], "TLSv1.3", "TLSv1.2")

    def test_tls_max_12_refuses_tls13(self):
        self.check(["--tls-max", "1.2"], "TLSv1.2", "TLSv1.3")


class AlpnConfigTest(unittest.TestCase):
    """--alpn narrows what one port offers; --no-http2 leaves h2 out of the default."""

    def alpn_of(self, server, offered):
        result = s_client(server.port, "-alpn", offered)
        return result.alpn if result.handshake_done else result.alert_numbers

    def test_alpn_http11_only_serves_http11_to_http2_clients(self):
        server = start_https(self, CERTS.ec, "--alpn", "http/1.1")
        self.assertEqual(self.alpn_of(server, "h2,http/1.1"), "http/1.1")
        result, body, version, status = curl_https(server, "/tls", http="2")
        self.assertEqual((result.returncode, version, status), (0, "1.1", 200), result.stderr)
        self.assertEqual(json.loads(body)["alpn"], "http/1.1")
        self.assertIn(ALERT_NO_APPLICATION_PROTOCOL, self.alpn_of(server, "h2"))
        server.stop_and_check()

    def test_alpn_h2_only_serves_http2_and_refuses_http11_only_clients(self):
        server = start_https(self, CERTS.ec, "--alpn", "h2")
        self.assertEqual(self.alpn_of(server, "http/1.1,h2"), "h2")
        self.assertIn(ALERT_NO_APPLICATION_PROTOCOL, self.alpn_of(server, "http/1.1"))
        result, body, version, status = curl_https(server, "/tls", http="2")
        self.assertEqual((result.returncode, version, status), (0, "2", 200), result.stderr)
        self.assertEqual(json.loads(body)["protocol"], "HTTP/2")
        server.stop_and_check()

    def test_no_http2_leaves_h2_out_of_the_default_alpn(self):
        server = start_https(self, CERTS.ec, "--no-http2")
        self.assertEqual(self.alpn_of(server, "h2,http/1.1"), "http/1.1")
        result, _, version, status = curl_https(server, "/ping", http="2")
        self.assertEqual((result.returncode, version, status), (0, "1.1", 200), result.stderr)
        server.stop_and_check()


class PlainAndTlsListenersTest(unittest.TestCase):
    def test_plain_port_serves_cleartext_beside_the_tls_port(self):
        server = start_https(self, CERTS.ec, "--workers", "2", "--plain-port", "0")
        self.assertIsNotNone(server.plain_port)
        self.assertNotEqual(server.plain_port, server.port)
        with Conn(server.plain_port) as conn:
            conn.request("GET", "/tls")
            resp = conn.read_response()
            self.assertEqual(resp.status, 200)
            info = json.loads(resp.body)
            self.assertEqual((info["tls"], info["protocol"]), (False, "HTTP/1.1"))
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        result = run_client(
            ["curl", "-sS", "--max-time", "20", "--http2-prior-knowledge", f"http://127.0.0.1:{server.plain_port}/tls"],
            timeout=30,
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        info = json.loads(result.stdout)
        self.assertEqual((info["tls"], info["protocol"]), (False, "HTTP/2"))
        for http in ("1.1", "2"):
            result, body, _, status = curl_https(server, "/tls", http=http)
            self.assertEqual((result.returncode, status), (0, 200), result.stderr)
            self.assertEqual(json.loads(body)["tls"], True)
        server.stop_and_check()


class ConnectionEndsTest(unittest.TestCase):
    """How the server ends TLS connections: with close_notify, so a client can tell
    a finished response from a cut one, and on time when they sit idle."""

    def ends_with_close_notify(self, tls, timeout=10):
        """Reads application data until the server closes: True when a close_notify
        came before the TCP close (ssl reads b""), False when the stream was cut."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if tls.tls.read(65536) == b"":
                    return True
                continue
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLEOFError:
                return False
            tls.read_raw()
        self.fail(f"the server did not close within {timeout}s")

    def test_connection_close_is_followed_by_close_notify(self):
        server = start_https(self, CERTS.ec, "--workers", "1")
        with ManualTls(server.port) as tls:
            tls.handshake()
            tls.send(http1_get("/echo?size=100000"))
            self.assertTrue(self.ends_with_close_notify(tls), "closed without close_notify")
        server.stop_and_check()

    def test_idle_tls_connections_are_closed_after_the_idle_timeout(self):
        server = start_https(self, CERTS.ec, "--workers", "1", "--idle-timeout", "400")
        conn = TlsConn(server.port, client_context())
        self.addCleanup(conn.close)
        conn.request("GET", "/ping")
        self.assertEqual(conn.read_response().body, b"pong")
        started = time.monotonic()
        self.assertEqual(conn.read_until_eof(5), b"")
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        server.stop_and_check()


class GracefulStopTest(unittest.TestCase):
    def test_sigterm_with_idle_and_half_handshaken_connections_exits_cleanly(self):
        server = start_https(self, CERTS.rsa, "--workers", "1", "--shutdown-timeout", "2000")
        idle = TlsConn(server.port, client_context())
        self.addCleanup(idle.close)
        idle.request("GET", "/ping")
        self.assertEqual(idle.read_response().body, b"pong")
        half = ManualTls(server.port)
        self.addCleanup(half.close)
        half.send_client_hello()
        slow = TlsConn(server.port, client_context())
        self.addCleanup(slow.close)
        slow.request("GET", "/delay?ms=300")
        time.sleep(0.1)
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        self.assertEqual(slow.read_response().body, b"done")
        server.assert_clean_exit(server.wait_exit(10))
        self.assertLess(time.monotonic() - started, 8)
        self.assertEqual(idle.read_until_eof(5), b"")


if __name__ == "__main__":
    unittest.main()
