"""compare http1: xKit's HTTP/1.1 claims against the baselines (epoll and io_uring), nginx and
Go on one machine.

Every server runs with one worker pinned to --server-cpus while wrk (-t1) runs pinned to
--client-cpus, so each side owns a core. Cases:
  ping      wrk, one GET /ping in flight per connection
  pipeline  wrk with xkbench/wrk/pipeline.lua, 16 pipelined GET /ping per write
  idle      the server's resident memory per idle keep-alive connection
A fresh server per run, round after round (the order reversed every other round); medians.
"""

from .. import environment
from ..cli import add_common_options, check_at_least_one
from ..loadgen import PIPELINE_SCRIPT, load_figures, measured_load, unmeasured_load, wrk_argv
from ..probes import measure_idle
from ..report import LATENCY_METRICS, milliseconds
from ..rounds import failure_lines, runs_cell
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, prepare_peers, run_comparison

HELP = "HTTP/1.1: xKit, the epoll and io_uring baselines, nginx and Go under wrk; idle memory per connection"
SERVERS = ("xkit", "xkit_epoll", "baseline", "baseline_uring", "nginx", "go")
CASES = ("ping", "pipeline", "idle")
THROUGHPUT_KEYS = (
    "req_per_s",
    *LATENCY_METRICS,
    "cpu_us_per_request",
    "user_us_per_request",
    "system_us_per_request",
    "softirq_us_per_request",
    "server_busy",
    "client_busy",
    "others_busy",
)


def add_arguments(parser):
    add_common_options(parser, first_port=21000, servers=(SERVERS, SERVERS), cases=(CASES, CASES))
    parser.add_argument("--connections", type=int, default=100, help="wrk connections")
    parser.add_argument("--idle-connections", type=int, default=10000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)


def wrk(server, args, seconds, pipelined=False):
    options = ["-s", str(PIPELINE_SCRIPT)] if pipelined else []
    return wrk_argv(f"http://127.0.0.1:{server.port}/ping", args.connections, seconds, options=options)


def measure_throughput(server, args, pipelined):
    """Rates from wrk, CPU from /proc, after a warm-up run."""
    unmeasured_load(wrk(server, args, WARMUP_SECONDS, pipelined), args.client_cpus, WARMUP_SECONDS)
    result, run = measured_load(wrk(server, args, args.duration, pipelined), args.client_cpus, args.duration, server)
    return {**load_figures(result), **run.per_request(result.requests)}


def measure_case(case, server, args):
    if case == "idle":
        return measure_idle(
            server,
            args.idle_connections,
            args.idle_seconds,
            lambda: unmeasured_load(wrk(server, args, WARMUP_SECONDS), args.client_cpus, WARMUP_SECONDS),
        )
    return measure_throughput(server, args, pipelined=case == "pipeline")


# --- report -------------------------------------------------------------------


def throughput_table(case, by_server, summary):
    title = {
        "ping": "GET /ping, one request in flight per connection",
        "pipeline": "GET /ping, 16 pipelined requests per write",
    }[case]
    return [f"### {title}", ""] + cpu_table(by_server, summary[case], "wrk", with_latency=True)


# What the "user / sys" column is, for the reports whose tables have it (cpu_table's).
CPU_SPLIT_NOTE = (
    "**CPU µs/req** is the server's user + system time (`/proc/PID/stat` utime + stime, all threads; "
    "nginx: its workers) per request; **user / sys µs/req** splits it into the server's own code and the "
    "kernel working on its behalf. On loopback a sender's CPU also runs the receiver's TCP path and "
    "wake-up, so sys is partly the cost of the peer's traffic: a bound on CPU µs/req below what sys "
    "alone takes cannot be met by user-space work."
)


def split_cell(stats):
    """user / sys µs per request, medians over the runs ("–" for runs that did not record them)."""
    user, system = stats.get("user_us_per_request"), stats.get("system_us_per_request")
    if not user or not system:
        return "–"
    return f"{user['median']:.2f} / {system['median']:.2f}"


def cpu_table(by_server, summary, client, with_latency=False):
    """| Server | Req/s | [Latency mean / p50 / p99 |] CPU µs/req | user / sys | runs | spread | + softirq
    | busy |, medians of each."""
    latency_header, latency_align = ("| Latency ms: mean / p50 / p99 (median) ", "---:|") if with_latency else ("", "")
    lines = [
        f"| Server | Req/s (median) {latency_header}| CPU µs/req (median) | user / sys µs/req | runs | spread "
        f"| + softirq µs/req | busy: server / {client} / others |",
        f"|---|---:|{latency_align}---:|---:|---|---|---:|---|",
    ]
    for server, runs in by_server.items():
        stats = summary[server]
        latency = f" {latency_cell(stats)} |" if with_latency else ""
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – |{' – |' if with_latency else ''} – | – | {runs_cell(runs)} | | | |")
            continue
        rate, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
        lines.append(
            f"| {server} | {rate['median']:,.0f} |{latency} {cpu['median']:.2f} | {split_cell(stats)} "
            f"| {runs_cell(runs)} "
            f"| {rate['min']:,.0f}–{rate['max']:,.0f} req/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs "
            f"| {stats['softirq_us_per_request']['median']:.2f} | {busy_cell(stats)} |"
        )
    return lines


def latency_cell(stats):
    """Mean / p50 / p99 latency in ms, medians over the runs ("–" for one the runs lack)."""
    return " / ".join(milliseconds(stats[key]["median"] if stats.get(key) else None) for key in LATENCY_METRICS)


def busy_cell(stats):
    """Share of a core used by the server and by the load generator, and by everything else
    on both cores but softirq: a server under 100% was waiting for the load generator; large
    'others' mean a noisy run."""
    return " / ".join(f"{stats[key]['median']:.0%}" for key in ("server_busy", "client_busy", "others_busy"))


def idle_table(by_server, summary, connections):
    lines = [
        f"### Idle keep-alive connections ({connections:,} served once, then idle)",
        "",
        "| Server | RSS bytes/conn (median) | runs | spread |",
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


def ratio_lines(summary):
    """The claims: xKit's CPU per request against the floors and nginx, its pipelined rate, and
    what io_uring saves the floor (the io_uring baseline's CPU per request over epoll's)."""
    claims = [
        ("xkit CPU/req ÷ baseline", "cpu_us_per_request", "xkit", "baseline", ("ping", "pipeline")),
        ("xkit CPU/req ÷ baseline_uring", "cpu_us_per_request", "xkit", "baseline_uring", ("ping", "pipeline")),
        ("baseline_uring CPU/req ÷ baseline", "cpu_us_per_request", "baseline_uring", "baseline", ("ping", "pipeline")),
        ("xkit CPU/req ÷ xkit_epoll", "cpu_us_per_request", "xkit", "xkit_epoll", ("ping", "pipeline")),
        ("xkit_epoll CPU/req ÷ baseline", "cpu_us_per_request", "xkit_epoll", "baseline", ("ping", "pipeline")),
        ("xkit CPU/req ÷ nginx", "cpu_us_per_request", "xkit", "nginx", ("ping", "pipeline")),
        ("xkit req/s ÷ nginx", "req_per_s", "xkit", "nginx", ("pipeline",)),
    ]
    lines = ["### Ratios (of medians)", ""]
    for label, key, server, peer, cases in claims:
        parts = []
        for case in cases:
            ours, theirs = summary_median(summary, case, server, key), summary_median(summary, case, peer, key)
            parts.append(f"{case} {ours / theirs:.2f}×" if ours and theirs else f"{case} n/a")
        lines.append(f"- {label}: " + ", ".join(parts))
    return lines


def machine_description(args):
    return (
        f"{environment.host_line()}; "
        f"servers on CPU {environment.cpu_list(args.server_cpus)} with one worker, wrk -t1 "
        f"-c{args.connections} on CPU {environment.cpu_list(args.client_cpus)}; {args.duration} s "
        f"per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians."
    )


def render(results, skipped, args, machine):
    summary = summarize_rounds(results, lambda case: ("bytes_per_connection",) if case == "idle" else THROUGHPUT_KEYS)
    lines = ["## HTTP/1.1 comparison", "", machine, "", CPU_SPLIT_NOTE, ""]
    for case, by_server in results.items():
        if case == "idle":
            lines += idle_table(by_server, summary, args.idle_connections) + [""]
        else:
            lines += throughput_table(case, by_server, summary) + [""]
    if "ping" in results or "pipeline" in results:
        lines += ratio_lines(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def run(args):
    check_at_least_one(args, "idle_connections")
    tools = ["taskset", "wrk"]
    fd_limit = args.idle_connections + 1024 if "idle" in args.cases else None

    def measure(bench):
        machine = machine_description(args)
        peers, skipped = prepare_peers(args, bench.work_dir, "http1")
        results = bench.rounds(
            {case: list(peers) for case in args.cases},
            lambda case, name: bench.run_once(peers[name], case, lambda server: measure_case(case, server, args)),
        )
        markdown, summary = render(results, skipped, args, machine)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "compare/http1", tools, measure, fd_limit)
