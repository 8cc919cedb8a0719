"""libpq's asynchronous API on xKit's loop (tests/interop/interop_pq.c): a
real PostgreSQL, made with initdb in a temporary folder and started on a
free loopback port (as the postgres user where the test runs as root, which
postgres refuses), takes six connections opened at once, each running nine
queries one after another, nonblocking; every third sends a 6 MB parameter,
which fills the socket's send buffer so that PQflush waits for the loop to
say the socket is writable, and gets it back. Every result is checked by the
program. Runs on the backend XK_IO names, as every test."""

import glob
import os
import pwd
import subprocess
import unittest

from support.interop import (
    free_port,
    program_path,
    run_program,
    stop,
    temp_folder,
    tool_path,
    wait_for_port,
)

# Debian keeps the server's programs off PATH, under its major version.
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
BIG_BYTES = 6 * 1024 * 1024


class LibpqAsyncTest(unittest.TestCase):
    def as_postgres(self, argv):
        """argv as the postgres user when this runs as root."""
        if os.geteuid() != 0:
            return argv
        return [tool_path("runuser"), "-u", "postgres", "--", *argv]

    def setUp(self):
        self.program = program_path("interop_pq", "libpq (libpq-dev)")
        initdb = tool_path("initdb", PG_BIN)
        postgres = tool_path("postgres", PG_BIN)
        folder = temp_folder(self, owner="postgres" if os.geteuid() == 0 else None)
        data = os.path.join(folder, "data")
        done = subprocess.run(
            self.as_postgres([initdb, "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.assertEqual(done.returncode, 0, f"initdb failed:\n{done.stdout}{done.stderr}")
        self.port = free_port()
        log_path = os.path.join(folder, "postgres.log")
        log = open(log_path, "w")
        self.addCleanup(log.close)
        if os.geteuid() == 0:
            os.chown(log_path, *self.postgres_ids())
        argv = [postgres, "-D", data, "-p", str(self.port), "-k", folder, "-c", "listen_addresses=127.0.0.1"]
        argv += ["-c", "fsync=off", "-c", "max_connections=20"]
        self.server = subprocess.Popen(self.as_postgres(argv), stdout=log, stderr=subprocess.STDOUT)
        self.addCleanup(stop, self.server)
        wait_for_port(self.port, self.server, "postgres", log_path)

    @staticmethod
    def postgres_ids():
        entry = pwd.getpwnam("postgres")
        return entry.pw_uid, entry.pw_gid

    def test_six_connections_with_queries_in_flight_at_once_and_a_large_parameter(self):
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres sslmode=disable gssencmode=disable"
        output = run_program(self, [self.program, conninfo, "6", "9", str(BIG_BYTES)], dict(os.environ))
        self.assertIn("ok: 54 queries on 6 connections", output)
        want = "epoll" if os.environ.get("XK_IO") == "epoll" else "io_uring"
        self.assertIn(f"on {want}", output)


if __name__ == "__main__":
    unittest.main()
