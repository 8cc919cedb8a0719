"""compare https: xKit's HTTPS claims against h2o, nginx and Go on one machine.

Every server runs with one worker pinned to --server-cpus while the load generator (-t1)
and this process run pinned to --client-cpus, so each side owns a core. TLS 1.3 with a
self-signed RSA-2048 certificate; each server keeps its own cipher-suite preference. Cases:
  h1         wrk -c100, GET /ping over HTTPS/1.1 keep-alive connections
  h2         h2load -c100 -m10, GET /ping over HTTPS/2
  handshake  wrk -c20 -H "Connection: close", GET /ping: a new connection, so a handshake,
             per request; twice: "resumed" (each server's defaults: wrk offers the ticket its
             last connection received) and "full" (resumption off on every server)
  idle       the server's resident memory per idle TLS keep-alive connection
Before the rounds each server is started once per handshake variant to check what it
negotiates (`openssl s_client`) and whether it resumes sessions. A fresh server per run,
round after round (the order reversed every other round); medians.
"""

import dataclasses
import re

from .. import environment
from ..cli import add_common_options, check_at_least_one, say
from ..loadgen import (
    LATENCY_RUN_SECONDS,
    RESUMPTION_SCRIPT,
    h2load_argv,
    load_figures,
    measured_load,
    unmeasured_load,
    with_percentiles,
    wrk_argv,
)
from ..matrix import STREAMS_PER_CONNECTION
from ..parsing import parse_resumption
from ..probes import measure_idle, negotiated, resumes
from ..report import LATENCY_METRICS
from ..rounds import failure_lines, runs_cell
from ..servers import RunFailed, running
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, prepare_peers, run_comparison
from .compare_http1 import latency_cell

HELP = "HTTPS/1.1, HTTPS/2, handshakes and idle TLS memory: xKit, h2o, nginx and Go"
SERVERS = ("xkit", "h2o", "nginx", "go")
CASES = ("h1", "h2", "handshake", "idle")
VARIANTS = ("resumed", "full")
H1_CONNECTIONS = 100
H2_CONNECTIONS = 100
HANDSHAKE_CONNECTIONS = 20
# The short wrk run whose CPU and requests are taken off the long run's, handshakes and all.
SHORT_RUN_SECONDS = 1
RESUMPTION_LOG = "resumption.log"
# What nginx's $ssl_session_reused and h2o's %{ssl.session-reused}x log for a resumed session.
LOGGED = {"nginx": "r", "h2o": "1"}


def add_arguments(parser):
    add_common_options(parser, first_port=24000, servers=(SERVERS, SERVERS), cases=(CASES, CASES))
    parser.add_argument("--idle-connections", type=int, default=5000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)


# --- peers ------------------------------------------------------------------


def edit_config(peer, filename, edit):
    """The peer with its generated configuration file passed through edit(text, run_dir)
    before it starts."""

    def command(port, run_dir):
        argv = peer.command(port, run_dir)
        path = run_dir / filename
        path.write_text(edit(path.read_text(), run_dir))
        return argv

    return dataclasses.replace(peer, command=command)


def nginx_edit(full, logged):
    """nginx 1.22 offers TLS 1.2 at most unless told (TLS 1.3 joined its default in 1.23.4)."""

    def edit(text, run_dir):
        settings = "ssl_protocols TLSv1.2 TLSv1.3;"
        if full:
            settings += "\n        ssl_session_tickets off;\n        ssl_session_cache off;"
        text, found = re.subn(
            r"(ssl_certificate_key [^;]*;)", lambda match: match.group(1) + "\n        " + settings, text
        )
        if logged:
            text, logs = re.subn(
                r"access_log off;",
                lambda _: (
                    f"log_format resumption $ssl_session_reused;\n    access_log {start_log(run_dir)} resumption;"
                ),
                text,
            )
            found = found and logs
        if not found:
            raise RunFailed("nginx.conf is not laid out as compare https expects")
        return text

    return edit


def h2o_edit(full, logged, max_connections):
    def edit(text, run_dir):
        extra = f"max-connections: {max_connections}\n"
        if full:
            extra += "ssl-session-resumption:\n  mode: off\n"
        if logged:
            extra += f'access-log:\n  path: {start_log(run_dir)}\n  format: "%{{ssl.session-reused}}x"\n'
        return text.rstrip("\n") + "\n" + extra

    return edit


def start_log(run_dir):
    """The resumption log, made writable for servers that open it after dropping root."""
    path = run_dir / RESUMPTION_LOG
    path.touch()
    path.chmod(0o666)
    return path


def tuned(peer, variant, max_connections, logged=False):
    """The peer for a handshake variant: "resumed" is its defaults, "full" turns tickets and the
    session cache off. nginx is also told TLS 1.3; h2o gets max_connections (its own default,
    1024, is below the idle case's count). logged: nginx and h2o log, per request, whether its
    session was resumed, into RESUMPTION_LOG in their run directory; xKit gets its GET /tls."""
    full = variant == "full"
    if peer.name == "xkit":
        # The check counts resumptions through GET /tls, a test-only route.
        flags = (["--no-tickets", "--session-cache", "0"] if full else []) + (["--test-routes"] if logged else [])
        if not flags:
            return peer
        return dataclasses.replace(peer, command=lambda port, run_dir: peer.command(port, run_dir) + flags)
    if peer.name == "go":
        return dataclasses.replace(peer, env={**peer.env, "BENCH_TLS_NO_RESUMPTION": "1"}) if full else peer
    if peer.name == "nginx":
        return edit_config(peer, "nginx.conf", nginx_edit(full, logged))
    return edit_config(peer, "h2o.conf", h2o_edit(full, logged, max_connections))


# --- load generators ----------------------------------------------------------


def ping_url(port):
    return f"https://127.0.0.1:{port}/ping"


def wrk(url, seconds, connections, options=()):
    return wrk_argv(url, connections, seconds, options=options)


def warm_up(server, args, connections, options=()):
    unmeasured_load(wrk(ping_url(server.port), WARMUP_SECONDS, connections, options), args.client_cpus, WARMUP_SECONDS)


def measured_wrk(server, args, seconds, connections, options=()):
    """A measured wrk run's record: its counts and what the server and cores spent."""
    result, run = measured_load(
        wrk(ping_url(server.port), seconds, connections, options), args.client_cpus, seconds, server
    )
    return {**load_figures(result), **run.per_request(result.requests)}


# --- cases --------------------------------------------------------------------


def measure_h1(server, args):
    """wrk opens its 100 connections, so 100 full handshakes, inside every run. A short run and
    a long one against the same warmed-up server carry the same handshakes, so the difference
    of their CPU over the difference of their requests is the cost of a request alone."""
    warm_up(server, args, H1_CONNECTIONS)
    short = measured_wrk(server, args, SHORT_RUN_SECONDS, H1_CONNECTIONS)
    long = measured_wrk(server, args, args.duration, H1_CONNECTIONS)
    extra_requests = long["requests"] - short["requests"]
    if extra_requests <= 0:
        raise RunFailed(f"the {args.duration}-s run completed no more requests than the {SHORT_RUN_SECONDS}-s one")
    steady = (long["server_cpu_s"] - short["server_cpu_s"]) * 1e6 / extra_requests
    return {
        **long,
        "whole_run_cpu_us_per_request": long["cpu_us_per_request"],
        "cpu_us_per_request": steady,
        "short_run": short,
    }


def measure_h2(server, args):
    """h2load opens its connections during --warm-up-time; the CPU window is its main duration.
    The latency percentiles come from a logged run after it (loadgen.h2load_percentiles)."""
    argv = h2load_argv(
        ping_url(server.port),
        H2_CONNECTIONS,
        args.duration,
        options=[f"--warm-up-time={WARMUP_SECONDS}", "--npn-list=h2"],
    )
    result, run = measured_load(argv, args.client_cpus, args.duration + WARMUP_SECONDS, server, h2_protocol="h2")
    with_percentiles(result, argv, args.client_cpus, args.duration + WARMUP_SECONDS, h2_protocol="h2")
    return {**load_figures(result), **run.per_request(result.requests)}


def measure_handshakes(server, args):
    """Every request on a new connection: CPU per request is CPU per handshake (plus one GET)."""
    close = ("-H", "Connection: close")
    warm_up(server, args, HANDSHAKE_CONNECTIONS, close)
    return measured_wrk(server, args, args.duration, HANDSHAKE_CONNECTIONS, close)


def measure_idle_tls(server, args):
    """RSS growth per TLS connection that has been served once and then sits idle."""
    return measure_idle(server, args.idle_connections, args.idle_seconds, lambda: warm_up(server, args, H1_CONNECTIONS))


MEASURES = {
    "h1": measure_h1,
    "h2": measure_h2,
    "handshake-resumed": measure_handshakes,
    "handshake-full": measure_handshakes,
    "idle": measure_idle_tls,
}


# --- checks -------------------------------------------------------------------


def wrk_resumption(server, args):
    """(resumed, total) of wrk's reconnections in 1 s of the handshake case's load, or None for
    a server that cannot tell: xKit's GET /tls answers say, tallied by wrk/resumption.lua;
    nginx and h2o write it to RESUMPTION_LOG (read once the server has stopped)."""
    url, close = f"https://127.0.0.1:{server.port}", ("-H", "Connection: close")
    if server.peer.name == "xkit":
        _result, run = unmeasured_load(
            wrk(url + "/tls", 1, HANDSHAKE_CONNECTIONS, close + ("-s", str(RESUMPTION_SCRIPT))), args.client_cpus, 1
        )
        tally = parse_resumption(run.output)
        if not tally:
            raise RunFailed("the wrk script counted no /tls answers")
        return tally
    if server.peer.name not in LOGGED:
        return None
    unmeasured_load(wrk(url + "/ping", 1, HANDSHAKE_CONNECTIONS, close), args.client_cpus, 1)
    server.stop()
    flags = (server.log_path.parent / RESUMPTION_LOG).read_text().split()
    return sum(flag == LOGGED[server.peer.name] for flag in flags), len(flags)


def check(peer, variant, bench):
    """Starts the peer once for a variant and records what it negotiates and resumes; "problem"
    says why its handshake runs for that variant would not measure what they claim to."""
    record = {"variant": variant, "problem": None}
    try:
        with running(peer, bench.ports, bench.work_dir, bench.args.server_cpus, f"check-{variant}") as server:
            if variant == "resumed":
                record["h1"] = negotiated(server.port, "http/1.1")
                record["h2"] = negotiated(server.port, "h2")
            record["resumes"] = resumes(server.port)
            tally = wrk_resumption(server, bench.args)
            if tally:
                record["wrk_resumed"], record["wrk_reconnections"] = tally
            record["problem"] = resumption_problem(record, variant)
    except (RunFailed, OSError) as error:
        record["problem"] = str(error)
    return record


def resumption_problem(record, variant):
    """A "full" run must resume nothing; a "resumed" one must resume, but how often is the
    server's own business (it is reported)."""
    if record["resumes"] != (variant == "resumed"):
        return f'resumption is {"on" if record["resumes"] else "off"}, not what "{variant}" needs'
    resumed = record.get("wrk_resumed")
    if variant == "full" and resumed:
        return f"{resumed} of {record['wrk_reconnections']} wrk reconnections were resumed"
    if variant == "resumed" and resumed == 0:
        return "wrk's reconnections were never resumed"
    return None


def run_checks(peers, bench):
    """{variant: {server: check record}} for the variants the cases use."""
    args = bench.args
    variants = VARIANTS if "handshake" in args.cases else ("resumed",)
    checks = {variant: {} for variant in variants}
    for variant in variants:
        for name, peer in peers.items():
            say(f"checking {name} ({variant})")
            checks[variant][name] = check(tuned(peer, variant, fd_limit(args), logged=True), variant, bench)
            if checks[variant][name]["problem"]:
                say(f"  {checks[variant][name]['problem']}")
    return checks


# --- rounds -------------------------------------------------------------------


def case_keys(cases):
    keys = []
    for case in cases:
        keys += [f"handshake-{variant}" for variant in VARIANTS] if case == "handshake" else [case]
    return keys


def plan_rounds(peers, checks, args):
    """({case: [server]}, {what: why excluded}): a server whose check failed for a handshake
    variant sits that variant out."""
    plan, excluded = {}, {}
    for key in case_keys(args.cases):
        variant = key.removeprefix("handshake-") if key.startswith("handshake-") else "resumed"
        plan[key] = []
        for name in peers:
            problem = checks.get(variant, {}).get(name, {}).get("problem")
            if problem and key.startswith("handshake-"):
                excluded[f"{name} {key}"] = f"check failed: {problem}"
            else:
                plan[key].append(name)
    return plan, excluded


# --- report -------------------------------------------------------------------

THROUGHPUT_KEYS = ("req_per_s", *LATENCY_METRICS, "cpu_us_per_request", "server_busy", "client_busy", "others_busy")
TITLES = {
    "h1": f"HTTPS/1.1 GET /ping — `wrk -t1 -c{H1_CONNECTIONS}`",
    "h2": f"HTTPS/2 GET /ping — `h2load -t1 -c{H2_CONNECTIONS} -m{STREAMS_PER_CONNECTION}`",
    "handshake-resumed": f"Handshakes, resumed (each server's defaults) — `wrk -t1 -c{HANDSHAKE_CONNECTIONS} "
    f'-H "Connection: close"`, GET /ping',
    "handshake-full": f"Handshakes, full (resumption off everywhere) — `wrk -t1 -c{HANDSHAKE_CONNECTIONS} "
    f'-H "Connection: close"`, GET /ping',
}


def case_figures(case):
    if case == "idle":
        return ("bytes_per_connection", "open_seconds")
    return (
        THROUGHPUT_KEYS
        + (("whole_run_cpu_us_per_request",) if case == "h1" else ())
        + (("softirq_us_per_request",) if case != "h2" else ())
    )


def throughput_table(case, by_server, summary):
    unit = "handshake" if case.startswith("handshake") else "req"
    client = "h2load" if case == "h2" else "wrk"
    whole = case == "h1"  # the long run's figure with its handshakes, beside the steady one
    lines = [
        f"### {TITLES[case]}",
        "",
        f"| Server | {'Handshakes' if unit == 'handshake' else 'Req'}/s (median) "
        f"| Latency ms: mean / p50 / p99 (median) | CPU µs/{unit} (median) |"
        + (" CPU µs/req, whole run |" if whole else "")
        + f" runs | spread | + softirq µs/{unit} | busy: server / {client} / others |",
        "|---|---:|---:|---:|" + ("---:|" if whole else "") + "---|---|---:|---|",
    ]
    for server, runs in by_server.items():
        stats = summary[case][server]
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – | – | – |" + (" – |" if whole else "") + f" {runs_cell(runs)} | | | |")
            continue
        rates, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
        softirq = stats.get("softirq_us_per_request")
        cells = [server, f"{rates['median']:,.0f}", latency_cell(stats), f"{cpu['median']:.2f}"]
        if whole:
            cells.append(f"{stats['whole_run_cpu_us_per_request']['median']:.2f}")
        cells += [
            runs_cell(runs),
            f"{rates['min']:,.0f}–{rates['max']:,.0f}/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs",
            f"{softirq['median']:.2f}" if softirq else "n/a",
            " / ".join(f"{stats[key]['median']:.0%}" for key in ("server_busy", "client_busy", "others_busy")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def idle_table(by_server, summary, connections):
    lines = [
        f"### Idle TLS keep-alive connections ({connections:,}, each served one HTTPS/1.1 GET /ping, then idle)",
        "",
        "| Server | RSS bytes/conn (median) | runs | spread | seconds to open them |",
        "|---|---:|---|---|---:|",
    ]
    for server, runs in by_server.items():
        stats = summary["idle"][server]
        if stats["bytes_per_connection"] is None:
            lines.append(f"| {server} | – | {runs_cell(runs)} | | |")
            continue
        rss = stats["bytes_per_connection"]
        lines.append(
            f"| {server} | {rss['median']:,.0f} | {runs_cell(runs)} "
            f"| {rss['min']:,.0f}–{rss['max']:,.0f} | {stats['open_seconds']['median']:.1f} |"
        )
    return lines


def check_table(checks):
    """What each server negotiated with OpenSSL's default client offer, and whether it resumed."""

    def suite(found):
        if not found or not found.get("cipher"):
            return "–"
        return f"{found['cipher']} ({found['version']}, {found['group']}, ALPN {found['alpn']})"

    def resumption(record):
        if record is None:
            return "not checked"
        if "resumes" not in record:
            return f"check failed: {record['problem']}"
        text = "resumed" if record["resumes"] else "full"
        if "wrk_reconnections" in record:
            text += f"; wrk: {record['wrk_resumed']:,} of {record['wrk_reconnections']:,}"
        elif record["problem"] is None:
            text += "; wrk: not counted (no per-request record)"
        return text + (f" — **{record['problem']}**" if record["problem"] else "")

    lines = [
        "### What each server negotiates and resumes",
        "",
        "Suites: `openssl s_client` (OpenSSL's default offer, as wrk's and h2load's). "
        "Resumption: a second Python connection offering the first one's ticket (resumed "
        "or full), and how many of wrk's reconnections in 1 s of the handshake load were "
        "resumed (xKit: its `GET /tls` answers; nginx and h2o: their access logs).",
        "",
        "| Server | HTTPS/1.1 | HTTPS/2 | resumption, defaults | resumption off |",
        "|---|---|---|---|---|",
    ]
    for name, record in checks.get("resumed", {}).items():
        lines.append(
            f"| {name} | {suite(record.get('h1'))} | {suite(record.get('h2'))} "
            f"| {resumption(record)} | {resumption(checks.get('full', {}).get(name))} |"
        )
    return lines


RATIO_ROWS = (
    ("h1", "cpu_us_per_request", "HTTPS/1.1 CPU µs/req"),
    ("h1", "req_per_s", "HTTPS/1.1 req/s"),
    ("h2", "cpu_us_per_request", "HTTPS/2 CPU µs/req"),
    ("h2", "req_per_s", "HTTPS/2 req/s"),
    ("handshake-resumed", "cpu_us_per_request", "resumed handshake CPU µs"),
    ("handshake-full", "cpu_us_per_request", "full handshake CPU µs"),
    ("idle", "bytes_per_connection", "idle RSS bytes/conn"),
)


def ratios(summary):
    """{row label: {peer: xKit's median ÷ the peer's, or None}} for the cases measured."""
    table = {}
    for case, key, label in RATIO_ROWS:
        if case not in summary:
            continue
        ours = summary_median(summary, case, "xkit", key)
        table[label] = {}
        for peer in SERVERS[1:]:
            theirs = summary_median(summary, case, peer, key)
            table[label][peer] = ours / theirs if ours and theirs else None
    return table


def ratio_table(table):
    lines = [
        "### xKit ÷ each peer (of medians; below 1 is less CPU or memory, above 1 more req/s)",
        "",
        "| Figure | " + " | ".join(f"xkit ÷ {peer}" for peer in SERVERS[1:]) + " |",
        "|---|" + "---:|" * len(SERVERS[1:]),
    ]
    for label, by_peer in table.items():
        cells = [f"{value:.2f}×" if value else "n/a" for value in by_peer.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def versions_line(env):
    names = ("xKit", "OpenSSL", "nginx", "h2o", "Go", "wrk", "h2load")
    return "Versions: " + "; ".join(f"{name}: {env[name]}" for name in names if name in env) + "."


def machine_description(args):
    return (
        f"{environment.host_line()}. Servers on CPU {environment.cpu_list(args.server_cpus)} with one worker or thread "
        f"(xKit --workers 1, h2o num-threads 1, nginx worker_processes 1, Go GOMAXPROCS=1); "
        f"wrk -t1 and h2load -t1 on CPU {environment.cpu_list(args.client_cpus)}; TLS 1.3, self-signed RSA-2048 "
        f"certificate; {args.duration} s per run after {WARMUP_SECONDS} s warm-up, "
        f"{args.runs} runs, medians."
    )


def method_lines(args):
    return [
        "### How to read it",
        "",
        "- CPU is the server's utime + stime from `/proc/PID/stat` over the measured window, "
        "divided by the requests completed in it. nginx: its worker (the master sleeps). h2o: "
        "itself and its neverbleed child, which holds the private key and makes every "
        "handshake signature (its perl crash helper sleeps and is left out).",
        "- nginx 1.22 offers TLS 1.2 at most unless told: it runs with `ssl_protocols TLSv1.2 "
        "TLSv1.3;`. h2o runs with `max-connections` raised for the idle case (its default "
        "is 1024). Go picks AES-128-GCM whatever the client prefers; the others follow "
        "OpenSSL's order, AES-256-GCM first (see the table above).",
        f"- HTTPS/1.1: wrk opens its {H1_CONNECTIONS} connections, so {H1_CONNECTIONS} full "
        f"handshakes, inside every run. Each measurement runs wrk for {SHORT_RUN_SECONDS} s and "
        f"then for {args.duration} s against the same warmed-up server; CPU µs/req is (CPU of "
        f"the long run − CPU of the short one) ÷ (requests of the long run − of the short one), "
        f'which leaves the handshakes out. "Whole run" is the long run\'s CPU ÷ its requests, '
        f"handshakes included. Req/s is the long run's.",
        "- HTTPS/2: h2load connects during `--warm-up-time`; the CPU window is its main "
        "duration, read off its output as it runs.",
        "- Latency: the load generator's mean, p50 and p99 per request. wrk's percentiles are its "
        "`--latency` distribution. h2load prints none: its p50 and p99 come from its `--log-file` in "
        f"a {LATENCY_RUN_SECONDS}-s run of the same command right after each measured one, since "
        "writing that log costs h2load about 1 µs per request and would slow the measured run (it "
        "slows the logged one, so there a p50 can exceed the mean).",
        "- Handshakes: every request is on a new connection, so CPU µs/handshake includes one "
        "TCP connection and one GET /ping. Resumed: the servers' defaults; wrk keeps a "
        "connection's session when it reconnects and offers the last ticket it received. "
        "Full: xKit `--no-tickets --session-cache 0`, Go `BENCH_TLS_NO_RESUMPTION=1`, nginx "
        "`ssl_session_tickets off; ssl_session_cache off;`, h2o `ssl-session-resumption: mode: "
        "off`. The check table says what each server actually did. OpenSSL's client (wrk's) uses "
        "a TLS 1.3 ticket once: a server that sends no fresh ticket after a resumed handshake "
        'resumes only every other reconnection, and its "resumed" figure is that mix.',
        "- Idle: `VmRSS` (nginx: its worker) with the connections open and idle for "
        f"{args.idle_seconds:g} s, minus `VmRSS` before they were opened (after a 1-s wrk "
        "warm-up), ÷ the connections. User-space memory only: kernel socket buffers are not "
        "in RSS.",
        "- busy: share of one core used by the server and by the load generator, and the CPU "
        'time of everything else on both cores; large "others" mean a noisy run.',
    ]


def render(results, excluded, skipped, checks, args, machine, env):
    summary = summarize_rounds(results, case_figures)
    lines = ["## HTTPS comparison", "", machine, "", versions_line(env), ""]
    if checks:
        lines += check_table(checks) + [""]
    for case, by_server in results.items():
        if case == "idle":
            lines += idle_table(by_server, summary, args.idle_connections) + [""]
        else:
            lines += throughput_table(case, by_server, summary) + [""]
    table = ratios(summary)
    lines += ratio_table(table) + [""]
    lines += method_lines(args) + [""]
    failures = failure_lines(results, skipped)
    if excluded:
        failures = (failures or ["### Skipped and failed", ""]) + [
            f"- {what}: skipped — {why}" for what, why in excluded.items()
        ]
    lines += failures
    return "\n".join(lines).rstrip() + "\n", {"cases": summary, "ratios": table, "checks": checks}


# --- run ----------------------------------------------------------------------


def fd_limit(args):
    """Open files for this process and the servers, which inherit its limit: the idle case's
    connections and then some."""
    return args.idle_connections + 1024


def run(args):
    check_at_least_one(args, "idle_connections")
    if args.duration <= SHORT_RUN_SECONDS:
        args.parser.error(f"--duration must be over {SHORT_RUN_SECONDS}")
    tools = ["taskset", "openssl", "wrk"] + (["h2load"] if "h2" in args.cases else [])

    def measure(bench):
        machine = machine_description(args)
        env = environment.capture(args.build_dir.resolve(), args.server_cpus, args.client_cpus, args.servers)
        peers, skipped = prepare_peers(args, bench.work_dir, "https1", tls=True)
        checks = run_checks(peers, bench)
        plan, excluded = plan_rounds(peers, checks, args)
        results = bench.rounds(
            plan,
            lambda key, name: bench.run_once(
                tuned(peers[name], "full" if key == "handshake-full" else "resumed", fd_limit(args)),
                key,
                lambda server: MEASURES[key](server, args),
            ),
        )
        markdown, summary = render(results, excluded, skipped, checks, args, machine, env)
        summary["environment"] = env
        return markdown, {
            "machine": machine,
            "skipped": {**skipped, **excluded},
            "results": results,
            "summary": summary,
        }

    return run_comparison(args, "compare/https", tools, measure, fd_limit(args))
