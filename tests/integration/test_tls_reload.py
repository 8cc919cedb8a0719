"""SIGHUP reloads certificates, keys and the client CA from the same paths: new
connections get the new files, established ones carry on; a reload that fails
changes nothing and says why."""

import json
import signal
import time
import unittest

from support.tls_fixtures import TlsConn, client_context, curl_https, replace_file, shared_certs, start_https

CERTS = None
RELOAD_WAIT = 5.0


setUpModule, tearDownModule = shared_certs(__name__)


def served_der(server, name="localhost", client=None):
    with TlsConn(server.port, client_context(verify=False, client=client), server_name=name) as conn:
        conn.request("GET", "/ping")
        resp = conn.read_response()
        if resp.body != b"pong":
            raise AssertionError(f"/ping got {resp!r}")
        return conn.peer_der()


class ReloadTest(unittest.TestCase):
    def setUp(self):
        self.live = CERTS.copy(CERTS.ec, f"live-{self._testMethodName}")

    def install(self, pair, target=None):
        target = target or self.live
        replace_file(target.cert, pair.cert)
        replace_file(target.key, pair.key)

    def wait_for_log(self, server, text, occurrences):
        """Waits until stderr holds `text` that many times; the stderr."""
        deadline = time.monotonic() + RELOAD_WAIT
        while server.stderr_text().count(text) < occurrences:
            if time.monotonic() > deadline:
                self.fail(
                    f"stderr has {server.stderr_text().count(text)} of {occurrences} "
                    f"{text!r} lines after {RELOAD_WAIT}s:\n{server.stderr_tail()}"
                )
            time.sleep(0.05)
        return server.stderr_text()

    def wait_until_served(self, server, der, name="localhost"):
        deadline = time.monotonic() + RELOAD_WAIT
        while served_der(server, name) != der:
            if time.monotonic() > deadline:
                self.fail(
                    f"new connections to {name} still get the old certificate "
                    f"{RELOAD_WAIT}s after SIGHUP:\n{server.stderr_tail()}"
                )
            time.sleep(0.05)

    def test_sighup_serves_the_new_certificate_and_keeps_open_connections(self):
        server = start_https(self, self.live, "--workers", "2")
        open_conn = TlsConn(server.port, client_context())
        self.addCleanup(open_conn.close)
        open_conn.request("GET", "/ping")
        self.assertEqual(open_conn.read_response().body, b"pong")
        self.assertEqual(open_conn.peer_der(), CERTS.ec.der())
        h2 = curl_https(server, "/ping", http="2")
        self.assertEqual(h2[1], b"pong", h2[0].stderr)

        self.install(CERTS.ec_next)
        server.send_signal(signal.SIGHUP)
        self.wait_until_served(server, CERTS.ec_next.der())
        self.assertIn("reloaded", self.wait_for_log(server, "reloaded", 1))
        for _ in range(6):  # every worker has it
            self.assertEqual(served_der(server), CERTS.ec_next.der())

        for size in (0, 100, 200000):
            open_conn.request("GET", f"/echo?size={size}")
            self.assertEqual(open_conn.read_response().body, b"x" * size)
        self.assertEqual(open_conn.peer_der(), CERTS.ec.der())
        server.stop_and_check()

    def test_a_failed_reload_keeps_the_old_certificate_and_says_why(self):
        server = start_https(self, self.live, "--workers", "2")
        baseline = server.settle_fd_baseline()
        keep_alive = TlsConn(server.port, client_context())
        self.addCleanup(keep_alive.close)
        for reloads, (cert, key) in enumerate(((CERTS.garbage, CERTS.ec.key), (CERTS.ec_next.cert, CERTS.ec.key)), 1):
            with self.subTest(cert=cert, key=key):
                replace_file(self.live.cert, cert)
                replace_file(self.live.key, key)
                server.send_signal(signal.SIGHUP)
                stderr = self.wait_for_log(server, "reload failed", reloads)
                failure = [line for line in stderr.splitlines() if "reload failed" in line][-1]
                self.assertTrue(len(failure) > len("reload failed") + 5, f"no reason given: {failure!r}")
                server.assert_running()
                self.assertEqual(served_der(server), CERTS.ec.der())
                keep_alive.request("GET", "/ping")
                self.assertEqual(keep_alive.read_response().body, b"pong")
        self.assertNotIn("reloaded", server.stderr_text())
        # Fixed files load on the next SIGHUP.
        self.install(CERTS.ec_next)
        server.send_signal(signal.SIGHUP)
        self.wait_for_log(server, "reloaded", 1)
        self.assertEqual(served_der(server), CERTS.ec_next.der())
        keep_alive.close()
        self.assertEqual(server.wait_fd_count(baseline), baseline, "fds leaked across reloads")
        server.stop_and_check()

    def test_repeated_reloads_leak_no_descriptors(self):
        server = start_https(self, self.live, "--workers", "1")
        baseline = server.settle_fd_baseline()
        for round_number in range(1, 6):
            self.install(CERTS.ec_next if round_number % 2 else CERTS.ec)
            server.send_signal(signal.SIGHUP)
            self.wait_for_log(server, "reloaded", round_number)
        self.assertEqual(served_der(server), CERTS.ec_next.der())
        self.assertEqual(server.wait_fd_count(baseline), baseline)
        server.stop_and_check()

    def test_sni_certificates_are_reloaded_too(self):
        sni = CERTS.copy(CERTS.sni_a, "live-sni-a")
        server = start_https(self, self.live, "--workers", "1", "--sni", f"a.example.test,{sni.cert},{sni.key}")
        self.assertEqual(served_der(server, "a.example.test"), CERTS.sni_a.der())
        self.install(CERTS.sni_a_next, sni)
        server.send_signal(signal.SIGHUP)
        self.wait_until_served(server, CERTS.sni_a_next.der(), "a.example.test")
        self.assertEqual(served_der(server), CERTS.ec.der())
        server.stop_and_check()

    def test_the_client_ca_is_reloaded_too(self):
        live_ca = CERTS.path("live-client-ca.pem")
        replace_file(live_ca, CERTS.ca)
        server = start_https(self, self.live, "--workers", "1", "--client-ca", live_ca, "--verify-client", "required")

        def verified(pair):
            result, body, _, status = curl_https(server, "/tls", "--cert", pair.cert, "--key", pair.key)
            return result.returncode == 0 and status == 200 and json.loads(body)["client_verified"]

        self.assertTrue(verified(CERTS.client))
        self.assertFalse(verified(CERTS.other_client))
        replace_file(live_ca, CERTS.other_ca)
        server.send_signal(signal.SIGHUP)
        self.wait_for_log(server, "reloaded", 1)
        deadline = time.monotonic() + RELOAD_WAIT
        while not verified(CERTS.other_client) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(verified(CERTS.other_client), server.stderr_tail())
        self.assertFalse(verified(CERTS.client))
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
