"""The arena's gateway-64 and production-stack in `xkbench arena`: an edge (TLS h2, /static from disk, the rest
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

production-stack adds the auth service (xkit-authsvc, on --client-cpus) and Redis as the server's
cache: every /api request is first asked of the auth service (xKit's AUTH_URL; nginx's
auth_request), as arena/compose.production-stack.yml runs them. Its load is the arena's two
h2load runs at once, with the arena's token: reads -m16 over 20 URIs (6 static, 2
/public/baseline, 10 /api/items/{id}, 2 /api/me) and writes (a POST of /api/items/{1..20} with a
JSON body) on an eighth of the connections at -m8; requests and CPU counted over both, and the
stack's CPU is the edge's, the server's and the auth service's.

gateway-h3 is gateway-64 over HTTP/3 (arena/compose.gateway-h3.yml: xkit-edge with EDGE_HTTP3=1 on
the UDP twin of its TLS port): bench/h3load (Debian's h2load has no HTTP/3) -m32 over the same 20
URIs on the arena's 64 connections divided by --scale, against Caddy (Debian's caddy 2.6) as the
edge, as the arena's gateway-h3 leaders run behind it: file_server with the twins for /static, the
rest to the server by reverse_proxy over kept-alive HTTP/1.1.
"""

import base64
import contextlib
import hashlib
import hmac
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .arena_peers import BROTLI_STATIC_MODULE, fill
from .loadgen import GRACE_SECONDS, h2load_argv, measured_load
from .parsing import parse_h2load
from .paths import PEERS_DIR
from .servers import Peer, RunFailed, pinned, running

# xKit's edge twice: to the server over kept-alive HTTP/1.1 (the compose files' choice) and over h2c
# (UPSTREAM_PROTOCOL=h2c: every request of a worker a stream on one connection).
EDGES = ("xkit", "xkit-h2c", "nginx")
EDGE_BINARY = {"xkit": "xkit", "xkit-h2c": "xkit", "nginx": "nginx", "caddy": "caddy"}
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
    "auth_cpu_us_per_request",
    "server_busy",
    "client_busy",
    "others_busy",
)


# production-stack's reads besides the static files, and its writes (the arena's shares of 20,000
# and 20 URIs: 10 % /public/baseline, 50 % /api/items/{id} of 1-10,000, 10 % /api/me).
API_URIS = (
    "/public/baseline?a=1&b=1",
    "/public/baseline?a=13&b=42",
    *(f"/api/items/{id_}" for id_ in (1, 7, 20, 512, 1024, 2048, 4096, 6000, 8191, 10000)),
    "/api/me",
    "/api/me",
)
WRITE_URIS = tuple(f"/api/items/{id_}" for id_ in range(1, 21))
WRITE_BODY = b'{"name":"bench-updated","price":123,"quantity":45}'
# The arena's published bench secret (frameworks/_shared/authsvc) and its token's claims.
JWT_SECRET = b"httparena-bench-secret-do-not-use-in-production"


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def arena_token():
    """A token as the arena's data/jwt-token.txt: HS256, sub 42."""
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": "42", "name": "Alice Chen", "exp": 4102444800}).encode())
    signature = hmac.new(JWT_SECRET, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(signature)}"


@dataclass(frozen=True)
class Stack:
    title: str
    arena_connections: int
    streams: int
    dynamic: tuple  # the URIs after the 6 static files
    edges: tuple = EDGES
    auth: bool = False  # the production stack: the auth service, Redis, the token, the writes
    options: tuple = field(default=())
    http3: bool = False  # the load over HTTP/3 (h3load), the edge serving it on its port's UDP


STACKS = {
    "gateway-64": Stack(
        "an edge (TLS h2, /static from disk, the rest proxied over HTTP/1.1) in front of xkit-arena: "
        f"20 URIs in turn (6 static, 4 /baseline2, 7 /json, 3 /async-db), {ACCEPT}",
        512,
        32,
        DYNAMIC_URIS,
    ),
    "gateway-h3": Stack(
        "gateway-64 over HTTP/3: the edge serves h3 on its TLS port's UDP (xkit-edge EDGE_HTTP3=1; Caddy), "
        f"h3load over the same 20 URIs, {ACCEPT}",
        64,
        32,
        DYNAMIC_URIS,
        edges=("xkit", "caddy"),
        http3=True,
    ),
    "production-stack": Stack(
        "the edge asks xkit-authsvc about every /api request, xkit-arena caches in Redis: reads "
        "(6 static, 2 /public/baseline, 10 /api/items/{id}, 2 /api/me) with the token, and at once "
        "writes (POST /api/items/{1..20}) on an eighth of the connections at -m8",
        256,
        16,
        API_URIS,
        edges=("xkit", "nginx"),
        auth=True,
    ),
}


def uris(data_dir, static_names, port, dynamic=DYNAMIC_URIS):
    """h2load -i's 20 URIs for an edge on port (h2load takes scheme, host and port from the first)."""
    static = [f"/static/{name}" for name in static_names[:STATIC_COUNT]]
    return [f"https://127.0.0.1:{port}{path}" for path in (*static, *dynamic)]


def upstream_peer(arena, setup, database_url, redis_url=None):
    """xkit-arena as the compose files' `server`: 8080 only (here a free port), the database, and
    for the production stack Redis."""

    def command(port, _dir):
        return ["env", f"ARENA_PORTS={port},0,0,0", str(arena)]

    env = {"DATA_DIR": str(setup.data_dir), "DATABASE_URL": database_url}
    if redis_url:
        env["REDIS_URL"] = redis_url
    return Peer("server", command, env, probe_path="/baseline11?a=1&b=1")


def authsvc_peer(binary):
    """xkit-authsvc as compose.production-stack.yml's `authsvc`, on a free port."""

    def command(port, _dir):
        return ["env", f"AUTHSVC_LISTEN=127.0.0.1:{port}", str(binary)]

    return Peer("authsvc", command, probe_path="/_health")


NGINX_AUTH_UPSTREAM = """upstream authsvc {
        server 127.0.0.1:@AUTH_PORT@;
        keepalive @KEEPALIVE@;
        keepalive_requests 1000000;
    }"""
NGINX_AUTH_LOCATIONS = """location /api/ {
            auth_request /_auth;
            auth_request_set $user_id $upstream_http_x_user_id;
            proxy_set_header X-User-Id $user_id;
            proxy_pass http://server;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location = /_auth {
            internal;
            proxy_pass http://authsvc/_auth;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }"""


CADDY_EDGE = """{{
  admin off
  auto_https off
  servers {{
    protocols h1 h2 h3
  }}
}}
https://127.0.0.1:{port} {{
  tls {cert} {key}
  handle /static/* {{
    root * {data}
    file_server {{
      precompressed br gzip
    }}
  }}
  handle {{
    reverse_proxy 127.0.0.1:{upstream} {{
      transport http {{
        keepalive_idle_conns_per_host {pool}
      }}
    }}
  }}
}}
"""


def caddy_edge_peer(binary, setup, upstream_port):
    """Caddy as the gateway-h3 edge: /static from disk with the twins, the rest to the server."""

    def command(port, run_dir):
        config = Path(run_dir) / "Caddyfile"
        config.write_text(
            CADDY_EDGE.format(
                port=port,
                cert=setup.certs_dir / "server.crt",
                key=setup.certs_dir / "server.key",
                data=setup.data_dir,
                upstream=upstream_port,
                pool=UPSTREAM_POOL,
            )
        )
        return [binary, "run", "--config", str(config), "--adapter", "caddyfile"]

    return Peer("caddy-edge", command, {"GOMAXPROCS": str(setup.workers)}, tls=True, probe_path=PROBE_STATIC)


def edge_peer(name, binary, setup, upstream_port, tools, auth_port=None, http3=False):
    """The edge `name` (EDGES, or caddy) in front of the server on upstream_port; http3: xkit-edge
    serves HTTP/3 too."""
    if name == "caddy":
        return caddy_edge_peer(binary, setup, upstream_port)
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
        if auth_port:
            env["AUTH_URL"] = f"http://127.0.0.1:{auth_port}"
        if http3:
            env["EDGE_HTTP3"] = "1"
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
            "AUTH_UPSTREAM": NGINX_AUTH_UPSTREAM.replace("@AUTH_PORT@", str(auth_port)).replace(
                "@KEEPALIVE@", str(UPSTREAM_POOL)
            )
            if auth_port
            else "",
            "AUTH_LOCATIONS": NGINX_AUTH_LOCATIONS if auth_port else "",
        }
        if tools.get("nginx_brotli"):
            values.update(BROTLI_MODULE=f"load_module {BROTLI_STATIC_MODULE};", BROTLI_STATIC="brotli_static on;")
        (Path(run_dir) / "nginx.conf").write_text(fill(NGINX_TEMPLATE, values))
        return [binary, "-c", str(Path(run_dir) / "nginx.conf"), "-p", str(run_dir), "-e", "stderr"]

    return Peer("nginx-edge", nginx_command, tls=True, workers_are_children=True, probe_path=PROBE_STATIC)


def connections(stack, args):
    return max(4, stack.arena_connections // args.scale)


def load_argv(stack, uri_file, seconds, args, h3load="h3load"):
    """h2load's command line, or for an HTTP/3 stack h3load's (h3load: its binary)."""
    if stack.http3:
        argv = h2load_argv("https://127.0.0.1", connections(stack, args), seconds, streams=stack.streams)
        return [str(h3load), *argv[1:-1], "-H", ACCEPT, "-i", str(uri_file)]
    options = ["--npn-list=h2", "-H", ACCEPT, "-i", str(uri_file)]
    if stack.auth:
        options += ["-H", f"Authorization: Bearer {arena_token()}"]
    argv = h2load_argv("https://127.0.0.1", connections(stack, args), seconds, streams=stack.streams, options=options)
    return argv[:-1]  # the URIs come from -i


def writes_argv(stack, uri_file, body_file, seconds, args):
    """The production stack's writes: POSTs of WRITE_BODY on an eighth of the connections, -m8."""
    options = ["--npn-list=h2", "-d", str(body_file), "-H", "Content-Type: application/json"]
    options += ["-H", f"Authorization: Bearer {arena_token()}", "-i", str(uri_file)]
    count = max(1, connections(stack, args) // 8)
    return h2load_argv("https://127.0.0.1", count, seconds, streams=8, options=options)[:-1]


def write_uri_files(stack, bench, inputs, port):
    """(reads' URI file, writes' URI file or None, the writes' body file or None) for an edge on port."""
    reads = bench.work_dir / f"stack-uris-{port}"
    lines = uris(inputs.setup.data_dir, inputs.static_names, port, stack.dynamic)
    reads.write_text("".join(line + "\n" for line in lines))
    if not stack.auth:
        return reads, None, None
    writes, body = bench.work_dir / f"stack-writes-{port}", bench.work_dir / "stack-write-body"
    writes.write_text("".join(f"https://127.0.0.1:{port}{path}\n" for path in WRITE_URIS))
    body.write_bytes(WRITE_BODY)
    return reads, writes, body


def loads_at_once(stack, files, seconds, args, front):
    """The reads measured against front while the writes (the production stack's) run beside them:
    (requests of both, the reads' Run)."""
    reads, writes, body = files
    writer = None
    if writes:
        argv = pinned(writes_argv(stack, writes, body, seconds, args), args.client_cpus)
        writer = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        result, run = measured_load(
            load_argv(stack, reads, seconds, args, Path(args.build_dir).resolve() / "bench" / "h3load"),
            args.client_cpus,
            seconds,
            front,
            h2_protocol="h3" if stack.http3 else "h2",
            h2load_window=False,
        )
    finally:
        output = writer.communicate(timeout=seconds + GRACE_SECONDS)[0] if writer else ""
    requests = result.requests
    if writer:
        written = parse_h2load(output, returncode=writer.returncode, protocol="h2")
        if not written.ok:
            raise RunFailed(f"the writes: {written.problems[0]}")
        requests += written.requests
    return requests, result, run


def measure(stack_name, edge_name, bench, inputs):
    """One run: a fresh server (and auth service) and a fresh edge in front of it, a warm-up, the
    measured load. inputs: arena, authsvc, setup, database (scripts/arena_db.LocalDatabase), static_names,
    edges ({name: binary}), tools. A run's record; never raises RunFailed."""
    stack, args = STACKS[stack_name], bench.args
    redis_url = inputs.database.redis_url if stack.auth else None
    server_peer = upstream_peer(inputs.arena, inputs.setup, inputs.database.database_url, redis_url)
    try:
        with contextlib.ExitStack() as started:
            server = started.enter_context(
                running(server_peer, bench.ports, bench.work_dir, args.client_cpus, "server")
            )
            auth = None
            if stack.auth:
                peer = authsvc_peer(inputs.authsvc)
                auth = started.enter_context(running(peer, bench.ports, bench.work_dir, args.client_cpus, "authsvc"))
            binary = inputs.edges[EDGE_BINARY[edge_name]]
            edge = edge_peer(
                edge_name, binary, inputs.setup, server.port, inputs.tools, auth.port if auth else None, stack.http3
            )

            def on_edge(front):
                files = write_uri_files(stack, bench, inputs, front.port)
                loads_at_once(stack, files, 2, args, front)  # warm-up
                behind = [server, auth] if auth else [server]
                before, pg0 = [s.cpu_seconds() for s in behind], inputs.database.pg_cpu_seconds()
                n, result, run = loads_at_once(stack, files, args.duration, args, front)
                after, pg1 = [s.cpu_seconds() for s in behind], inputs.database.pg_cpu_seconds()
                record = {"requests": n, "req_per_s": n / args.duration, **run.per_request(n)}
                record["server_cpu_us_per_request"] = (after[0] - before[0]) * 1e6 / n
                record["auth_cpu_us_per_request"] = (after[1] - before[1]) * 1e6 / n if auth else None
                record["pg_cpu_us_per_request"] = (pg1 - pg0) * 1e6 / n
                edge_us = record.get("cpu_us_per_request")
                behind_us = record["server_cpu_us_per_request"] + (record["auth_cpu_us_per_request"] or 0)
                record["stack_cpu_us_per_request"] = edge_us + behind_us if edge_us else None
                return record

            return bench.run_once(edge, stack_name, on_edge)
    except (RunFailed, OSError, subprocess.TimeoutExpired) as error:
        return {"ok": False, "error": str(error)}
