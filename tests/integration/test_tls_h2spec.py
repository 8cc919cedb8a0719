"""h2spec over TLS (h2 chosen by ALPN): every case passes, strictly too. On a
TLS connection that chose h2 there is no HTTP/1.1 to fall back to, so unlike
the cleartext shared port the invalid-preface case must pass as well."""

import os
import subprocess
import tempfile
import unittest

import test_h2spec
from support.tls_fixtures import shared_certs, start_https

CERTS = None


setUpModule, tearDownModule = shared_certs(__name__)


class TlsH2specTest(unittest.TestCase):
    def run_h2spec(self, pair, server_options, *h2spec_args):
        h2spec = test_h2spec.find_h2spec()
        if h2spec is None:
            self.fail(
                "h2spec is neither on PATH nor in ~/go/bin; scripts/install-deps.sh "
                "(run by `make test`) installs it with `go install`"
            )
        server = start_https(self, pair, *server_options)
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "h2spec.xml")
            # -t: TLS; -k: do not verify the (test CA's) certificate.
            argv = [
                h2spec,
                "-t",
                "-k",
                "-h",
                "127.0.0.1",
                "-p",
                str(server.port),
                "--timeout",
                str(test_h2spec.CASE_TIMEOUT),
                "-j",
                report,
                *h2spec_args,
            ]
            try:
                result = subprocess.run(argv, capture_output=True, timeout=test_h2spec.RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.fail(f"h2spec did not finish within {test_h2spec.RUN_TIMEOUT}s")
            output = result.stdout.decode("utf-8", "replace")
            self.assertTrue(os.path.exists(report), f"h2spec wrote no report:\n{output[-4000:]}")
            cases = test_h2spec.junit_cases(report)
        self.assertGreaterEqual(len(cases), test_h2spec.MIN_CASES, output[-4000:])
        failing = [f"{package} / {title}: {problem}" for (package, title), problem in sorted(cases.items()) if problem]
        self.assertEqual(failing, [], "h2spec cases that did not pass over TLS:\n" + "\n".join(failing))
        self.assertIn(" 0 failed", output)
        server.assert_running()
        server.stop_and_check()

    def test_every_h2spec_case_passes_over_tls_on_the_shared_port(self):
        self.run_h2spec(CERTS.rsa, ["--workers", "2"])

    def test_every_h2spec_case_passes_strictly_over_tls_with_an_ecdsa_certificate(self):
        self.run_h2spec(CERTS.ec, ["--workers", "1", "--alpn", "h2"], "--strict")


if __name__ == "__main__":
    unittest.main()
