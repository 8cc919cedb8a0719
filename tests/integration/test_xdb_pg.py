"""<xdb/pg.h>, the PostgreSQL pool on xKit's loop, against a real PostgreSQL
15 started in a temporary folder on a free port and loaded with the arena's
seed (scripts/arena_seed.py). Each test runs one scenario of
tests/interop/pg_pool.c (its comment lists them) on the backend XK_IO names,
and checks what it prints: typed rows against the seed generator's own rows,
many queries in flight on one connection, the server stopped and started
again under load, a query past its timeout, the queue bound, cancelled
queries, hostile parameters, a failing query in a batch, transactions,
one connection filled before the next (XPG_DISPATCH_FILL); the
same over TLS; and against a fake server whose replies break the protocol."""

import os
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest

from support.interop import RUN_TIMEOUT, free_port, program_path, run_program
from support.postgres import Postgres

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import arena_seed  # noqa: E402

ITEMS = 2_000  # enough for the tests; the generator gives the same first rows at any size
WANT_BACKEND = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"


class PgPoolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.program = program_path("pg_pool", "libpq (libpq-dev)")

    def setUp(self):
        self.postgres = Postgres(self)
        self.postgres.seed(items=ITEMS)

    def scenario(self, name, *args):
        output = run_program(self, [self.program, self.postgres.conninfo, name, *args], dict(os.environ))
        self.assertIn(f"ok: {name} on {WANT_BACKEND}", output)
        return output

    def test_rows_read_through_the_typed_getters_are_the_seed(self):
        ids = [1, 2, 42, 777, ITEMS]
        output = self.scenario("typed", *map(str, ids))
        rows = {row[0]: row for row in arena_seed.item_rows(ITEMS)}
        got = [line.split("\t")[1:] for line in output.splitlines() if line.startswith("item\t")]
        want = []
        for id_ in ids:
            id_, name, category, price, quantity, active, tags, score, count = rows[id_]
            # jsonb prints arrays with a space after each comma
            tags = tags.replace(",", ", ")
            want.append(
                [str(id_), name, category, str(price), str(quantity), str(active).lower(), tags, str(score), str(count)]
            )
        self.assertEqual(sorted(got), sorted(want))

    def test_many_queries_in_flight_on_one_connection_each_answer_to_its_own_callback(self):
        output = self.scenario("pipeline", "200")
        peak = int(output.split("peak in flight on one connection: ")[1].split(",")[0])
        self.assertGreater(peak, 1, output)
        self.assertEqual(peak, 64, "the pipeline should fill to its depth (64)")

    def test_queries_fail_fast_while_the_server_is_down_and_recover_when_it_returns(self):
        argv = [self.program, self.postgres.conninfo, "restart"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []

        def read():
            for line in proc.stdout:
                lines.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def wait_for(word, seconds):
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                if any(line.strip() == word for line in lines):
                    return
                if proc.poll() is not None and not reader.is_alive():
                    break
                time.sleep(0.02)
            proc.kill()
            self.fail(f"no '{word}' within {seconds} s:\n{''.join(lines)}")

        try:
            wait_for("ready", 20)
            time.sleep(0.5)  # queries running
            self.postgres.stop()
            wait_for("down", 10)
            time.sleep(1.0)  # reconnection attempts fail meanwhile
            self.postgres.start()
            wait_for("recovered", 15)
            proc.wait(timeout=RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(timeout=5)
            proc.stdout.close()
        output = "".join(lines)
        self.assertEqual(proc.returncode, 0, output)
        self.assertIn(f"ok: restart on {WANT_BACKEND}", output)
        self.assertNotIn("Sanitizer", output)

    def test_a_slow_query_times_out_while_other_queries_go_on(self):
        self.scenario("timeout")

    def test_a_full_queue_refuses_at_once(self):
        output = self.scenario("queue")
        self.assertIn("taken 5, refused 5", output)

    def test_a_cancelled_query_never_calls_back(self):
        self.scenario("cancel")

    def test_injection_through_parameters_does_nothing(self):
        self.scenario("inject")
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM items").strip(), str(ITEMS))
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM fortune").strip(), "200")
        self.assertEqual(self.postgres.psql("SELECT count(*) FROM users WHERE id = 42").strip(), "1")

    def test_a_failing_query_in_a_batch_fails_alone_with_its_sqlstate(self):
        self.scenario("batch")
        self.assertEqual(self.postgres.psql("SELECT string_agg(n::text, ',' ORDER BY n) FROM scratch").strip(), "1,2")

    def test_filling_one_connection_first_keeps_each_answer_with_its_own_query(self):
        output = self.scenario("fill")
        self.assertIn("fill: 8 queries on one connection, 4 on the next; later turns held in one batch", output)
        # the failing query in the middle of the full connection's batch undid nothing else
        self.assertEqual(self.postgres.psql("SELECT string_agg(n::text, ',' ORDER BY n) FROM scratch").strip(), "1,2")

    def test_transactions_on_a_pinned_connection(self):
        self.scenario("tx")
        # 5 rolled back; 7 committed after the callback, 9 from BEGIN's callback itself
        self.assertEqual(self.postgres.psql("SELECT string_agg(n::text, ',' ORDER BY n) FROM scratch").strip(), "7,9")


class TlsTest(unittest.TestCase):
    """Over TLS (sslmode=require), where libpq sets the session up and the pool
    then reads and writes through it: rows, a batch with a failure, transactions
    and a full pipeline come out as in the clear."""

    @classmethod
    def setUpClass(cls):
        cls.program = program_path("pg_pool", "libpq (libpq-dev)")

    def setUp(self):
        self.postgres = Postgres(self, tls=True)
        self.postgres.seed(items=ITEMS)

    def scenario(self, name, *args):
        output = run_program(self, [self.program, self.postgres.conninfo, name, *args], dict(os.environ))
        self.assertIn(f"ok: {name} on {WANT_BACKEND}", output)
        return output

    def test_the_pool_runs_its_queries_through_the_connections_tls(self):
        self.assertIn("sslmode=require", self.postgres.conninfo)
        output = self.scenario("typed", "1", "42")
        self.assertEqual(len([line for line in output.splitlines() if line.startswith("item\t")]), 2)
        self.scenario("batch")
        self.scenario("tx")
        output = self.scenario("pipeline", "200")
        self.assertIn("peak in flight on one connection: 64", output)


def message(kind, body=b""):
    return kind + struct.pack("!I", len(body) + 4) + body


# What the fake server answers the first batch with, and what the pool must say then.
HOSTILE = {
    "a value past its row's end": (
        message(b"1")
        + message(b"t", b"\0\0")
        + message(b"n")
        + message(b"2")
        + message(b"D", b"\0\x01" + struct.pack("!I", 1000) + b"abc"),
        "unexpected message from the server (type 'D')",
    ),
    "a length shorter than itself": (b"C\0\0\0\x02", "the server sent a malformed message"),
    "a gigabyte for a short message": (b"C\x7f\xff\xff\xf0", "the server sent a malformed message"),
    "an unknown message": (message(b"?"), "unexpected message from the server (type '?')"),
    "a reply out of turn": (message(b"2"), "unexpected message from the server (type '2')"),
    "a close mid-batch": (b"", "server closed the connection unexpectedly"),
    "a row with more values than described": (
        message(b"1") + message(b"t", b"\0\0") + message(b"n") + message(b"2") + message(b"D", b"\0\x01\0\0\0\x01x"),
        "unexpected message from the server (type 'D')",
    ),
    "an error without its SQLSTATE": (
        message(b"E", b"SERROR\0VERROR\0Mno code\0\0"),
        "unexpected message from the server (type 'E')",
    ),
    "a fatal error, then a close": (
        message(b"E", b"SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0"),
        "terminating connection due to administrator command",
    ),
}


class FakeServer:
    """Speaks PostgreSQL's startup (trust: no password), then answers the
    first batch (what comes up to a Sync) with reply and closes."""

    def __init__(self, reply):
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    @staticmethod
    def read_exactly(conn, n):
        data = b""
        while len(data) < n:
            piece = conn.recv(n - len(data))
            if not piece:
                raise ConnectionError("client left")
            data += piece
        return data

    def serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    length = struct.unpack("!I", self.read_exactly(conn, 4))[0]
                    self.read_exactly(conn, length - 4)  # the startup packet
                    conn.sendall(message(b"R", b"\0\0\0\0") + message(b"Z", b"I"))
                    kind = b""
                    while kind != b"S":  # up to the batch's Sync
                        kind = self.read_exactly(conn, 1)
                        length = struct.unpack("!I", self.read_exactly(conn, 4))[0]
                        self.read_exactly(conn, length - 4)
                    conn.sendall(self.reply)
                except (ConnectionError, OSError):
                    pass

    def close(self):
        self.listener.close()


class HostileServerTest(unittest.TestCase):
    """A server whose replies break the protocol: the pool fails the queries in
    flight with XPG_EDOWN and says why, reads nothing out of bounds (the
    sanitizers watch) and waits for no gigabyte message."""

    def test_a_broken_stream_fails_the_queries_on_it_and_nothing_else(self):
        program = program_path("pg_pool", "libpq (libpq-dev)")
        for name, (reply, why) in HOSTILE.items():
            with self.subTest(name):
                server = FakeServer(reply)
                self.addCleanup(server.close)
                conninfo = f"host=127.0.0.1 port={server.port} user=x dbname=x sslmode=disable gssencmode=disable"
                output = run_program(self, [program, conninfo, "hostile"], dict(os.environ))
                self.assertIn(f"ok: hostile on {WANT_BACKEND}", output)
                self.assertIn(f"queries failed with: {why}", output)


class UnreachableTest(unittest.TestCase):
    def test_queries_fail_instead_of_waiting_for_a_server_that_is_not_there(self):
        program = program_path("pg_pool", "libpq (libpq-dev)")
        conninfo = f"host=127.0.0.1 port={free_port()} user=postgres dbname=postgres sslmode=disable gssencmode=disable"
        output = run_program(self, [program, conninfo, "unreachable"], dict(os.environ))
        self.assertIn(f"ok: unreachable on {WANT_BACKEND}", output)
        self.assertIn("Connection refused", output)


class SeedTest(unittest.TestCase):
    def test_the_seed_is_the_same_every_run_and_holds_what_the_arena_reads(self):
        first = list(arena_seed.item_rows(100_000))
        self.assertEqual(first, list(arena_seed.item_rows(100_000)))
        self.assertEqual(len(first), 100_000)
        prices = [row[3] for row in first]
        self.assertEqual((min(prices), max(prices)), (1, 500))
        # async-db's default range holds far more than its largest limit
        self.assertGreater(sum(10 <= p <= 50 for p in prices), 50 * 100)
        fortunes = list(arena_seed.fortune_rows(200))
        self.assertEqual(len(fortunes), 200)
        self.assertIn("<script>", dict(fortunes)[11])
        self.assertEqual([u[0] for u in arena_seed.user_rows(1000)].count(42), 1)


if __name__ == "__main__":
    unittest.main()
