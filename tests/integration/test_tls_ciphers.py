"""Cipher suites and key-exchange groups: each configured one is negotiated and
reported by /tls; what is not configured is refused with handshake_failure;
RSA and ECDSA certificates each get their own TLS 1.2 suites."""

import json
import ssl
import unittest

from support.tls_fixtures import TlsConn, client_context, curl_https, http1_get, s_client, shared_certs, start_https

CERTS = None
ALERT_HANDSHAKE_FAILURE = 40

TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
# OpenSSL name, the certificate it needs.
TLS12_SUITES = (
    ("ECDHE-RSA-AES128-GCM-SHA256", "rsa"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "rsa"),
    ("ECDHE-RSA-CHACHA20-POLY1305", "rsa"),
    ("ECDHE-ECDSA-AES128-GCM-SHA256", "ec"),
    ("ECDHE-ECDSA-AES256-GCM-SHA384", "ec"),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", "ec"),
)
# The same suites by their IANA names, which /tls may use instead of OpenSSL's.
IANA_NAMES = {
    "ECDHE-RSA-AES128-GCM-SHA256": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-RSA-AES256-GCM-SHA384": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-RSA-CHACHA20-POLY1305": "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "ECDHE-ECDSA-AES128-GCM-SHA256": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305": "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
}


setUpModule, tearDownModule = shared_certs(__name__)


class CipherSuitesTest(unittest.TestCase):
    def assert_refused(self, result):
        self.assertFalse(result.handshake_done, result.text)
        self.assertIn(ALERT_HANDSHAKE_FAILURE, result.alert_numbers, result.text)

    def assert_reports(self, server, version, cipher):
        """What /tls says over both protocols, via curl (which offers everything)."""
        for http in ("1.1", "2"):
            result, body, _, status = curl_https(server, "/tls", http=http)
            self.assertEqual((result.returncode, status), (0, 200), result.stderr)
            info = json.loads(body)
            self.assertEqual(info["version"], version)
            self.assertIn(info["cipher"], (cipher, IANA_NAMES.get(cipher)))

    def test_each_tls13_suite_configured_alone_is_the_one_negotiated(self):
        for suite in TLS13_SUITES:
            with self.subTest(suite=suite):
                server = start_https(self, CERTS.rsa, "--workers", "1", "--ciphersuites", suite)
                result = s_client(server.port, "-tls1_3")
                self.assertEqual((result.protocol, result.cipher), ("TLSv1.3", suite), result.text)
                self.assert_reports(server, "TLSv1.3", suite)
                others = ":".join(s for s in TLS13_SUITES if s != suite)
                self.assert_refused(s_client(server.port, "-tls1_3", "-ciphersuites", others))
                server.stop_and_check()

    def test_by_default_aes128_is_preferred_and_every_suite_accepted(self):
        # OpenSSL's clients (s_client, curl, wrk) offer AES-256 first; the
        # server's order decides.
        server = start_https(self, CERTS.rsa, "--workers", "1")
        result = s_client(server.port, "-tls1_3")
        self.assertEqual(result.cipher, "TLS_AES_128_GCM_SHA256", result.text)
        for suite in TLS13_SUITES:
            with self.subTest(suite=suite):
                result = s_client(server.port, "-tls1_3", "-ciphersuites", suite)
                self.assertEqual(result.cipher, suite, result.text)
        server.stop_and_check()

    def test_a_client_may_pick_any_of_the_configured_tls13_suites(self):
        server = start_https(self, CERTS.ec, "--workers", "1", "--ciphersuites", ":".join(TLS13_SUITES))
        for suite in TLS13_SUITES:
            with self.subTest(suite=suite):
                result = s_client(server.port, "-tls1_3", "-ciphersuites", suite, request=http1_get("/tls"))
                self.assertEqual(result.cipher, suite, result.text)
                self.assertEqual(result.json_body()["cipher"], suite)
        server.stop_and_check()

    def test_each_tls12_suite_configured_alone_is_the_one_negotiated_with_its_certificate(self):
        for suite, pair in TLS12_SUITES:
            with self.subTest(suite=suite):
                server = start_https(
                    self, getattr(CERTS, pair), "--workers", "1", "--tls-max", "1.2", "--ciphers", suite
                )
                result = s_client(server.port, "-tls1_2", request=http1_get("/tls"))
                self.assertEqual((result.protocol, result.cipher), ("TLSv1.2", suite), result.text)
                self.assertIn(result.json_body()["cipher"], (suite, IANA_NAMES[suite]))
                self.assert_reports(server, "TLSv1.2", suite)
                server.stop_and_check()

    def test_tls12_suites_for_the_other_key_type_are_refused(self):
        for pair, wrong in (
            ("rsa", "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"),
            ("ec", "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256"),
        ):
            with self.subTest(certificate=pair):
                server = start_https(self, getattr(CERTS, pair), "--workers", "1")
                self.assert_refused(s_client(server.port, "-tls1_2", "-cipher", wrong))
                result = s_client(server.port, "-tls1_2")
                self.assertTrue(result.handshake_done, result.text)
                server.stop_and_check()

    def test_default_tls12_list_has_only_ecdhe_with_aead(self):
        server = start_https(self, CERTS.rsa, "--workers", "1")
        for weak in (
            "AES128-GCM-SHA256",
            "ECDHE-RSA-AES128-SHA",
            "ECDHE-RSA-AES256-SHA384",
            "DHE-RSA-AES128-GCM-SHA256",
        ):
            with self.subTest(cipher=weak):
                self.assert_refused(s_client(server.port, "-tls1_2", "-cipher", weak))
        for good in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"):
            with self.subTest(cipher=good):
                self.assertEqual(s_client(server.port, "-tls1_2", "-cipher", good).cipher, good)
        server.stop_and_check()

    def test_a_tls12_client_offering_both_aes_gcm_sizes_gets_aes128_in_either_order(self):
        """The TLS 1.2 list puts AES-128-GCM first, as the TLS 1.3 one does."""
        for pair, auth in (("rsa", "RSA"), ("ec", "ECDSA")):
            server = start_https(self, getattr(CERTS, pair), "--workers", "1")
            aes128, aes256 = f"ECDHE-{auth}-AES128-GCM-SHA256", f"ECDHE-{auth}-AES256-GCM-SHA384"
            for offered in (f"{aes256}:{aes128}", f"{aes128}:{aes256}"):
                with self.subTest(certificate=pair, offered=offered):
                    result = s_client(server.port, "-tls1_2", "-cipher", offered)
                    self.assertEqual(result.cipher, aes128, result.text)
            server.stop_and_check()

    def test_no_common_tls13_suite_is_refused_and_the_server_serves_on(self):
        server = start_https(self, CERTS.rsa, "--workers", "1", "--ciphersuites", "TLS_AES_128_GCM_SHA256")
        self.assert_refused(s_client(server.port, "-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"))
        with self.assertRaisesRegex(ssl.SSLError, "(?i)handshake.failure"):
            context = client_context(version=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-RSA-AES256-SHA384")
            TlsConn(server.port, context).close()
        with TlsConn(server.port, client_context()) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()

    def test_certificate_key_types_show_in_the_handshake(self):
        for pair, signature, bits in (("rsa", "RSA-PSS", 2048), ("ec", "ECDSA", 256)):
            with self.subTest(certificate=pair):
                server = start_https(self, getattr(CERTS, pair), "--workers", "1")
                result = s_client(server.port)
                self.assertIn(f"Server public key is {bits} bit", result.out)
                self.assertRegex(result.out, rf"Peer signature type: {signature}")
                self.assertEqual(result.verify_code, 0, result.text)
                server.stop_and_check()


class GroupsTest(unittest.TestCase):
    def temp_key(self, server, *args):
        result = s_client(server.port, *args)
        return result.temp_key if result.handshake_done else result.alert_numbers

    def test_each_configured_group_is_used_when_the_client_offers_only_it(self):
        server = start_https(self, CERTS.rsa, "--workers", "1", "--groups", "X25519:P-256")
        for version in ("-tls1_3", "-tls1_2"):
            with self.subTest(version=version):
                self.assertRegex(self.temp_key(server, version, "-groups", "X25519"), r"^X25519\b")
                self.assertRegex(self.temp_key(server, version, "-groups", "P-256"), r"^ECDH, (prime256v1|P-256)\b")
        self.assertIn(ALERT_HANDSHAKE_FAILURE, self.temp_key(server, "-tls1_3", "-groups", "P-384"))
        server.stop_and_check()

    def test_a_single_group_is_reached_through_hello_retry(self):
        # OpenSSL's client sends an X25519 key share first; the server must ask for P-256.
        server = start_https(self, CERTS.ec, "--workers", "1", "--groups", "P-256")
        self.assertRegex(self.temp_key(server, "-tls1_3"), r"^ECDH, (prime256v1|P-256)\b")
        self.assertIn(ALERT_HANDSHAKE_FAILURE, self.temp_key(server, "-tls1_3", "-groups", "X25519"))
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
