"""Certificates: SNI picks one per name (wildcards for one label), client
certificates (mTLS, optional and required), encrypted keys, and configurations
that must fail at startup with one clear line naming the problem."""

import json
import os
import ssl
import tempfile
import unittest

from support.harness import SANITIZER_MARKERS, ResponseIncomplete
from support.tls_fixtures import (
    KEY_PASSWORD,
    HttpsTestCase,
    Pair,
    TlsConn,
    client_context,
    curl_https,
    http1_get,
    run_https_expecting_failure,
    s_client,
    shared_certs,
    start_https,
)

CERTS = None
ALERT_CERTIFICATE_REQUIRED = 116
# What OpenSSL's server sends for a client certificate it cannot verify.
ALERTS_BAD_CLIENT_CERTIFICATE = (42, 46, 48, 40)


setUpModule, tearDownModule = shared_certs(__name__)


class SniTest(HttpsTestCase):
    pair = "rsa"

    @classmethod
    def options(cls, certs):
        return [
            "--workers",
            "2",
            "--sni",
            f"a.example.test,{certs.sni_a.cert},{certs.sni_a.key}",
            "--sni",
            f"*.wild.example.test,{certs.sni_wild.cert},{certs.sni_wild.key}",
        ]

    def served(self, name):
        """(DER of the certificate served for SNI `name`, s_client result)."""
        context = client_context(verify=False)
        with TlsConn(self.server.port, context, server_name=name) as conn:
            der = conn.peer_der()
        return der, s_client(self.server.port, server_name=name)

    def test_each_sni_name_gets_its_certificate_which_verifies_for_it(self):
        for name, pair in (
            ("a.example.test", self.certs.sni_a),
            ("x.wild.example.test", self.certs.sni_wild),
            ("other-label.wild.example.test", self.certs.sni_wild),
        ):
            with self.subTest(name=name):
                der, result = self.served(name)
                self.assertEqual(der, pair.der())
                self.assertIn(f"CN = {pair.subject}", result.subject or "", result.text)
                checked = s_client(self.server.port, "-verify_hostname", name, server_name=name)
                self.assertEqual(checked.verify_code, 0, checked.text)

    def test_names_matching_no_sni_entry_get_the_default_certificate(self):
        for name in ("localhost", "b.example.test", "deep.x.wild.example.test", "wild.example.test", "example.test"):
            with self.subTest(name=name):
                der, _ = self.served(name)
                self.assertEqual(der, self.certs.rsa.der())
        result = s_client(self.server.port, server_name=None, request=http1_get("/tls"))
        self.assertIn("O = xKit RSA", result.subject or "", result.text)
        self.assertEqual(result.json_body()["sni"], "")

    def test_sni_names_match_without_regard_to_case(self):
        for name, pair in (("A.Example.TEST", self.certs.sni_a), ("X.WILD.example.test", self.certs.sni_wild)):
            with self.subTest(name=name):
                der, _ = self.served(name)
                self.assertEqual(der, pair.der())

    def test_curl_by_name_verifies_and_tls_reports_the_name(self):
        for host in ("a.example.test", "x.wild.example.test"):
            for http in ("1.1", "2"):
                with self.subTest(host=host, http=http):
                    result, body, version, status = curl_https(self.server, "/tls", http=http, host=host)
                    self.assertEqual((result.returncode, version, status), (0, http, 200), result.stderr)
                    self.assertEqual(json.loads(body)["sni"], host)


class ClientCertificateTest(unittest.TestCase):
    def mtls_server(self, mode):
        return start_https(self, CERTS.ec, "--workers", "2", "--client-ca", CERTS.ca, "--verify-client", mode)

    def curl_tls(self, server, *args, http="1.1"):
        return curl_https(server, "/tls", *args, http=http)

    def with_cert(self, pair):
        return ["--cert", pair.cert, "--key", pair.key]

    def assert_verified_client(self, server):
        for http in ("1.1", "2"):
            with self.subTest(http=http):
                result, body, version, status = self.curl_tls(server, *self.with_cert(CERTS.client), http=http)
                self.assertEqual((result.returncode, version, status), (0, http, 200), result.stderr)
                info = json.loads(body)
                self.assertEqual(info["client_verified"], True)
                self.assertIn(CERTS.client.subject, info["client_subject"])

    def assert_refused(self, server, pair, alerts):
        args = self.with_cert(pair) if pair else []
        result, body, _, status = self.curl_tls(server, *args)
        self.assertNotEqual(result.returncode, 0, f"curl got {status}: {body!r}")
        self.assertFalse(body, f"served {body!r}")
        for version in ("-tls1_3", "-tls1_2"):
            with self.subTest(version=version, cert=pair and pair.subject):
                extra = ["-cert", pair.cert, "-key", pair.key] if pair else []
                result = s_client(server.port, version, *extra, request=http1_get("/tls"))
                self.assertIsNone(result.body(), result.out)
                self.assertTrue(set(result.alert_numbers) & set(alerts), result.text)
        # Python's client: in TLS 1.3 its handshake ends before the server judges the
        # certificate, so the refusal may come as an alert on the first read instead.
        try:
            with TlsConn(server.port, client_context(client=pair)) as conn:
                conn.request("GET", "/ping")
                resp = conn.read_response()
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError, ResponseIncomplete):
            pass
        else:
            self.fail(f"served {resp!r}")

    def test_required_accepts_a_client_certificate_from_the_ca(self):
        server = self.mtls_server("required")
        self.assert_verified_client(server)
        result = s_client(server.port, "-cert", CERTS.client.cert, "-key", CERTS.client.key)
        self.assertIn(
            "xKit Test CA",
            result.out.partition("Acceptable client certificate CA names")[2],
            "the certificate request should name the CA clients must chain to:\n" + result.out,
        )
        server.stop_and_check()

    def test_required_refuses_a_client_without_a_certificate(self):
        server = self.mtls_server("required")
        self.assert_refused(server, None, (ALERT_CERTIFICATE_REQUIRED, 40))
        server.stop_and_check()

    def test_required_refuses_a_certificate_from_another_ca(self):
        server = self.mtls_server("required")
        self.assert_refused(server, CERTS.other_client, ALERTS_BAD_CLIENT_CERTIFICATE)
        server.stop_and_check()

    def test_optional_serves_clients_without_a_certificate_unverified(self):
        server = self.mtls_server("optional")
        for http in ("1.1", "2"):
            result, body, _, status = self.curl_tls(server, http=http)
            self.assertEqual((result.returncode, status), (0, 200), result.stderr)
            info = json.loads(body)
            self.assertEqual((info["client_verified"], info["client_subject"]), (False, ""))
        self.assert_verified_client(server)
        server.stop_and_check()

    def test_optional_still_refuses_a_certificate_that_does_not_verify(self):
        server = self.mtls_server("optional")
        self.assert_refused(server, CERTS.other_client, ALERTS_BAD_CLIENT_CERTIFICATE)
        server.stop_and_check()

    def test_sessions_with_a_verified_client_resume_and_stay_verified(self):
        server = self.mtls_server("required")
        with tempfile.TemporaryDirectory() as tmp:
            session = os.path.join(tmp, "session.pem")
            for version in ("-tls1_3", "-tls1_2"):
                with self.subTest(version=version):
                    cert = ["-cert", CERTS.client.cert, "-key", CERTS.client.key]
                    first = s_client(server.port, version, *cert, "-sess_out", session, request=http1_get("/tls"))
                    self.assertEqual(first.json_body()["client_verified"], True, first.text)
                    again = s_client(server.port, version, *cert, "-sess_in", session, request=http1_get("/tls"))
                    self.assertTrue(again.reused, again.text)
                    info = again.json_body()
                    self.assertEqual((info["resumed"], info["client_verified"]), (True, True))
                    self.assertIn(CERTS.client.subject, info["client_subject"])
        server.stop_and_check()


class EncryptedKeyTest(unittest.TestCase):
    def test_an_encrypted_key_is_used_with_its_password(self):
        server = start_https(
            self,
            Pair(CERTS.ec.cert, CERTS.ec_encrypted_key, CERTS.ec.subject),
            "--workers",
            "1",
            "--key-password",
            KEY_PASSWORD,
        )
        with TlsConn(server.port, client_context()) as conn:
            self.assertEqual(conn.peer_der(), CERTS.ec.der())
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        server.stop_and_check()


class BadConfigurationTest(unittest.TestCase):
    """Each must exit 1 before listening, with one stderr line that names the problem."""

    def assert_refuses(self, paths, *options, names):
        """names: what the line must contain, or a tuple of which it must contain one."""
        code, out, err = run_https_expecting_failure(paths, *options)
        self.assertEqual(code, 1, f"stdout {out!r}; stderr {err!r}")
        self.assertNotIn("listening", out)
        self.assertFalse([m for m in SANITIZER_MARKERS if m in err], err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, f"expected one line on stderr:\n{err}")
        self.assertTrue(lines[0].startswith("https_bench_server: "), lines[0])
        names = names if isinstance(names, tuple) else (names,)
        self.assertTrue(any(name in lines[0] for name in names), f"{lines[0]!r} names none of {names}")

    def pair(self, cert=None, key=None):
        return (cert or CERTS.ec.cert, key or CERTS.ec.key)

    def test_missing_certificate_or_key_file(self):
        missing = os.path.join(CERTS.dir, "no-such-cert.pem")
        self.assert_refuses(self.pair(cert=missing), names="no-such-cert.pem")
        missing = os.path.join(CERTS.dir, "no-such-key.pem")
        self.assert_refuses(self.pair(key=missing), names="no-such-key.pem")

    def test_certificate_file_that_is_not_pem(self):
        self.assert_refuses(self.pair(cert=CERTS.garbage), names="garbage.pem")

    def test_key_that_does_not_match_the_certificate(self):
        self.assert_refuses(self.pair(key=CERTS.sni_a.key), names=("sni-a.key", "ec.pem"))

    def test_unknown_cipher_suite_group_names(self):
        for option, value in (
            ("--ciphers", "NOT-A-CIPHER"),
            ("--ciphersuites", "TLS_NOT_A_SUITE"),
            ("--groups", "NOTAGROUP"),
        ):
            with self.subTest(option=option):
                self.assert_refuses(self.pair(), option, value, names=value)

    def test_encrypted_key_with_a_wrong_or_no_password(self):
        encrypted = self.pair(key=CERTS.ec_encrypted_key)
        self.assert_refuses(encrypted, "--key-password", "wrong", names="ec-encrypted.key")
        self.assert_refuses(encrypted, names="ec-encrypted.key")

    def test_bad_client_ca_file(self):
        for path in (CERTS.garbage, os.path.join(CERTS.dir, "no-such-ca.pem")):
            with self.subTest(ca=path):
                self.assert_refuses(
                    self.pair(), "--client-ca", path, "--verify-client", "required", names=os.path.basename(path)
                )

    def test_bad_sni_certificate(self):
        missing = os.path.join(CERTS.dir, "no-such-sni.pem")
        self.assert_refuses(
            self.pair(), "--sni", f"a.example.test,{missing},{CERTS.sni_a.key}", names="no-such-sni.pem"
        )
        self.assert_refuses(
            self.pair(), "--sni", f"a.example.test,{CERTS.sni_a.cert},{CERTS.ec.key}", names=("sni-a.pem", "ec.key")
        )

    def test_inconsistent_options_are_refused(self):
        self.assert_refuses(self.pair(), "--tls-min", "1.3", "--tls-max", "1.2", names=("version", "1.3"))
        self.assert_refuses(self.pair(), "--verify-client", "required", names=("CA", "client-ca"))


if __name__ == "__main__":
    unittest.main()
