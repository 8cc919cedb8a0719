"""compare h3: xKit's HTTP/3 against ngtcp2's own server (gtlsserver), quic-go and Caddy.

Every server runs with one worker or thread pinned to --server-cpus, bench/h3load (our HTTP/3
load generator, build/bench/h3load) and this process pinned to --client-cpus. Cases:
  get   h3load -c10 -m64, GET /ping (xKit, quic-go); gtlsserver and Caddy serve no handler, so
        they answer GET /ping from a 4-byte static file of the same body
  post  h3load -c10 -m64, POST /echo with a 64 KiB body (xKit and quic-go echo it back)
  h2    xKit's own HTTPS/2 on the same shape: h2load -c10 -m64, GET /ping
  idle  the server's resident memory per idle QUIC connection (--idle-connections, each served
        one GET /ping, then held open by h3load --hold)
A fresh server per run, round after round (the order reversed every other round); medians.
h3load sends runs of packets with UDP_SEGMENT and reads with UDP_GRO, as quic-go's client does;
--plain-udp turns both off (a packet per call), for every server alike.
"""

import subprocess
import time

from .. import environment
from ..cli import add_common_options, say
from ..loadgen import h2load_argv, load_figures, measured_load, unmeasured_load
from ..peers import PeerContext, xkit_peer
from ..prepare import SetupFailed, build_go_peers, make_certificate
from ..report import LATENCY_METRICS
from ..rounds import failure_lines, runs_cell
from ..servers import Peer, RunFailed, find_tool, pinned, running
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison
from .compare_http1 import latency_cell, split_cell

HELP = "HTTP/3: xKit against gtlsserver (ngtcp2 + nghttp3), quic-go and Caddy"
SERVERS = ("xkit", "gtlsserver", "go", "caddy")
CASES = ("get", "post", "h2", "idle")
CONNECTIONS = 10
STREAMS = 64
POST_BYTES = 64 * 1024
MIN_IDLE_SHARE = 0.95
PING_BODY = b"pong"  # what xKit's and Go's GET /ping answer; the static peers serve it from a file
# Who serves what: gtlsserver and Caddy are file servers, with nothing that echoes a body.
SERVES = {"get": SERVERS, "post": ("xkit", "go"), "h2": ("xkit",), "idle": SERVERS}
TARGETS = (  # issue 27's: xKit's CPU µs/req ÷ the peer's, at most
    ("get", "gtlsserver", 0.6),
    ("get", "go", 0.15),
    ("get", "xkit-h2", 1.8),
    ("post", "go", 0.5),
)


def add_arguments(parser):
    add_common_options(parser, first_port=25000, servers=(SERVERS, SERVERS), cases=(CASES, CASES))
    parser.add_argument("--idle-connections", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)
    parser.add_argument(
        "--plain-udp",
        action="store_true",
        help="h3load sends a packet per send() and reads one per recv(), instead of runs with UDP_SEGMENT "
        "and UDP_GRO (as quic-go does)",
    )
    parser.add_argument(
        "--qpack-capacity",
        type=int,
        default=0,
        help="the QPACK dynamic table h3load's SETTINGS allow the server (default 0, as nghttp3's clients: static "
        "table only; browsers allow one)",
    )


# --- the load generator -------------------------------------------------------


def h3load_binary(args):
    return str((args.build_dir / "bench" / "h3load").resolve())


def h3load_argv(args, port, path, seconds=None, requests=None, body=None):
    argv = [h3load_binary(args), "-t1", f"-c{CONNECTIONS}", f"-m{STREAMS}"]
    argv += ["-n", str(requests)] if requests else ["-D", str(seconds), f"--warm-up-time={WARMUP_SECONDS}"]
    if body:
        argv += [f"--body-size={body}"]
    if args.plain_udp:
        argv += ["--no-gso", "--no-gro"]
    if args.qpack_capacity:
        argv += [f"--qpack-capacity={args.qpack_capacity}"]
    return argv + [f"https://127.0.0.1:{port}{path}"]


def h3_probe(args, path):
    """A readiness check for servers on UDP alone: one h3 request answered 2xx."""

    def probe(port):
        argv = [h3load_binary(args), "-t1", "-c1", "-m1", "-n", "1", f"https://127.0.0.1:{port}{path}"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=2)
        except subprocess.TimeoutExpired:
            return "no HTTP/3 answer in 2 s"
        return None if "1 succeeded" in done.stdout else "no HTTP/3 answer"

    return probe


# --- peers --------------------------------------------------------------------


def make_peers(args, work_dir):
    """({name: Peer}, {name: why skipped}), every one on the same RSA-2048 certificate."""
    peers, skipped = {}, {}
    cert, key = make_certificate(work_dir)
    htdocs = work_dir / "htdocs"
    htdocs.mkdir()
    (htdocs / "ping").write_bytes(PING_BODY)
    htdocs.chmod(0o755)
    if "xkit" in args.servers:
        context = PeerContext(build_dir=args.build_dir.resolve(), workers=1, cert=cert, key=key)
        peers["xkit"] = xkit_peer("https2", context)
    if "gtlsserver" in args.servers:
        gtlsserver = find_tool("gtlsserver", "/usr/sbin/gtlsserver")
        if gtlsserver is None:
            skipped["gtlsserver"] = "not installed (Debian: ngtcp2-server; bench/setup.sh --peers gtlsserver)"
        else:
            peers["gtlsserver"] = Peer(
                "gtlsserver",
                lambda port, _dir: [gtlsserver, "-q", "-d", str(htdocs), "127.0.0.1", str(port), str(key), str(cert)],
                probe=h3_probe(args, "/ping"),
            )
    if "go" in args.servers:
        try:
            go_bin = build_go_peers(work_dir / "go", ("h3_bench_server",))
            peers["go"] = Peer(
                "go",
                lambda port, _dir: [str(go_bin / "h3_bench_server"), str(port), str(cert), str(key)],
                {"GOMAXPROCS": "1"},
                probe=h3_probe(args, "/ping"),
            )
        except SetupFailed as error:
            skipped["go"] = str(error)
    if "caddy" in args.servers:
        caddy = find_tool("caddy", "/usr/bin/caddy")
        if caddy is None:
            skipped["caddy"] = "not installed (Debian: caddy; bench/setup.sh --peers caddy)"
        else:
            peers["caddy"] = Peer(
                "caddy", caddy_command(caddy, cert, key, htdocs), {"GOMAXPROCS": "1"}, probe=h3_probe(args, "/ping")
            )
    for name, reason in skipped.items():
        say(f"skipping {name}: {reason}")
    return peers, skipped


def caddy_command(caddy, cert, key, htdocs):
    """Caddy 2.6 serving htdocs over HTTP/3 (and HTTPS on TCP, which nobody asks), no logs."""

    def command(port, run_dir):
        config = run_dir / "Caddyfile"
        config.write_text(
            "{\n  admin off\n  auto_https off\n  servers {\n    protocols h1 h2 h3\n  }\n}\n"
            f"https://127.0.0.1:{port} {{\n  tls {cert} {key}\n  root * {htdocs}\n  file_server\n}}\n"
        )
        return [caddy, "run", "--config", str(config), "--adapter", "caddyfile"]

    return command


# --- cases --------------------------------------------------------------------


def measure(case, server, args):
    if case == "idle":
        return measure_idle(server, args)
    if case == "h2":
        argv = h2load_argv(
            f"https://127.0.0.1:{server.port}/ping",
            CONNECTIONS,
            args.duration,
            streams=STREAMS,
            options=[f"--warm-up-time={WARMUP_SECONDS}", "--npn-list=h2"],
        )
        result, run = measured_load(argv, args.client_cpus, args.duration + WARMUP_SECONDS, server, h2_protocol="h2")
        return {**load_figures(result), **run.per_request(result.requests)}
    path, body = ("/echo", POST_BYTES) if case == "post" else ("/ping", None)
    argv = h3load_argv(args, server.port, path, seconds=args.duration, body=body)
    result, run = measured_load(argv, args.client_cpus, args.duration + WARMUP_SECONDS, server)
    return {**load_figures(result), **run.per_request(result.requests)}


def measure_idle(server, args):
    """RSS growth per QUIC connection that has been served one GET /ping and then sits idle:
    h3load opens them, one request each, and holds them open while the server's RSS is read."""
    count = args.idle_connections
    unmeasured_load(h3load_argv(args, server.port, "/ping", requests=1000), args.client_cpus, 10)
    time.sleep(0.5)  # let the warm-up connections close
    rss_before = server.rss_bytes()
    argv = h3load_argv(args, server.port, "/ping", requests=count)
    argv[2:4] = [f"-c{count}", "-m1", f"--hold={args.idle_seconds + 2}"]
    started = time.monotonic()
    with subprocess.Popen(pinned(argv, args.client_cpus), stdout=subprocess.PIPE, text=True) as load:
        for line in load.stdout:
            if line.startswith("all connections idle"):
                break
        else:
            load.wait()
            raise RunFailed(f"h3load never had its {count} connections idle (exit {load.returncode})")
        opened_in = time.monotonic() - started
        time.sleep(args.idle_seconds)
        rss_after = server.rss_bytes()
        idle = int(line.split(":")[1])
        load.stdout.read()
        load.wait()
    # A few of a thousand handshakes may be lost (gtlsserver drops about 1%): the RSS is divided
    # by the connections that were open, provided they are nearly all.
    if idle < count * MIN_IDLE_SHARE:
        raise RunFailed(f"only {idle} of {count} connections were open and idle")
    return {
        "connections": idle,
        "rss_before": rss_before,
        "rss_after": rss_after,
        "bytes_per_connection": (rss_after - rss_before) / idle,
        "open_seconds": round(opened_in, 1),
    }


def check_peers(args, peers, bench):
    """Each peer answers the GET case at all (one request through h3load), before the rounds."""
    problems = {}
    for name, peer in peers.items():
        try:
            with running(peer, bench.ports, bench.work_dir, args.server_cpus, "check") as server:
                unmeasured_load(h3load_argv(args, server.port, "/ping", requests=100), args.client_cpus, 5)
        except (RunFailed, OSError) as error:
            problems[name] = f"check failed: {error}"
            say(f"  {name}: {problems[name]}")
    return problems


# --- report -------------------------------------------------------------------

KEYS = (
    "req_per_s",
    *LATENCY_METRICS,
    "cpu_us_per_request",
    "user_us_per_request",
    "system_us_per_request",
    "softirq_us_per_request",
    "server_busy",
    "client_busy",
)
TITLES = {
    "get": f"HTTP/3 GET /ping — `h3load -c{CONNECTIONS} -m{STREAMS}`",
    "post": f"HTTP/3 POST /echo, {POST_BYTES // 1024} KiB body — `h3load -c{CONNECTIONS} -m{STREAMS} "
    f"--body-size={POST_BYTES}`",
    "h2": f"xKit's HTTPS/2 on the same shape — `h2load -c{CONNECTIONS} -m{STREAMS}`, GET /ping",
}


def idle_table(by_server, summary, count):
    lines = [
        f"### Idle QUIC connections ({count:,}, each served one HTTP/3 GET /ping, then idle)",
        "",
        "| Server | RSS bytes/conn (median) | runs | spread | seconds to open them |",
        "|---|---:|---|---|---:|",
    ]
    for server, runs in by_server.items():
        rss = summary["idle"][server]["bytes_per_connection"]
        if rss is None:
            lines.append(f"| {server} | – | {runs_cell(runs)} | | |")
            continue
        opened = summary["idle"][server]["open_seconds"]["median"]
        lines.append(
            f"| {server} | {rss['median']:,.0f} | {runs_cell(runs)} "
            f"| {rss['min']:,.0f}–{rss['max']:,.0f} | {opened:.1f} |"
        )
    return lines


def case_keys(case):
    return ("bytes_per_connection", "open_seconds") if case == "idle" else KEYS


def table(case, by_server, summary):
    lines = [
        f"### {TITLES[case]}",
        "",
        "| Server | Req/s (median) | Latency ms: mean / p50 / p99 (median) | CPU µs/req (median) "
        "| user / sys µs/req | runs | spread | + softirq µs/req | busy: server / client |",
        "|---|---:|---:|---:|---:|---|---|---:|---|",
    ]
    for server, runs in by_server.items():
        stats = summary[case][server]
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – | – | – | – | {runs_cell(runs)} | | | |")
            continue
        rates, cpu, softirq = stats["req_per_s"], stats["cpu_us_per_request"], stats["softirq_us_per_request"]
        lines.append(
            f"| {server} | {rates['median']:,.0f} | {latency_cell(stats)} | {cpu['median']:.2f} "
            f"| {split_cell(stats)} | {runs_cell(runs)} "
            f"| {rates['min']:,.0f}–{rates['max']:,.0f}/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs "
            f"| {softirq['median']:.2f} | {stats['server_busy']['median']:.0%} / {stats['client_busy']['median']:.0%} |"
        )
    return lines


def target_rows(summary):
    """[(label, ratio or None, limit)] for issue 27's targets that this run measured."""
    rows = []
    for case, peer, limit in TARGETS:
        ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
        theirs = (
            summary_median(summary, "h2", "xkit", "cpu_us_per_request")
            if peer == "xkit-h2"
            else summary_median(summary, case, peer, "cpu_us_per_request")
        )
        label = f"{case}: xKit h3 ÷ " + ("xKit HTTPS/2" if peer == "xkit-h2" else peer)
        rows.append((label, ours / theirs if ours and theirs else None, limit))
    return rows


def target_table(rows):
    lines = [
        "### Issue 27's targets (server CPU µs/req, xKit ÷ peer, of medians)",
        "",
        "| Figure | ratio | target | met |",
        "|---|---:|---:|---|",
    ]
    for label, ratio, limit in rows:
        met = "n/a" if ratio is None else ("yes" if ratio <= limit else "**no**")
        lines.append(f"| {label} | {f'{ratio:.2f}×' if ratio else 'n/a'} | ≤ {limit}× | {met} |")
    return lines


def render(results, skipped, args, env):
    summary = summarize_rounds(results, case_keys)
    machine = (
        f"{environment.host_line()}. Servers on CPU {environment.cpu_list(args.server_cpus)} with one worker or "
        f"thread (xKit --workers 1, Go and Caddy GOMAXPROCS=1, gtlsserver is single-threaded); h3load and h2load "
        f"-t1 on CPU {environment.cpu_list(args.client_cpus)}; TLS 1.3, self-signed RSA-2048 certificate; "
        f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians. h3load sends "
        + (
            "and reads a packet per call (--plain-udp)."
            if args.plain_udp
            else "and reads runs of packets (UDP_SEGMENT and UDP_GRO)."
        )
        + (
            f" Its SETTINGS allow a {args.qpack_capacity}-byte QPACK dynamic table."
            if args.qpack_capacity
            else " Its SETTINGS allow no QPACK dynamic table (nghttp3's default)."
        )
    )
    lines = ["## HTTP/3 comparison", "", machine, ""]
    for case, by_server in results.items():
        if case == "idle":
            lines += idle_table(by_server, summary, args.idle_connections) + [""]
        else:
            lines += table(case, by_server, summary) + [""]
    rows = target_rows(summary)
    lines += target_table(rows) + [""]
    lines += [
        "### How to read it",
        "",
        "- CPU is the server's utime + stime from `/proc/PID/stat` over h3load's (h2load's) main duration, "
        "after its warm-up in which the connections and handshakes happen, ÷ the requests completed in it.",
        "- user / sys splits it: utime is the server's own code, stime the kernel's work on its behalf (UDP "
        "sends and receives, and on loopback the receiving side's path, which runs on the sending CPU).",
        "- gtlsserver (ngtcp2's example server) and Caddy serve files only: their GET /ping is a 4-byte file "
        "holding xKit's answer; neither echoes a body, so POST runs on xKit and quic-go alone.",
        "- h3load: bench/h3load.c, ngtcp2 0.12's client with GnuTLS and a lean HTTP/3 client of xKit's frame "
        "reader and QPACK (each path's request encoded once), one thread, so that it outruns the servers; "
        "the certificate is not verified.",
        "",
    ]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", {"cases": summary, "targets": rows}


def run(args):
    tools = ["taskset", "openssl"] + (["h2load"] if "h2" in args.cases else [])

    def measure_all(bench):
        env = environment.capture(args.build_dir.resolve(), args.server_cpus, args.client_cpus, ["xkit"])
        peers, skipped = make_peers(args, bench.work_dir)
        for name, problem in check_peers(args, peers, bench).items():
            skipped[name] = problem
            peers.pop(name)
        plan = {case: [name for name in SERVES[case] if name in peers] for case in args.cases}
        results = bench.rounds(
            plan, lambda case, name: bench.run_once(peers[name], case, lambda server: measure(case, server, args))
        )
        markdown, summary = render(results, skipped, args, env)
        summary["environment"] = env
        return markdown, {"skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "compare/h3", tools, measure_all, fd_limit=args.idle_connections + 1024)
