"""compare h2c: xKit's cleartext HTTP/2 claims against h2o and Go on one machine.

Every server runs with one worker pinned to --server-cpus while h2load (-t1, prior
knowledge) runs pinned to --client-cpus, so each side owns a core. Cases:
  ping     GET /ping, 100 connections × 10 concurrent streams
  echo4k   GET /echo?size=4096, 100 × 10 (h2o serves a 4096-byte file and ignores the query)
  post64k  POST /echo with a 64 KiB body echoed back, 20 × 10 (xkit and go: h2o has no echo)
A fresh server per run, round after round (the order reversed every other round); medians.
"""

import os
from dataclasses import dataclass

from .. import environment
from ..cli import add_common_options
from ..loadgen import LATENCY_RUN_SECONDS, h2load_argv, load_figures, measured_load, unmeasured_load, with_percentiles
from ..matrix import STREAMS_PER_CONNECTION
from ..rounds import failure_lines
from ..servers import find_tool
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, prepare_peers, run_comparison
from .compare_http1 import CPU_SPLIT_NOTE, THROUGHPUT_KEYS, cpu_table

HELP = "cleartext HTTP/2: xKit, h2o and Go's h2c peer under h2load"
SERVERS = ("xkit", "h2o", "go")
POST_BODY_BYTES = 64 << 10


@dataclass(frozen=True)
class Case:
    """One h2load workload: what to request, over how many connections, against whom."""

    title: str
    path: str
    connections: int
    posts_body: bool
    servers: tuple


CASES = {
    "ping": Case("GET /ping", "/ping", 100, False, SERVERS),
    "echo4k": Case("GET /echo?size=4096 (h2o: a static 4096-byte file)", "/echo?size=4096", 100, False, SERVERS),
    "post64k": Case("POST /echo, 64 KiB body echoed back", "/echo", 20, True, ("xkit", "go")),
}

# Ratios of median CPU µs/req that the claims bound from above: (case, peer) -> bound.
CLAIMS = {("ping", "h2o"): 0.85, ("ping", "go"): 0.10, ("echo4k", "h2o"): 0.85, ("post64k", "go"): 0.67}


def add_arguments(parser):
    add_common_options(parser, first_port=22000, servers=(SERVERS, SERVERS), cases=(tuple(CASES), tuple(CASES)))


def h2load(server, case, seconds, body_path):
    options = ["-d", str(body_path)] if case.posts_body else []
    return h2load_argv(f"http://127.0.0.1:{server.port}{case.path}", case.connections, seconds, options=options)


def measure_case(case_name, server, args, body_path):
    """A warm-up run, the first to speak HTTP/2 (the start check speaks HTTP/1.1), then the
    measured one; the server's CPU over the whole measured run; then a logged run for the
    latency percentiles (loadgen.h2load_percentiles)."""
    case = CASES[case_name]
    unmeasured_load(
        h2load(server, case, WARMUP_SECONDS, body_path), args.client_cpus, WARMUP_SECONDS, h2_protocol="h2c"
    )
    argv = h2load(server, case, args.duration, body_path)
    result, run = measured_load(argv, args.client_cpus, args.duration, server, h2_protocol="h2c", h2load_window=False)
    with_percentiles(result, argv, args.client_cpus, args.duration, h2_protocol="h2c")
    return {**load_figures(result), **run.per_request(result.requests)}


# --- report -------------------------------------------------------------------


def case_table(case_name, by_server, summary):
    case = CASES[case_name]
    return [f"### {case.title} — `h2load -c{case.connections} -m{STREAMS_PER_CONNECTION}`", ""] + cpu_table(
        by_server, summary[case_name], "h2load", with_latency=True
    )


def ratio_table(summary):
    """xKit's median CPU µs/req over each peer's, with the claimed bound where there is one."""
    peers = [peer for peer in SERVERS if peer != "xkit"]
    lines = [
        "### xKit's CPU µs/req ÷ each peer's (of medians)",
        "",
        "| Case | " + " | ".join(f"xkit ÷ {peer}" for peer in peers) + " |",
        "|---|" + "---|" * len(peers),
    ]
    for case in summary:
        cells = [ratio_cell(summary, case, peer) for peer in peers]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def ratio_cell(summary, case, peer):
    if peer not in CASES[case].servers:
        return "–"
    ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
    theirs = summary_median(summary, case, peer, "cpu_us_per_request")
    if not ours or not theirs:
        return "n/a"
    ratio = ours / theirs
    bound = CLAIMS.get((case, peer))
    if bound is None:
        return f"{ratio:.2f}×"
    verdict = "met" if ratio <= bound else "not met"
    return f"{ratio:.2f}× (claim ≤ {bound:.2f}×: {verdict})"


def machine_description(args):
    versions = ", ".join(
        environment.first_line(argv)
        for argv in (
            ["h2load", "--version"],
            [find_tool("h2o", "/usr/sbin/h2o") or "h2o", "--version"],
            [find_tool("go", "/usr/local/go/bin/go") or "go", "version"],
        )
    )
    return (
        f"{environment.host_line()}; {versions}. Servers on CPU "
        f"{environment.cpu_list(args.server_cpus)} with one worker, h2load -t1 (cleartext "
        f"HTTP/2, prior knowledge) on CPU {environment.cpu_list(args.client_cpus)}; "
        f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians. "
        f"Latency p50 and p99: from h2load's --log-file in a {LATENCY_RUN_SECONDS}-s run right after "
        "each measured one (the log would slow the measured run, and slows the logged one, so a p50 "
        "can exceed the mean; bench/README.md)."
    )


def render(results, skipped, machine):
    summary = summarize_rounds(results, lambda case: THROUGHPUT_KEYS)
    lines = ["## HTTP/2 (h2c) comparison", "", machine, "", CPU_SPLIT_NOTE, ""]
    for case, by_server in results.items():
        lines += case_table(case, by_server, summary) + [""]
    lines += ratio_table(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def run(args):
    def measure(bench):
        machine = machine_description(args)
        body_path = bench.work_dir / "body64k"
        body_path.write_bytes(os.urandom(POST_BODY_BYTES))
        peers, skipped = prepare_peers(args, bench.work_dir, "h2c")
        plan = {case: [name for name in peers if name in CASES[case].servers] for case in args.cases}
        results = bench.rounds(
            plan,
            lambda case, name: bench.run_once(
                peers[name], case, lambda server: measure_case(case, server, args, body_path)
            ),
        )
        markdown, summary = render(results, skipped, machine)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "compare/h2c", ["taskset", "h2load"], measure)
