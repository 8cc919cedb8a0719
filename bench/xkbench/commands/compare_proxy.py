"""compare proxy: xKit's reverse proxy against the least-work proxy, nginx, h2o, HAProxy and Go.

Every proxy runs with one worker pinned to --server-cpus; the load generator (-t1), the upstream
and this process run pinned to --client-cpus. The upstream is the least-work responder
(bench/servers/baseline_responder.c --bodies), which answers any request with a 4-byte pong once
its body has come, started once for the whole command. Every proxy keeps up to --upstream-pool idle upstream connections
(xKit --upstream-pool, nginx keepalive, Go MaxIdleConnsPerHost; h2o and HAProxy keep what
they open). Cases:
  get      wrk -c100, GET /proxied over HTTP/1.1, proxied over HTTP/1.1
  h2       h2load -c10 -m10 over TLS 1.3 (HTTP/2 by ALPN), GET /proxied, proxied over HTTP/1.1
  post64k  wrk -c20, POST /proxied with a 64 KiB body, proxied over HTTP/1.1
  get256k  wrk -c20, GET /big over HTTP/1.1, answered by the upstream with a 256 KiB body (xKit
           splices it to the client, conf.splice_min)
  auth     wrk -c100, GET /proxied over HTTP/1.1, first checked by an auth subrequest to the same
           upstream (GET /auth, 200), then proxied: two upstream calls per request (xKit's
           --upstream-auth, nginx's auth_request; the other proxies have none)
  idle     the proxy's resident memory per idle keep-alive client connection that has had one
           request proxied (its upstream connection back in the pool)
A fresh proxy per run, round after round (the order reversed every other round); medians.
"""

from dataclasses import dataclass
from pathlib import Path

from .. import environment
from ..cli import add_common_options, check_at_least_one
from ..loadgen import POST_SCRIPT, h2load_argv, load_figures, measured_load, unmeasured_load, wrk_argv
from ..prepare import SetupFailed, build_go_peers, make_certificate
from ..probes import measure_idle
from ..proxy_peers import LABELS, PROXIED_PATH, ProxyContext, find_proxies, upstream_peer
from ..rounds import failure_lines, runs_cell
from ..servers import RunFailed, find_tool, running
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison
from .compare_http1 import CPU_SPLIT_NOTE, THROUGHPUT_KEYS, cpu_table

HELP = "reverse proxy: xKit, the least-work proxy, nginx, h2o, HAProxy and Go in front of one upstream"
SERVERS = tuple(LABELS)
POST_BODY_BYTES = 64 << 10
BIG_PATH = "/big"  # the upstream's 256 KiB answer (baseline_responder --bodies)
H2_STREAMS = 10


@dataclass(frozen=True)
class Case:
    title: str
    front: str  # "http1", "h2tls" or "http1auth"
    tool: str  # "wrk" or "h2load"
    connections: int
    posts_body: bool = False
    path: str = PROXIED_PATH


CASES = {
    "get": Case("HTTP/1.1 front, GET proxied", "http1", "wrk", 100),
    "h2": Case(f"HTTP/2 over TLS front (h2load -m{H2_STREAMS}), GET proxied over HTTP/1.1", "h2tls", "h2load", 10),
    "post64k": Case("HTTP/1.1 front, POST with a 64 KiB body proxied", "http1", "wrk", 20, posts_body=True),
    "get256k": Case("HTTP/1.1 front, GET of a 256 KiB body proxied", "http1", "wrk", 20, path=BIG_PATH),
    "auth": Case("HTTP/1.1 front, GET proxied after an auth subrequest (two upstream calls)", "http1auth", "wrk", 100),
    "idle": Case("Idle proxied keep-alive connections", "http1", "none", 0),
}

# The targets: xKit's CPU µs/req ÷ the peer's at most this (case, peer) -> bound.
TARGETS = {
    ("get", "nginx"): 0.75,
    ("get", "h2o"): 0.75,
    ("get", "haproxy"): 0.85,
    ("get", "go"): 0.2,
    ("get", "floor"): 1.15,
    ("h2", "nginx"): 0.6,
    ("h2", "h2o"): 0.6,
    ("post64k", "nginx"): 0.75,
}


def add_arguments(parser):
    add_common_options(parser, first_port=26000, servers=(SERVERS, SERVERS), cases=(tuple(CASES), tuple(CASES)))
    parser.add_argument("--upstream-pool", type=int, default=256, help="idle upstream connections each proxy keeps")
    parser.add_argument(
        "--xkit-build-dir", type=Path, help="xKit's bench servers from this build instead (another branch's proxy)"
    )
    parser.add_argument("--idle-connections", type=int, default=2000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)


def load_argv(case, server, seconds, body_path):
    """wrk (with post.lua for a body) or h2load (HTTP/2 only, by ALPN) against the proxy."""
    url = f"{'https' if server.peer.tls else 'http'}://127.0.0.1:{server.port}{case.path}"
    if case.tool == "h2load":
        return h2load_argv(url, case.connections, seconds, streams=H2_STREAMS, options=["--npn-list=h2"])
    if case.posts_body:
        return wrk_argv(url, case.connections, seconds, options=["-s", str(POST_SCRIPT)], script_args=[str(body_path)])
    return wrk_argv(url, case.connections, seconds)


def measure_case(case_name, server, args, body_path):
    case = CASES[case_name]
    h2_protocol = "h2" if case.tool == "h2load" else None

    def warm_up():
        argv = load_argv(CASES["get"] if case.tool == "none" else case, server, WARMUP_SECONDS, body_path)
        unmeasured_load(argv, args.client_cpus, WARMUP_SECONDS, h2_protocol=h2_protocol)

    if case_name == "idle":
        request = f"GET {PROXIED_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        return measure_idle(server, args.idle_connections, args.idle_seconds, warm_up, request=request)
    warm_up()
    argv = load_argv(case, server, args.duration, body_path)
    result, run = measured_load(
        argv, args.client_cpus, args.duration, server, h2_protocol=h2_protocol, h2load_window=False
    )
    return {**load_figures(result), **run.per_request(result.requests)}


# --- report -------------------------------------------------------------------


def case_table(case_name, by_server, summary):
    case = CASES[case_name]
    client = case.tool
    shape = f"`{client} -c{case.connections}" + (f" -m{H2_STREAMS}`" if client == "h2load" else "`")
    return [f"### {case.title} — {shape}", ""] + cpu_table(by_server, summary[case_name], client, with_latency=True)


def idle_table(by_server, summary, connections):
    lines = [
        f"### {CASES['idle'].title} ({connections:,}, each proxied once, then idle)",
        "",
        "| Proxy | RSS bytes/conn (median) | runs | spread |",
        "|---|---:|---|---|",
    ]
    for server, runs in by_server.items():
        stats = summary["idle"][server]["bytes_per_connection"]
        if stats is None:
            lines.append(f"| {server} | – | {runs_cell(runs)} | |")
        else:
            lines.append(
                f"| {server} | {stats['median']:,.0f} | {runs_cell(runs)} | {stats['min']:,.0f}–{stats['max']:,.0f} |"
            )
    return lines


def ratio_cell(summary, case, peer):
    ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
    theirs = summary_median(summary, case, peer, "cpu_us_per_request")
    if not ours or not theirs:
        return "n/a"
    ratio = ours / theirs
    bound = TARGETS.get((case, peer))
    if bound is None:
        return f"{ratio:.2f}×"
    return f"{ratio:.2f}× (target ≤ {bound:.2f}×: {'met' if ratio <= bound else 'not met'})"


def ratio_table(summary):
    """xKit's median CPU µs/req over each peer's, with the issue's target where there is one."""
    peers = [peer for peer in SERVERS if peer != "xkit"]
    cases = [case for case in summary if case != "idle"]
    lines = [
        "### xKit's CPU µs/req ÷ each proxy's (of medians)",
        "",
        "| Case | " + " | ".join(f"xkit ÷ {peer}" for peer in peers) + " |",
        "|---|" + "---|" * len(peers),
    ]
    for case in cases:
        lines.append(f"| {case} | " + " | ".join(ratio_cell(summary, case, peer) for peer in peers) + " |")
    return lines


def machine_description(args):
    versions = ", ".join(
        environment.first_line(argv)
        for argv in (
            [find_tool("nginx", "/usr/sbin/nginx") or "nginx", "-v"],
            [find_tool("h2o", "/usr/bin/h2o") or "h2o", "--version"],
            [find_tool("haproxy", "/usr/sbin/haproxy") or "haproxy", "-v"],
            [find_tool("go", "/usr/local/go/bin/go") or "go", "version"],
        )
    )
    return (
        f"{environment.host_line()}; {versions}. Proxies on CPU {environment.cpu_list(args.server_cpus)} with one "
        f"worker; the load generator (-t1), the upstream (the least-work responder) and this runner on CPU "
        f"{environment.cpu_list(args.client_cpus)}; "
        + (f"xKit's servers from {args.xkit_build_dir}; " if args.xkit_build_dir else "")
        + f"up to {args.upstream_pool} idle upstream connections each; "
        f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians; "
        f"load average before: {environment.load_average()}."
    )


def render(results, skipped, args, machine):
    keys = lambda case: ("bytes_per_connection",) if case == "idle" else THROUGHPUT_KEYS  # noqa: E731
    summary = summarize_rounds(results, keys)
    lines = ["## Reverse proxy comparison", "", machine, "", CPU_SPLIT_NOTE, ""]
    for case, by_server in results.items():
        if case == "idle":
            lines += idle_table(by_server, summary, args.idle_connections) + [""]
        else:
            lines += case_table(case, by_server, summary) + [""]
    lines += ratio_table(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def prepare_context(args, work_dir, upstream_port, needs_tls):
    context = ProxyContext(
        build_dir=args.build_dir.resolve(),
        xkit_build_dir=(args.xkit_build_dir or args.build_dir).resolve(),
        upstream=f"127.0.0.1:{upstream_port}",
        pool=args.upstream_pool,
    )
    if needs_tls:
        try:
            context.cert, context.key = make_certificate(work_dir)
        except SetupFailed as error:
            context.cert_problem = str(error)
    if "go" in args.servers:
        try:
            context.go_bin = build_go_peers(work_dir / "go", ("reverse_proxy",))
        except SetupFailed as error:
            context.go_problem = str(error)
    return context


def run(args):
    check_at_least_one(args, "idle_connections", "upstream_pool")
    tools = ["taskset", "wrk"] + (["h2load"] if "h2" in args.cases else [])
    fd_limit = args.idle_connections * 3 + 1024 if "idle" in args.cases else None

    def measure(bench):
        machine = machine_description(args)
        body_path = bench.work_dir / "body64k"
        body_path.write_bytes(b"x" * POST_BODY_BYTES)  # no CRLF CRLF: the upstream counts heads by them
        upstream = upstream_peer(args.build_dir.resolve())
        try:
            with running(upstream, bench.ports, bench.work_dir, args.client_cpus, "upstream") as upstream_server:
                context = prepare_context(args, bench.work_dir, upstream_server.port, "h2" in args.cases)
                fronts = {CASES[case].front for case in args.cases}
                proxies = {front: find_proxies(args.servers, front, context) for front in fronts}
                plan = {case: list(proxies[CASES[case].front][0]) for case in args.cases}
                results = bench.rounds(
                    plan,
                    lambda case, name: bench.run_once(
                        proxies[CASES[case].front][0][name],
                        case,
                        lambda server: measure_case(case, server, args, body_path),
                    ),
                )
        except RunFailed as error:
            raise SystemExit(f"compare proxy: the upstream did not start: {error}") from None
        skipped = {
            f"{name} ({front})": reason
            for front, (_peers, missing) in proxies.items()
            for name, reason in missing.items()
            if any(CASES[case].front == front for case in args.cases)
        }
        markdown, summary = render(results, skipped, args, machine)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "compare/proxy", tools, measure, fd_limit)
