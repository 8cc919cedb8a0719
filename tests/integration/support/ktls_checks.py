"""The TLS suite's key cases on xKit's kTLS path, run INSIDE the guest that
ktls_guest.py boots (its kernel has the `tls` module); test_ktls.py runs
them there. Run on a kernel without `tls`, every test fails at once: nothing
here passes unless the kernel really seals (and, on TLS 1.2, opens) the
records.

What the kTLS path is, with Debian 12's OpenSSL 3.0: after the handshake
OpenSSL hands the keys to the kernel (SSL_OP_ENABLE_KTLS); TLS 1.2 AES-GCM
gets both ways. TLS 1.3 goes to the kernel only when the server is told to
(--ktls-tls13, xTlsConf.ktls_tls13), and then for sending only (OpenSSL 3.0
has no TLS 1.3 kTLS receive, so OpenSSL opens what comes in); by default
TLS 1.3 stays on xKit's records, because OpenSSL 3.0 cannot give the kernel
new keys when a client's KeyUpdate asks for them. xKit's own record layer
stands aside (xTlsHandOver) whenever the kernel has either direction. The
checks below run with --ktls-tls13, so both versions reach the kernel, but
for DefaultRecordPathTest, which checks the default.
"""

import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import unittest

from .tls_fixtures import (
    HttpsServer,
    InteractiveSClient,
    ManualTls,
    TlsConn,
    client_context,
    curl_https,
    h2_over_tls,
    http1_get,
    make_certs,
    use_certs,
)

CERTS = None
BODY = os.urandom(3 * 1024 * 1024 + 4321)  # many records and many socket reads each way
# How long a 3 MiB echo may wait for its answer: the guest runs under qemu's TCG, whose emulated
# crypto took more than harness.SOCKET_TIMEOUT's 10 s for it once on a loaded host (not a byte
# back; 4-5 s otherwise).
BIG_ECHO_TIMEOUT = 60.0
TLS13, TLS12 = ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2
# The kernel's TLS statistics (net/tls/tls_proc.c): what it really did.
TLS_STAT = "/proc/net/tls_stat"


def setUpModule():
    global CERTS
    with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
        if "tls" not in f.read().split():
            raise AssertionError("this kernel has no tls module loaded: these checks must run in the kTLS guest")
    CERTS = make_certs()
    use_certs(CERTS)


def tearDownModule():
    CERTS.cleanup()


def tls_stat():
    with open(TLS_STAT) as f:
        return {name: int(value) for name, value in (line.split() for line in f if line.strip())}


def tls_info(conn):
    conn.request("GET", "/tls")
    resp = conn.read_response()
    return json.loads(resp.body)


class KtlsTest(unittest.TestCase):
    server_options = ("--workers", "1", "--ktls-tls13")

    @classmethod
    def setUpClass(cls):
        cls.server = HttpsServer(CERTS.rsa, list(cls.server_options)).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_and_check()

    def assert_serves_ping(self):
        with TlsConn(self.server.port, client_context()) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")


class KernelRecordsTest(KtlsTest):
    """The server says so, the handler sees it, and the kernel's counters move."""

    def test_the_server_logs_that_ktls_is_available(self):
        self.assertIn("kTLS: available", self.server.stderr_text())

    def test_tls13_records_are_sent_by_the_kernel_and_opened_by_openssl(self):
        before = tls_stat()
        with TlsConn(self.server.port, client_context(version=TLS13)) as conn:
            info = tls_info(conn)
        self.assertEqual(info["version"], "TLSv1.3", info)
        self.assertTrue(info["ktls_send"], info)
        self.assertFalse(info["ktls_recv"], info)  # OpenSSL 3.0: no TLS 1.3 kTLS receive
        self.assertFalse(info["xkit_records"], info)
        self.assertGreater(tls_stat()["TlsTxSw"], before["TlsTxSw"])

    def test_tls12_records_go_through_the_kernel_both_ways(self):
        before = tls_stat()
        with TlsConn(self.server.port, client_context(version=TLS12)) as conn:
            info = tls_info(conn)
        self.assertEqual(info["version"], "TLSv1.2", info)
        self.assertTrue(info["ktls_send"] and info["ktls_recv"], info)
        self.assertFalse(info["xkit_records"], info)
        after = tls_stat()
        self.assertGreater(after["TlsTxSw"], before["TlsTxSw"])
        self.assertGreater(after["TlsRxSw"], before["TlsRxSw"])

    def test_curl_over_http2_is_on_kernel_records(self):
        result, body, version, status = curl_https(self.server, "/tls", http="2")
        self.assertEqual(status, 200, result.stderr)
        info = json.loads(body)
        self.assertEqual((version, info["protocol"]), ("2", "HTTP/2"))
        self.assertTrue(info["ktls_send"], info)

    def test_3mb_echoes_over_http1_on_both_versions(self):
        for version in (TLS13, TLS12):
            context = client_context(version=version)
            with self.subTest(version=version), TlsConn(self.server.port, context, timeout=BIG_ECHO_TIMEOUT) as conn:
                self.assertTrue(tls_info(conn)["ktls_send"])
                conn.request("POST", "/echo", body=BODY)
                resp = conn.read_response()
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.body, BODY)

    def test_3mb_echoes_over_http2_on_both_versions(self):
        for version in (TLS13, TLS12):
            with self.subTest(version=version):
                context = client_context(alpn=("h2",), version=version)
                conn = h2_over_tls(self.server.port, context, timeout=BIG_ECHO_TIMEOUT)
                self.addCleanup(conn.close)
                asked = conn.request("GET", "/tls")
                conn.read_response(asked)
                self.assertTrue(json.loads(bytes(conn.streams[asked].body))["ktls_send"])
                posted = conn.request("POST", "/echo", body=BODY)
                self.assertEqual(conn.read_response(posted).status, 200)
                self.assertEqual(bytes(conn.streams[posted].body), BODY)


class SendfileTest(unittest.TestCase):
    """A static file leaves by sendfile(2), the kernel sealing the records."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="xk-ktls-static-")
        self.body = os.urandom(2 * 1024 * 1024 + 777)
        with open(os.path.join(self.root, "blob.bin"), "wb") as f:
            f.write(self.body)
        self.server = HttpsServer(CERTS.rsa, ["--workers", "1", "--ktls-tls13", "--static", self.root]).start()
        self.addCleanup(self.server.stop_and_check)

    def test_a_static_file_is_sent_by_sendfile_over_kernel_tls(self):
        trace = os.path.join(self.root, "strace.log")
        strace = subprocess.Popen(
            ["strace", "-f", "-qq", "-e", "trace=sendfile", "-o", trace, "-p", str(self.server.pid)],
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.5)  # strace attaches (slow under emulation)
        try:
            for version in ("--tlsv1.3", "--tlsv1.2"):
                with self.subTest(version=version):
                    result, body, http, status = curl_https(
                        self.server, "/static/blob.bin", version, "--tls-max", version[-3:]
                    )
                    self.assertEqual(status, 200, result.stderr)
                    self.assertEqual(hashlib.sha256(body).hexdigest(), hashlib.sha256(self.body).hexdigest())
        finally:
            time.sleep(0.5)
            strace.terminate()
            strace.wait(timeout=30)
        with open(trace) as f:
            calls = [line for line in f if "sendfile(" in line]
        sent = sum(int(line.rsplit("=", 1)[1].split()[0]) for line in calls if "= -1" not in line)
        self.assertGreaterEqual(sent, 2 * len(self.body), "".join(calls[-10:]))


class KeyUpdateTest(KtlsTest):
    """TLS 1.3 KeyUpdate from the client (openssl s_client's k and K)."""

    def test_a_key_update_of_the_clients_keys_keeps_the_connection_serving(self):
        # "k": the client's sending keys change; OpenSSL, which opens TLS 1.3 records here, follows.
        with InteractiveSClient(self.server.port, "-tls1_3") as client:
            client.wait_for("Verify return code")
            for done in range(1, 6):
                client.send(b"k\n")
                client.wait_for("KEYUPDATE", count=done)
                client.send(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                client.wait_for("pong", count=done)
            client.send(http1_get("/echo?size=20000"))
            self.assertEqual(client.wait_exit(), 0, client.text[-3000:])

    def test_a_key_update_that_asks_the_server_to_update_too_ends_the_connection_cleanly(self):
        # "K": the server must change its sending keys too, which OpenSSL 3.0 cannot give the
        # kernel (this one, 6.1, could not take them either). Sealing on under the old keys
        # would hand the client records it cannot open (bad_record_mac), so the server ends
        # the connection: the client sees the end of the stream, and no record fails. The end is
        # a FIN, never a reset, wherever the GET lands: the server lingers, reading and dropping
        # what comes beneath the records (closed at once, a GET that arrived before the close
        # but was not read made the kernel reset the connection: s_client read ECONNRESET).
        with InteractiveSClient(self.server.port, "-tls1_3") as client:
            client.wait_for("Verify return code")
            client.send(b"K\n")
            client.wait_for("KEYUPDATE")
            client.send(http1_get("/ping"))
            client.wait_exit()
            self.assertNotIn("pong", client.text)
            self.assertNotIn("bad record mac", client.text.lower().replace("_", " "), client.text[-1500:])
            self.assertIn("unexpected eof", client.text, client.text[-1500:])

    def test_after_a_key_update_that_asks_the_server_to_update_others_are_served(self):
        with InteractiveSClient(self.server.port, "-tls1_3") as client:
            client.wait_for("Verify return code")
            client.send(b"K\n")
            client.wait_for("KEYUPDATE")
            client.send(http1_get("/ping"))
            client.wait_exit()
        self.assert_serves_ping()


class CloseAndBadRecordsTest(KtlsTest):
    def test_close_notify_from_the_client_is_answered_with_one(self):
        for version in (TLS13, TLS12):
            with self.subTest(version=version):
                raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
                tls = client_context(version=version).wrap_socket(raw, server_hostname="localhost")
                tls.sendall(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                reply = b""
                while b"pong" not in reply:
                    reply += tls.recv(4096)
                plain = tls.unwrap()  # sends close_notify, waits for the server's
                self.assertEqual(plain.recv(100), b"")  # then the server closes the TCP connection
                plain.close()
        self.assert_serves_ping()

    def tampered_request(self, version):
        """Sends a request whose record's tag is broken; the client's ManualTls, closed by the server."""
        c = ManualTls(self.server.port, client_context(version=version))
        self.addCleanup(c.close)
        c.handshake()
        c.tls.write(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
        raw = bytearray(c.outgoing.read())
        raw[-3] ^= 0x40  # inside the tag
        c.send_raw(bytes(raw))
        c.read_until_eof(timeout=10)
        return c

    def test_a_tampered_tls13_record_is_answered_with_bad_record_mac(self):
        # OpenSSL opens TLS 1.3 records here (no kernel receive): its alert, sealed by the kernel.
        c = self.tampered_request(TLS13)
        with self.assertRaises(ssl.SSLError) as caught:
            c.tls.read(4096)
        self.assertIn("BAD_RECORD_MAC", str(caught.exception))
        self.assert_serves_ping()

    def test_a_tampered_tls12_record_fails_in_the_kernel_and_ends_the_connection(self):
        # The kernel opens TLS 1.2 records: it counts the failure and the read fails
        # (EBADMSG); the connection ends, and nothing the server sent after it is data.
        before = tls_stat()["TlsDecryptError"]
        c = self.tampered_request(TLS12)
        self.assertEqual(tls_stat()["TlsDecryptError"], before + 1)
        with self.assertRaises((ssl.SSLError, ssl.SSLWantReadError)):
            c.tls.read(4096)  # no response to the request came
        self.assert_serves_ping()

    def test_a_record_longer_than_tls_allows_ends_the_connection(self):
        for version in (TLS13, TLS12):
            with self.subTest(version=version), ManualTls(self.server.port, client_context(version=version)) as c:
                c.handshake()
                length = 16384 + 2048 + 1
                c.send_raw(struct.pack("!BHH", 23, 0x0303, length) + bytes(length))
                c.read_until_eof(timeout=10)
        self.assert_serves_ping()


class DefaultRecordPathTest(KtlsTest):
    """Without --ktls-tls13: TLS 1.2 on the kernel's records, TLS 1.3 on xKit's, where a
    KeyUpdate that asks the server for new keys is answered and the connection serves on."""

    server_options = ("--workers", "1")

    def test_the_server_logs_which_versions_the_kernel_takes(self):
        self.assertIn("kTLS: available; TLS 1.2 (TLS 1.3: xKit's) records", self.server.stderr_text())

    def test_tls13_is_on_xkits_records_and_tls12_on_the_kernels(self):
        with TlsConn(self.server.port, client_context(version=TLS13)) as conn:
            info = tls_info(conn)
        self.assertEqual(info["version"], "TLSv1.3", info)
        self.assertFalse(info["ktls_send"] or info["ktls_recv"], info)
        self.assertTrue(info["xkit_records"], info)
        with TlsConn(self.server.port, client_context(version=TLS12)) as conn:
            info = tls_info(conn)
        self.assertEqual(info["version"], "TLSv1.2", info)
        self.assertTrue(info["ktls_send"] and info["ktls_recv"], info)

    def test_a_key_update_that_asks_the_server_to_update_too_keeps_serving(self):
        with InteractiveSClient(self.server.port, "-tls1_3") as client:
            client.wait_for("Verify return code")
            for done in range(1, 4):
                client.send(b"K\n")
                client.wait_for("KEYUPDATE", count=done)
                client.send(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                client.wait_for("pong", count=done)
            client.send(http1_get("/echo?size=20000"))
            self.assertEqual(client.wait_exit(), 0, client.text[-3000:])
