"""A real PostgreSQL for a test: made with initdb in a temporary folder and
started on a free loopback port (as the postgres user where the test runs as
root, which postgres refuses), stopped when the test ends. It can be stopped
and started again on the same port and data (a server restart), and loaded
with the arena's seed (scripts/arena_seed.py). With tls=True it takes TLS
(a self-signed certificate) and conninfo asks for it (sslmode=require)."""

import glob
import os
import pwd
import subprocess
import types

from support.interop import free_port, stop, temp_folder, tool_path, wait_for_port

# Debian keeps the server's programs off PATH, under its major version.
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
SEED = os.path.join(SOURCE_DIR, "scripts", "arena_seed.py")


class Postgres:
    """test: a TestCase (the server lives for the test) or a TestCase class
    (from setUpClass: for the class)."""

    def __init__(self, test, max_connections=20, tls=False):
        add_cleanup = test.addClassCleanup if isinstance(test, type) else test.addCleanup
        scope = types.SimpleNamespace(addCleanup=add_cleanup)
        self.max_connections = max_connections
        self.tls = tls
        self.postgres = tool_path("postgres", PG_BIN)
        self.psql_path = tool_path("psql", PG_BIN)
        self.folder = temp_folder(scope, owner="postgres" if os.geteuid() == 0 else None)
        self.data = os.path.join(self.folder, "data")
        initdb = tool_path("initdb", PG_BIN)
        done = subprocess.run(
            self.as_postgres([initdb, "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise AssertionError(f"initdb failed:\n{done.stdout}{done.stderr}")
        if tls:
            self.make_certificate()
        self.port = free_port()
        self.log_path = os.path.join(self.folder, "postgres.log")
        self.server = None
        self.start()
        add_cleanup(self.stop)

    @property
    def conninfo(self):
        sslmode = "require" if self.tls else "disable"
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres sslmode={sslmode} gssencmode=disable"

    @staticmethod
    def as_postgres(argv):
        """argv as the postgres user when this runs as root."""
        if os.geteuid() != 0:
            return argv
        return [tool_path("runuser"), "-u", "postgres", "--", *argv]

    def make_certificate(self):
        """server.crt and server.key in the folder, the key the server's own and private, as it insists."""
        self.cert, self.key = os.path.join(self.folder, "server.crt"), os.path.join(self.folder, "server.key")
        argv = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"]
        subprocess.run(argv + ["-keyout", self.key, "-out", self.cert], check=True, capture_output=True, timeout=60)
        os.chmod(self.key, 0o600)
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.cert, self.key):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self):
        log = open(self.log_path, "a")
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.log_path, entry.pw_uid, entry.pw_gid)
        argv = [self.postgres, "-D", self.data, "-p", str(self.port), "-k", self.folder]
        argv += ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", f"max_connections={self.max_connections}"]
        if self.tls:
            argv += ["-c", "ssl=on", "-c", f"ssl_cert_file={self.cert}", "-c", f"ssl_key_file={self.key}"]
        self.server = subprocess.Popen(self.as_postgres(argv), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for_port(self.port, self.server, "postgres", self.log_path)

    def stop(self):
        """Stops the server with a fast shutdown (sessions end at once), through
        pg_ctl: a signal to runuser would kill postgres and leave its lock file."""
        if self.server is None:
            return
        pg_ctl = tool_path("pg_ctl", PG_BIN)
        subprocess.run(
            self.as_postgres([pg_ctl, "stop", "-D", self.data, "-m", "fast", "-w"]), capture_output=True, timeout=60
        )
        try:
            self.server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        stop(self.server)
        self.server = None

    def psql(self, sql=None, file=None):
        """Runs sql (or the file) with psql, failing on the first error; returns its output."""
        argv = [self.psql_path, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.conninfo]
        argv += ["-f", file] if file else ["-c", sql]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise AssertionError(f"psql failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def seed(self, **sizes):
        """Loads the arena's seed (scripts/arena_seed.py; sizes: items=, fortunes=, users=)."""
        path = os.path.join(self.folder, "seed.sql")
        argv = ["python3", SEED, "-o", path] + [f"--{k}={v}" for k, v in sizes.items()]
        subprocess.run(argv, check=True, timeout=300)
        self.psql(file=path)
