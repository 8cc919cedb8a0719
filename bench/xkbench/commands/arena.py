"""arena: xKit's HttpArena entry (arena/main.c, xkit-arena) against its Go peer
(bench/peers/go/arena_server, net/http alone) under the arena's load shapes, scaled down.

Both serve the arena's endpoints on four ports (ARENA_PORTS: h1+h2c, TLS http/1.1, h2c only,
TLS h2) with the dataset from --data-dir and a fresh self-signed RSA-2048 certificate. Each
runs with one worker pinned to --server-cpus (xkit-arena takes its workers from its affinity,
Go from GOMAXPROCS=1); wrk -t1 or h2load -t1 runs on --client-cpus. The arena loads 64
logical CPUs; here every profile's connections are divided by --scale (default 64: the same
connections per server CPU), at least 4. A fresh server per run, rounds alternate, medians.
"""

import shlex
from dataclasses import dataclass
from pathlib import Path

from .. import environment
from ..cli import add_common_options, say
from ..loadgen import PIPELINE_SCRIPT, h2load_argv, measured_load, unmeasured_load, wrk_argv
from ..paths import REPO_ROOT, WRK_SCRIPTS, shown
from ..prepare import SetupFailed, build_go_peers, make_certificate
from ..rounds import failure_lines, runs_cell
from ..servers import Peer, find_tool
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison

HELP = "the HttpArena profiles at this machine's scale: xKit's arena entry against its Go peer"
SERVERS = ("xkit", "go")
LABELS = {"xkit": "xKit", "go": "Go"}
PORTS = ("h1", "tls-h1", "h2c", "tls-h2")  # ARENA_PORTS's order
DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "arena" / "data"
BASELINE_SCRIPT = WRK_SCRIPTS / "arena_baseline.lua"
JSON_SCRIPT = WRK_SCRIPTS / "arena_json.lua"
GRPC_PATH = "/benchmark.BenchmarkService/GetSum"
# SumRequest{a = 1, b = 2} in one uncompressed gRPC message: flag, length, two varint fields.
GRPC_REQUEST = bytes([0, 0, 0, 0, 4, 0x08, 1, 0x10, 2])
GRPC_HEADERS = ("-H", "content-type: application/grpc", "-H", "te: trailers")
KEYS = ("req_per_s", "cpu_us_per_request", "server_busy", "client_busy", "others_busy")
MIN_CONNECTIONS = 4


@dataclass(frozen=True)
class Profile:
    """One of the arena's profiles: the tool, the port (one of PORTS), the target, the arena's
    connections (divided by --scale here), and the tool's extra arguments: wrk's options and
    its script's arguments, or h2load's options ("{grpc_body}" is the request file's path)."""

    title: str
    tool: str
    port: str
    path: str
    arena_connections: int
    options: tuple = ()
    script_args: tuple = ()

    @property
    def scheme(self):
        return "https" if self.port.startswith("tls") else "http"


# static-h2 and echo-ws are one row each here once arena/main.c serves /static and /ws.
PROFILES = {
    "baseline": Profile("GET and POST (Content-Length, chunked) /baseline11", "wrk", "h1",
                        "/baseline11", 4096, ("-s", str(BASELINE_SCRIPT))),
    "limited-conn": Profile("baseline, a reconnect every 10 requests", "wrk", "h1", "/baseline11", 4096,
                            ("-s", str(BASELINE_SCRIPT)), ("10",)),
    "pipelined": Profile("GET /pipeline, 16 pipelined", "wrk", "h1", "/pipeline", 4096,
                         ("-s", str(PIPELINE_SCRIPT)), ("/pipeline",)),
    "async": Profile("GET /delay/15, held connections", "wrk", "h1", "/delay/15", 32000),
    "json-tls": Profile("GET /json/{count}?m=, 7 pairs, TLS 1.3 http/1.1", "wrk", "tls-h1", "/json", 4096,
                        ("-s", str(JSON_SCRIPT))),
    "baseline-h2": Profile("GET /baseline2 over TLS h2, 100 streams", "h2load", "tls-h2",
                           "/baseline2?a=1&b=1", 1024, ("--npn-list=h2",)),
    "baseline-h2c": Profile("GET /baseline2, h2c prior knowledge, 100 streams", "h2load", "h2c",
                            "/baseline2?a=1&b=1", 1024),
    "unary-grpc": Profile("gRPC GetSum over h2c, 100 streams", "h2load", "h1", GRPC_PATH, 1024,
                          ("-d", "{grpc_body}", *GRPC_HEADERS)),
    "unary-grpc-tls": Profile("gRPC GetSum over TLS h2, 100 streams", "h2load", "tls-h2", GRPC_PATH, 1024,
                              ("--npn-list=h2", "-d", "{grpc_body}", *GRPC_HEADERS)),
}
STREAMS = 100


def add_arguments(parser):
    add_common_options(parser, first_port=26000, servers=(SERVERS, SERVERS),
                       cases=(tuple(PROFILES), tuple(PROFILES)))
    parser.add_argument("--scale", type=int, default=64,
                        help="divide the arena's connections by this (default 64: its logical CPUs "
                             "per server CPU here)")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help="the arena's data, with dataset.json (default ../shared/arena/data)")


def connections(profile, args):
    return max(MIN_CONNECTIONS, profile.arena_connections // args.scale)


def load_argv(profile, ports, seconds, args, grpc_body):
    target = f"{profile.scheme}://127.0.0.1:{ports[profile.port]}{profile.path}"
    options = [str(grpc_body) if option == "{grpc_body}" else option for option in profile.options]
    if profile.tool == "wrk":
        return wrk_argv(target, connections(profile, args), seconds, options=options,
                        script_args=profile.script_args)
    return h2load_argv(target, connections(profile, args), seconds, streams=STREAMS, options=options)


def shown_argv(profile, args):
    argv = load_argv(profile, dict.fromkeys(PORTS, "PORT"), args.duration, args, "REQUEST_FILE")
    return shlex.join(shown(arg) if arg.startswith(str(WRK_SCRIPTS)) else arg for arg in argv)


def arena_peer(name, binary, data_dir, certs_dir, extra_ports, env=None):
    """A server of the arena's contract whose first port comes from the picker; the other
    three, taken beforehand, go with it into ARENA_PORTS."""
    def command(port, _dir):
        ports = ",".join(str(p) for p in (port, *extra_ports))
        return ["env", f"ARENA_PORTS={ports}", f"DATA_DIR={data_dir}", f"CERTS_DIR={certs_dir}", str(binary)]
    return Peer(name, command, env or {}, probe_path="/baseline11?a=1&b=1")


def measure_profile(profile, server, extra_ports, args, grpc_body):
    """A warm-up run (h2load's first HTTP/2 or TLS connections, wrk's connections), then the
    measured one; the server's CPU over the whole measured run."""
    ports = dict(zip(PORTS, (server.port, *extra_ports)))
    protocol = {"h2load": "h2" if profile.scheme == "https" else "h2c"}.get(profile.tool)
    unmeasured_load(load_argv(profile, ports, WARMUP_SECONDS, args, grpc_body), args.client_cpus,
                    WARMUP_SECONDS, h2_protocol=protocol)
    result, run = measured_load(load_argv(profile, ports, args.duration, args, grpc_body), args.client_cpus,
                                args.duration, server, h2_protocol=protocol, h2load_window=False)
    return {"requests": result.requests, "req_per_s": result.req_per_s, **run.per_request(result.requests)}


# --- report -------------------------------------------------------------------


def ratio_cell(ours, theirs):
    return f"{ours / theirs:.2f}×" if ours and theirs else "–"


def render(results, skipped, args, machine):
    summary = summarize_rounds(results, lambda profile: KEYS)
    lines = ["## HttpArena profiles at this machine's scale", "", machine, "",
             "| Profile | conns | xKit req/s | Go req/s | req/s xKit ÷ Go | xKit CPU µs/req | Go CPU µs/req "
             "| CPU xKit ÷ Go | runs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, by_server in results.items():
        rate = {server: summary_median(summary, name, server, "req_per_s") for server in SERVERS}
        cpu = {server: summary_median(summary, name, server, "cpu_us_per_request") for server in SERVERS}
        runs = " / ".join(f"{LABELS[server]} {runs_cell(r)}" for server, r in by_server.items())
        lines.append(f"| {name} | {connections(PROFILES[name], args)} | "
                     + " | ".join(f"{rate[s]:,.0f}" if rate[s] else "–" for s in SERVERS)
                     + f" | {ratio_cell(rate['xkit'], rate['go'])} | "
                     + " | ".join(f"{cpu[s]:.2f}" if cpu[s] else "–" for s in SERVERS)
                     + f" | {ratio_cell(cpu['xkit'], cpu['go'])} | {runs} |")
    lines += ["", "Load per profile (PORT: the profile's port; REQUEST_FILE: one SumRequest{a=1, b=2}):", ""]
    lines += [f"- {name}: {PROFILES[name].title} — `{shown_argv(PROFILES[name], args)}`" for name in results]
    busy = [summary_median(summary, name, server, "others_busy") for name in results for server in results[name]]
    busy = [value for value in busy if value is not None]
    lines += ["", f"Other load on the measured cores (medians, in cores): up to {max(busy, default=0):.2f}; "
                  "req/s moves with it, CPU µs/req much less.", ""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def machine_description(args):
    versions = ", ".join(environment.first_line(argv) for argv in (
        ["wrk", "--version"], ["h2load", "--version"],
        [find_tool("go", "/usr/local/go/bin/go") or "go", "version"]))
    return (f"{environment.host_line()}; {versions}. xkit-arena and Go's arena_server (GOMAXPROCS=1) "
            f"with one worker on CPU {environment.cpu_list(args.server_cpus)}, wrk -t1 / h2load -t1 "
            f"on CPU {environment.cpu_list(args.client_cpus)}; the arena's connections ÷ {args.scale} "
            f"(at least {MIN_CONNECTIONS}); {args.duration} s per run after {WARMUP_SECONDS} s warm-up, "
            f"{args.runs} runs, medians.")


def prepare(args, work_dir):
    """({name: binary}, {name: why skipped}, the certificates' directory)."""
    if not (args.data_dir / "dataset.json").is_file():
        raise SetupFailed(f"no dataset.json in {args.data_dir} (--data-dir)")
    cert, key = make_certificate(work_dir)
    certs_dir = work_dir / "certs"
    certs_dir.mkdir()
    (certs_dir / "server.crt").symlink_to(cert)
    (certs_dir / "server.key").symlink_to(key)
    binaries, skipped = {}, {}
    if "xkit" in args.servers:
        binary = args.build_dir.resolve() / "arena" / "xkit-arena"
        if binary.is_file():
            binaries["xkit"] = binary
        else:
            skipped["xkit"] = f"{binary} not built (configure with -DXK_BUILD_ARENA=ON)"
    if "go" in args.servers:
        try:
            binaries["go"] = build_go_peers(work_dir / "go", ("arena_server",)) / "arena_server"
        except SetupFailed as error:
            skipped["go"] = str(error)
    for name, reason in skipped.items():
        say(f"skipping {name}: {reason}")
    return binaries, skipped, certs_dir


def run(args):
    if args.scale < 1:
        args.parser.error("--scale must be at least 1")

    def measure(bench):
        machine = machine_description(args)
        binaries, skipped, certs_dir = prepare(args, bench.work_dir)
        grpc_body = bench.work_dir / "sum-request"
        grpc_body.write_bytes(GRPC_REQUEST)
        data_dir = args.data_dir.resolve()

        def once(name, server_name):
            extra = [bench.ports.take() for _ in PORTS[1:]]
            peer = arena_peer(server_name, binaries[server_name], data_dir, certs_dir, extra,
                              {"GOMAXPROCS": str(len(args.server_cpus))} if server_name == "go" else None)
            return bench.run_once(peer, name, lambda server: measure_profile(
                PROFILES[name], server, extra, args, grpc_body))

        plan = {name: [server for server in SERVERS if server in binaries] for name in args.cases}
        results = bench.rounds(plan, once)
        markdown, summary = render(results, skipped, args, machine)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "arena", ["taskset", "wrk", "h2load", "openssl"], measure, fd_limit=8192)
