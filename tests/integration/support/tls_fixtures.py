"""Certificates and TLS clients for the HTTPS integration tests (test_tls*.py).

Certificates are made once per test module with the openssl CLI, in a
temporary directory (make_certs / Certs.cleanup). The clients are the real
ones a user would run (openssl s_client, curl, nghttp, h2load) plus Python's
ssl module on top of harness.Conn for byte-level control. HttpsServer and
HttpsTestCase are harness.ServerProcess and harness.ServerTestCase serving
https_bench_server (XK_HTTPS_SERVER), so every server is checked for a clean
exit with no sanitizer report.
"""

import hmac
import json
import os
import re
import select
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from .h2client import H2Conn
from .harness import (
    LISTEN_RE,
    SOCKET_TIMEOUT,
    START_TIMEOUT,
    Conn,
    ServerProcess,
    ServerTestCase,
    _binary_from_env,
    run_client,
    start_owned,
)

KEY_PASSWORD = "xkit-test-password"
CLIENT_TIMEOUT = 30

# Every certificate lives two days: long enough for any run, never a real one.
DAYS = "2"

# openssl req needs a config; ours is minimal so the system's cannot add extensions.
OPENSSL_CONF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""

RSA_KEY = ("-newkey", "rsa:2048")
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256")


def https_server_path():
    return _binary_from_env("XK_HTTPS_SERVER")


@dataclass
class Pair:
    """A certificate and its private key, both PEM files."""

    cert: str
    key: str
    subject: str  # the subject's CN, which the tests look for in what they are served

    def der(self):
        """The certificate in DER, to compare with what a server presents."""
        return cert_der(self.cert)


def cert_der(path):
    with open(path) as pem:
        return ssl.PEM_cert_to_DER_cert(pem.read())


class Certs:
    """Every certificate and key the TLS tests use, made in one temporary directory:

    ca, other_ca         two unrelated CAs (PEM certs; their keys beside them)
    rsa, ec              localhost + 127.0.0.1 server certs (RSA-2048, ECDSA P-256) from ca
    ec_next              another localhost ECDSA cert from ca (what a reload installs)
    sni_a, sni_wild      a.example.test and *.wild.example.test from ca
    sni_a_next           another a.example.test cert from ca
    client, other_client client certs from ca and from other_ca
    ec_encrypted_key     ec's key encrypted with KEY_PASSWORD
    garbage              a file that is no PEM at all
    """

    def __init__(self, directory):
        self.dir = directory
        self._tmp = None
        conf = self.path("openssl.cnf")
        with open(conf, "w") as out:
            out.write(OPENSSL_CONF)
        self._conf = conf
        self.ca = self._self_signed("ca", "xKit Test CA")
        self.other_ca = self._self_signed("other-ca", "xKit Other CA")
        local = "DNS:localhost,IP:127.0.0.1"
        specs = [  # (name, CN, key, issuer, SAN, extensions)
            ("rsa", "localhost", RSA_KEY, "ca", local, "server"),
            ("ec", "localhost", EC_KEY, "ca", local, "server"),
            ("ec-next", "localhost", EC_KEY, "ca", local, "server"),
            ("sni-a", "a.example.test", EC_KEY, "ca", "DNS:a.example.test", "server"),
            ("sni-wild", "*.wild.example.test", EC_KEY, "ca", "DNS:*.wild.example.test", "server"),
            ("sni-a-next", "a.example.test", EC_KEY, "ca", "DNS:a.example.test", "server"),
            ("client", "xKit Test Client", EC_KEY, "ca", None, "client"),
            ("other-client", "xKit Other Client", EC_KEY, "other-ca", None, "client"),
        ]
        # The organisation tells otherwise alike certificates apart in what s_client prints.
        orgs = {"rsa": "xKit RSA", "ec": "xKit ECDSA", "ec-next": "xKit Reloaded", "sni-a-next": "xKit Reloaded"}
        running = [
            self._leaf(name, cn, key, issuer, san, ext, orgs.get(name, "xKit"))
            for name, cn, key, issuer, san, ext in specs
        ]
        for name, proc in running:
            _finish(proc, f"making {name}")
        (
            self.rsa,
            self.ec,
            self.ec_next,
            self.sni_a,
            self.sni_wild,
            self.sni_a_next,
            self.client,
            self.other_client,
        ) = (Pair(self.path(f"{name}.pem"), self.path(f"{name}.key"), cn) for name, cn, *_ in specs)
        self.ec_encrypted_key = self.path("ec-encrypted.key")
        _run_openssl(
            ["pkey", "-in", self.ec.key, "-aes256", "-passout", f"pass:{KEY_PASSWORD}", "-out", self.ec_encrypted_key],
            "encrypting a key",
        )
        self.garbage = self.path("garbage.pem")
        with open(self.garbage, "w") as out:
            out.write("this is not a certificate\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def _self_signed(self, name, cn):
        cert, key = self.path(f"{name}.pem"), self.path(f"{name}.key")
        _run_openssl(
            [
                "req",
                "-x509",
                "-new",
                *EC_KEY,
                "-nodes",
                "-keyout",
                key,
                "-out",
                cert,
                "-days",
                DAYS,
                "-subj",
                f"/CN={cn}",
                "-config",
                self._conf,
                "-extensions",
                "ca",
            ],
            f"making {name}",
        )
        return cert

    def _leaf(self, name, cn, key_spec, issuer, san, extensions, org):
        argv = [
            "openssl",
            "req",
            "-x509",
            "-new",
            *key_spec,
            "-nodes",
            "-keyout",
            self.path(f"{name}.key"),
            "-out",
            self.path(f"{name}.pem"),
            "-days",
            DAYS,
            "-subj",
            f"/O={org}/CN={cn}",
            "-config",
            self._conf,
            "-extensions",
            extensions,
            "-CA",
            self.path(f"{issuer}.pem"),
            "-CAkey",
            self.path(f"{issuer}.key"),
        ]
        if san:
            argv += ["-addext", f"subjectAltName={san}"]
        return name, subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def copy(self, pair, name):
        """A writable copy of a pair under new names, for tests that overwrite files."""
        copied = Pair(self.path(f"{name}.pem"), self.path(f"{name}.key"), pair.subject)
        replace_file(copied.cert, pair.cert)
        replace_file(copied.key, pair.key)
        return copied

    def cleanup(self):
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def make_certs():
    """Certs in a fresh temporary directory; call .cleanup() when done (tearDownModule)."""
    tmp = tempfile.TemporaryDirectory(prefix="xkit-tls-")
    try:
        certs = Certs(tmp.name)
    except BaseException:
        tmp.cleanup()
        raise
    certs._tmp = tmp
    return certs


def replace_file(target, source):
    """Replaces target with source's content in one rename, as a deploy script would."""
    staging = target + ".new"
    shutil.copyfile(source, staging)
    os.replace(staging, target)


def _run_openssl(args, what):
    _finish(
        subprocess.Popen(["openssl", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE),
        what,
    )


def _finish(proc, what):
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"openssl timed out {what}") from None
    if proc.returncode != 0:
        raise AssertionError(f"openssl failed {what}: {(out + err).decode(errors='replace')[-2000:]}")


# ---- The server ----

PLAIN_LISTEN_RE = re.compile(r"^plain listening on (\S+):(\d+)$")


class HttpsServer(ServerProcess):
    """https_bench_server PORT CERT KEY [options], a harness.ServerProcess whose clients
    speak TLS. With --plain-port it prints a second line, `plain listening on HOST:PORT`;
    plain_port holds that port."""

    scheme = "https"

    def __init__(self, pair, options=(), port=0):
        super().__init__([pair.cert, pair.key, *options], binary=https_server_path(), port=port)
        self.expects_plain = "--plain-port" in options
        self.plain_port = None

    def listening_patterns(self):
        return [LISTEN_RE, PLAIN_LISTEN_RE] if self.expects_plain else [LISTEN_RE]

    def start(self):
        super().start()
        if self.expects_plain:
            self.plain_port = int(self.also_listening[0].group(2))
        return self

    def open_conn(self, context=None, **kwargs):
        """A TLS connection (TlsConn's keyword arguments), trusting the test CA by default."""
        kwargs.setdefault("host", self.connect_host)
        return TlsConn(self.port, context or client_context(), **kwargs)


class HttpsTestCase(ServerTestCase):
    """A harness.ServerTestCase whose shared server is HTTPS, serving getattr(certs, pair)
    with options(certs); connect() and fetch() speak TLS."""

    pair = "rsa"
    server_options = ()

    @classmethod
    def start_shared_server(cls):
        cls.certs = current_certs()
        options = [str(option) for option in cls.options(cls.certs)]
        return HttpsServer(getattr(cls.certs, cls.pair), options).start()

    @classmethod
    def options(cls, certs):
        """The server's options; override where they name certificate files."""
        return cls.server_options


def start_https(test, pair, *options):
    """An HTTPS server owned by one test (harness.start_owned)."""
    return start_owned(test, HttpsServer(pair, [str(option) for option in options]))


def run_https_expecting_failure(pair_or_paths, *options, timeout=START_TIMEOUT):
    """Runs the server where it must refuse to start: (returncode, stdout, stderr)."""
    cert, key = pair_or_paths if isinstance(pair_or_paths, tuple) else (pair_or_paths.cert, pair_or_paths.key)
    argv = [https_server_path(), "0", cert, key, *map(str, options)]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(
            f"{argv} was still running after {timeout}s instead of refusing to start; stdout {expired.stdout!r}"
        ) from None
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


# ---- Python's ssl client ----

_certs_for_context = None


def use_certs(certs):
    """Makes these helpers use certs (their CA above all) by default; once per module."""
    global _certs_for_context
    _certs_for_context = certs


def shared_certs(module_name):
    """setUpModule and tearDownModule for a test module whose tests share one
    set of certificates, kept in its CERTS and used by these helpers:
    setUpModule, tearDownModule = shared_certs(__name__)."""
    module = sys.modules[module_name]

    def set_up():
        module.CERTS = make_certs()
        use_certs(module.CERTS)

    def tear_down():
        module.CERTS.cleanup()

    return set_up, tear_down


def current_certs():
    if _certs_for_context is None:
        raise RuntimeError("set up the module with tls_fixtures.shared_certs")
    return _certs_for_context


def client_context(alpn=("http/1.1",), version=None, ca=None, client=None, ciphers=None, verify=True):
    """An ssl.SSLContext that trusts the test CA. version: ssl.TLSVersion to
    pin both ends to; client: a Pair sent as the client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        context.load_verify_locations(ca or _certs_for_context.ca)
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if alpn:
        context.set_alpn_protocols(list(alpn))
    if version is not None:
        context.minimum_version = context.maximum_version = version
    if client is not None:
        context.load_cert_chain(client.cert, client.key)
    if ciphers:
        context.set_ciphers(ciphers)
    return context


class TlsConn(Conn):
    """harness.Conn over TLS: the same strict HTTP/1.1 reading, through Python's ssl."""

    def __init__(
        self,
        port,
        context,
        server_name="localhost",
        host="127.0.0.1",
        timeout=SOCKET_TIMEOUT,
        session=None,
        rcvbuf=None,
    ):
        super().__init__(port, host, timeout, rcvbuf)
        try:
            self.sock = context.wrap_socket(self.sock, server_hostname=server_name, session=session)
        except BaseException:
            self.sock.close()
            raise

    def _fill(self, size=1 << 20):
        try:
            return super()._fill(size)
        except ssl.SSLError as error:
            # An alert after the handshake (e.g. certificate_required) ends the stream.
            self.alert = error
            self.eof = True
            return False

    def peer_der(self):
        return self.sock.getpeercert(binary_form=True)


def h2_over_tls(port, context=None, server_name="localhost", **kwargs):
    """h2client.H2Conn over TLS with ALPN h2: the preface goes out once the handshake is done."""
    conn = H2Conn(port, handshake=False, **kwargs)
    try:
        conn.sock = (context or client_context(alpn=("h2",))).wrap_socket(conn.sock, server_hostname=server_name)
        if conn.sock.selected_alpn_protocol() != "h2":
            raise AssertionError(f"ALPN chose {conn.sock.selected_alpn_protocol()!r}, not h2")
        conn.handshake()
    except BaseException:
        conn.close()
        raise
    return conn


class ManualTls:
    """A TLS client driven step by step over a raw socket (ssl.MemoryBIO), for what
    SSLSocket cannot do: stop mid-handshake, or send raw records after it."""

    def __init__(self, port, context=None, server_name="localhost", timeout=SOCKET_TIMEOUT, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        if rcvbuf:  # before connecting, so the window the server sees is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            self.sock.connect(("127.0.0.1", port))
        except BaseException:
            self.sock.close()
            raise
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = (context or client_context()).wrap_bio(self.incoming, self.outgoing, server_hostname=server_name)
        self.received = bytearray()  # every raw byte from the server

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.sock.close()

    def send_client_hello(self):
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        self._flush()

    def handshake(self):
        while True:
            try:
                self.tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self.read_raw():
                    raise AssertionError("server closed during the handshake") from None

    def _flush(self):
        data = self.outgoing.read()
        if data:
            self.sock.sendall(data)

    def read_raw(self):
        """One recv into the TLS engine; the bytes (b"" at EOF)."""
        data = self.sock.recv(65536)
        self.received += data
        if data:
            self.incoming.write(data)
        else:
            self.incoming.write_eof()
        return data

    def send(self, data):
        self.tls.write(data)
        self._flush()

    def send_raw(self, data):
        self.sock.sendall(data)

    def read_until_eof(self, timeout):
        """Waits for the server to close; the raw bytes it sent meanwhile. Fails if it stays open."""
        self.sock.settimeout(timeout)
        start = len(self.received)
        try:
            while True:
                try:
                    if not self.read_raw():
                        break
                except ConnectionResetError:
                    break
        except TimeoutError:
            raise AssertionError(f"connection still open after {timeout}s") from None
        return bytes(self.received[start:])


class KeyedTls(ManualTls):
    """A ManualTls that also knows the client's write keys (from the key log that
    Python's ssl writes), to seal records no TLS library would send: split
    messages, odd alerts, padding. seq is the client's next write sequence number;
    records sealed here and by self.tls must not be mixed after the handshake."""

    def __init__(self, port, context=None, **kwargs):
        context = context or client_context()
        self._keylog = tempfile.NamedTemporaryFile(prefix="xkit-keylog-", delete=False)
        self._keylog.close()
        context.keylog_filename = self._keylog.name
        super().__init__(port, context, **kwargs)
        self.keys = None
        self.seq = 0

    def close(self):
        super().close()
        if os.path.exists(self._keylog.name):
            os.unlink(self._keylog.name)

    def _keylog_secret(self, label):
        with open(self._keylog.name) as f:
            lines = [line.split() for line in f if line.startswith(label + " ")]
        if not lines:
            raise AssertionError(f"no {label} in the key log")
        return bytes.fromhex(lines[-1][2]), bytes.fromhex(lines[-1][1])

    def derive_keys(self):
        """The client's write key and IV for the negotiated suite (TLS 1.2 after its
        ClientKeyExchange is written, TLS 1.3 after the handshake)."""
        cipher = self.tls.cipher()[0]
        sha384 = "SHA384" in cipher
        key_len = 16 if "AES128" in cipher or "AES_128" in cipher else 32
        self.aead = ChaCha20Poly1305 if "CHACHA20" in cipher else AESGCM
        self.tls13 = self.tls.version() == "TLSv1.3"
        if self.tls13:
            secret, _ = self._keylog_secret("CLIENT_TRAFFIC_SECRET_0")
            self._traffic = ("sha384" if sha384 else "sha256", secret, key_len)
            self._keys_from_secret()
            return
        master, client_random = self._keylog_secret("CLIENT_RANDOM")
        server_random = bytes(self.received[11:43])  # in the ServerHello, the first record
        iv_len = 12 if self.aead is ChaCha20Poly1305 else 4
        block = tls12_prf(
            "sha384" if sha384 else "sha256",
            master,
            b"key expansion",
            server_random + client_random,
            2 * key_len + 2 * iv_len,
        )
        self.keys = (block[:key_len], block[2 * key_len : 2 * key_len + iv_len])

    def _keys_from_secret(self):
        digest, secret, key_len = self._traffic
        self.keys = (hkdf_expand_label(digest, secret, b"key", key_len), hkdf_expand_label(digest, secret, b"iv", 12))

    def update_keys(self):
        """TLS 1.3: the client's next write keys, after a KeyUpdate of its own (RFC 8446 §7.2)."""
        digest, secret, key_len = self._traffic
        self._traffic = (digest, hkdf_expand_label(digest, secret, b"traffic upd", len(secret)), key_len)
        self._keys_from_secret()
        self.seq = 0

    def seal(self, content_type, data, padding=0, seq=None):
        """One record of content_type carrying data, sealed under the next (or the given)
        sequence number; TLS 1.3 records get padding zero bytes after the real type."""
        key, iv = self.keys
        seq = self.seq if seq is None else seq
        self.seq = seq + 1
        if self.tls13:
            inner = data + bytes([content_type]) + bytes(padding)
            header = struct.pack("!BHH", 23, 0x0303, len(inner) + 16)
            nonce = bytes(a ^ b for a, b in zip(iv, bytes(4) + seq.to_bytes(8, "big"), strict=True))
            return header + self.aead(key).encrypt(nonce, inner, header)
        aad = seq.to_bytes(8, "big") + struct.pack("!BHH", content_type, 0x0303, len(data))
        if self.aead is ChaCha20Poly1305:
            nonce, explicit = bytes(a ^ b for a, b in zip(iv, bytes(4) + seq.to_bytes(8, "big"), strict=True)), b""
        else:
            explicit = seq.to_bytes(8, "big")
            nonce = iv + explicit
        body = explicit + self.aead(key).encrypt(nonce, data, aad)
        return struct.pack("!BHH", content_type, 0x0303, len(body)) + body

    def open_tls12(self, record, seq):
        """The plaintext of one of the client's own TLS 1.2 records."""
        key, iv = self.keys
        content_type, _, length = struct.unpack("!BHH", record[:5])
        body = record[5 : 5 + length]
        aad = seq.to_bytes(8, "big") + struct.pack(
            "!BHH", content_type, 0x0303, length - 16 - (0 if self.aead is ChaCha20Poly1305 else 8)
        )
        if self.aead is ChaCha20Poly1305:
            return self.aead(key).decrypt(
                bytes(a ^ b for a, b in zip(iv, bytes(4) + seq.to_bytes(8, "big"), strict=True)), body, aad
            )
        return self.aead(key).decrypt(iv + body[:8], body[8:], aad)

    def read_plain(self, until, timeout=10):
        """Application data from the server until until(data) holds; what came."""
        self.sock.settimeout(timeout)
        data = bytearray()
        while not until(bytes(data)):
            try:
                data += self.tls.read(65536)
            except ssl.SSLWantReadError:
                if not self.read_raw():
                    raise AssertionError(f"closed after {bytes(data)!r}") from None
        return bytes(data)


def split_records(data):
    """Raw TLS bytes as a list of whole records."""
    records = []
    while data:
        length = struct.unpack("!H", data[3:5])[0]
        records.append(data[: 5 + length])
        data = data[5 + length :]
    return records


def hkdf_expand_label(digest, secret, label, length):
    """RFC 8446 §7.1 with no context, for outputs of one hash block."""
    full = b"tls13 " + label
    info = struct.pack("!HB", length, len(full)) + full + b"\x00\x01"
    return hmac.new(secret, info, digest).digest()[:length]


def tls12_prf(digest, secret, label, seed, length):
    """RFC 5246 §5: P_hash(secret, label + seed)."""
    seed = label + seed
    out, a = b"", seed
    while len(out) < length:
        a = hmac.new(secret, a, digest).digest()
        out += hmac.new(secret, a + seed, digest).digest()
    return out[:length]


def client_hello(server_name="localhost", alpn=("h2", "http/1.1"), version=None):
    """The bytes of a ClientHello from Python's ssl, never completed."""
    context = client_context(alpn=alpn, version=version)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


# ---- openssl s_client ----


@dataclass
class SClient:
    """What `openssl s_client` printed; None for fields it did not print."""

    returncode: int
    out: str
    err: str

    def _field(self, pattern, text=None):
        match = re.search(pattern, self.out if text is None else text, re.MULTILINE)
        return match.group(1).strip() if match else None

    @property
    def text(self):
        return self.out + self.err

    @property
    def handshake_line(self):
        """'New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384' or 'Reused, ...'."""
        return self._field(r"^((?:New|Reused), .*)$")

    @property
    def reused(self):
        line = self.handshake_line
        return None if line is None else line.startswith("Reused")

    @property
    def protocol(self):
        """From 'New, TLSv1.3, Cipher is ...', or the session block's 'Protocol  :'."""
        return self._field(r"^(?:New|Reused), (\S+), Cipher is ") or self._field(r"^\s*Protocol\s*:\s*(\S+)")

    @property
    def cipher(self):
        cipher = self._field(r"^(?:New|Reused), \S+, Cipher is (\S+)") or self._field(r"^\s*Cipher\s*:\s*(\S+)")
        return None if cipher in (None, "(NONE)", "0000") else cipher

    @property
    def alpn(self):
        return self._field(r"^ALPN protocol: (\S+)")

    @property
    def verify_code(self):
        code = self._field(r"^\s*Verify return code: (\d+)")
        return None if code is None else int(code)

    @property
    def subject(self):
        return self._field(r"^subject=(.*)$")

    @property
    def temp_key(self):
        return self._field(r"^Server Temp Key: (.*)$")

    @property
    def alert_numbers(self):
        return [int(number) for number in re.findall(r"alert number (\d+)", self.text)]

    @property
    def handshake_done(self):
        return self.handshake_line is not None and "Cipher is (NONE)" not in self.handshake_line

    def body(self):
        """What the server answered on the application stream: s_client echoes it between
        the session report and its closing lines; the HTTP response is found by its status line."""
        start = self.out.find("HTTP/1.1 ")
        return None if start < 0 else self.out[start:]

    def json_body(self):
        text = self.body()
        if text is None:
            raise AssertionError(f"no HTTP response in s_client's output:\n{self.text[-3000:]}")
        _, _, rest = text.partition("\r\n\r\n")
        # s_client may print more (session tickets, "closed") right after the body.
        return json.JSONDecoder().raw_decode(rest)[0]


def s_client(port, *args, request=None, server_name="localhost", ca=None, timeout=CLIENT_TIMEOUT):
    """Runs `openssl s_client` against 127.0.0.1:port. With request (HTTP/1.1
    bytes that ask for Connection: close) it is sent after the handshake and
    s_client reads until the server closes, so TLS 1.3 tickets arrive too;
    without, s_client ends right after the handshake."""
    argv = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", ca or _certs_for_context.ca]
    if server_name:
        argv += ["-servername", server_name]
    else:
        argv.append("-noservername")
    if request is not None:
        argv.append("-ign_eof")
    argv += [str(arg) for arg in args]
    try:
        done = subprocess.run(argv, input=request or b"", capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"s_client did not finish within {timeout}s: {argv}; stdout {expired.stdout!r}") from None
    return SClient(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))


class InteractiveSClient:
    """`openssl s_client` fed line by line, for its commands: "k" (KeyUpdate), "K" (KeyUpdate
    that asks the server to update its keys too) and "R" (renegotiate). A command only counts
    at the start of what s_client reads at once, so each step waits for s_client's answer."""

    def __init__(self, port, *args, server_name="localhost"):
        argv = [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{port}",
            "-servername",
            server_name,
            "-CAfile",
            _certs_for_context.ca,
            *map(str, args),
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.out = bytearray()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=CLIENT_TIMEOUT)
        self.proc.stdin.close()
        self.proc.stdout.close()

    @property
    def text(self):
        return self.out.decode(errors="replace")

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        piece = os.read(self.proc.stdout.fileno(), 65536) if ready else None
        if piece:
            self.out += piece
        return piece

    def wait_for(self, text, count=1, timeout=CLIENT_TIMEOUT):
        """Reads until `text` has appeared `count` times; fails at EOF or timeout."""
        deadline = time.monotonic() + timeout
        while self.text.count(text) < count:
            left = deadline - time.monotonic()
            if left <= 0 or self._read(left) == b"":
                raise AssertionError(f"s_client never printed {text!r} ({count}x):\n{self.text[-3000:]}")

    def send(self, data):
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass

    def wait_exit(self, timeout=CLIENT_TIMEOUT):
        """Reads until s_client exits (the server closed); its exit status."""
        deadline = time.monotonic() + timeout
        while self._read(max(0.0, deadline - time.monotonic())) != b"":
            if time.monotonic() > deadline:
                raise AssertionError(f"s_client still running after {timeout}s:\n{self.text[-3000:]}")
        return self.proc.wait(timeout=timeout)


def http1_get(target, host="localhost"):
    """A GET that asks the server to close after answering."""
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()


# ---- curl ----


def curl_https(server, target, *args, http="1.1", host="localhost", ca=None, timeout=CLIENT_TIMEOUT):
    """curl to https://HOST:PORT/target, HOST resolved to 127.0.0.1, verifying against
    the test CA. Returns (CompletedProcess, body bytes, http_version, status)."""
    marker = b"\n--xkit-curl--"
    argv = [
        "curl",
        "-sS",
        "--max-time",
        str(timeout - 5),
        "--cacert",
        ca or _certs_for_context.ca,
        "--resolve",
        f"{host}:{server.port}:127.0.0.1",
        f"--http{http}",
        "-w",
        marker.decode() + "%{http_version} %{response_code}",
        *map(str, args),
        f"https://{host}:{server.port}{target}",
    ]
    result = run_client(argv, timeout)
    body, found, tail = result.stdout.rpartition(marker)
    if not found:
        return result, None, None, None
    version, _, status = tail.decode().partition(" ")
    return result, body, version, int(status)
