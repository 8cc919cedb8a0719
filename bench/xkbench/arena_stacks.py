"""The arena's gateway-64 stack in `xkbench arena`: an edge (TLS h2, /static from disk, the rest
proxied over kept-alive HTTP/1.1) in front of xKit's entry as the server, as
arena/compose.gateway.yml runs them. The edges: xKit's (arena/edge.c, xkit-edge) and nginx
configured as the arena's gateway entries behind stock nginx are (bench/peers/nginx/gateway.conf.in),
both in front of the same xkit-arena (a fresh one per run) on a PostgreSQL with the arena's seed
(scripts/arena_db.py), for /async-db.

The load is the arena's: h2load -m32 over 20 URIs in turn (6 static files, 4 /baseline2, 7 /json
from 1 to 50 items, 3 /async-db with limits 10, 25 and 50), each request with
`Accept-Encoding: br;q=1, gzip;q=0.8`; the arena's 512 connections divided by --scale. The edge
runs with one worker on --server-cpus (xKit's twice: HTTP/1.1 to the server, and h2c); the server
(one worker), PostgreSQL and the load on --client-cpus. Reported per request: the edge's CPU (what
the edges are compared by), the server's, the stack's (edge + server) and PostgreSQL's.
"""

from dataclasses import dataclass
from pathlib import Path

from .arena_peers import BROTLI_STATIC_MODULE, fill
from .loadgen import h2load_argv, measured_load, unmeasured_load
from .paths import PEERS_DIR
from .servers import Peer, RunFailed, running

# xKit's edge twice: to the server over kept-alive HTTP/1.1 (the compose files' choice) and over h2c
# (UPSTREAM_PROTOCOL=h2c: every request of a worker a stream on one connection).
EDGES = ("xkit", "xkit-h2c", "nginx")
EDGE_BINARY = {"xkit": "xkit", "xkit-h2c": "xkit", "nginx": "nginx"}
ACCEPT = "Accept-Encoding: br;q=1, gzip;q=0.8"
NGINX_TEMPLATE = PEERS_DIR / "nginx" / "gateway.conf.in"
PROBE_STATIC = "/static/reset.css"
UPSTREAM_POOL = 256  # idle upstream connections each edge keeps (xKit per worker, nginx keepalive)
# The arena's dynamic URIs of gateway-64 (its 6 static files are taken from the data's static/).
DYNAMIC_URIS = (
    *(f"/baseline2?a={a}&b={b}" for a, b in ((1, 1), (13, 42), (100, 200), (7, 8))),
    *(f"/json/{count}" for count in (1, 5, 10, 15, 25, 40, 50)),
    *(f"/async-db?min=10&max=50&limit={limit}" for limit in (10, 25, 50)),
)
STATIC_COUNT = 6
KEYS = (
    "req_per_s",
    "cpu_us_per_request",
    "server_cpu_us_per_request",
    "stack_cpu_us_per_request",
    "pg_cpu_us_per_request",
    "server_busy",
    "client_busy",
    "others_busy",
)


@dataclass(frozen=True)
class Stack:
    title: str
    arena_connections: int
    streams: int


STACKS = {
    "gateway-64": Stack(
        "an edge (TLS h2, /static from disk, the rest proxied over HTTP/1.1) in front of xkit-arena: "
        f"20 URIs in turn (6 static, 4 /baseline2, 7 /json, 3 /async-db), {ACCEPT}",
        512,
        32,
    ),
}


def uris(data_dir, static_names, port):
    """h2load -i's 20 URIs for an edge on port (h2load takes scheme, host and port from the first)."""
    static = [f"/static/{name}" for name in static_names[:STATIC_COUNT]]
    return [f"https://127.0.0.1:{port}{path}" for path in (*static, *DYNAMIC_URIS)]


def upstream_peer(arena, setup, database_url):
    """xkit-arena as compose.gateway.yml's `server`: 8080 only (here a free port), the database."""

    def command(port, _dir):
        return ["env", f"ARENA_PORTS={port},0,0,0", str(arena)]

    env = {"DATA_DIR": str(setup.data_dir), "DATABASE_URL": database_url}
    return Peer("server", command, env, probe_path="/baseline11?a=1&b=1")


def edge_peer(name, binary, setup, upstream_port, tools):
    """The edge `name` (EDGES) in front of the server on upstream_port."""
    if name in ("xkit", "xkit-h2c"):

        def command(port, _dir):
            return ["env", f"EDGE_PORT={port}", str(binary)]

        env = {
            "DATA_DIR": str(setup.data_dir),
            "CERTS_DIR": str(setup.certs_dir),
            "EDGE_HOST": "127.0.0.1",
            "UPSTREAM": f"http://127.0.0.1:{upstream_port}",
            "UPSTREAM_CONNECTIONS": str(UPSTREAM_POOL),
            "UPSTREAM_PROTOCOL": "h2c" if name == "xkit-h2c" else "http/1.1",
        }
        return Peer(f"{name}-edge", command, env, tls=True, probe_path=PROBE_STATIC)

    def nginx_command(port, run_dir):
        values = {
            "WORKERS": setup.workers,
            "RUNDIR": run_dir,
            "PORT": port,
            "DATA": setup.data_dir,
            "CERT": setup.certs_dir / "server.crt",
            "KEY": setup.certs_dir / "server.key",
            "UPSTREAM": f"127.0.0.1:{upstream_port}",
            "KEEPALIVE": UPSTREAM_POOL,
            "BROTLI_MODULE": "",
            "BROTLI_STATIC": "",
        }
        if tools.get("nginx_brotli"):
            values.update(BROTLI_MODULE=f"load_module {BROTLI_STATIC_MODULE};", BROTLI_STATIC="brotli_static on;")
        (Path(run_dir) / "nginx.conf").write_text(fill(NGINX_TEMPLATE, values))
        return [binary, "-c", str(Path(run_dir) / "nginx.conf"), "-p", str(run_dir), "-e", "stderr"]

    return Peer("nginx-edge", nginx_command, tls=True, workers_are_children=True, probe_path=PROBE_STATIC)


def connections(stack, args):
    return max(4, stack.arena_connections // args.scale)


def load_argv(stack, uri_file, seconds, args):
    options = ("--npn-list=h2", "-H", ACCEPT, "-i", str(uri_file))
    argv = h2load_argv("https://127.0.0.1", connections(stack, args), seconds, streams=stack.streams, options=options)
    return argv[:-1]  # the URIs come from -i


def measure(stack_name, edge_name, bench, inputs):
    """One run: a fresh server and a fresh edge in front of it, a warm-up, the measured load.
    inputs: arena, setup, database (scripts/arena_db.LocalDatabase), static_names, edges
    ({name: binary}), tools. A run's record; never raises RunFailed."""
    stack, args = STACKS[stack_name], bench.args
    server_peer = upstream_peer(inputs.arena, inputs.setup, inputs.database.database_url)
    try:
        with running(server_peer, bench.ports, bench.work_dir, args.client_cpus, "server") as server:
            binary = inputs.edges[EDGE_BINARY[edge_name]]
            edge = edge_peer(edge_name, binary, inputs.setup, server.port, inputs.tools)

            def on_edge(front):
                uri_file = bench.work_dir / f"gateway-uris-{front.port}"
                uri_file.write_text(
                    "".join(line + "\n" for line in uris(inputs.setup.data_dir, inputs.static_names, front.port))
                )
                unmeasured_load(load_argv(stack, uri_file, 2, args), args.client_cpus, 2, h2_protocol="h2")
                server0, pg0 = server.cpu_seconds(), inputs.database.pg_cpu_seconds()
                argv = load_argv(stack, uri_file, args.duration, args)
                result, run = measured_load(
                    argv, args.client_cpus, args.duration, front, h2_protocol="h2", h2load_window=False
                )
                server1, pg1 = server.cpu_seconds(), inputs.database.pg_cpu_seconds()
                n = result.requests
                record = {"requests": n, "req_per_s": result.req_per_s, **run.per_request(n)}
                record["server_cpu_us_per_request"] = (server1 - server0) * 1e6 / n
                record["pg_cpu_us_per_request"] = (pg1 - pg0) * 1e6 / n
                edge_us = record.get("cpu_us_per_request")
                record["stack_cpu_us_per_request"] = edge_us + record["server_cpu_us_per_request"] if edge_us else None
                return record

            return bench.run_once(edge, stack_name, on_edge)
    except (RunFailed, OSError) as error:
        return {"ok": False, "error": str(error)}
