"""compare db: the arena entry's database routes (arena/main.c, arena/stack.c) against Go's
net/http with pgx and go-redis (bench/peers/go_db, GOMAXPROCS=1), on one PostgreSQL 15 with
the arena's seed and one redis-server (scripts/arena_db.py), both pinned with wrk to
--client-cpus while each server has one worker on --server-cpus.

Cases (wrk -t1, --connections each):
  async-db    GET /async-db, limit 5-50, a price range of 100 (xkbench/wrk/db_async.lua)
  fortunes    GET /fortunes
  row         GET /api/items/{id} of any of the 100,000 rows, no cache (ARENA_CACHE=off, CACHE=off)
  cache95     GET /api/items/{id} through Redis, 95% of requests for 100 hot ids
  pipelining  xKit alone, --pipeline-connections (256) on DATABASE_CONNECTIONS=4: the row case
              with 64 queries in flight per connection at most against DATABASE_PIPELINE_DEPTH=1
The server's CPU per request from /proc/PID/stat, and beside it PostgreSQL's (its postmaster
and backends) and Redis's, so the report shows which side is the bottleneck. A fresh server per
run, rounds alternating the servers' order; medians."""

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from .. import environment
from ..cli import add_common_options
from ..loadgen import load_figures, measured_load, unmeasured_load, wrk_argv
from ..paths import WRK_SCRIPTS
from ..prepare import SetupFailed, make_certificate
from ..rounds import failure_lines, runs_cell
from ..servers import Peer, RunFailed, find_tool, running
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison
from .compare_http1 import CPU_SPLIT_NOTE

HELP = "databases: the arena entry's PostgreSQL and Redis routes against Go (pgx, go-redis); pipelining"
REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
import arena_db  # noqa: E402

SERVERS = ("xkit", "go")
CASES = ("async-db", "fortunes", "row", "cache95", "pipelining")
GO_DB_MODULE = REPO / "bench" / "peers" / "go_db"
KEYS = (
    "req_per_s",
    "latency_ms",
    "latency_p99_ms",
    "cpu_us_per_request",
    "user_us_per_request",
    "system_us_per_request",
    "pg_cpu_us_per_request",
    "redis_cpu_us_per_request",
    "server_busy",
    "others_busy",
    "hit_ratio",
    "queries_per_batch",
    "peak_in_flight",
)
# The issue's targets: xKit's CPU per request at most this share of Go's.
TARGETS = {"async-db": 0.35, "fortunes": 0.35, "row": 0.30}
STATS_LINE = re.compile(r"(\d+) queries in (\d+) batches, at most (\d+) in flight")


def add_arguments(parser):
    add_common_options(parser, first_port=24000, servers=(SERVERS, SERVERS), cases=(CASES, CASES))
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--pipeline-connections", type=int, default=256, help="the pipelining case's (256)")
    parser.add_argument("--xkit-db-connections", type=int, default=2, help="xKit's pool per worker (the entry's 2)")
    parser.add_argument("--go-db-connections", type=int, default=16, help="Go's pgx pool (16)")
    parser.add_argument("--pg-port", type=int, default=24900)
    parser.add_argument("--redis-port", type=int, default=24901)


def build_go(directory):
    go = find_tool("go", "/usr/local/go/bin/go")
    if go is None:
        raise SetupFailed("Go is not installed")
    env = dict(os.environ, GOFLAGS="-mod=mod")
    done = subprocess.run(
        [go, "build", "-o", str(directory / "go_db"), "."],
        cwd=GO_DB_MODULE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SetupFailed("go build failed: " + done.stderr.strip().splitlines()[-1])
    return directory / "go_db"


def arena_setup(work_dir):
    """A one-item dataset and a certificate: the entry wants them, the database routes don't."""
    data, certs = work_dir / "data", work_dir / "certs"
    (data / "static").mkdir(parents=True)
    certs.mkdir()
    item = '{"id":1,"name":"a","category":"b","price":1,"quantity":1,"active":true,"tags":[],'
    (data / "dataset.json").write_text("[" + item + '"rating":{"score":1,"count":1}}]')
    cert, key = make_certificate(work_dir)
    shutil.copy(cert, certs / "server.crt")
    shutil.copy(key, certs / "server.key")
    return data, certs


def peers_for(args, work_dir, db):
    """{name: function(case) -> Peer}: each case starts its server with that case's settings."""
    arena = args.build_dir.resolve() / "arena" / "xkit-arena"
    if not arena.exists():
        raise SetupFailed(f"{arena} is not built (cmake -DXK_BUILD_ARENA=ON, target xkit-arena)")
    data, certs = arena_setup(work_dir)
    extra = [args.first_port + 800 + i for i in range(3)]
    go_bin = build_go(work_dir / "go") if "go" in args.servers else None

    def xkit(case, depth=64):
        env = {
            "DATA_DIR": str(data),
            "CERTS_DIR": str(certs),
            "DATABASE_URL": db.database_url,
            "DATABASE_CONNECTIONS": str(4 if case == "pipelining" else args.xkit_db_connections),
            "DATABASE_PIPELINE_DEPTH": str(depth),
        }
        if case == "cache95":
            env["REDIS_URL"] = db.redis_url
        else:
            env["ARENA_CACHE"] = "off"

        def command(port, _dir):
            return ["env", f"ARENA_PORTS={port},{extra[0]},{extra[1]},{extra[2]}", str(arena)]

        return Peer("xkit", command, env, probe_path="/pipeline")

    def go(case):
        env = {
            "DATABASE_URL": db.database_url,
            "DATABASE_CONNECTIONS": str(args.go_db_connections),
            "GOMAXPROCS": "1",
            "GOGC": os.environ.get("GOGC", "100"),
        }
        if case == "cache95":
            env["REDIS_URL"] = db.redis_url
        else:
            env["CACHE"] = "off"

        def command(port, _dir):
            return ["env", f"PORT={port}", str(go_bin)]

        return Peer("go", command, env, probe_path="/pipeline")

    return {"xkit": xkit, "xkit_depth1": lambda case: xkit(case, depth=1), "go": go}


def wrk_for(case, port, args, seconds):
    url = f"http://127.0.0.1:{port}"
    connections = args.pipeline_connections if case == "pipelining" else args.connections
    if case == "async-db":
        return wrk_argv(url, connections, seconds, options=["-s", str(WRK_SCRIPTS / "db_async.lua")])
    if case == "fortunes":
        return wrk_argv(url + "/fortunes", connections, seconds)
    items = ["-s", str(WRK_SCRIPTS / "db_items.lua")]
    return wrk_argv(url, connections, seconds, options=items, script_args=["hot", "95"] if case == "cache95" else ())


def redis_hits(db):
    """Redis's keyspace_hits and keyspace_misses so far."""
    with socket.create_connection(("127.0.0.1", db.redis_port), timeout=5) as conn:
        conn.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        reply = b""
        while b"keyspace_misses" not in reply or not reply.endswith(b"\r\n"):
            piece = conn.recv(65536)
            if not piece:
                break
            reply += piece
    found = dict(re.findall(r"(keyspace_hits|keyspace_misses):(\d+)", reply.decode()))
    return int(found.get("keyspace_hits", 0)), int(found.get("keyspace_misses", 0))


def measure(case, peer, bench, db):
    args = bench.args
    label = case.replace("-", "")
    try:
        with running(peer, bench.ports, bench.work_dir, args.server_cpus, label) as server:
            unmeasured_load(wrk_for(case, server.port, args, WARMUP_SECONDS), args.client_cpus, WARMUP_SECONDS)
            pg0, redis0, hits0 = db.pg_cpu_seconds(), db.redis_cpu_seconds(), redis_hits(db)
            argv = wrk_for(case, server.port, args, args.duration)
            result, run = measured_load(argv, args.client_cpus, args.duration, server)
            pg1, redis1, hits1 = db.pg_cpu_seconds(), db.redis_cpu_seconds(), redis_hits(db)
            server.stop()  # the entry prints its pool's figures as it stops
            log = server.log_path.read_text(errors="replace")
    except (RunFailed, OSError, SetupFailed) as error:
        return {"ok": False, "error": str(error)}
    n = result.requests
    record = {"ok": True, **load_figures(result), **run.per_request(n)}
    record["pg_cpu_us_per_request"] = (pg1 - pg0) * 1e6 / n if n else None
    record["redis_cpu_us_per_request"] = (redis1 - redis0) * 1e6 / n if n else None
    hits, misses = hits1[0] - hits0[0], hits1[1] - hits0[1]
    record["hit_ratio"] = hits / (hits + misses) if case == "cache95" and hits + misses else None
    found = STATS_LINE.search(log)
    if found:
        queries, batches, peak = map(int, found.groups())
        record["queries_per_batch"] = queries / batches if batches else None
        record["peak_in_flight"] = peak
    return record


# --- report -------------------------------------------------------------------


def cell(stats, key, fmt):
    found = stats.get(key)
    return format(found["median"], fmt) if found else "–"


def case_table(case, by_server, summary):
    titles = {
        "async-db": "GET /async-db, limit 5–50",
        "fortunes": "GET /fortunes",
        "row": "GET /api/items/{id}, one row by id, no cache",
        "cache95": "GET /api/items/{id} through Redis, 95% of requests for hot ids",
        "pipelining": "Pipelining: one row by id, 256 connections, 4 database connections per worker",
    }
    lines = [
        f"### {titles[case]}",
        "",
        "| Server | Req/s | Latency mean / p99 ms | server CPU µs/req | server user / sys µs/req "
        "| PostgreSQL CPU µs/req | Redis CPU µs/req "
        "| hit ratio | queries per batch / peak in flight | busy: server / others | runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for server, runs in by_server.items():
        s = summary[case][server]
        lines.append(
            f"| {server} | {cell(s, 'req_per_s', ',.0f')} | {cell(s, 'latency_ms', '.2f')} / "
            f"{cell(s, 'latency_p99_ms', '.2f')} | {cell(s, 'cpu_us_per_request', '.1f')} "
            f"| {cell(s, 'user_us_per_request', '.1f')} / {cell(s, 'system_us_per_request', '.1f')} "
            f"| {cell(s, 'pg_cpu_us_per_request', '.1f')} | {cell(s, 'redis_cpu_us_per_request', '.1f')} "
            f"| {cell(s, 'hit_ratio', '.1%')} | {cell(s, 'queries_per_batch', '.1f')} / "
            f"{cell(s, 'peak_in_flight', '.0f')} | {cell(s, 'server_busy', '.0%')} / {cell(s, 'others_busy', '.0%')} "
            f"| {runs_cell(runs)} |"
        )
    return lines


def ratio_lines(summary):
    lines = ["### xKit's CPU per request over Go's (of medians), against the issue's targets", ""]
    for case in ("async-db", "fortunes", "row", "cache95"):
        ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
        theirs = summary_median(summary, case, "go", "cpu_us_per_request")
        if not ours or not theirs:
            continue
        target = TARGETS.get(case)
        verdict = f" (target ≤ {target}×: {'met' if ours / theirs <= target else 'not met'})" if target else ""
        lines.append(f"- {case}: {ours / theirs:.2f}×{verdict}")
    one = summary_median(summary, "pipelining", "xkit_depth1", "cpu_us_per_request")
    deep = summary_median(summary, "pipelining", "xkit", "cpu_us_per_request")
    if one and deep:
        lines.append(f"- pipelining: CPU per query at depth 64 over depth 1: {deep / one:.2f}×")
    return lines


def machine_description(args):
    return (
        f"{environment.host_line()}; servers on CPU {environment.cpu_list(args.server_cpus)} with one worker; "
        f"wrk -t1 -c{args.connections}, PostgreSQL 15 (fsync off, the arena's seed) and redis-server on CPU "
        f"{environment.cpu_list(args.client_cpus)}; xKit's pool {args.xkit_db_connections} pipelined connections, "
        f"Go's pgx pool {args.go_db_connections}; {args.duration} s per run after {WARMUP_SECONDS} s warm-up, "
        f"{args.runs} runs alternating, medians."
    )


def run(args):
    def measure_all(bench):
        machine = machine_description(args)
        db = arena_db.LocalDatabase(
            bench.work_dir / "db",
            args.pg_port,
            args.redis_port,
            cpus=environment.cpu_list(args.client_cpus),
        )
        skipped = {}
        try:
            db.start()
            makers = peers_for(args, bench.work_dir, db)
            plan = {}
            for case in args.cases:
                if case == "pipelining":
                    plan[case] = ["xkit", "xkit_depth1"] if "xkit" in args.servers else []
                else:
                    plan[case] = list(args.servers)
            results = bench.rounds(plan, lambda case, name: measure(case, makers[name](case), bench, db))
        finally:
            db.stop()
        summary = summarize_rounds(results, lambda case: KEYS)
        lines = ["## Databases", "", machine, "", CPU_SPLIT_NOTE, ""]
        for case, by_server in results.items():
            lines += case_table(case, by_server, summary) + [""]
        lines += ratio_lines(summary) + [""]
        lines += failure_lines(results, skipped)
        markdown = "\n".join(lines).rstrip() + "\n"
        return markdown, {"machine": machine, "results": results, "summary": summary}

    return run_comparison(args, "compare/db", ["taskset", "wrk"], measure_all)
