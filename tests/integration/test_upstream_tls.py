"""https:// upstreams (<xhttp/client.h>'s TLS): the bench server's --upstream
to an xKit HTTPS server (https_bench_server with the test certificates of
support/tls_fixtures.py, --test-routes for GET /tls, which says how its
connection is secured, and --static for a large file).

A good chain (the test CA given with --upstream-ca) passes, by address (no
SNI) and by name (SNI); the pool's second connection resumes the first one's
session; bodies of a few MiB cross both ways whole. Then the failures, each a
502 whose body names what failed: a certificate for another name, a chain to
a CA not trusted (the system's store, or another CA), a self-signed
certificate. --upstream-server-name checks (and sends) another name, and
--upstream-insecure lets the wrong certificate through."""

import hashlib
import json
import os
import subprocess
import tempfile
import time
import unittest
import zlib

from support.harness import ServerProcess, bench_server_path, request_once, start_owned
from support.tls_fixtures import Pair, shared_certs, start_https

setUpModule, tearDownModule = shared_certs(__name__)
CERTS = None  # set by setUpModule


def self_signed(directory):
    """A localhost certificate that signs itself (no CA behind it)."""
    pair = Pair(os.path.join(directory, "self.pem"), os.path.join(directory, "self.key"), "localhost")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", pair.key, "-out", pair.cert, "-days", "2", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return pair


class UpstreamTlsTest(unittest.TestCase):
    def upstream(self, pair, *extra):
        return start_https(self, pair, "--workers", "1", "--test-routes", *extra)

    def proxy(self, url, *extra):
        # Without --test-routes (start_server's), so GET /tls and POST /upload go to the upstream.
        args = ["--workers", "1", "--upstream", url, "--upstream-timeout", "2000", "--max-body", "16777216"]
        return start_owned(self, ServerProcess(argv=[bench_server_path(), "0", *args, *map(str, extra)]))

    def request(self, server, method, target, body=None):
        return request_once(server.port, method, target, body=body)

    def finish(self, *servers):
        for server in servers:
            server.stop_and_check()

    def tls_info(self, server):
        resp = self.request(server, "GET", "/tls")
        self.assertEqual(resp.status, 200, resp.body)
        return json.loads(resp.body)

    def test_a_good_chain_by_address_and_by_name(self):
        up = self.upstream(CERTS.rsa)
        by_address = self.proxy(f"https://127.0.0.1:{up.port}", "--upstream-ca", CERTS.ca)
        info = self.tls_info(by_address)
        self.assertTrue(info["tls"], info)
        self.assertEqual(info["sni"], "", "SNI carried an address")
        self.assertEqual(info["alpn"], "http/1.1")
        by_name = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca)
        self.assertEqual(self.tls_info(by_name)["sni"], "localhost")
        self.finish(by_address, by_name, up)

    def test_http2_by_alpn(self):
        up = self.upstream(CERTS.rsa)
        server = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca, "--upstream-h2")
        for _ in range(3):
            info = self.tls_info(server)
            self.assertEqual((info["alpn"], info["protocol"]), ("h2", "HTTP/2"), info)
        self.finish(server, up)

    def test_the_next_connection_resumes_the_session(self):
        # The upstream closes idle connections at once, so each request needs a new one.
        up = self.upstream(CERTS.ec, "--idle-timeout", "100")
        server = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca)
        first = self.tls_info(server)
        self.assertFalse(first["resumed"], first)
        resumed = []
        for _ in range(3):
            time.sleep(0.4)
            resumed.append(self.tls_info(server)["resumed"])
        self.assertTrue(all(resumed), resumed)
        self.finish(server, up)

    def test_bodies_of_a_few_mib_both_ways(self):
        with tempfile.TemporaryDirectory(prefix="xkit-up-tls-") as root:
            data = os.urandom(3 << 20)
            with open(os.path.join(root, "big.bin"), "wb") as out:
                out.write(data)
            up = self.upstream(CERTS.rsa, "--static", root)
            server = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca)
            resp = self.request(server, "GET", "/static/big.bin")
            self.assertEqual(resp.status, 200)
            self.assertEqual(hashlib.sha256(resp.body).hexdigest(), hashlib.sha256(data).hexdigest())
            sent = os.urandom(2 << 20)
            resp = self.request(server, "POST", "/upload", body=sent)
            self.assertEqual(resp.status, 200, resp.body)
            got = json.loads(resp.body)
            self.assertEqual((got["bytes"], got["crc32"]), (len(sent), f"{zlib.crc32(sent):08x}"))
            self.finish(server, up)

    def assert_refused(self, server, words):
        resp = self.request(server, "GET", "/tls")
        self.assertEqual(resp.status, 502, resp.body)
        self.assertIn(b"TLS handshake failed", resp.body)
        self.assertIn(words, resp.body)

    def test_a_certificate_for_another_name_is_502(self):
        up = self.upstream(CERTS.sni_a)  # a.example.test only
        server = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca)
        self.assert_refused(server, b"certificate verify failed: hostname mismatch")
        by_address = self.proxy(f"https://127.0.0.1:{up.port}", "--upstream-ca", CERTS.ca)
        self.assert_refused(by_address, b"certificate verify failed: IP address mismatch")
        # The name it does carry, checked and sent as SNI, passes.
        named = self.proxy(
            f"https://127.0.0.1:{up.port}", "--upstream-ca", CERTS.ca, "--upstream-server-name", "a.example.test"
        )
        self.assertEqual(self.tls_info(named)["sni"], "a.example.test")
        self.finish(server, by_address, named, up)

    def test_an_untrusted_chain_is_502(self):
        up = self.upstream(CERTS.rsa)
        system_store = self.proxy(f"https://localhost:{up.port}")
        self.assert_refused(system_store, b"unable to get local issuer certificate")
        other_ca = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.other_ca)
        self.assert_refused(other_ca, b"unable to get local issuer certificate")
        self.finish(system_store, other_ca, up)

    def test_a_self_signed_certificate_is_502(self):
        with tempfile.TemporaryDirectory(prefix="xkit-up-tls-") as directory:
            up = self.upstream(self_signed(directory))
            server = self.proxy(f"https://localhost:{up.port}", "--upstream-ca", CERTS.ca)
            self.assert_refused(server, b"certificate verify failed: self-signed certificate")
            self.finish(server, up)

    def test_insecure_lets_a_wrong_certificate_through(self):
        up = self.upstream(CERTS.sni_a)
        server = self.proxy(f"https://localhost:{up.port}", "--upstream-insecure")
        info = self.tls_info(server)
        self.assertTrue(info["tls"])
        self.finish(server, up)

    def test_an_unreadable_ca_file_is_refused_at_start(self):
        for ca in ("/nonexistent/ca.pem", CERTS.garbage):
            argv = [bench_server_path(), "0", "--upstream", "https://localhost:1", "--upstream-ca", ca]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            self.assertNotEqual(done.returncode, 0, ca)
            self.assertIn("--upstream: invalid argument", done.stderr)


if __name__ == "__main__":
    unittest.main()
