"""The examples (examples/*.c) as their users run them: each binary started on port 0 (a free
one) with 2 workers, driven with real clients, and stopped with SIGTERM, which must end it with exit 0 and no
sanitizer report.

- json_api: the CRUD round trip with Python's http.client (and curl over h2c), pages of the
  list, bad bodies answered 400 with a JSON error that names the problem, 404/405/413/415 in
  JSON, and creates from 8 threads at once each stored once (their connections spread over the 2
  workers as the kernel hashes them, which no test can force; the store is one either way).
- static_site: the example site (build/examples/site, with the style.css.gz twin `make` made)
  over HTTPS with curl, HTTP/2 and HTTP/1.1: the page compressed on the fly per
  Accept-Encoding and decoding to the file's bytes, the twin preferred and sent as it is on
  disk, security headers, a 404 page, and the plain port's 301 to HTTPS.
- ws_chat on 2 workers with Python's websockets: clients are added until the server's log
  shows both workers hold some (so a message crosses workers; 2^-23 odds of failing for want
  of one), and each client receives every join, message and leave in the room; an oversized
  message is closed with 1009, binary with 1003, a client that stops reading is dropped
  (1008) while the others go on, and a stop closes every client with 1001."""

import asyncio
import gzip
import http.client
import json
import os
import re
import signal
import socket
import tempfile
import threading
import unittest

import brotli
import websockets

from support.harness import (
    LISTEN_RE,
    ServerProcess,
    ServerTestCase,
    _binary_from_env,
    require_tool,
    run_client,
    start_owned,
)
from support.tls_fixtures import PLAIN_LISTEN_RE, make_certs
from support.wsclient import OP_CLOSE, WsConn, close_payload

TIMEOUT = 15


def example(var, workers):
    """An example binary (its path in the environment variable var) on a free port."""
    return ServerProcess(argv=[_binary_from_env(var), "0", str(workers)])


# ---- json_api ----


class JsonApiTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        return example("XK_JSON_API", 2).start()

    def call(self, method, target, body=None, content_type="application/json", raw=None):
        """(status, headers, JSON body or None) of one request on a fresh connection."""
        conn = http.client.HTTPConnection(self.server.connect_host, self.server.port, timeout=TIMEOUT)
        try:
            payload = raw if raw is not None else None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": content_type} if payload is not None and content_type else {}
            conn.request(method, target, body=payload, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        if resp.status == 204:
            self.assertEqual(data, b"")
            return resp.status, resp.headers, None
        self.assertEqual(resp.headers["Content-Type"], "application/json", (method, target, data))
        return resp.status, resp.headers, json.loads(data)

    def assert_error(self, answer, status, words):
        self.assertEqual(answer[0], status, answer)
        self.assertEqual(list(answer[2]), ["error"], answer)
        self.assertIn(words, answer[2]["error"])

    def get(self, target):
        """(status, JSON body) of GET target."""
        status, _, body = self.call("GET", target)
        return status, body

    def total(self):
        return self.call("GET", "/items?limit=1")[2]["total"]

    def test_the_health_route_answers_ok_while_serving(self):
        conn = http.client.HTTPConnection(self.server.connect_host, self.server.port, timeout=TIMEOUT)
        self.addCleanup(conn.close)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        self.assertEqual((resp.status, resp.read()), (200, b"ok\n"))

    def test_an_item_is_created_read_replaced_and_deleted(self):
        status, headers, item = self.call("POST", "/items", {"title": "buy milk"})
        self.assertEqual(status, 201)
        self.assertEqual(set(item), {"id", "title", "done"})
        self.assertEqual((item["title"], item["done"]), ("buy milk", False))
        location = headers["Location"]
        self.assertEqual(location, f"/items/{item['id']}")
        self.assertEqual(self.get(location), (200, item))

        replaced = dict(item, title="buy oat milk ✓", done=True)
        answer = self.call("PUT", location, {"title": "buy oat milk ✓", "done": True})
        self.assertEqual((answer[0], answer[2]), (200, replaced))
        self.assertEqual(self.get(location), (200, replaced))
        # The same item over HTTP/2 (h2c), as curl sees it.
        done = run_client(["curl", "-sS", "--http2-prior-knowledge", self.server.url(location)])
        self.assertEqual(json.loads(done.stdout), replaced, done.stderr)

        self.assertEqual(self.call("DELETE", location)[0], 204)
        self.assert_error(self.call("GET", location), 404, "no such item")
        self.assert_error(self.call("DELETE", location), 404, "no such item")
        self.assert_error(self.call("PUT", location, {"title": "x"}), 404, "no such item")

    def test_the_list_comes_in_pages_by_limit_and_offset(self):
        titles = [f"page item {i}" for i in range(5)]
        made = [self.call("POST", "/items", {"title": t})[2] for t in titles]
        first = self.total() - 5  # the newest come last: the list is in the order made
        page = self.call("GET", f"/items?limit=2&offset={first + 1}")[2]
        self.assertEqual(page["items"], made[1:3])
        self.assertEqual(page["total"], first + 5)
        self.assertEqual(self.call("GET", f"/items?offset={first}&limit=100")[2]["items"], made)
        self.assertEqual(self.call("GET", f"/items?offset={first + 5}")[2]["items"], [])
        self.assertEqual(len(self.call("GET", "/items?offset=0")[2]["items"]), min(20, first + 5))  # 20 a page
        for query in ("limit=0", "limit=101", "limit=x", "offset=-1", "offset=", "limit=1e2"):
            with self.subTest(query=query):
                self.assert_error(self.call("GET", f"/items?{query}"), 400, "limit must be 1 to 100")

    def test_a_bad_body_is_400_with_a_json_error_naming_the_problem(self):
        before = self.total()
        cases = [
            (b'{"title": "a"', "not JSON: the input ends inside an object (line 1, column 14)"),
            (b'{"title": "a",}', "not JSON"),
            (b'{"title": "\xff"}', "not JSON"),
            (b"", "not JSON"),
            (b'["title"]', 'an object with "title"'),
            (b'{"done": true}', 'an object with "title"'),
            (b'{"title": "a", "colour": "red"}', 'an object with "title"'),
            (b'{"id": 7, "title": "a"}', 'an object with "title"'),
            (b'{"title": 5}', '"title" must be a string of 1 to 200 bytes'),
            (b'{"title": ""}', '"title" must be a string'),
            (json.dumps({"title": "x" * 201}).encode(), '"title" must be a string'),
            (b'{"title": "a", "done": "yes"}', '"done" must be true or false'),
        ]
        for raw, words in cases:
            with self.subTest(body=raw[:40]):
                self.assert_error(self.call("POST", "/items", raw=raw), 400, words)
        item = self.call("POST", "/items", {"title": "kept"})[2]
        self.assert_error(self.call("PUT", f"/items/{item['id']}", raw=b'{"title": 1}'), 400, '"title"')
        self.assertEqual(self.call("GET", f"/items/{item['id']}")[2], item)  # unchanged by the bad PUT
        self.assertEqual(self.total(), before + 1)

    def test_a_body_that_is_not_json_by_its_type_is_415(self):
        for content_type in ("text/plain", "application/jsonx", None):
            with self.subTest(content_type=content_type):
                answer = self.call("POST", "/items", raw=b'{"title": "a"}', content_type=content_type)
                self.assert_error(answer, 415, "application/json")
        answer = self.call("POST", "/items", raw=b'{"title": "a"}', content_type="Application/JSON; charset=utf-8")
        self.assertEqual(answer[0], 201, answer)

    def test_unknown_items_and_paths_are_json_404s_and_other_methods_json_405s(self):
        for target in ("/items/999999999", "/items/abc", "/items/-1", "/nope", "/items/1/more"):
            with self.subTest(target=target):
                self.assert_error(self.call("GET", target), 404, "no such")
        for method, target, allowed in (
            ("PATCH", "/items", {"GET", "HEAD", "POST"}),
            ("POST", "/items/1", {"GET", "HEAD", "PUT", "DELETE"}),
        ):
            with self.subTest(method=method, target=target):
                answer = self.call(method, target, raw=b"{}")
                self.assert_error(answer, 405, "method not allowed")
                self.assertEqual({m.strip() for m in answer[1]["Allow"].split(",")}, allowed)

    def test_a_body_over_16_kib_is_a_json_413(self):
        big = json.dumps({"title": "x" * (16 * 1024)}).encode()
        self.assert_error(self.call("POST", "/items", raw=big), 413, "over 16 KiB")

    def test_creates_from_many_threads_on_two_workers_are_each_stored_once(self):
        """8 threads on a connection each (the kernel spreads them over the 2 workers, which
        share the store), 25 creates each, all at once."""
        threads, per_thread, results, failures = 8, 25, [], []
        start = threading.Barrier(threads)

        def client(n):
            conn = http.client.HTTPConnection(self.server.connect_host, self.server.port, timeout=TIMEOUT)
            try:
                start.wait()
                for i in range(per_thread):
                    body = json.dumps({"title": f"thread {n} item {i}"})
                    conn.request("POST", "/items", body=body, headers={"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    results.append((resp.status, json.loads(resp.read())))
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                failures.append(repr(e))
            finally:
                conn.close()

        workers = [threading.Thread(target=client, args=(n,)) for n in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(60)
        self.assertEqual(failures, [])
        self.assertEqual({status for status, _ in results}, {201})
        made = {item["id"]: item["title"] for _, item in results}
        self.assertEqual(len(made), threads * per_thread, "two creates got one id")
        stored, offset = [], 0
        while page := self.call("GET", f"/items?limit=100&offset={offset}")[2]["items"]:
            stored += page
            offset += len(page)
        ids = [item["id"] for item in stored]
        self.assertEqual(ids, sorted(set(ids)), "the list is not in the order made, or repeats an item")
        self.assertEqual({i["id"]: i["title"] for i in stored if i["title"].startswith("thread ")}, made)


# ---- static_site ----


class SiteServer(ServerProcess):
    """static_site ROOT CERT KEY: the HTTPS port (port) and the plain one (plain_port)."""

    scheme = "https"

    def __init__(self, root, pair):
        # Both ports 0 (free ones), 2 workers.
        super().__init__(argv=[_binary_from_env("XK_STATIC_SITE"), root, pair.cert, pair.key, "0", "0", "2"])
        self.plain_port = None

    def listening_patterns(self):
        return [LISTEN_RE, PLAIN_LISTEN_RE]

    def start(self):
        super().start()
        self.plain_port = int(self.also_listening[0].group(2))
        return self


class StaticSiteTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        cls.site = os.environ.get("XK_EXAMPLE_SITE", "")
        if not os.path.isfile(os.path.join(cls.site, "style.css.gz")):
            raise RuntimeError(f"XK_EXAMPLE_SITE={cls.site!r} holds no built site; run through ctest")
        cls.certs = make_certs()
        return SiteServer(cls.site, cls.certs.ec).start()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.certs.cleanup()

    def file(self, name):
        with open(os.path.join(self.site, name), "rb") as f:
            return f.read()

    def curl(self, url, *args, http="2"):
        """(status, {header: value}, body as sent, HTTP version) of one curl request."""
        require_tool(self, "curl")
        with tempfile.TemporaryDirectory() as tmp:
            head, body = os.path.join(tmp, "head"), os.path.join(tmp, "body")
            done = run_client(
                [
                    "curl",
                    "-sS",
                    "--max-time",
                    "20",
                    "--cacert",
                    self.certs.ca,
                    f"--http{http}",
                    "-D",
                    head,
                    "-o",
                    body,
                    "-w",
                    "%{http_version} %{response_code}",
                    "--resolve",
                    f"localhost:{self.server.port}:127.0.0.1",
                    "--resolve",
                    f"localhost:{self.server.plain_port}:127.0.0.1",
                    *args,
                    url,
                ]  # fmt: skip
            )
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(head, "rb") as f:
                lines = f.read().decode("latin-1").split("\r\n")
            with open(body, "rb") as f:
                data = f.read()
        version, status = done.stdout.decode().split()
        # With -L every response's head is there: the last block is the final response's.
        last = max(i for i, line in enumerate(lines) if line.startswith("HTTP/"))
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[last + 1 :] if line)
        }
        return int(status), headers, data, version

    def https(self, target, *args, http="2"):
        return self.curl(f"https://localhost:{self.server.port}{target}", *args, http=http)

    def assert_security_headers(self, headers):
        self.assertEqual(headers.get("strict-transport-security"), "max-age=31536000")
        self.assertEqual(headers.get("x-content-type-options"), "nosniff")
        self.assertIn("default-src 'self'", headers.get("content-security-policy", ""))

    def test_the_index_page_over_http2_and_http11_with_security_headers(self):
        for protocol, version in (("2", "2"), ("1.1", "1.1")):
            with self.subTest(protocol=protocol):
                status, headers, body, got = self.https("/", http=protocol)
                self.assertEqual((status, got), (200, version))
                self.assertEqual(body, self.file("index.html"))
                self.assertTrue(headers["content-type"].startswith("text/html"), headers)
                self.assertNotIn("content-encoding", headers)  # curl asked for no coding
                self.assert_security_headers(headers)
                self.assertEqual(headers.get("cache-control"), "no-cache")

    def test_the_page_is_compressed_on_the_fly_in_the_coding_the_client_prefers(self):
        original = self.file("index.html")
        for accept, coding, decode in (
            ("br", "br", brotli.decompress),
            ("gzip", "gzip", gzip.decompress),
            ("gzip;q=0.5, br", "br", brotli.decompress),
            ("br;q=0.1, gzip", "gzip", gzip.decompress),
        ):
            for protocol in ("2", "1.1"):
                with self.subTest(accept=accept, protocol=protocol):
                    status, headers, body, _ = self.https(
                        "/index.html", "-H", f"Accept-Encoding: {accept}", http=protocol
                    )
                    self.assertEqual((status, headers.get("content-encoding")), (200, coding), headers)
                    self.assertLess(len(body), len(original))
                    self.assertEqual(decode(body), original)
                    self.assertEqual(headers.get("vary"), "Accept-Encoding")
        status, headers, body, _ = self.https("/", "-H", "Accept-Encoding: identity")
        self.assertNotIn("content-encoding", headers)
        self.assertEqual(body, original)

    def test_the_style_sheets_twin_is_preferred_and_sent_as_it_is_on_disk(self):
        twin = self.file("style.css.gz")
        self.assertEqual(gzip.decompress(twin), self.file("style.css"))
        # A client that would take Brotli first still gets the gzip twin: no work for the server.
        for accept in ("gzip", "br, gzip"):
            with self.subTest(accept=accept):
                status, headers, body, _ = self.https("/style.css", "-H", f"Accept-Encoding: {accept}")
                self.assertEqual((status, headers.get("content-encoding")), (200, "gzip"), headers)
                self.assertEqual(body, twin)
                self.assertTrue(headers["content-type"].startswith("text/css"), headers)
                self.assert_security_headers(headers)
        # Brotli alone: no twin for it, so the sheet is compressed on the fly.
        status, headers, body, _ = self.https("/style.css", "-H", "Accept-Encoding: br")
        self.assertEqual(headers.get("content-encoding"), "br", headers)
        self.assertEqual(brotli.decompress(body), self.file("style.css"))

    def test_a_missing_file_is_a_404_page(self):
        for target in ("/missing.html", "/../CMakeLists.txt", "/%2e%2e/CMakeLists.txt"):
            with self.subTest(target=target):
                status, headers, body, _ = self.https(target, "--path-as-is")
                self.assertEqual(status, 404)
                self.assertTrue(headers["content-type"].startswith("text/html"), headers)
                self.assertIn(b"Not found", body)

    def test_the_plain_port_redirects_to_https_with_a_301(self):
        plain, port = self.server.plain_port, self.server.port
        for host, target in (("127.0.0.1", "/style.css?v=2"), ("localhost", "/"), ("[::1]", "/a/b")):
            with self.subTest(host=host, target=target):
                status, headers, body, _ = self.curl(
                    f"http://127.0.0.1:{plain}{target}", "-H", f"Host: {host}:{plain}", http="1.1"
                )
                self.assertEqual(status, 301)
                self.assertEqual(headers["location"], f"https://{host}:{port}{target}")
                self.assertNotIn("strict-transport-security", headers)  # not honoured over plain HTTP
        self.assertEqual(self.curl(f"http://127.0.0.1:{plain}/", "-H", "Host: bad/host", http="1.1")[0], 400)
        # A browser follows it to the page.
        status, headers, body, version = self.curl(f"http://localhost:{plain}/", "-L", http="2")
        self.assertEqual((status, version, body), (200, "2", self.file("index.html")))
        self.assert_security_headers(headers)


# ---- ws_chat ----

JOINED_RE = re.compile(r"(\S+) joined on worker (\d+)$", re.M)


class WsChatTest(ServerTestCase):
    @classmethod
    def start_shared_server(cls):
        return example("XK_WS_CHAT", 2).start()

    def run_async(self, coro):
        return asyncio.run(asyncio.wait_for(coro, 90))

    def url(self, name, port=None):
        return f"ws://127.0.0.1:{port or self.server.port}/chat?name={name}"

    def worker_of(self, name, server=None):
        """The worker the server's log says name joined on."""
        joined = dict(JOINED_RE.findall((server or self.server).stderr_text()))
        self.assertIn(name, joined, "no join line in the server's log")
        return int(joined[name])

    async def connect_on_both_workers(self, prefix, server=None, at_least=3):
        """Clients prefix0, prefix1, ... added one at a time (each reads its own join first)
        until the log shows both workers hold one, and at least at_least of them."""
        clients, workers = [], {}
        while len(clients) < at_least or len(set(workers.values())) < 2:
            self.assertLess(len(clients), 24, f"24 clients all reached one worker: {workers}")
            name = f"{prefix}{len(clients)}"
            ws = await websockets.connect(self.url(name, server and server.port), compression=None)
            self.assertEqual(json.loads(await recv(ws)), {"type": "join", "name": name})
            clients.append((name, ws))
            workers[name] = self.worker_of(name, server)
        return clients

    def test_every_client_receives_every_join_message_and_leave_across_workers(self):
        async def go():
            clients = await self.connect_on_both_workers("c")
            names = [name for name, _ in clients]
            # Each has seen its own join; now the joins of those after it, in the order they came.
            for k, (name, ws) in enumerate(clients):
                later = [json.loads(await recv(ws)) for _ in names[k + 1 :]]
                self.assertEqual(later, [{"type": "join", "name": n} for n in names[k + 1 :]], name)
            for name, ws in clients:
                await ws.send(f"hello from {name} ✓")
            sent = {(name, f"hello from {name} ✓") for name in names}
            for name, ws in clients:
                got = [json.loads(await recv(ws)) for _ in names]
                self.assertEqual({(m["name"], m["text"]) for m in got}, sent, name)
                self.assertEqual({m["type"] for m in got}, {"message"})
            # Leaving, one at a time: everyone still there hears it.
            while clients:
                name, ws = clients.pop()
                await ws.close()
                for other, other_ws in clients:
                    self.assertEqual(json.loads(await recv(other_ws)), {"type": "leave", "name": name}, other)

        self.run_async(go())

    def test_an_oversized_message_is_closed_with_1009_and_binary_with_1003(self):
        async def go():
            watcher = await websockets.connect(self.url("watcher"), compression=None)
            big = await websockets.connect(self.url("big"), compression=None)
            binary = await websockets.connect(self.url("binary"), compression=None)
            joins = [json.loads(await recv(watcher))["name"] for _ in range(3)]
            self.assertEqual(joins, ["watcher", "big", "binary"])
            await big.send("x" * 4096)  # the most a message may be
            self.assertEqual(json.loads(await recv(watcher))["text"], "x" * 4096)
            await big.send("x" * 4097)
            await binary.send(b"\x00\x01")
            for ws, code in ((big, 1009), (binary, 1003)):
                with self.assertRaises(websockets.ConnectionClosed) as closed:
                    while True:
                        await recv(ws)
                self.assertEqual(closed.exception.rcvd.code, code)
            left = [json.loads(await recv(watcher)) for _ in range(2)]
            self.assertEqual({(m["type"], m["name"]) for m in left}, {("leave", "big"), ("leave", "binary")})
            await watcher.close()

        self.run_async(go())

    def test_a_name_is_required_and_checked(self):
        async def go():
            for query in ("", "?name=", "?name=a%20b", "?name=<script>", "?name=" + "n" * 33):
                with self.subTest(query=query), self.assertRaises(websockets.InvalidStatus) as refused:
                    await websockets.connect(f"ws://127.0.0.1:{self.server.port}/chat{query}")
                self.assertEqual(refused.exception.response.status_code, 400)

        self.run_async(go())

    def test_the_page_to_chat_from(self):
        resp = self.fetch("GET", "/")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header("content-type"), "text/html; charset=utf-8")
        self.assertIn(b"/chat?name=", resp.body)

    def test_a_client_that_stops_reading_is_dropped_and_the_others_go_on(self):
        """A raw client with a 4 KiB receive buffer joins and stops reading; another sends
        messages of 4 KB, 2 MiB more than the kernel's largest send buffer (tcp_wmem) holds,
        each once the one before has come back to it. The sender, which keeps up, gets all of its
        own; the silent one finds, when it reads again, part of them and then a close 1008:
        nothing more was queued for it."""
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", self.server.port))
        slow = WsConn(self.server.port, path="/chat?name=slow", sock=sock, timeout=TIMEOUT)
        self.addCleanup(slow.close)
        self.assertIn(" 101 ", slow.status_line)
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            send_buffer_max = int(f.read().split()[2])
        text = "y" * 4000
        count = (send_buffer_max + (2 << 20)) // len(text)

        async def go():
            async with websockets.connect(self.url("fast"), compression=None) as fast:
                self.assertEqual(json.loads(await recv(fast)), {"type": "join", "name": "fast"})
                for i in range(count):
                    await fast.send(f"{i:05} {text}")
                    message = json.loads(await recv(fast))
                    self.assertEqual(message, {"type": "message", "name": "fast", "text": f"{i:05} {text}"})
                # Now the silent client reads what was queued for it, up to the server's close.
                received = 0
                while (frame := slow.read_frame())[2] != OP_CLOSE:
                    received += 1
                self.assertEqual(frame[3], close_payload(1008, b"too slow"))
                self.assertLess(received, count, "nothing was held back from the silent client")
                slow.send_frame(OP_CLOSE, close_payload(1008))
                self.assertEqual(json.loads(await recv(fast)), {"type": "leave", "name": "slow"})

        self.run_async(go())

    def test_a_stop_closes_every_client_with_1001_and_exits_cleanly(self):
        server = start_owned(self, example("XK_WS_CHAT", 2))

        async def go():
            clients = await self.connect_on_both_workers("s", server=server)
            server.send_signal(signal.SIGTERM)
            for name, ws in clients:
                with self.assertRaises(websockets.ConnectionClosed) as closed:
                    while True:
                        await recv(ws)  # the leaves of the others may come first
                self.assertEqual(closed.exception.rcvd.code, 1001, name)

        self.run_async(go())
        server.assert_clean_exit(server.wait_exit(TIMEOUT))


async def recv(ws):
    return await asyncio.wait_for(ws.recv(), TIMEOUT)


if __name__ == "__main__":
    unittest.main()
