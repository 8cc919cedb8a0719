"""The production stack's server endpoints of the arena entry (arena/stack.c,
../shared/arena/CONTRACT.md "The stacks"): /public/baseline, /public/json/{n},
GET and POST /api/items/{id} and GET /api/me, against a real PostgreSQL 15
loaded with the arena's seed (scripts/arena_seed.py) and a real redis-server
(REDIS_URL), and again with the cache in the process (no REDIS_URL). Each
answer is compared with the seed generator's own rows; the cache says MISS
then HIT; a POST answers 204 and the next read is a MISS with the new values;
injection attempts through the path id, the JSON fields and X-User-Id change
nothing but what a POST may change, byte for byte; Redis killed, reads and
writes are still served from the database (MISS), and the cache is used
again once Redis is back. Both I/O backends (ctest runs each test twice)."""

import datetime
import json
import os
import socket
import subprocess
import sys
import time
import types
import unittest

import test_arena_db
from support.harness import Conn, http_request
from support.interop import free_port, temp_folder
from support.postgres import Postgres
from support.redis_server import RedisServer
from test_arena_db import item_json, start_arena

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import arena_seed  # noqa: E402

ITEMS, USERS = 2000, 1000  # the seed's first rows: the same bytes as the full seed's


def setUpModule():
    test_arena_db.setUpModule()


def tearDownModule():
    test_arena_db.tearDownModule()


def user_json(row):
    id_, name, email, plan, seconds = row
    created = datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": id_, "name": name, "email": email, "plan": plan, "created_at": created}


def call(port, method, target, headers=None, body=None):
    with Conn(port, timeout=10) as conn:
        conn.request(method, target, headers=headers, body=body)
        return conn.read_response()


class StackChecks:
    """The checks both cache configurations pass; setUpClass starts the servers."""

    @classmethod
    def start(cls, with_redis):
        cls.postgres = Postgres(cls)
        cls.postgres.seed(items=ITEMS, users=USERS)
        cls.items = {row[0]: item_json(row) for row in arena_seed.item_rows(ITEMS)}
        cls.users = {row[0]: user_json(row) for row in arena_seed.user_rows(USERS)}
        env = {}
        cls.redis = None
        if with_redis:
            cls.redis = RedisServer(types.SimpleNamespace(addCleanup=cls.addClassCleanup))
            env["REDIS_URL"] = f"redis://127.0.0.1:{cls.redis.port}"
        cls.server = start_arena(cls, cls.postgres.conninfo, env)

    def request(self, method, target, headers=None, body=None):
        return call(self.server.port, method, target, headers, body)

    def get_item(self, id_, cache):
        response = self.request("GET", f"/api/items/{id_}")
        self.assertEqual(response.status, 200, response)
        self.assertEqual(response.header("content-type"), "application/json")
        self.assertEqual(response.header("x-cache"), cache, f"/api/items/{id_}")
        return json.loads(response.body)

    def post_item(self, id_, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.request("POST", f"/api/items/{id_}", {"Content-Type": "application/json"}, data)

    def assert_counts_unchanged(self):
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM items").strip(), str(ITEMS))
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM users").strip(), str(USERS))
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM fortune").strip(), "200")

    def test_public_baseline_and_json(self):
        response = self.request("GET", "/public/baseline?a=13&b=42")
        self.assertEqual((response.status, response.body), (200, b"55"))
        response = self.request("GET", "/public/json/1")
        self.assertEqual(response.status, 200, response)
        body = json.loads(response.body)
        self.assertEqual(body["count"], 1)
        self.assertEqual(body["items"][0]["total"], 1)

    def test_an_item_is_the_seed_row_miss_then_hit(self):
        for id_ in (1, 7, 1999):
            self.assertEqual(self.get_item(id_, "MISS"), self.items[id_])
            self.assertEqual(self.get_item(id_, "HIT"), self.items[id_])

    def test_a_cached_item_expires_within_a_second(self):
        self.get_item(11, "MISS")
        time.sleep(1.2)
        self.assertEqual(self.get_item(11, "MISS"), self.items[11])

    def test_post_updates_invalidates_and_answers_204(self):
        self.get_item(3, "MISS")
        self.get_item(3, "HIT")
        response = self.post_item(3, {"name": "Changed Widget", "price": 123, "quantity": 45})
        self.assertEqual((response.status, response.body), (204, b""), response)
        want = dict(self.items[3], name="Changed Widget", price=123, quantity=45)
        self.assertEqual(self.get_item(3, "MISS"), want)
        self.assertEqual(self.get_item(3, "HIT"), want)
        row = self.postgres.psql("SELECT name, price, quantity, category FROM items WHERE id = 3").strip()
        self.assertEqual(row, f"Changed Widget|123|45|{self.items[3]['category']}")

    def test_bad_updates_are_refused_and_change_nothing(self):
        for body in [
            b"",
            b"{",
            b"[1,2]",
            b'{"name":"x","price":1}',
            b'{"name":"x","price":"1","quantity":1}',
            b'{"name":1,"price":1,"quantity":1}',
            b'{"name":"x","price":1.5,"quantity":1}',
            b'{"name":"x","price":-1,"quantity":1}',
            b'{"name":"x","price":1,"quantity":4294967296}',
            b'{"name":"nul\\u0000byte","price":1,"quantity":1}',
        ]:
            response = self.post_item(5, body)
            self.assertEqual(response.status, 400, body)
        for target in ["0", "abc", "-1", "2147483648", "99999999999999999999", "5000"]:
            response = self.post_item(target, {"name": "x", "price": 1, "quantity": 1})
            self.assertEqual(response.status, 404, target)
            self.assertEqual(self.request("GET", f"/api/items/{target}").status, 404, target)
        self.assertEqual(self.get_item(5, "MISS"), self.items[5])

    def test_api_me_is_the_users_row_of_x_user_id(self):
        for cache in ("MISS", "HIT"):
            response = self.request("GET", "/api/me", {"X-User-Id": "42"})
            self.assertEqual(response.status, 200, response)
            self.assertEqual(response.header("content-type"), "application/json")
            self.assertEqual(response.header("x-cache"), cache)
            self.assertEqual(json.loads(response.body), self.users[42])
        self.assertEqual(self.request("GET", "/api/me").status, 401)
        for bad in ["", "abc", "42 OR 1=1", "42;DROP TABLE users", "-42", "0", "42'--"]:
            self.assertEqual(self.request("GET", "/api/me", {"X-User-Id": bad}).status, 400, bad)
        self.assertEqual(self.request("GET", "/api/me", {"X-User-Id": "99999"}).status, 404)

    def test_injection_through_every_parameter_does_nothing(self):
        for target in ["1;DROP%20TABLE%20items", "1%20OR%201=1", "1'--", "1%27%20OR%20%271%27=%271", "(1)"]:
            self.assertEqual(self.request("GET", f"/api/items/{target}").status, 404, target)
            response = self.post_item(target, {"name": "x", "price": 1, "quantity": 1})
            self.assertEqual(response.status, 404, target)
        # Text fields are values, kept byte for byte: SQL, RESP and HTML shapes alike.
        for id_, name in [
            (21, "x'); DROP TABLE items; --"),
            (22, "\r\n*1\r\n$8\r\nFLUSHALL\r\n"),
            (23, '"},"id":1,"x":{"'),
            (24, "$1 $2 \\' \u00e9\u2014 <script>"),
        ]:
            response = self.post_item(id_, {"name": name, "price": 7, "quantity": 8})
            self.assertEqual(response.status, 204, name)
            want = dict(self.items[id_], name=name, price=7, quantity=8)
            self.assertEqual(self.get_item(id_, "MISS"), want)
            self.assertEqual(self.get_item(id_, "HIT"), want)
        response = self.request("GET", "/api/me", {"X-User-Id": "1 UNION SELECT 1"})
        self.assertEqual(response.status, 400)
        self.assert_counts_unchanged()
        self.assertEqual(self.get_item(25, "MISS"), self.items[25])

    def test_clients_that_leave_while_waiting_harm_nothing(self):
        body = json.dumps({"name": "left", "price": 5, "quantity": 6}).encode()
        for round_ in range(20):
            with socket.create_connection(("127.0.0.1", self.server.port)) as sock:
                requests = [http_request("GET", f"/api/items/{600 + round_ * 8 + i}") for i in range(8)]
                requests.append(http_request("GET", "/api/me", headers={"X-User-Id": str(100 + round_)}))
                requests.append(http_request("POST", f"/api/items/{700 + round_}", body=body))
                sock.sendall(b"".join(requests))
        time.sleep(0.5)
        self.server.assert_running()
        self.assertEqual(self.get_item(61, "MISS"), self.items[61])
        response = self.request("GET", "/api/me", {"X-User-Id": "7"})
        self.assertEqual(json.loads(response.body), self.users[7])


class StackWithRedisTest(StackChecks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.start(with_redis=True)

    def stored_ttl(self, key):
        """The key's PTTL once the entry's SET has reached Redis: a MISS is answered without
        waiting for it, so the key may land a moment after the response."""
        deadline = time.monotonic() + 2
        while self.redis.command("EXISTS", key) != b":1":
            self.assertLess(time.monotonic(), deadline, f"{key} never reached Redis")
            time.sleep(0.005)
        return int(self.redis.command("PTTL", key)[1:])

    def test_the_cache_is_redis_with_a_ttl_of_a_second(self):
        self.get_item(31, "MISS")
        ttl = self.stored_ttl("item:31")
        self.assertTrue(0 < ttl <= 1000, ttl)
        self.request("GET", "/api/me", {"X-User-Id": "42"})
        ttl = self.stored_ttl("user:42")
        self.assertTrue(0 < ttl <= 30000, ttl)
        self.assertEqual(self.post_item(31, {"name": "n", "price": 1, "quantity": 2}).status, 204)
        self.assertEqual(self.redis.command("EXISTS", "item:31"), b":0")

    def test_redis_killed_reads_and_writes_come_from_the_database(self):
        try:
            self.redis.kill()
            for id_ in (41, 42, 41):
                self.assertEqual(self.get_item(id_, "MISS"), self.items[id_])
            response = self.request("GET", "/api/me", {"X-User-Id": "42"})
            self.assertEqual((response.status, response.header("x-cache")), (200, "MISS"))
            self.assertEqual(json.loads(response.body), self.users[42])
            self.assertEqual(self.post_item(43, {"name": "down", "price": 2, "quantity": 3}).status, 204)
            self.assertEqual(self.get_item(43, "MISS"), dict(self.items[43], name="down", price=2, quantity=3))
        finally:
            if not self.redis.alive():
                self.redis.start()
        # The client reconnects by itself (backoff up to 5 s): hits again.
        deadline = time.monotonic() + 15
        while True:
            response = self.request("GET", "/api/items/44")
            self.assertEqual(response.status, 200)
            if response.header("x-cache") == "HIT":
                break
            self.assertLess(time.monotonic(), deadline, "no HIT 15 s after Redis came back")
            time.sleep(0.2)
        self.server.assert_running()


class StackInProcessCacheTest(StackChecks, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.start(with_redis=False)
        cls.uncached = start_arena(cls, cls.postgres.conninfo, {"ARENA_CACHE": "off"})

    def test_with_the_cache_off_every_read_is_a_miss_from_the_database(self):
        for _ in range(3):
            response = call(self.uncached.port, "GET", "/api/items/51")
            self.assertEqual((response.status, response.header("x-cache")), (200, "MISS"))
            self.assertEqual(json.loads(response.body), self.items[51])


class StackDatabaseDownTest(unittest.TestCase):
    """PostgreSQL stopped: 503 for every /api answer not in the cache, nothing hangs."""

    @classmethod
    def setUpClass(cls):
        cls.postgres = Postgres(cls)
        cls.postgres.seed(items=100, users=50)
        cls.redis = RedisServer(types.SimpleNamespace(addCleanup=cls.addClassCleanup))
        cls.server = start_arena(cls, cls.postgres.conninfo, {"REDIS_URL": f"redis://127.0.0.1:{cls.redis.port}"})

    def test_503_while_the_database_is_down(self):
        self.assertEqual(call(self.server.port, "GET", "/api/items/1").status, 200)
        self.postgres.stop()
        try:
            deadline = time.monotonic() + 10
            while call(self.server.port, "GET", "/api/items/2").status != 503:
                self.assertLess(time.monotonic(), deadline, "still 200 with the database stopped")
            started = time.monotonic()
            self.assertEqual(call(self.server.port, "GET", "/api/items/3").status, 503)
            self.assertEqual(call(self.server.port, "GET", "/api/me", {"X-User-Id": "42"}).status, 503)
            body = json.dumps({"name": "x", "price": 1, "quantity": 1}).encode()
            self.assertEqual(call(self.server.port, "POST", "/api/items/4", None, body).status, 503)
            self.assertLess(time.monotonic() - started, 5, "503s while down should be quick")
        finally:
            self.postgres.start()
        self.server.assert_running()


class ArenaDbScriptTest(unittest.TestCase):
    """scripts/arena_db.py, what `make arena` runs the entry with: a PostgreSQL with the seed and
    a redis-server for the command's lifetime, their URLs in its environment."""

    SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "arena_db.py")
    QUERY = 'psql "$DATABASE_URL" -XAtc "SELECT count(*) FROM items; SELECT email FROM users WHERE id = 42"'

    def run_script(self, folder, pg_port, redis_port, env):
        argv = [sys.executable, self.SCRIPT, "--dir", folder, "--pg-port", str(pg_port)]
        argv += ["--redis-port", str(redis_port), "--", "sh", "-c", self.QUERY + '; echo "redis=$REDIS_URL"']
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        return done.stdout

    def test_the_seeded_database_lives_as_long_as_the_command(self):
        folder = temp_folder(self)
        os.chmod(folder, 0o711)  # the postgres user reaches its data folder through it
        pg_port, redis_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        for _ in range(2):  # made and seeded once, then started again as it is
            output = self.run_script(os.path.join(folder, "db"), pg_port, redis_port, env)
            self.assertIn("100000\nuser42@example.com\n", output)
            self.assertIn(f"redis=redis://127.0.0.1:{redis_port}\n", output)
            for port in (pg_port, redis_port):
                with self.assertRaises(OSError, msg=f"port {port} still open after the command"):
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
        # A DATABASE_URL of the user's own is used as it is: nothing started, nothing seeded.
        env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:1/none"
        argv = [sys.executable, self.SCRIPT, "--dir", os.path.join(folder, "other"), "--", "sh", "-c"]
        done = subprocess.run(argv + ['echo "$DATABASE_URL"'], capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(done.stdout, "postgres://nobody@127.0.0.1:1/none\n")
        self.assertFalse(os.path.exists(os.path.join(folder, "other")))


if __name__ == "__main__":
    unittest.main()
