"""arena: xKit's HttpArena entry (arena/main.c, xkit-arena) against its Go peer
(bench/peers/go/arena_server, net/http alone) and, on the profiles the arena runs them on,
h2o built as the arena's h2o entry is (a C program on libh2o) and nginx configured as the arena's
nginx entry is (xkbench/arena_peers.py), under the arena's load shapes, scaled down; --score
scores them as the board does (xkbench/arena_score.py). baseline-h3 and static-h3 run on the TLS h2
port's UDP through bench/h3load (build/bench/h3load: Debian's h2load has no HTTP/3), against
Caddy as a plain file server (static-h3 only: it cannot add /baseline2's numbers). gateway-64
and production-stack run as stacks: xKit's edge and nginx's in front of the same xKit server (and auth service;
xkbench/arena_stacks.py), compared by the edge's CPU per request, the whole stack's beside it;
gateway-h3 too, over HTTP/3, with Caddy as the other edge.

Every server serves the arena's endpoints on four ports (ARENA_PORTS: h1+h2c, TLS http/1.1,
h2c only, TLS h2) with a copy of the dataset from --data-dir and a fresh self-signed RSA-2048
certificate. Each runs with one worker pinned to --server-cpus (xkit-arena takes its workers
from its affinity, Go and Caddy from GOMAXPROCS=1, h2o runs one loop, nginx from worker_processes);
the load runs on --client-cpus: wrk -t1, h2load -t1, h3load -t1, bench/peers/go/ws_load (the WebSocket
rows, GOMAXPROCS unset) or bench/peers/go/paced_load (the paced rows). The arena loads 64
logical CPUs; here every profile's connections are divided by --scale (default 64: the same
connections per server CPU), at least 4. The paced profiles keep an absolute rate instead
(see PACED below). A fresh server per run, rounds alternate, medians.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import arena_score, arena_stacks, environment
from ..arena_peers import ArenaSetup, caddy_peer, find_infrastructure, make_peer, not_served
from ..cli import add_common_options, say
from ..loadgen import PIPELINE_SCRIPT, h2load_argv, measured_load, run_measured, run_tool, unmeasured_load, wrk_argv
from ..paths import REPO_ROOT, WRK_SCRIPTS, shown
from ..prepare import SetupFailed, build_go_peers, make_certificate
from ..probes import what_curl_gets
from ..rounds import failure_lines, runs_cell
from ..servers import RunFailed, find_tool
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison
from .compare_h3 import h3_probe
from .compare_websocket import parse as parse_ws_load

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import arena_db  # noqa: E402

HELP = "the HttpArena profiles at this machine's scale: xKit's arena entry against Go, h2o, nginx and Caddy"
SERVERS = ("xkit", "go", "h2o", "nginx", "caddy")
PEERS = SERVERS[1:]
# The tables' columns: these always, Caddy (which runs the HTTP/3 rows only) when it ran.
COLUMNS = SERVERS[:4]
LABELS = {
    "xkit": "xKit",
    "go": "Go",
    "h2o": "h2o",
    "nginx": "nginx",
    "caddy": "Caddy",
    "xkit-h2c": "xKit, h2c upstream",
}
PORTS = ("h1", "tls-h1", "h2c", "tls-h2")  # ARENA_PORTS's order
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "arena" / "data"
BASELINE_SCRIPT = WRK_SCRIPTS / "arena_baseline.lua"
JSON_SCRIPT = WRK_SCRIPTS / "arena_json.lua"
GRPC_PATH = "/benchmark.BenchmarkService/GetSum"
# SumRequest{a = 1, b = 2} in one uncompressed gRPC message: flag, length, two varint fields.
GRPC_REQUEST = bytes([0, 0, 0, 0, 4, 0x08, 1, 0x10, 2])
GRPC_HEADERS = ("-H", "content-type: application/grpc", "-H", "te: trailers")
ACCEPT = "Accept-Encoding: br;q=1, gzip;q=0.8"
ECHO_BODY_BYTES = 10240  # the 8gbit profile's "10 KB" POST bodies
GO_TOOLS = ("ws_load", "paced_load")
H3LOAD = "h3load"  # bench/h3load.c, built into the build directory's bench/
KEYS = ("req_per_s", "cpu_us_per_request", "system_us_per_request", "server_busy", "client_busy", "others_busy")
PACED_KEYS = KEYS + ("p99_us", "mean_us", "p50_us", "p999_us", "target_rate")
MIN_CONNECTIONS = 4
# The placeholders a profile's options may hold, the files they stand for, and what the
# report shows in their place.
FILES = {"{grpc_body}": "REQUEST_FILE", "{static_uris}": "URI_FILE", "{echo_body}": "BODY_FILE"}


@dataclass
class Inputs:
    """What the loads are made from: the files FILES's placeholders stand for, the private
    directory (h2load's URI files go there), the served copy of the data, the Go load tools."""

    files: dict
    work_dir: Path
    data_dir: Path
    tools: dict


@dataclass(frozen=True)
class Profile:
    """One of the arena's profiles: the tool (wrk, h2load, h3load, ws_load, paced_load), the port
    (one of PORTS; h3load's is its UDP twin), the target (None: h2load reads its URIs from -i), the arena's connections
    (divided by --scale here), the tool's extra arguments (wrk's options and its script's
    arguments; h2load's, ws_load's or paced_load's options, with FILES placeholders), h2load's
    streams, and for paced_load the rate option that sets its requests per second."""

    title: str
    tool: str
    port: str
    path: str | None
    arena_connections: int
    options: tuple = ()
    script_args: tuple = ()
    streams: int = 100
    rate_option: str | None = None

    @property
    def scheme(self):
        return "https" if self.port.startswith("tls") else "http"

    @property
    def paced(self):
        return self.tool == "paced_load"


PROFILES = {
    "baseline": Profile(
        "GET and POST (Content-Length, chunked) /baseline11",
        "wrk",
        "h1",
        "/baseline11",
        4096,
        ("-s", str(BASELINE_SCRIPT)),
    ),
    "limited-conn": Profile(
        "baseline, a reconnect every 10 requests",
        "wrk",
        "h1",
        "/baseline11",
        4096,
        ("-s", str(BASELINE_SCRIPT)),
        ("10",),
    ),
    "pipelined": Profile(
        "GET /pipeline, 16 pipelined", "wrk", "h1", "/pipeline", 4096, ("-s", str(PIPELINE_SCRIPT)), ("/pipeline",)
    ),
    "async": Profile("GET /delay/15, held connections", "wrk", "h1", "/delay/15", 32000),
    "json-tls": Profile(
        "GET /json/{count}?m=, 7 pairs, TLS 1.3 http/1.1", "wrk", "tls-h1", "/json", 4096, ("-s", str(JSON_SCRIPT))
    ),
    "baseline-h2": Profile(
        "GET /baseline2 over TLS h2, 100 streams", "h2load", "tls-h2", "/baseline2?a=1&b=1", 1024, ("--npn-list=h2",)
    ),
    "static-h2": Profile(
        f"GET the 20 files of /static/ in turn over TLS h2, 32 streams, {ACCEPT}",
        "h2load",
        "tls-h2",
        None,
        1024,
        ("--npn-list=h2", "-H", ACCEPT, "-i", "{static_uris}"),
        streams=32,
    ),
    "baseline-h2c": Profile(
        "GET /baseline2, h2c prior knowledge, 100 streams", "h2load", "h2c", "/baseline2?a=1&b=1", 1024
    ),
    "unary-grpc": Profile(
        "gRPC GetSum over h2c, 100 streams", "h2load", "h1", GRPC_PATH, 1024, ("-d", "{grpc_body}", *GRPC_HEADERS)
    ),
    "unary-grpc-tls": Profile(
        "gRPC GetSum over TLS h2, 100 streams",
        "h2load",
        "tls-h2",
        GRPC_PATH,
        1024,
        ("--npn-list=h2", "-d", "{grpc_body}", *GRPC_HEADERS),
    ),
    "baseline-h3": Profile(
        "GET /baseline2 over HTTP/3 (QUIC on the TLS h2 port's UDP), 64 streams",
        H3LOAD,
        "tls-h2",
        "/baseline2?a=1&b=1",
        64,
        streams=64,
    ),
    "static-h3": Profile(
        f"GET the 20 files of /static/ in turn over HTTP/3, 64 streams, {ACCEPT}",
        H3LOAD,
        "tls-h2",
        None,
        64,
        ("-H", ACCEPT, "-i", "{static_uris}"),
        streams=64,
    ),
    "echo-ws": Profile(
        'WebSocket "hello" echo, 1 in flight (req/s: messages/s)',
        "ws_load",
        "h1",
        "/ws",
        4096,
        ("-inflight", "1", "-reupgrade", "0"),
    ),
    "echo-ws-pipeline": Profile(
        'WebSocket "hello" echo, 16 in flight', "ws_load", "h1", "/ws", 4096, ("-inflight", "16", "-reupgrade", "0")
    ),
    "echo-ws-limited": Profile(
        'WebSocket "hello" echo, a new connection and upgrade every 10 messages',
        "ws_load",
        "h1",
        "/ws",
        4096,
        ("-inflight", "1", "-reupgrade", "10"),
    ),
    "latency-1m": Profile(
        "GET /baseline11, paced at the arena's 1M req/s ÷ --scale (latency from each request's due time)",
        "paced_load",
        "h1",
        "/baseline11?a=1&b=1",
        1024,
        ("-expect", "2"),
        rate_option="rate_1m",
    ),
    "latency-10k": Profile(
        "GET /baseline11, paced (latency from each request's due time)",
        "paced_load",
        "h1",
        "/baseline11?a=1&b=1",
        1024,
        ("-expect", "2"),
        rate_option="latency_rate",
    ),
    "8gbit": Profile(
        f"POST /echo, {ECHO_BODY_BYTES:,} B bodies echoed, TLS 1.3 http/1.1, paced",
        "paced_load",
        "tls-h1",
        "/echo",
        512,
        ("-body", "{echo_body}", "-echo"),
        rate_option="rate_8gbit",
    ),
}
# The paced profiles' rates. The arena paces latency-10k at 10,000 req/s and 8gbit at 50,000
# over 64 CPUs; divided by --scale they would be 156 and 781 req/s here, too few requests
# for /proc's 10 ms CPU ticks to count in a short run. So the rate stays absolute: 10,000
# req/s (a light load for one core, as the arena's is for 64: every request arrives alone)
# and 5,000 for 8gbit (a tenth: what one client core keeps up with while it encrypts and
# checks 10 KiB each way; the arena's 50,000 would saturate the client, not the server).
# latency-1m is the exception: its 1,000,000 req/s are what the fastest entries carry on 64
# CPUs, a load that is heavy per core; divided by --scale (15,625 req/s by default) it stays a
# share of one core's capacity as the arena's is of 64 (--rate-1m sets it outright).
PACED = {"latency_rate": 10000, "rate_8gbit": 5000}
ARENA_RATE_1M = 1_000_000
# The profiles the board scores for engines that need pieces xKit's main branch lacks, and why
# they are not measured here: listed in every report, and scored 0 by --score.
NOT_MEASURED = {
    "gateway-64": "measured as a stack (its own table: xKit's edge against nginx's in front of the same "
    "xKit server), not scored: the board ranks whole stacks' req/s on 64 CPUs",
    "gateway-h3": "measured as a stack over HTTP/3 (its own table: xKit's edge against Caddy's in front of "
    "the same xKit server), not scored, as gateway-64",
    "production-stack": "measured as a stack (its own table: xKit's edge against nginx's with "
    "auth_request, in front of the same server and auth service), not scored, as gateway-64",
}


def add_arguments(parser):
    cases = (*PROFILES, *arena_stacks.STACKS)
    add_common_options(parser, first_port=26000, servers=(SERVERS, SERVERS), cases=(cases, cases))
    parser.add_argument(
        "--scale",
        type=int,
        default=64,
        help="divide the arena's connections by this (default 64: its logical CPUs per server CPU here)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="the arena's data, with dataset.json and static/ (default ../shared/arena/data)",
    )
    parser.add_argument(
        "--latency-rate",
        type=int,
        default=PACED["latency_rate"],
        help="latency-10k's requests per second, over all connections (default 10000, not scaled)",
    )
    parser.add_argument(
        "--rate-8gbit",
        type=int,
        default=PACED["rate_8gbit"],
        help="8gbit's requests per second, over all connections (default 5000, not scaled)",
    )
    parser.add_argument(
        "--rate-1m",
        type=int,
        default=None,
        help=f"latency-1m's requests per second, over all connections (default {ARENA_RATE_1M:,} ÷ --scale)",
    )
    parser.add_argument(
        "--score",
        action="store_true",
        help="add the arena's per-profile scores and composite for every server measured (xkbench/arena_score.py)",
    )
    parser.add_argument(
        "--score-from",
        type=Path,
        metavar="REPORT_JSON",
        help="measure nothing: print the scores of an earlier arena report (results/arena/STAMP.json)",
    )


def connections(profile, args):
    return max(MIN_CONNECTIONS, profile.arena_connections // args.scale)


def rate(profile, args):
    """A paced profile's requests per second (None for the others)."""
    if profile.rate_option == "rate_1m" and args.rate_1m is None:
        return ARENA_RATE_1M // args.scale
    return getattr(args, profile.rate_option) if profile.rate_option else None


def load_argv(profile, ports, seconds, args, files, tools=None):
    """The load's command line; files maps FILES placeholders to paths, tools the Go load
    generators' names to their binaries (the bare names when not given, as the report shows)."""
    base = f"{profile.scheme}://127.0.0.1:{ports[profile.port]}"
    target = base + (profile.path or "")
    options = [str(files.get(option, option)) for option in profile.options]
    count = connections(profile, args)
    if profile.tool == "wrk":
        return wrk_argv(target, count, seconds, options=options, script_args=profile.script_args)
    tool = str((tools or {}).get(profile.tool, profile.tool))
    if profile.tool in ("h2load", H3LOAD):
        argv = h2load_argv(target, count, seconds, streams=profile.streams, options=options)
        argv[0] = tool
        return argv if profile.path else argv[:-1]
    if profile.tool == "ws_load":
        return [
            tool,
            "-raw",
            "-url",
            f"ws://127.0.0.1:{ports[profile.port]}{profile.path}",
            "-conns",
            str(count),
            *options,
            "-duration",
            f"{seconds}s",
        ]
    return [
        tool,
        "-url",
        target,
        "-conns",
        str(count),
        "-rate",
        str(rate(profile, args)),
        "-duration",
        f"{seconds}s",
        *options,
    ]


def shown_argv(profile, args):
    argv = load_argv(profile, dict.fromkeys(PORTS, "PORT"), args.duration, args, FILES)
    return shlex.join(shown(arg) if arg.startswith(str(WRK_SCRIPTS)) else arg for arg in argv)


def static_files(data_dir):
    """The files the arena's static-h2 asks for in turn: the 20 under static/, not their twins."""
    return sorted(
        path.name for path in (data_dir / "static").iterdir() if path.is_file() and path.suffix not in (".br", ".gz")
    )


def write_static_uris(directory, data_dir, port):
    """h2load -i's file for a server on port: h2load takes scheme, host and port from the first."""
    path = directory / f"static-uris-{port}"
    path.write_text("".join(f"https://127.0.0.1:{port}/static/{name}\n" for name in static_files(data_dir)))
    return path


def parse_paced(run):
    """paced_load's JSON line as {key: number}; RunFailed when it failed, timed out or erred."""
    line = next((line for line in reversed(run.output.splitlines()) if line.startswith("{")), None)
    try:
        report = json.loads(line) if line else None
    except ValueError:
        report = None
    if run.timed_out or report is None or run.returncode != 0 or report.get("errors") or not report.get("requests"):
        why = (report or {}).get("first_error") or (run.output.strip().splitlines()[-1:] or [run.returncode])[0]
        raise RunFailed(f"paced_load failed: {why}")
    return report


def what_static_sends(port):
    """What one static-h2 request (app.js, with the profile's Accept-Encoding) gets, as curl sees it."""
    coding, size = what_curl_gets(f"https://127.0.0.1:{port}/static/app.js", ["--http2", "-H", ACCEPT])
    return f"{coding}, {size:,} B"


def measure_h1_h2(profile, ports, args, inputs, server):
    """wrk or h2load: a warm-up run (h2load's first HTTP/2 or TLS connections, wrk's
    connections), then the measured one; the server's CPU over the whole measured run."""
    protocol = {"h2load": "h2" if profile.scheme == "https" else "h2c", H3LOAD: "h3"}.get(profile.tool)
    record, files = {}, inputs.files
    if profile.path is None:
        files = {**files, "{static_uris}": write_static_uris(inputs.work_dir, inputs.data_dir, ports["tls-h2"])}
        record["sent"] = what_static_sends(ports["tls-h2"])
    unmeasured_load(
        load_argv(profile, ports, WARMUP_SECONDS, args, files, inputs.tools),
        args.client_cpus,
        WARMUP_SECONDS,
        h2_protocol=protocol,
    )
    result, run = measured_load(
        load_argv(profile, ports, args.duration, args, files, inputs.tools),
        args.client_cpus,
        args.duration,
        server,
        h2_protocol=protocol,
        h2load_window=False,
    )
    return {**record, "requests": result.requests, "req_per_s": result.req_per_s, **run.per_request(result.requests)}


def measure_go_tool(profile, ports, args, inputs, server):
    """ws_load or paced_load: a warm-up run, then the measured one; the server's CPU over the
    whole measured run (paced_load connects first, then keeps its schedule)."""
    parse = parse_paced if profile.paced else parse_ws_load
    parse(
        run_tool(
            load_argv(profile, ports, WARMUP_SECONDS, args, inputs.files, inputs.tools),
            args.client_cpus,
            WARMUP_SECONDS,
        )
    )
    run = run_measured(
        load_argv(profile, ports, args.duration, args, inputs.files, inputs.tools),
        args.client_cpus,
        args.duration,
        server,
    )
    if not profile.paced:
        messages, per_second = parse(run)
        return {"requests": messages, "req_per_s": per_second, **run.per_request(messages)}
    report = parse(run)
    latency = {key: report[key] for key in ("p50_us", "p99_us", "p999_us", "mean_us", "max_us")}
    return {
        "requests": report["requests"],
        "req_per_s": report["rate"],
        "target_rate": report["target_rate"],
        **latency,
        **run.per_request(report["requests"]),
    }


def measure_profile(profile, server, extra_ports, args, inputs):
    ports = dict(zip(PORTS, (server.port, *extra_ports), strict=True))
    if profile.tool in ("wrk", "h2load", H3LOAD):
        return measure_h1_h2(profile, ports, args, inputs, server)
    return measure_go_tool(profile, ports, args, inputs, server)


# --- report -------------------------------------------------------------------


def ratio_cell(ours, theirs):
    return f"{ours / theirs:.2f}×" if ours and theirs else "–"


def best_peer(values, pick):
    """(name, value) of the best peer by pick (max or min) among those with a value."""
    present = {name: value for name, value in values.items() if name != "xkit" and value}
    if not present:
        return None, None
    name = pick(present, key=present.get)
    return name, present[name]


def versus_best(values, pick):
    name, value = best_peer(values, pick)
    return f"{ratio_cell(values.get('xkit'), value)} {LABELS[name]}" if name and values.get("xkit") else "–"


def number_cell(value, form):
    return format(value, form) if value else "–"


def table_columns(results):
    """COLUMNS, then any other server that ran one of results's rows."""
    ran = {server for by_server in results.values() for server in by_server}
    return COLUMNS + tuple(server for server in SERVERS if server not in COLUMNS and server in ran)


def throughput_lines(results, summary, args):
    columns = table_columns(results)
    heads = (
        " | ".join(f"{LABELS[s]} req/s" for s in columns)
        + " | req/s xKit ÷ best peer | "
        + " | ".join(f"{LABELS[s]} CPU µs/req" for s in columns)
        + " | CPU xKit ÷ best peer | "
        + " | ".join(f"{LABELS[s]} sys µs/req" for s in columns)
    )
    lines = [f"| Profile | conns | {heads} | runs |", "|---|---:|" + "---:|" * (3 * len(columns) + 2) + "---|"]
    for name, by_server in results.items():
        rate_of = {s: summary_median(summary, name, s, "req_per_s") for s in columns}
        cpu_of = {s: summary_median(summary, name, s, "cpu_us_per_request") for s in columns}
        sys_of = {s: summary_median(summary, name, s, "system_us_per_request") for s in columns}
        runs = " / ".join(f"{LABELS[server]} {runs_cell(r)}" for server, r in by_server.items())
        lines.append(
            f"| {name} | {connections(PROFILES[name], args)} | "
            + " | ".join(number_cell(rate_of[s], ",.0f") for s in columns)
            + f" | {versus_best(rate_of, max)} | "
            + " | ".join(number_cell(cpu_of[s], ".2f") for s in columns)
            + f" | {versus_best(cpu_of, min)} | "
            + " | ".join(number_cell(sys_of[s], ".2f") for s in columns)
            + f" | {runs} |"
        )
    return lines


def latency_lines(results, summary, args):
    """The paced rows' latencies (from each request's due time), in ms."""
    paced = [name for name in results if PROFILES[name].paced]
    if not paced:
        return []
    columns = table_columns({name: results[name] for name in paced})
    heads = " | ".join(f"{LABELS[s]} {key} ms" for key in ("p99", "mean") for s in columns)
    lines = [
        "### Paced profiles: latency from each request's due time",
        "",
        f"| Profile | conns | target req/s | {heads} |",
        "|---|---:|---:|" + "---:|" * (2 * len(columns)),
    ]
    for name in paced:
        cells = [
            number_cell((summary_median(summary, name, s, key) or 0) / 1000, ".2f")
            for key in ("p99_us", "mean_us")
            for s in columns
        ]
        lines.append(
            f"| {name} | {connections(PROFILES[name], args)} | {rate(PROFILES[name], args):,} | "
            + " | ".join(cells)
            + " |"
        )
    return lines + [""]


def sent_lines(results):
    """What each server sent for the static rows' app.js: the peers do not all read q-values alike.
    curl asks over TLS h2 for static-h3 too (Debian's curl has no HTTP/3): the same files and rules."""
    lines = []
    for name in ("static-h2", "static-h3"):
        if name not in results:
            continue
        seen = {
            server: next((run["sent"] for run in runs if run.get("ok") and "sent" in run), None)
            for server, runs in results[name].items()
        }
        lines += [
            f"{name}, what GET /static/app.js with the profile's Accept-Encoding got: "
            + "; ".join(f"{LABELS[server]} {sent}" for server, sent in seen.items() if sent),
            "",
        ]
    return lines


def not_served_lines(unserved):
    """unserved: {server: {profile: why}}, one line per server and reason."""
    lines = []
    for server, by_profile in unserved.items():
        reasons = {}
        for profile, why in by_profile.items():
            reasons.setdefault(why, []).append(profile)
        lines += [f"- {LABELS[server]}: – in {', '.join(profiles)}: {why}" for why, profiles in reasons.items()]
    return ["### Not served", ""] + lines + [""] if lines else []


def not_measured_lines():
    return (
        ["### Not measured here (scored 0 by the board's sum until they are)", ""]
        + [f"- {name}: {why}" for name, why in NOT_MEASURED.items()]
        + [""]
    )


def scale_note(args):
    return (
        f"Every profile runs at this machine's scale: one server core, the arena's connections ÷ {args.scale} "
        f"(at least {MIN_CONNECTIONS}), latency-1m paced at {ARENA_RATE_1M:,} ÷ {args.scale} = "
        f"{rate(PROFILES['latency-1m'], args):,} req/s, latency-10k at {args.latency_rate:,} and 8gbit at "
        f"{args.rate_8gbit:,} req/s."
    )


def scored_servers(summary):
    """The servers a summary has figures for, in SERVERS's order."""
    present = {server for by_server in summary.values() for server in by_server}
    return [server for server in SERVERS if server in present]


def render_score(summary, args):
    """(markdown lines, scores) of arena_score over the servers summary measured."""
    servers = scored_servers(summary)
    scored = arena_score.score(summary, servers)
    return arena_score.score_lines(scored, servers, LABELS, NOT_MEASURED, scale_note(args)), scored


def stack_lines(results, summary, args):
    """The stacks' rows: per edge, req/s and CPU µs per request of the edge, the server, the two
    together and PostgreSQL; and xKit's edge against nginx's."""
    if not results:
        return []
    keys = (
        "cpu_us_per_request",
        "server_cpu_us_per_request",
        "auth_cpu_us_per_request",
        "stack_cpu_us_per_request",
        "pg_cpu_us_per_request",
    )
    lines = [
        "### Stacks: an edge in front of xkit-arena",
        "",
        "| Stack | conns | edge | req/s | edge CPU µs/req | server µs/req | authsvc µs/req "
        "| stack µs/req | PostgreSQL µs/req | runs |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, by_edge in results.items():
        for edge, runs in by_edge.items():
            cells = " | ".join(number_cell(summary_median(summary, name, edge, key), ".2f") for key in keys)
            rate_cell = number_cell(summary_median(summary, name, edge, "req_per_s"), ",.0f")
            lines.append(
                f"| {name} | {arena_stacks.connections(arena_stacks.STACKS[name], args)} | {LABELS[edge]} | "
                f"{rate_cell} | {cells} | {runs_cell(runs)} |"
            )
        peer = "caddy" if "caddy" in arena_stacks.STACKS[name].edges else "nginx"
        for ours in ("xkit", "xkit-h2c"):
            ratios = []
            for what, key in (("edge", "cpu_us_per_request"), ("stack", "stack_cpu_us_per_request")):
                xkit, theirs = (summary_median(summary, name, edge, key) for edge in (ours, peer))
                ratios.append(f"{what} {ratio_cell(xkit, theirs)}")
            if ours in by_edge:
                lines += [
                    "",
                    f"{name}, CPU per request of {LABELS[ours]}'s edge ÷ {LABELS[peer]}'s: " + ", ".join(ratios) + ".",
                ]
    lines += [
        "",
        "The stack: the edge, the server and the auth service (production-stack). The edge (one worker) "
        "on the server CPUs; xkit-arena and xkit-authsvc (one worker each), PostgreSQL, Redis and h2load "
        "(h3load for gateway-h3) on the client CPUs; the edges to the server over HTTP/1.1 keep up to 256 "
        "idle connections, the h2c one sends every request on one. Load:",
        "",
    ]
    for name in results:
        stack = arena_stacks.STACKS[name]
        argv = shlex.join(arena_stacks.load_argv(stack, "URI_FILE", args.duration, args)).replace(
            arena_stacks.arena_token(), "TOKEN"
        )
        lines.append(f"- {name}: {stack.title} — `{argv}`")
        if stack.auth:
            writes = arena_stacks.writes_argv(stack, "WRITE_URIS", "BODY", args.duration, args)
            lines.append(f"  and at once `{shlex.join(writes).replace(arena_stacks.arena_token(), 'TOKEN')}`")
    lines.append("")
    return lines


def render(results, skipped, args, machine, unserved=None):
    stacks = {name: by_edge for name, by_edge in results.items() if name in arena_stacks.STACKS}
    results = {name: by_server for name, by_server in results.items() if name not in arena_stacks.STACKS}
    stack_summary = summarize_rounds(stacks, lambda name: arena_stacks.KEYS)
    summary = summarize_rounds(results, lambda profile: PACED_KEYS if PROFILES[profile].paced else KEYS)
    lines = ["## HttpArena profiles at this machine's scale", "", machine, "", scale_note(args), ""]
    if results:
        lines += throughput_lines(results, summary, args) + [""]
        lines += [
            "Best peer: the peer with the most req/s, or the least CPU µs/req; echo-ws rows count "
            "messages, the paced rows run at a fixed rate (req/s is the rate reached). CPU µs/req is the "
            "server's user + system time (`/proc/PID/stat`); sys µs/req is its system part, the kernel's "
            "work for it, which on loopback includes the receiving side's TCP path.",
            "",
        ]
    lines += latency_lines(results, summary, args)
    lines += stack_lines(stacks, stack_summary, args)
    lines += sent_lines(results)
    lines += not_served_lines(unserved or {})
    lines += not_measured_lines()
    if results:
        lines += [
            "Load per profile (PORT: the profile's port; REQUEST_FILE: one SumRequest{a=1, b=2}; "
            f"URI_FILE: the 20 static files; BODY_FILE: {ECHO_BODY_BYTES:,} random bytes):",
            "",
        ]
        lines += [f"- {name}: {PROFILES[name].title} — `{shown_argv(PROFILES[name], args)}`" for name in results]
        lines += [""]
    busy = [
        summary_median(by_name, name, server, "others_busy")
        for by_name, runs in ((summary, results), (stack_summary, stacks))
        for name in runs
        for server in runs[name]
    ]
    busy = [value for value in busy if value is not None]
    lines += [
        f"Other load on the measured cores (medians, in cores): up to {max(busy, default=0):.2f}; "
        "req/s moves with it, CPU µs/req much less.",
        "",
    ]
    lines += failure_lines({**results, **stacks}, skipped)
    return "\n".join(lines).rstrip() + "\n", summary, stack_summary


def machine_description(args):
    versions = ", ".join(
        environment.first_line(argv)
        for argv in (
            ["wrk", "--version"],
            ["h2load", "--version"],
            [find_tool("go", "/usr/local/go/bin/go") or "go", "version"],
            ["pkg-config", "--modversion", "libh2o-evloop"],
            [find_tool("nginx", "/usr/sbin/nginx") or "nginx", "-v"],
            [find_tool("caddy", "/usr/bin/caddy") or "caddy", "version"],
        )
    )
    return (
        f"{environment.host_line()}; {versions}. xkit-arena, Go's arena_server and Caddy (GOMAXPROCS=1), "
        f"h2o and nginx with one worker on CPU {environment.cpu_list(args.server_cpus)}, the load (one thread, "
        f"or a Go program) on CPU {environment.cpu_list(args.client_cpus)}; the arena's connections ÷ "
        f"{args.scale} (at least {MIN_CONNECTIONS}); latency-1m paced at "
        f"{rate(PROFILES['latency-1m'], args):,} req/s, latency-10k at {args.latency_rate:,} req/s and "
        f"8gbit at {args.rate_8gbit:,} req/s in all; {args.duration} s per run after "
        f"{WARMUP_SECONDS} s warm-up, {args.runs} runs, medians."
    )


def copy_data(source, work_dir):
    """The arena's data where h2o's and nginx's unprivileged workers can read it."""
    if not (source / "dataset.json").is_file() or not (source / "static").is_dir():
        raise SetupFailed(f"no dataset.json and static/ in {source} (--data-dir)")
    target = work_dir / "data"
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def prepare(args, work_dir):
    """({name: binary}, {name: why skipped}, tools, ArenaSetup, {load tool: binary})."""
    cert, key = make_certificate(work_dir)
    certs_dir = work_dir / "certs"
    certs_dir.mkdir(mode=0o755)
    (certs_dir / "server.crt").symlink_to(cert)
    (certs_dir / "server.key").symlink_to(key)
    setup = ArenaSetup(copy_data(args.data_dir.resolve(), work_dir), certs_dir, len(args.server_cpus))
    binaries, skipped = {}, {}
    if "xkit" in args.servers:
        binary = args.build_dir.resolve() / "arena" / "xkit-arena"
        if binary.is_file():
            binaries["xkit"] = binary
        else:
            skipped["xkit"] = f"{binary} not built (configure with -DXK_BUILD_ARENA=ON)"
    load_tools = {}
    try:
        go_dir = build_go_peers(work_dir / "go", ("arena_server", *GO_TOOLS))
        load_tools = {tool: go_dir / tool for tool in GO_TOOLS}
        if "go" in args.servers:
            binaries["go"] = go_dir / "arena_server"
    except SetupFailed as error:
        if "go" in args.servers:
            skipped["go"] = str(error)
        say(f"no ws_load and paced_load, so no echo-ws or paced rows: {error}")
    h3load = args.build_dir.resolve() / "bench" / H3LOAD
    if h3load.is_file():
        load_tools[H3LOAD] = h3load
    else:
        say(f"no {h3load}, so no HTTP/3 rows (configure with -DXK_BUILD_BENCHMARKS=ON)")
    found, missing, tools = find_infrastructure(args.servers, work_dir)
    binaries.update(found)
    skipped.update(missing)
    for name, reason in skipped.items():
        say(f"skipping {name}: {reason}")
    return binaries, skipped, tools, setup, load_tools


def plan_profiles(args, binaries, tools, load_tools):
    """({profile: [servers that run it]}, {server: {profile: why not}}). Profiles whose load
    generator could not be built run on nobody."""
    plan, unserved = {}, {}
    for name in args.cases:
        if name in arena_stacks.STACKS:
            if arena_stacks.STACKS[name].http3 and H3LOAD not in load_tools:
                continue
            plan[name] = [
                edge
                for edge in arena_stacks.STACKS[name].edges
                if arena_stacks.EDGE_BINARY[edge] in binaries and arena_stacks.EDGE_BINARY[edge] in args.servers
            ]
            continue
        profile = PROFILES[name]
        if profile.tool in (*GO_TOOLS, H3LOAD) and profile.tool not in load_tools:
            continue
        plan[name] = []
        for server in (s for s in SERVERS if s in binaries):
            why = not_served(server, name, tools)
            if why:
                unserved.setdefault(server, {})[name] = why
            else:
                plan[name].append(server)
    return plan, unserved


@dataclass
class StackInputs:
    """What arena_stacks.measure starts its runs from."""

    arena: Path
    authsvc: Path
    setup: ArenaSetup
    database: object  # scripts/arena_db.LocalDatabase, started
    static_names: list
    edges: dict  # {edge: binary}
    tools: dict


def prepare_stacks(args, bench, setup, binaries, tools):
    """(StackInputs, the started database, None) for the stack rows, or (None, None, why not)."""
    arena = binaries.get("xkit")
    edge, authsvc = (args.build_dir.resolve() / "arena" / name for name in ("xkit-edge", "xkit-authsvc"))
    if arena is None or not edge.is_file() or not authsvc.is_file():
        return None, None, f"xkit-arena, {edge.name} or {authsvc.name} not built (configure with -DXK_BUILD_ARENA=ON)"
    edges = {"xkit": edge}
    for name in ("nginx", "caddy"):
        if name in binaries:
            edges[name] = binaries[name]
    database = arena_db.LocalDatabase(
        bench.work_dir / "db",
        args.first_port + 900,
        args.first_port + 901,
        cpus=environment.cpu_list(args.client_cpus),
    )
    try:
        database.start()
    except (OSError, SystemExit, subprocess.CalledProcessError) as error:  # arena_db exits when one cannot start
        database.stop()
        return None, None, f"no PostgreSQL for /async-db: {error}"
    inputs = StackInputs(arena, authsvc, setup, database, static_files(setup.data_dir), edges, tools)
    return inputs, database, None


def score_report(path, args):
    """--score-from: the scores of an earlier report's summary, printed; nothing is measured."""
    try:
        report = json.loads(path.read_text())
        summary = report["summary"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        args.parser.error(f"--score-from {path}: not an arena report ({error})")
    lines, _ = render_score(summary, args)
    print("\n".join([f"Scores of {path}", "", *lines]).rstrip())
    return 0


def run(args):
    if args.scale < 1:
        args.parser.error("--scale must be at least 1")
    if args.latency_rate < 1 or args.rate_8gbit < 1 or (args.rate_1m is not None and args.rate_1m < 1):
        args.parser.error("the paced rates must be at least 1 request per second")
    if args.score_from:
        return score_report(args.score_from, args)

    def measure(bench):
        machine = machine_description(args)
        binaries, skipped, tools, setup, load_tools = prepare(args, bench.work_dir)
        grpc_body = bench.work_dir / "sum-request"
        grpc_body.write_bytes(GRPC_REQUEST)
        echo_body = bench.work_dir / "echo-body"
        echo_body.write_bytes(os.urandom(ECHO_BODY_BYTES))
        inputs = Inputs(
            {"{grpc_body}": grpc_body, "{echo_body}": echo_body}, bench.work_dir, setup.data_dir, load_tools
        )

        def once(name, server_name):
            extra = [bench.ports.take() for _ in PORTS[1:]]
            if server_name == "caddy":
                peer = caddy_peer(binaries["caddy"], setup, extra, h3_probe(args, "/static/reset.css"))
            else:
                peer = make_peer(server_name, binaries[server_name], setup, extra, tools)
            return bench.run_once(
                peer, name, lambda server: measure_profile(PROFILES[name], server, extra, args, inputs)
            )

        plan, unserved = plan_profiles(args, binaries, tools, load_tools)
        stacks = [name for name in plan if name in arena_stacks.STACKS]
        database = stack_inputs = None
        if stacks:
            stack_inputs, database, why = prepare_stacks(args, bench, setup, binaries, tools)
            if why:
                say(f"no stack rows: {why}")
                for name in stacks:
                    plan.pop(name)
                skipped["stacks"] = why

        def each(name, server_name):
            if name in arena_stacks.STACKS:
                return arena_stacks.measure(name, server_name, bench, stack_inputs)
            return once(name, server_name)

        try:
            results = bench.rounds(plan, each)
        finally:
            if database:
                database.stop()
        markdown, summary, stack_summary = render(results, skipped, args, machine, unserved)
        report = {
            "machine": machine,
            "skipped": skipped,
            "not_served": unserved,
            "not_measured": NOT_MEASURED,
            "tools": tools,
            "results": results,
            "summary": summary,
            "stacks": stack_summary,
        }
        if args.score:
            lines, report["score"] = render_score(summary, args)
            markdown = markdown.rstrip() + "\n\n" + "\n".join(lines).rstrip() + "\n"
        return markdown, report

    return run_comparison(args, "arena", ["taskset", "wrk", "h2load", "openssl", "curl"], measure, fd_limit=8192)
