"""libpq's asynchronous API on xKit's loop (tests/interop/interop_pq.c): a
real PostgreSQL, made with initdb in a temporary folder and started on a
free loopback port (as the postgres user where the test runs as root, which
postgres refuses), takes six connections opened at once, each running nine
queries one after another, nonblocking; every third sends a 6 MB parameter,
which fills the socket's send buffer so that PQflush waits for the loop to
say the socket is writable, and gets it back. Every result is checked by the
program. Runs on the backend XK_IO names, as every test."""

import os
import unittest

from support.interop import program_path, run_program
from support.postgres import Postgres

BIG_BYTES = 6 * 1024 * 1024


class LibpqAsyncTest(unittest.TestCase):
    def setUp(self):
        self.program = program_path("interop_pq", "libpq (libpq-dev)")
        self.postgres = Postgres(self)

    def test_six_connections_with_queries_in_flight_at_once_and_a_large_parameter(self):
        conninfo = self.postgres.conninfo
        output = run_program(self, [self.program, conninfo, "6", "9", str(BIG_BYTES)], dict(os.environ))
        self.assertIn("ok: 54 queries on 6 connections", output)
        want = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"
        self.assertIn(f"on {want}", output)


if __name__ == "__main__":
    unittest.main()
