"""HTTP/3 interop with clients other than aioquic and gtlsclient (test_http3.py has those):
quic-go's HTTP/3 client (support/h3goclient, a Go module built here) and headless Chromium
with QUIC forced on the server's origin. Each fetches what a browser or a Go program would:
a small response, a POST body echoed, a static file."""

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from support.tls_fixtures import HttpsTestCase, shared_certs

setUpModule, tearDownModule = shared_certs(__name__)

GO_CLIENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "h3goclient")


def build_go_client(test):
    """support/h3goclient built into a temporary folder; its path. quic-go comes from Go's module
    cache, else its proxy."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise AssertionError("Go is needed for quic-go's HTTP/3 client (scripts/install-deps.sh)")
    out = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, out, True)
    path = os.path.join(out, "h3goclient")
    done = subprocess.run([go, "build", "-o", path, "."], cwd=GO_CLIENT_DIR, capture_output=True, timeout=300)
    test.assertEqual(done.returncode, 0, done.stderr.decode())
    return path


class Http3InteropTest(HttpsTestCase):
    """One server with a static file."""

    @classmethod
    def options(cls, certs):
        cls.static_dir = tempfile.mkdtemp()
        # The page writes what the browser saw into itself: the protocol it came by, and the
        # answer to a POST it makes (RFC 9114 requests from a browser's fetch).
        cls.token = os.urandom(16).hex()
        page = f"""<!doctype html><title>h3</title><p id=proto>none</p><p id=echo>none</p>
<script>
document.getElementById("proto").textContent = performance.getEntriesByType("navigation")[0].nextHopProtocol;
fetch("/echo", {{method: "POST", body: "posted {cls.token}"}})
  .then(r => r.text()).then(t => {{ document.getElementById("echo").textContent = t; }});
</script>
"""
        with open(os.path.join(cls.static_dir, "page.html"), "w") as out:
            out.write(page)
        cls.blob = os.urandom(700_000)
        with open(os.path.join(cls.static_dir, "blob.bin"), "wb") as out:
            out.write(cls.blob)
        return ["--workers", "1", "--static", cls.static_dir]

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.static_dir, ignore_errors=True)

    def test_quic_go_client_gets_posts_and_fetches_a_static_file(self):
        client = build_go_client(self)
        argv = [client, f"https://127.0.0.1:{self.server.port}", self.certs.ca, "/static/blob.bin"]
        done = subprocess.run(argv, capture_output=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        report = json.loads(done.stdout)
        self.assertEqual(report["protos"], ["HTTP/3.0"] * 3)
        self.assertEqual(report["ping"], "pong")
        self.assertEqual((report["echo_length"], report["echo_same"]), (200_000, True))
        self.assertEqual(report["static_size"], len(self.blob))
        self.assertEqual(report["static_sha256"], hashlib.sha256(self.blob).hexdigest())
        self.assertEqual(report["static_type"], "application/octet-stream")
        self.assertEqual(report["connections"], 1)  # one QUIC connection carried the three

    def test_chromium_loads_a_page_over_h3_and_posts_from_it(self):
        chromium = shutil.which("chromium")
        self.assertIsNotNone(chromium, "Chromium is needed (Debian chromium; scripts/install-deps.sh)")
        with open(self.certs.rsa.cert, "rb") as pem:
            leaf = x509.load_pem_x509_certificate(pem.read())
        spki = leaf.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        profile = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, profile, True)
        origin = f"127.0.0.1:{self.server.port}"
        argv = [
            chromium,
            "--headless=new",
            "--no-sandbox",  # run as root in CI
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--enable-quic",
            f"--origin-to-force-quic-on={origin}",  # no Alt-Svc round first: QUIC from the start
            "--ignore-certificate-errors-spki-list=" + base64.b64encode(hashlib.sha256(spki).digest()).decode(),
            "--virtual-time-budget=10000",  # the page's fetch finishes before the DOM is dumped
            "--dump-dom",
            f"https://{origin}/static/page.html",
        ]
        done = subprocess.run(argv, capture_output=True, timeout=120)
        dom = done.stdout.decode()
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-3000:])
        self.assertIn('<p id="proto">h3</p>', dom)
        self.assertIn(f'<p id="echo">posted {self.token}</p>', dom)


if __name__ == "__main__":
    unittest.main()
