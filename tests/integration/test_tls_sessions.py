"""Session resumption, as openssl s_client sees it (-sess_out, then -sess_in):
by tickets in TLS 1.3 and 1.2, by the session-ID cache in TLS 1.2, across
workers, and not at all once both are switched off. /tls reports it."""

import os
import tempfile
import unittest

from support.tls_fixtures import http1_get, s_client, shared_certs, start_https

CERTS = None
# Resumptions tried per case: with two workers on SO_REUSEPORT, each client port
# lands on one of them, so a few tries reach both (a per-worker key or cache fails).
RESUMPTIONS = 6


setUpModule, tearDownModule = shared_certs(__name__)


class ResumptionTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.session_file = os.path.join(tmp.name, "session.pem")

    def forget_session(self):
        if os.path.exists(self.session_file):
            os.unlink(self.session_file)

    def first_and_resumed(self, server, *args):
        """One full handshake that saves its session, then RESUMPTIONS that offer it.
        Each asks for /tls and reads until the server closes, so TLS 1.3 tickets arrive."""
        self.forget_session()
        first = s_client(server.port, *args, "-sess_out", self.session_file, request=http1_get("/tls"))
        self.assertTrue(first.handshake_done, first.text)
        self.assertFalse(first.reused, first.text)
        self.assertEqual(first.json_body()["resumed"], False)
        later = [
            s_client(server.port, *args, "-sess_in", self.session_file, request=http1_get("/tls"))
            for _ in range(RESUMPTIONS)
        ]
        for result in later:
            self.assertTrue(result.handshake_done, result.text)
        return first, later

    def assert_resumed(self, server, version, *args):
        first, later = self.first_and_resumed(server, *args)
        self.assertEqual(first.protocol, version, first.text)
        for result in later:
            self.assertTrue(result.reused, f"offered the saved session, got:\n{result.text}")
        for result in later:
            self.assertEqual(result.protocol, version)
            info = result.json_body()
            self.assertEqual((info["resumed"], info["version"]), (True, version), info)

    def assert_not_resumed(self, server, *args):
        """Either the server handed out nothing to resume (s_client then saves no
        session), or offering what it handed out gets a full handshake."""
        self.forget_session()
        first = s_client(server.port, *args, "-sess_out", self.session_file, request=http1_get("/tls"))
        self.assertTrue(first.handshake_done, first.text)
        if not os.path.exists(self.session_file):
            return
        later = [
            s_client(server.port, *args, "-sess_in", self.session_file, request=http1_get("/tls"))
            for _ in range(RESUMPTIONS)
        ]
        for result in later:
            self.assertTrue(result.handshake_done, result.text)
            self.assertFalse(result.reused, result.text)
            self.assertEqual(result.json_body()["resumed"], False)

    def test_tls13_resumes_by_ticket_on_every_worker(self):
        server = start_https(self, CERTS.rsa, "--workers", "2")
        self.assert_resumed(server, "TLSv1.3", "-tls1_3")
        server.stop_and_check()

    def test_tls12_resumes_by_ticket_on_every_worker(self):
        server = start_https(self, CERTS.rsa, "--workers", "2")
        self.assert_resumed(server, "TLSv1.2", "-tls1_2")
        server.stop_and_check()

    def test_tls12_resumes_by_session_id_without_tickets(self):
        server = start_https(self, CERTS.ec, "--workers", "2", "--no-tickets")
        self.assert_resumed(server, "TLSv1.2", "-tls1_2")
        self.assert_resumed(server, "TLSv1.2", "-tls1_2", "-no_ticket")
        server.stop_and_check()

    def test_tickets_still_resume_with_the_id_cache_off(self):
        server = start_https(self, CERTS.ec, "--workers", "2", "--session-cache", "0")
        self.assert_resumed(server, "TLSv1.3", "-tls1_3")
        self.assert_resumed(server, "TLSv1.2", "-tls1_2")
        # A TLS 1.2 client that takes no ticket had only the cache to resume from.
        self.assert_not_resumed(server, "-tls1_2", "-no_ticket")
        server.stop_and_check()

    def test_nothing_resumes_with_tickets_and_cache_off(self):
        server = start_https(self, CERTS.ec, "--workers", "1", "--no-tickets", "--session-cache", "0")
        for version in ("-tls1_3", "-tls1_2"):
            with self.subTest(version=version):
                self.assert_not_resumed(server, version)
        server.stop_and_check()

    def test_a_session_from_another_server_is_not_resumed(self):
        one = start_https(self, CERTS.ec, "--workers", "1")
        two = start_https(self, CERTS.ec, "--workers", "1")
        for version in ("-tls1_3", "-tls1_2"):
            with self.subTest(version=version):
                first = s_client(one.port, version, "-sess_out", self.session_file, request=http1_get("/ping"))
                self.assertTrue(first.handshake_done, first.text)
                other = s_client(two.port, version, "-sess_in", self.session_file, request=http1_get("/tls"))
                self.assertTrue(other.handshake_done, other.text)
                self.assertFalse(other.reused, other.text)
                self.assertEqual(other.json_body()["resumed"], False)
        one.stop_and_check()
        two.stop_and_check()


if __name__ == "__main__":
    unittest.main()
