"""The arena entry's database endpoints (arena/main.c: GET /async-db and GET
/fortunes, ../shared/arena/CONTRACT.md "The database") against a real
PostgreSQL 15 loaded with the arena's seed (scripts/arena_seed.py), each
answer compared with the seed generator's own rows: async-db's items field by
field, fortunes' page byte for byte. Also: parameters that try injection, a
client that leaves with queries in flight, and the server stopped and started
again (503 while it is down, answers again by itself afterwards)."""

import html
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import unittest

from support.harness import Conn, ServerProcess, http_request
from support.postgres import Postgres
from support.tls_fixtures import shared_certs

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import arena_seed  # noqa: E402

from support.ports import free_ports

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)


def start_arena(test_class, conninfo, extra_env=None):
    """The entry with DATABASE_URL (and extra_env), a one-item dataset and no static files."""
    tmp = tempfile.mkdtemp(prefix="xkit-arena-db-")
    test_class.addClassCleanup(shutil.rmtree, tmp, ignore_errors=True)
    data, certs = os.path.join(tmp, "data"), os.path.join(tmp, "certs")
    os.makedirs(os.path.join(data, "static"))
    os.makedirs(certs)
    item = {"id": 1, "name": "a", "category": "b", "price": 1, "quantity": 1, "active": True, "tags": []}
    item["rating"] = {"score": 1, "count": 1}
    with open(os.path.join(data, "dataset.json"), "w") as f:
        json.dump([item], f)
    shutil.copy(CERTS.rsa.cert, os.path.join(certs, "server.crt"))
    shutil.copy(CERTS.rsa.key, os.path.join(certs, "server.key"))
    ports = free_ports(4)
    env = {"DATA_DIR": data, "CERTS_DIR": certs, "ARENA_PORTS": ",".join(map(str, ports))}
    env["DATABASE_URL"] = conninfo
    env.update(extra_env or {})
    path = os.environ.get("XK_ARENA")
    if not path:
        raise AssertionError("XK_ARENA is not set: run through ctest (make test), which builds xkit-arena")
    server = ServerProcess(argv=[path, "0"], env=env).start()
    test_class.addClassCleanup(server.close)
    return server


def get(port, target, timeout=10):
    with Conn(port, timeout=timeout) as conn:
        conn.request("GET", target)
        return conn.read_response()


def item_json(row):
    id_, name, category, price, quantity, active, tags, score, count = row
    return {
        "id": id_,
        "name": name,
        "category": category,
        "price": price,
        "quantity": quantity,
        "active": active,
        "tags": json.loads(tags),
        "rating": {"score": score, "count": count},
    }


def fortunes_page(rows):
    fortunes = list(rows) + [(0, "Additional fortune added at request time.")]
    fortunes.sort(key=lambda f: f[1].encode())
    cells = "".join(f"<tr><td>{id_}</td><td>{html.escape(message, quote=True)}</td></tr>" for id_, message in fortunes)
    page = "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
    page += f"<tr><th>id</th><th>message</th></tr>{cells}</table></body></html>"
    return page.replace("&#x27;", "&#39;").encode()


class ArenaDatabaseTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.postgres = Postgres(cls)
        cls.postgres.seed()
        cls.items = {row[0]: item_json(row) for row in arena_seed.item_rows(100_000)}
        cls.server = start_arena(cls, cls.postgres.conninfo)

    def async_db(self, query):
        response = get(self.server.port, f"/async-db?{query}")
        self.assertEqual(response.status, 200, response)
        self.assertEqual(response.header("content-type"), "application/json")
        return json.loads(response.body)

    def assert_items(self, body, low, high, limit):
        matching = sum(low <= item["price"] <= high for item in self.items.values())
        self.assertEqual(body["count"], min(limit, matching))
        self.assertEqual(len(body["items"]), body["count"])
        self.assertEqual(len({item["id"] for item in body["items"]}), body["count"])
        for item in body["items"]:
            self.assertEqual(item, self.items[item["id"]])
            self.assertTrue(low <= item["price"] <= high)

    def test_async_db_answers_the_seed_rows_in_the_price_range(self):
        for low, high, limit in [(10, 50, 50), (1, 500, 5), (100, 120, 25), (499, 500, 50), (250, 250, 50)]:
            self.assert_items(self.async_db(f"min={low}&max={high}&limit={limit}"), low, high, limit)

    def test_async_db_defaults_and_clamps(self):
        self.assert_items(self.async_db(""), 10, 50, 50)
        self.assert_items(self.async_db("limit=500"), 10, 50, 50)
        self.assert_items(self.async_db("limit=0"), 10, 50, 1)
        self.assert_items(self.async_db("limit=-3&min=20"), 20, 50, 1)
        self.assertEqual(self.async_db("min=9999&max=9999"), {"items": [], "count": 0})

    def test_fortunes_is_the_table_plus_one_sorted_and_escaped(self):
        response = get(self.server.port, "/fortunes")
        self.assertEqual(response.status, 200, response)
        self.assertEqual(response.header("content-type"), "text/html; charset=utf-8")
        want = fortunes_page(arena_seed.fortune_rows(200))
        self.assertEqual(response.body, want)
        self.assertIn(b"&lt;script&gt;alert(&quot;This should not be displayed", response.body)
        self.assertTrue(18 * 1024 <= len(response.body) <= 64 * 1024, len(response.body))

    def test_injection_through_parameters_does_nothing(self):
        for query in [
            "min=1;DROP%20TABLE%20items&max=50",
            "min=1%27%20OR%20%271%27=%271&max=50",
            "min=10&max=50%29;%20DELETE%20FROM%20fortune;--",
            "limit=5%00&min=10",
            "min=%22&max=%5C",
        ]:
            body = self.async_db(query)
            self.assertLessEqual(body["count"], 50)
            for item in body["items"]:
                self.assertEqual(item, self.items[item["id"]])
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM items").strip(), "100000")
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM fortune").strip(), "200")

    def test_clients_that_leave_with_queries_in_flight_harm_nothing(self):
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", self.server.port)) as sock:
                requests = b"".join(http_request("GET", "/fortunes") for _ in range(8))
                sock.sendall(requests + http_request("GET", "/async-db?limit=50"))
        time.sleep(0.3)
        self.server.assert_running()
        self.assert_items(self.async_db("min=10&max=50&limit=50"), 10, 50, 50)
        self.assertEqual(get(self.server.port, "/fortunes").status, 200)


class ArenaPoolExhaustedTest(unittest.TestCase):
    """One connection per worker, one query in flight on it and two waiting: a burst of requests
    beyond that is answered 503 at once, the rest 200, and the server serves on."""

    @classmethod
    def setUpClass(cls):
        cls.postgres = Postgres(cls)
        cls.postgres.seed(items=1000)
        env = {"DATABASE_CONNECTIONS": "1", "DATABASE_PIPELINE_DEPTH": "1", "DATABASE_QUEUE": "2"}
        cls.server = start_arena(cls, cls.postgres.conninfo, env)

    def test_a_burst_beyond_the_queue_is_answered_503_and_the_rest_200(self):
        # Sixty requests on sixty connections, sent before any answer is read: each worker's
        # pool takes three (one in flight, two queued) and refuses the rest.
        socks = [socket.create_connection(("127.0.0.1", self.server.port)) for _ in range(60)]
        try:
            for sock in socks:
                sock.sendall(http_request("GET", "/fortunes"))
            statuses = []
            for sock in socks:
                sock.settimeout(10)
                head = b""
                while b"\r\n" not in head:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                statuses.append(int(head.split(b" ", 2)[1]))
        finally:
            for sock in socks:
                sock.close()
        self.assertEqual(set(statuses) - {200, 503}, set(), statuses)
        self.assertIn(503, statuses, "nothing refused with two queries queued per worker")
        self.assertIn(200, statuses)
        self.server.assert_running()
        self.assertEqual(get(self.server.port, "/fortunes").status, 200)


class ArenaDatabaseRestartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.postgres = Postgres(cls)
        cls.postgres.seed(items=1000)
        cls.server = start_arena(cls, cls.postgres.conninfo)

    def statuses(self, n):
        out = []
        for _ in range(n):
            started = time.monotonic()
            response = get(self.server.port, "/async-db?min=1&max=500&limit=5", timeout=10)
            out.append(response.status)
            self.assertLess(time.monotonic() - started, 7, "a request hung while the database was away")
            if response.status == 503:
                self.assertEqual(json.loads(response.body), {"items": [], "count": 0})
        return out

    def test_503_while_the_database_is_down_then_answers_again_by_itself(self):
        self.assertEqual(self.statuses(10), [200] * 10)
        self.postgres.stop()
        deadline = time.monotonic() + 10
        while self.statuses(1) != [503]:
            self.assertLess(time.monotonic(), deadline, "still 200 with the database stopped")
        started = time.monotonic()
        self.assertEqual(self.statuses(10), [503] * 10)
        self.assertLess(time.monotonic() - started, 5, "503s while down should be quick")
        self.postgres.start()
        # Every worker's pool reconnects on its own backoff: wait for 20 answers in a row.
        deadline, in_a_row = time.monotonic() + 20, 0
        while in_a_row < 20:
            self.assertLess(time.monotonic(), deadline, "not answering 20 s after the database came back")
            in_a_row = in_a_row + 1 if self.statuses(1) == [200] else 0
        self.server.assert_running()


if __name__ == "__main__":
    unittest.main()
