#!/usr/bin/env python3
"""A local PostgreSQL loaded with the arena's seed (scripts/arena_seed.py), and
a redis-server beside it, for running the arena entry (`make arena`) and its
database benchmarks (`xkbench compare db`) outside the arena, which has its own
PostgreSQL already seeded.

    python3 scripts/arena_db.py --dir build/arena/db -- COMMAND [ARG...]

makes DIR/pg once (initdb; role bench, password bench; database benchmark;
the seed loaded once, as the arena's DATABASE_URL names them), starts
PostgreSQL on 127.0.0.1:--pg-port (55432) and redis-server on --redis-port
(56379, left out with --no-redis or where redis-server is not installed),
runs COMMAND with DATABASE_URL and REDIS_URL set, and stops both when it
ends. With DATABASE_URL already set it starts nothing and runs COMMAND as is:
it never loads the seed, which drops the tables, into a database of yours.
Run as root, the servers run as the postgres user, which owns DIR/pg."""

import argparse
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)


TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    """/proc/PID/stat's fields from the state on (utime is [11], stime [12], cutime [13], cstime [14])."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2 :].split()


def tool(name):
    for folder in PG_BIN:
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    path = shutil.which(name)
    if not path:
        sys.exit(f"arena_db: {name} not found (apt-get install postgresql redis-server; make deps)")
    return path


def as_postgres(argv):
    return argv if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]


def wait_for_port(port, proc, name, log, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"arena_db: {name} did not start on port {port}; see {log}")


class LocalDatabase:
    """PostgreSQL with the seed in folder (made once), and optionally redis-server."""

    def __init__(self, folder, pg_port=55432, redis_port=56379, redis=True, items=100_000, pg_args=(), cpus=None):
        self.folder = os.path.abspath(folder)
        self.pg_port, self.redis_port = pg_port, redis_port
        self.want_redis = redis and shutil.which("redis-server") is not None
        self.items = items
        self.pg_args = list(pg_args)
        self.pin = ["taskset", "-c", cpus] if cpus else []  # both servers on these CPUs ("0")
        self.pg = self.redis = None

    @property
    def database_url(self):
        return f"postgres://bench:bench@127.0.0.1:{self.pg_port}/benchmark"

    @property
    def redis_url(self):
        return f"redis://127.0.0.1:{self.redis_port}" if self.redis else None

    def psql(self, *args):
        argv = [tool("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.pg_port)]
        subprocess.run(argv + list(args), check=True, stdout=subprocess.DEVNULL)

    def start(self):
        data = os.path.join(self.folder, "pg")
        os.makedirs(self.folder, exist_ok=True)
        fresh = not os.path.exists(os.path.join(data, "PG_VERSION"))
        if fresh:
            shutil.rmtree(data, ignore_errors=True)
            os.makedirs(data)
            if os.geteuid() == 0:
                entry = pwd.getpwnam("postgres")
                os.chown(data, entry.pw_uid, entry.pw_gid)
            initdb = [tool("initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]
            subprocess.run(as_postgres(initdb), check=True, stdout=subprocess.DEVNULL)
        log = os.path.join(data, "postgres.log")
        argv = [tool("postgres"), "-D", data, "-p", str(self.pg_port), "-k", data, "-c", "listen_addresses=127.0.0.1"]
        argv += ["-c", "max_connections=256", "-c", "fsync=off", *self.pg_args]
        with open(log, "a") as out:
            self.pg = subprocess.Popen(self.pin + as_postgres(argv), stdout=out, stderr=subprocess.STDOUT)
        wait_for_port(self.pg_port, self.pg, "postgres", log)
        seeded = os.path.join(data, "seeded")
        if not os.path.exists(seeded):
            self.psql("-U", "postgres", "-d", "postgres", "-c", "CREATE ROLE bench LOGIN PASSWORD 'bench'")
            self.psql("-U", "postgres", "-d", "postgres", "-c", "CREATE DATABASE benchmark OWNER bench")
            seed = os.path.join(self.folder, "seed.sql")
            subprocess.run([sys.executable, os.path.join(HERE, "arena_seed.py"), f"--items={self.items}", "-o", seed])
            self.psql("-U", "bench", "-d", "benchmark", "-f", seed)
            os.remove(seed)
            with open(seeded, "w") as f:
                f.write("the arena's seed is loaded\n")
        if self.want_redis:
            argv = ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", ""]
            argv += ["--appendonly", "no", "--dir", self.folder, "--logfile", os.path.join(self.folder, "redis.log")]
            self.redis = subprocess.Popen(self.pin + argv, stdout=subprocess.DEVNULL)
            wait_for_port(self.redis_port, self.redis, "redis-server", os.path.join(self.folder, "redis.log"))
        return self

    def pg_cpu_seconds(self):
        """What PostgreSQL has spent: its processes' user and system time, the postmaster's
        waited-for children too (a backend that ended between two readings stays counted)."""
        total, todo = 0.0, [self.pg.pid] if self.pg else []
        while todo:
            pid = todo.pop()
            try:
                fields = proc_stat(pid)
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo += [int(p) for p in f.read().split()]
            except OSError:
                continue
            total += sum(int(v) for v in fields[11:15]) / TICKS
        return total

    def redis_cpu_seconds(self):
        return sum(int(v) for v in proc_stat(self.redis.pid)[11:13]) / TICKS if self.redis else 0.0

    def stop(self):
        if self.pg is not None:
            data = os.path.join(self.folder, "pg")
            subprocess.run(as_postgres([tool("pg_ctl"), "stop", "-D", data, "-m", "fast", "-w"]), capture_output=True)
            self.pg.wait(timeout=30)
            self.pg = None
        if self.redis is not None:
            self.redis.terminate()
            self.redis.wait(timeout=30)
            self.redis = None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="where the database lives (made once)")
    parser.add_argument("--pg-port", type=int, default=55432)
    parser.add_argument("--redis-port", type=int, default=56379)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    if os.environ.get("DATABASE_URL"):
        os.execvp(command[0], command)
    db = LocalDatabase(args.dir, args.pg_port, args.redis_port, redis=not args.no_redis).start()
    env = dict(os.environ, DATABASE_URL=db.database_url)
    if db.redis_url:
        env["REDIS_URL"] = db.redis_url
    print(f"arena_db: DATABASE_URL={db.database_url} REDIS_URL={db.redis_url or '(none)'}", flush=True)
    child = subprocess.Popen(command, env=env)
    signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        code = child.wait()
    finally:
        db.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
