"""h2spec, the HTTP/2 conformance suite, against the bench server. `make test`
installs h2spec (scripts/install-deps.sh); without it these tests fail."""

import os
import shutil
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree

from support.harness import Conn, start_server

# h2spec waits this long for each expected frame; a passing run never does.
CASE_TIMEOUT = 5
RUN_TIMEOUT = 240
# h2spec 2.x has 145 generic, HTTP/2 and HPACK cases (146 with --strict);
# fewer means it did not run them all.
MIN_CASES = 145

# On a port that also speaks HTTP/1.1, h2spec's invalid preface is an
# HTTP/1.1 request like any other, answered 400 before the close h2spec
# expects; test_the_invalid_preface_is_a_bad_http1_request_on_a_shared_port
# checks that answer, and --http2-only must pass the case itself.
SHARED_PORT_CASES = {("http2/3.5", "Sends invalid connection preface")}


def find_h2spec():
    path = shutil.which("h2spec")
    if path:
        return path
    home = os.path.join(os.path.expanduser("~"), "go", "bin", "h2spec")
    return home if os.access(home, os.X_OK) else None


def junit_cases(path):
    """{(package, title): problem} for every case in h2spec's JUnit report;
    problem is None for a pass, else the failure, error or skip text."""
    cases = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        problem = None
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                problem = f"{kind}: {(node.text or node.get('message') or '').strip()}"
        cases[(case.get("package"), case.get("classname"))] = problem
    return cases


class H2specTest(unittest.TestCase):
    def run_h2spec(self, server_args, *h2spec_args):
        """Runs every h2spec case against a fresh server; (cases, output)."""
        h2spec = find_h2spec()
        if h2spec is None:
            self.fail(
                "h2spec is neither on PATH nor in ~/go/bin; scripts/install-deps.sh "
                "(run by `make test`) installs it with `go install`"
            )
        server = start_server(self, server_args)
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "h2spec.xml")
            argv = [
                h2spec,
                "-h",
                server.connect_host,
                "-p",
                str(server.port),
                "--timeout",
                str(CASE_TIMEOUT),
                "-j",
                report,
                *h2spec_args,
            ]
            try:
                result = subprocess.run(argv, capture_output=True, timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.fail(f"h2spec did not finish within {RUN_TIMEOUT}s")
            output = result.stdout.decode("utf-8", "replace")
            self.assertTrue(os.path.exists(report), f"h2spec wrote no report:\n{output[-4000:]}")
            cases = junit_cases(report)
        self.assertGreaterEqual(len(cases), MIN_CASES, output[-4000:])
        server.assert_running()
        server.stop_and_check()
        return cases, output

    @staticmethod
    def failing(cases, allowed=()):
        return [
            f"{package} / {title}: {problem}"
            for (package, title), problem in sorted(cases.items())
            if problem and (package, title) not in allowed
        ]

    def test_every_h2spec_case_but_the_invalid_preface_passes_on_the_shared_port(self):
        cases, _ = self.run_h2spec(["--workers", "2"])
        failing = self.failing(cases, SHARED_PORT_CASES)
        self.assertEqual(failing, [], "h2spec cases that did not pass:\n" + "\n".join(failing))

    def test_every_h2spec_case_passes_strictly_on_an_http2_only_server(self):
        cases, output = self.run_h2spec(["--workers", "2", "--http2-only"], "--strict")
        failing = self.failing(cases)
        self.assertEqual(failing, [], "h2spec cases that did not pass:\n" + "\n".join(failing))
        self.assertIn(" 0 failed", output)

    def test_the_invalid_preface_is_a_bad_http1_request_on_a_shared_port(self):
        server = start_server(self, ["--workers", "1"])
        with Conn(server.port) as conn:
            conn.send(b"INVALID CONNECTION PREFACE\r\n\r\n")
            resp = conn.read_response()
            self.assertEqual(resp.status, 400)
            self.assertEqual(conn.read_until_eof(), b"")
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
