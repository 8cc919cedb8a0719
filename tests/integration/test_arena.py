"""xKit's HttpArena entry (build/arena/xkit-arena) checked the way the arena's
validation checks an entry (../shared/arena/CONTRACT.md, "What validation
checks"): sums with fixed and random values over every port and protocol, POST
bodies with Content-Length and chunked, requests in fragments and split at
every byte offset, pipelining, real delays, JSON compared field by field with
the dataset, byte-exact echo, gRPC, and what each TLS port negotiates.

The entry reads a dataset made here (the contract's shape, random values) and
a certificate from the TLS fixtures, on four free ports.

The entry's image (arena/Dockerfile; arena/README.md) is checked the same way
with XK_ARENA_COMMAND: a command line, split as a shell would, that runs the
entry in the foreground instead of XK_ARENA, with {data} and {certs} replaced by
the directories made here (dataset.json and static/; server.crt and server.key)
and ARENA_PORTS in its environment, e.g.
  XK_ARENA_COMMAND='podman run --rm --network host -e ARENA_PORTS
    -v {data}/dataset.json:/data/dataset.json:ro -v {data}/static:/data/static:ro
    -v {certs}/server.crt:/certs/server.crt:ro -v {certs}/server.key:/certs/server.key:ro
    xkit-arena' python3 tests/integration/test_arena.py
(run from tests/integration/). SIGTERM to that command must stop the entry."""

import asyncio
import concurrent.futures
import gzip
import json
import os
import random
import shlex
import shutil
import socket
import ssl
import tempfile
import time
import unittest

import brotli
import grpc
from websockets.sync.client import connect as ws_connect

from support.h2client import INITIAL_WINDOW_SIZE, H2Conn, settings_frame
from support.h3client import h3_connect, run
from support.harness import Conn, ServerProcess, ServerTestCase, chunked, http_request, run_client
from support.ports import free_ports
from support.tls_fixtures import TlsConn, client_context, shared_certs

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

TAGS = ["sale", "new", "popular", "heavy-duty", "wireless", "fast", "eco", "premium"]


def make_dataset(n=50, seed=7):
    rng = random.Random(seed)
    return [
        {
            "id": i + 1,
            "name": f'Item {i + 1} \u00e9"q"',
            "category": rng.choice(["tools", "toys", "food"]),
            "price": rng.randint(1, 1000),
            "quantity": rng.randint(0, 200),
            "active": rng.random() < 0.5,
            "tags": rng.sample(TAGS, rng.randint(0, 4)),
            "rating": {"score": rng.randint(0, 50), "count": rng.randint(0, 1000)},
        }
        for i in range(n)
    ]


STATIC_TYPES = {
    "app.js": "application/javascript",
    "reset.css": "text/css",
    "index.html": "text/html",
    "manifest.json": "application/json",
    "logo.svg": "image/svg+xml",
    "hero.webp": "image/webp",
    "bold.woff2": "font/woff2",
}
STATIC_TEXT = ("app.js", "reset.css", "index.html", "manifest.json", "logo.svg")


def make_static_files(root):
    """The arena's kinds of files; the text ones with .gz and .br twins made after them."""
    os.makedirs(root)
    rng = random.Random(3)
    for name in STATIC_TYPES:
        if name in STATIC_TEXT:
            data = "".join(f"line {i} of {name}: {rng.random()}\n" for i in range(2000)).encode()
        else:
            data = bytes(rng.getrandbits(8) for _ in range(20000))
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        if name in STATIC_TEXT:
            with open(os.path.join(root, name + ".gz"), "wb") as f:
                f.write(gzip.compress(data))
            with open(os.path.join(root, name + ".br"), "wb") as f:
                f.write(brotli.compress(data))


def arena_argv(data, certs):
    """The command that runs the entry: XK_ARENA_COMMAND (the image), else the XK_ARENA binary."""
    command = os.environ.get("XK_ARENA_COMMAND")
    if command:
        return [word.replace("{data}", data).replace("{certs}", certs) for word in shlex.split(command)]
    path = os.environ.get("XK_ARENA")
    if not path:
        raise AssertionError("XK_ARENA is not set: run through ctest (make test), which builds xkit-arena")
    return [path, "0"]


def sum_request(a, b):
    def varint(v):
        v &= (1 << 64) - 1
        out = bytearray()
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                return bytes(out)

    return b"\x08" + varint(a) + b"\x10" + varint(b)


class ArenaEntryTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="xkit-arena-")
        data, certs = os.path.join(cls.tmp.name, "data"), os.path.join(cls.tmp.name, "certs")
        os.makedirs(data)
        os.makedirs(certs)
        cls.dataset = make_dataset()
        with open(os.path.join(data, "dataset.json"), "w") as f:
            json.dump(cls.dataset, f, indent=2)
        cls.static_dir = os.path.join(data, "static")
        make_static_files(cls.static_dir)
        shutil.copy(CERTS.rsa.cert, os.path.join(certs, "server.crt"))
        shutil.copy(CERTS.rsa.key, os.path.join(certs, "server.key"))
        cls.h1, cls.tls_h1, cls.h2c, cls.tls_h2 = free_ports(4)
        env = {"DATA_DIR": data, "CERTS_DIR": certs, "ARENA_PORTS": f"{cls.h1},{cls.tls_h1},{cls.h2c},{cls.tls_h2}"}
        return ServerProcess(argv=arena_argv(data, certs), env=env).start()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.tmp.cleanup()

    def get(self, target, port=None, **kwargs):
        with Conn(port or self.h1) as conn:
            conn.request("GET", target, **kwargs)
            return conn.read_response()

    def post(self, target, body, headers=None, port=None):
        with Conn(port or self.h1) as conn:
            conn.request("POST", target, headers=headers, body=body)
            return conn.read_response()

    def curl(self, *args):
        result = run_client(["curl", "-sS", "--max-time", "20", *args])
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout

    # ---- /baseline11 and /baseline2 ----

    def test_baseline_sums_query_values_and_the_body(self):
        resp = self.get("/baseline11?a=13&b=42")
        self.assertEqual((resp.status, resp.body), (200, b"55"))
        self.assertEqual(resp.header("content-type"), "text/plain")
        self.assertEqual(self.post("/baseline11?a=13&b=42", b"20").body, b"75")
        body = chunked(b"20", [1, 1])
        self.assertEqual(self.post("/baseline11?a=13&b=42", body, {"transfer-encoding": "chunked"}).body, b"75")
        for _ in range(5):
            a, b, c = (random.randint(-(10**6), 10**6) for _ in range(3))
            self.assertEqual(self.get(f"/baseline11?a={a}&b={b}").body, str(a + b).encode())
            self.assertEqual(self.post(f"/baseline11?a={a}&b={b}", str(c).encode()).body, str(a + b + c).encode())

    def test_requests_in_fragments_and_split_at_every_byte(self):
        raw = http_request(
            "POST", "/baseline11?a=13&b=42", headers=[("connection", "close")], body=b"20", host="localhost"
        )
        with Conn(self.h1) as conn:
            for piece in (raw[:10], raw[10:30], raw[30:-2], raw[-2:]):
                conn.send(piece)
                time.sleep(0.03)
            answer = conn.read_until_eof()
        self.assertTrue(answer.endswith(b"\r\n\r\n75"), answer)
        for at in range(1, len(raw)):
            with Conn(self.h1) as conn:
                conn.send(raw[:at])
                conn.send(raw[at:])
                answer = conn.read_until_eof()
            self.assertTrue(answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"75"), (at, answer))

    def test_baseline2_over_h2_tls_and_h2c_prior_knowledge(self):
        out = self.curl(
            "--http2",
            "--cacert",
            CERTS.ca,
            "-w",
            " %{http_version}",
            f"https://localhost:{self.tls_h2}/baseline2?a=13&b=42",
        )
        self.assertEqual(out, b"55 2")
        out = self.curl(
            "--http2-prior-knowledge", "-w", " %{http_version}", f"http://127.0.0.1:{self.h2c}/baseline2?a=20&b=22"
        )
        self.assertEqual(out, b"42 2")

    def test_baseline2_sums_held_by_a_shut_window_arrive_exact_once_it_opens(self):
        # Each sum is a few bytes the handler writes on its stack: while the
        # client's stream window is shut, the server keeps its own copy.
        with H2Conn(self.h2c, settings={INITIAL_WINDOW_SIZE: 0}, auto_window=False) as conn:
            ids = [conn.request("GET", f"/baseline2?a={1000 * i + 1}&b={i}") for i in range(1, 9)]
            conn.read_until(lambda: all(conn.stream(i).response() is not None for i in ids), "the heads")
            conn.pump(0.2)
            self.assertEqual([bytes(conn.stream(i).body) for i in ids], [b""] * 8, "DATA sent into a shut window")
            conn.send(settings_frame({INITIAL_WINDOW_SIZE: 1 << 16}))
            conn.read_until(lambda: all(conn.stream(i).ended for i in ids), "the bodies")
            self.assertEqual([bytes(conn.stream(i).body) for i in ids], [b"%d" % (1001 * i + 1) for i in range(1, 9)])

    def test_the_h2c_port_does_not_answer_http11(self):
        result = run_client(
            [
                "curl",
                "-sS",
                "--max-time",
                "5",
                "--http1.1",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                f"http://127.0.0.1:{self.h2c}/baseline2?a=1&b=1",
            ]
        )
        self.assertNotEqual(result.returncode, 0)
        self.assertEqual(result.stdout, b"000")

    # ---- /pipeline and /delay ----

    def test_sixteen_pipelined_requests_get_sixteen_answers(self):
        with Conn(self.h1) as conn:
            conn.send(http_request("GET", "/pipeline") * 16)
            bodies = [conn.read_response().body for _ in range(16)]
        self.assertEqual(bodies, [b"ok"] * 16)

    def test_delay_waits_and_answers_its_own_value(self):
        self.assertEqual(self.get("/delay/0").body, b"0")
        start = time.monotonic()
        self.assertEqual(self.get("/delay/300").body, b"300")
        self.assertGreaterEqual(time.monotonic() - start, 0.27)
        values = [random.randint(1, 400) for _ in range(32)]
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda ms: self.get(f"/delay/{ms}").body, values))
        self.assertEqual(answers, [str(v).encode() for v in values])

    # ---- /json ----

    def check_json(self, body, count, m):
        doc = json.loads(body)
        self.assertEqual(doc["count"], count)
        expected = [dict(item, total=item["price"] * item["quantity"] * m) for item in self.dataset[:count]]
        self.assertEqual(doc["items"], expected)

    def test_json_is_the_dataset_with_totals(self):
        for count, m in ((1, 1), (12, 3), (50, 5), (0, 2)):
            resp = self.get(f"/json/{count}?m={m}")
            self.assertEqual(resp.header("content-type"), "application/json")
            self.check_json(resp.body, count, m)
        self.check_json(self.get("/json/7").body, 7, 1)

    def test_json_over_tls_http11_and_h2c(self):
        context = client_context(alpn=("h2", "http/1.1"))
        with TlsConn(self.tls_h1, context) as conn:
            self.assertEqual(conn.sock.selected_alpn_protocol(), "http/1.1")
            self.assertEqual(conn.sock.version(), "TLSv1.3")
            conn.request("GET", "/json/20?m=4")
            self.check_json(conn.read_response().body, 20, 4)
        body = self.curl("--http2-prior-knowledge", f"http://127.0.0.1:{self.h2c}/json/31?m=2")
        self.check_json(body, 31, 2)

    def test_json_is_compressed_only_when_asked(self):
        resp = self.get("/json/50?m=1", headers={"Accept-Encoding": "gzip, br"})
        self.assertIn(resp.header("content-encoding"), ("gzip", "br"))
        decode = brotli.decompress if resp.header("content-encoding") == "br" else gzip.decompress
        self.check_json(decode(resp.body), 50, 1)
        resp = self.get("/json/25?m=3", headers={"Accept-Encoding": "gzip"})
        self.assertEqual(resp.header("content-encoding"), "gzip")
        self.check_json(gzip.decompress(resp.body), 25, 3)
        resp = self.get("/json/50?m=1")
        self.assertIsNone(resp.header("content-encoding"))
        self.check_json(resp.body, 50, 1)
        self.assertIsNone(
            self.get("/baseline11?a=1&b=2", headers={"Accept-Encoding": "gzip, br"}).header("content-encoding")
        )

    # ---- /echo ----

    def test_echo_is_byte_exact(self):
        for size in (1, 100, 4096, 65536, 100 * 1024):
            data = os.urandom(size)
            resp = self.post("/echo", data)
            self.assertEqual((resp.status, resp.body), (200, data))
            self.assertEqual(resp.header("content-type"), "application/octet-stream")
        data = os.urandom(30000)
        resp = self.post("/echo", chunked(data, [1000, 29000]), {"transfer-encoding": "chunked"})
        self.assertEqual(resp.body, data)
        self.assertEqual(self.post("/echo", b"").body, b"")
        with TlsConn(self.tls_h1, client_context()) as conn:
            conn.request("POST", "/echo", body=data)
            self.assertEqual(conn.read_response().body, data)

    # ---- gRPC ----

    def test_grpc_get_sum_over_h2c_and_tls(self):
        def call(channel):
            method = channel.unary_unary(
                "/benchmark.BenchmarkService/GetSum", request_serializer=lambda m: m, response_deserializer=lambda m: m
            )
            return method(sum_request(13, 42), timeout=10)

        with grpc.insecure_channel(f"127.0.0.1:{self.h1}") as channel:
            self.assertEqual(call(channel), b"\x08\x37")
        with open(CERTS.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        with grpc.secure_channel(f"localhost:{self.tls_h2}", credentials) as channel:
            self.assertEqual(call(channel), b"\x08\x37")

    # ---- /static ----

    def static_bytes(self, name):
        with open(os.path.join(self.static_dir, name), "rb") as f:
            return f.read()

    def test_static_files_have_their_sizes_and_types(self):
        for name, media_type in STATIC_TYPES.items():
            resp = self.get(f"/static/{name}")
            self.assertEqual(resp.status, 200, name)
            self.assertEqual(resp.body, self.static_bytes(name))
            self.assertEqual(resp.header("content-type").split(";")[0], media_type)
            self.assertIsNone(resp.header("content-encoding"))
        self.assertEqual(self.get("/static/nonexistent.txt").status, 404)

    def test_static_twins_as_the_client_prefers_them(self):
        for accept, coding, decode in (
            ("br;q=1, gzip;q=0.8", "br", brotli.decompress),
            ("gzip", "gzip", gzip.decompress),
        ):
            resp = self.get("/static/app.js", headers={"Accept-Encoding": accept})
            self.assertEqual(resp.header("content-encoding"), coding)
            self.assertEqual(decode(resp.body), self.static_bytes("app.js"))
        self.assertIsNone(
            self.get("/static/hero.webp", headers={"Accept-Encoding": "br, gzip"}).header("content-encoding")
        )

    def test_a_text_file_without_twins_is_sent_as_it_is_on_disk(self):
        # The server compresses (JSON), but static bodies come from disk byte for byte: the
        # entry turns the library's on-the-fly compression of static files off.
        data = "".join(f".rule-{i} {{ margin: {i}px }}\n" for i in range(800)).encode()
        path = os.path.join(self.static_dir, "plain.css")
        with open(path, "wb") as f:
            f.write(data)
        self.addCleanup(os.unlink, path)
        resp = self.get("/static/plain.css", headers={"Accept-Encoding": "br;q=1, gzip;q=0.8"})
        self.assertEqual((resp.status, resp.header("content-encoding"), resp.body), (200, None, data))
        self.assertTrue(resp.header("etag").startswith('"'))
        out = self.curl(
            "--http2",
            "--cacert",
            CERTS.ca,
            "-H",
            "Accept-Encoding: br;q=1, gzip;q=0.8",
            "-D",
            "-",
            f"https://localhost:{self.tls_h2}/static/plain.css",
        )
        head, body = out.split(b"\r\n\r\n", 1)
        self.assertNotIn(b"content-encoding", head.lower())
        self.assertEqual(body, data)

    def test_static_over_tls_h1_and_h2(self):
        with TlsConn(self.tls_h1, client_context()) as conn:
            conn.request("GET", "/static/reset.css")
            self.assertEqual(conn.read_response().body, self.static_bytes("reset.css"))
        out = self.curl(
            "--http2",
            "--cacert",
            CERTS.ca,
            "-H",
            "Accept-Encoding: br;q=1, gzip;q=0.8",
            "-D",
            "-",
            f"https://localhost:{self.tls_h2}/static/logo.svg",
        )
        head, body = out.split(b"\r\n\r\n", 1)
        self.assertIn(b"content-encoding: br", head.lower())
        self.assertEqual(brotli.decompress(body), self.static_bytes("logo.svg"))

    def wait_until_every_worker_serves(self, target, body, since):
        """Every worker keeps its own open file for up to a second: fresh connections (which
        land on any worker) must all get body within 2 s of the change, and keep getting it
        once a second has passed."""
        streak = 0
        while streak < 10 or time.monotonic() - since < 1.1:
            self.assertLess(time.monotonic() - since, 2.0, f"{target} was not served anew within 2 s")
            streak = streak + 1 if self.get(target).body == body else 0
            time.sleep(0.02)

    def test_a_file_replaced_on_disk_is_served_new_within_two_seconds(self):
        path = os.path.join(self.static_dir, "manifest.json")
        original = self.static_bytes("manifest.json")
        self.assertEqual(self.get("/static/manifest.json").body, original)
        try:
            with open(path + ".new", "wb") as f:
                f.write(b'{"replaced": true}')
            os.replace(path + ".new", path)
            self.wait_until_every_worker_serves("/static/manifest.json", b'{"replaced": true}', time.monotonic())
        finally:
            with open(path + ".new", "wb") as f:
                f.write(original)
            os.replace(path + ".new", path)
        self.wait_until_every_worker_serves("/static/manifest.json", original, time.monotonic())

    # ---- WebSocket ----

    def test_websocket_echoes_in_order_and_answers_close_1000(self):
        with ws_connect(f"ws://127.0.0.1:{self.h1}/ws", compression=None) as ws:
            for i in range(16):  # 16 in flight, as the echo-ws-pipeline profile sends them
                ws.send(f"hello {i}")
            self.assertEqual([ws.recv(timeout=10) for _ in range(16)], [f"hello {i}" for i in range(16)])
            data = os.urandom(70000)
            ws.send(data)
            self.assertEqual(ws.recv(timeout=10), data)
            ws.close(1000)
            self.assertEqual(ws.protocol.close_rcvd.code, 1000)

    def test_a_plain_get_of_ws_is_a_4xx(self):
        status = self.get("/ws").status
        self.assertTrue(400 <= status < 500, status)

    # ---- HTTP/3: baseline-h3 and static-h3 ----

    def test_h3_beside_tls_h2_over_ipv4_and_ipv6_with_64_streams(self):
        # The arena's h3 profiles: h3 on the UDP port of the h2 TLS port's number, reached at
        # localhost over either family, many streams on one connection; the static file's twin
        # as the profile's Accept-Encoding prefers it.
        async def go(host):
            async with h3_connect(host, self.tls_h2, ca_file=CERTS.ca) as client:
                sums = await asyncio.gather(*(client.request("GET", f"/baseline2?a={i}&b=7") for i in range(64)))
                css = await client.request(
                    "GET", "/static/reset.css", headers=[("accept-encoding", "br;q=1, gzip;q=0.8")]
                )
                plain = await client.request("GET", "/static/hero.webp")
                missing = await client.request("GET", "/static/nonexistent.txt")
                return sums, css, plain, missing

        for host in ("127.0.0.1", "::1"):
            with self.subTest(host=host):
                sums, css, plain, missing = run(go(host))
                self.assertEqual([(r.status, r.body) for r in sums], [(200, str(i + 7).encode()) for i in range(64)])
                self.assertEqual((css.status, css.headers.get("content-encoding")), (200, "br"))
                self.assertEqual(css.headers["content-type"].split(";")[0], "text/css")
                self.assertEqual(brotli.decompress(css.body), self.static_bytes("reset.css"))
                self.assertEqual((plain.status, plain.body), (200, self.static_bytes("hero.webp")))
                self.assertEqual(missing.status, 404)

    def test_tcp_responses_on_the_h2_port_advertise_h3(self):
        out = self.curl(
            "--http2",
            "--cacert",
            CERTS.ca,
            "-D",
            "-",
            "-o",
            "/dev/null",
            f"https://localhost:{self.tls_h2}/baseline2?a=1&b=1",
        )
        self.assertIn(f'alt-svc: h3=":{self.tls_h2}"'.encode(), out.lower())

    # ---- TLS ----

    def test_tls_ports_serve_the_mounted_certificate_with_tls13_and_alpn_as_offered(self):
        for port, offered, chosen in (
            (self.tls_h1, ("h2", "http/1.1"), "http/1.1"),
            (self.tls_h2, ("h2", "http/1.1"), "h2"),
        ):
            context = client_context(alpn=offered)
            with socket.create_connection(("127.0.0.1", port)) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    self.assertEqual(tls.version(), "TLSv1.3")
                    self.assertEqual(tls.selected_alpn_protocol(), chosen)
                    self.assertIn(
                        tls.cipher()[0],
                        ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"),
                    )
                    with open(CERTS.rsa.cert, "rb") as f:
                        pem = f.read().decode()
                    self.assertEqual(tls.getpeercert(binary_form=True), ssl.PEM_cert_to_DER_cert(pem))

    def test_tls_never_names_a_protocol_the_client_did_not_offer(self):
        context = client_context(alpn=("http/1.1",))
        try:
            with socket.create_connection(("127.0.0.1", self.tls_h2)) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    self.assertIn(tls.selected_alpn_protocol(), (None, "http/1.1"))
        except ssl.SSLError as e:
            self.assertIn("no application protocol", str(e).lower())

    def test_old_tls_versions_are_refused(self):
        for version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
            context = client_context(verify=False)
            context.minimum_version = context.maximum_version = version
            context.set_ciphers("ALL:@SECLEVEL=0")
            with self.assertRaises(ssl.SSLError):
                with socket.create_connection(("127.0.0.1", self.tls_h1)) as raw:
                    context.wrap_socket(raw, server_hostname="localhost").close()


if __name__ == "__main__":
    unittest.main()
