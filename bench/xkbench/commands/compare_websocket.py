"""compare websocket: xKit's WebSocket echo (on io_uring, and on epoll as xkit_epoll) against the
least-work WebSocket floors (baseline_responder and baseline_uring with --websocket: a 101, then
an echo per "hello" frame, counted by length) and Go's gorilla/websocket on one machine.

Each server runs with one worker (GOMAXPROCS=1 for Go) pinned to --server-cpus while
bench/peers/go/ws_load -raw runs pinned to --client-cpus. ws_load keeps N connections with K
"hello" text messages in flight on each, writes the messages that are due in one write (so
16 in flight arrive together, as from a pipelining client), and checks every echo. Cases:
  hello       512 connections, 1 message in flight
  inflight16  512 connections, 16 in flight
  reupgrade   512 connections, 1 in flight, a new connection and handshake every 10 messages
The server's CPU per message comes from /proc/PID/stat over the whole run. A fresh server
per run, round after round (the order reversed every other round); medians.
"""

import re
from dataclasses import dataclass

from .. import environment
from ..cli import add_common_options
from ..loadgen import run_measured, run_tool
from ..rounds import failure_lines
from ..servers import RunFailed, find_tool
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, prepare_peers, run_comparison
from .compare_http1 import CPU_SPLIT_NOTE, cpu_table

HELP = "WebSocket echo: xKit, the epoll and io_uring floors and Go's gorilla/websocket under ws_load -raw"
SERVERS = ("xkit", "xkit_epoll", "baseline", "baseline_uring", "go")
LOAD = "ws_load"
KEYS = (
    "req_per_s",
    "cpu_us_per_request",
    "user_us_per_request",
    "system_us_per_request",
    "softirq_us_per_request",
    "server_busy",
    "client_busy",
    "others_busy",
)
RESULT_RE = re.compile(r"messages=(\d+) seconds=([\d.]+) rate=(\d+) errors=(\d+)")


@dataclass(frozen=True)
class Case:
    title: str
    connections: int
    inflight: int
    reupgrade: int


CASES = {
    "hello": Case('"hello" echo, 512 connections, 1 in flight', 512, 1, 0),
    "inflight16": Case('"hello" echo, 512 connections, 16 in flight', 512, 16, 0),
    "reupgrade": Case('"hello" echo, 512 connections, 1 in flight, re-upgrading every 10 messages', 512, 1, 10),
}

# Bounds on xKit's CPU µs per message ÷ Go's (issue 15's targets).
CLAIMS = {"hello": 0.33, "inflight16": 0.25, "reupgrade": 0.5}
# Bound on xKit's CPU µs per message ÷ the floor's of the same backend, where a message costs
# the floor one receive and one send as an HTTP/1.1 exchange does; a re-upgrade also costs a
# handshake, which the floor barely does (no HTTP parsing), so it has no bound.
FLOOR_CLAIM = 1.15
FLOORS = (("xkit", "baseline_uring"), ("xkit_epoll", "baseline"))


def add_arguments(parser):
    add_common_options(parser, first_port=23000, servers=(SERVERS, SERVERS), cases=(tuple(CASES), tuple(CASES)))


def load_argv(load, server, case, seconds):
    return [
        str(load),
        "-raw",
        "-url",
        f"ws://127.0.0.1:{server.port}/ws",
        "-conns",
        str(case.connections),
        "-inflight",
        str(case.inflight),
        "-reupgrade",
        str(case.reupgrade),
        "-duration",
        f"{seconds}s",
    ]


def parse(run):
    match = RESULT_RE.search(run.output)
    if run.timed_out or run.returncode != 0 or not match or int(match.group(4)):
        raise RunFailed(f"ws_load failed: {run.output.strip().splitlines()[-1:] or run.returncode}")
    return int(match.group(1)), float(match.group(3))


def measure_case(case_name, server, args, load):
    """A warm-up run, then the measured one; the server's CPU over the whole measured run."""
    case = CASES[case_name]
    parse(run_tool(load_argv(load, server, case, WARMUP_SECONDS), args.client_cpus, WARMUP_SECONDS))
    run = run_measured(load_argv(load, server, case, args.duration), args.client_cpus, args.duration, server)
    messages, rate = parse(run)
    return {"requests": messages, "req_per_s": rate, **run.per_request(messages)}


def ratio_cell(summary, case, server, peer, bound):
    ours = summary_median(summary, case, server, "cpu_us_per_request")
    theirs = summary_median(summary, case, peer, "cpu_us_per_request")
    if not ours or not theirs:
        return "n/a"
    ratio = ours / theirs
    if bound is None:
        return f"{ratio:.2f}×"
    return f"{ratio:.2f}× (target ≤ {bound:.2f}×: {'met' if ratio <= bound else 'not met'})"


def ratio_lines(summary):
    pairs = [*FLOORS, ("xkit", "go")]
    lines = [
        "### xKit's CPU µs/message ÷ the floor's of its backend, and ÷ Go's (of medians)",
        "",
        "| Case | " + " | ".join(f"{server} ÷ {peer}" for server, peer in pairs) + " |",
        "|---|" + "---|" * len(pairs),
    ]
    for case in summary:
        floor_bound = None if CASES[case].reupgrade else FLOOR_CLAIM
        cells = [ratio_cell(summary, case, server, peer, floor_bound) for server, peer in FLOORS]
        cells.append(ratio_cell(summary, case, "xkit", "go", CLAIMS[case]))
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def machine_description(args):
    go = find_tool("go", "/usr/local/go/bin/go") or "go"
    return (
        f"{environment.host_line()}; {environment.first_line([go, 'version'])}, gorilla/websocket "
        f"v1.5.3. xkit runs on its default backend (io_uring where allowed), xkit_epoll on epoll; "
        f"baseline (epoll) and baseline_uring are the floors, answering ws_load -raw's frames by "
        f"length. Servers on CPU {environment.cpu_list(args.server_cpus)} with one worker, ws_load "
        f"on CPU {environment.cpu_list(args.client_cpus)}; {args.duration} s per run after "
        f"{WARMUP_SECONDS} s warm-up, {args.runs} runs, medians. Req/s below are messages/s."
    )


def render(results, skipped, machine):
    summary = summarize_rounds(results, lambda case: KEYS)
    lines = ["## WebSocket comparison", "", machine, "", CPU_SPLIT_NOTE, ""]
    for case, by_server in results.items():
        lines += [f"### {CASES[case].title}", ""] + cpu_table(by_server, summary[case], LOAD) + [""]
    lines += ratio_lines(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def run(args):
    def measure(bench):
        machine = machine_description(args)
        asked = list(args.servers)
        args.servers = list(dict.fromkeys([*asked, "go"]))  # go builds ws_load too
        peers, skipped = prepare_peers(args, bench.work_dir, "websocket", extra_go=(LOAD,))
        if "go" in skipped:
            raise RunFailed(f"ws_load (Go) could not be built: {skipped['go']}")
        args.servers = asked  # and is measured only when asked for
        peers = {name: peer for name, peer in peers.items() if name in asked}
        load = bench.work_dir / "go" / LOAD
        plan = {case: list(peers) for case in args.cases}
        results = bench.rounds(
            plan,
            lambda case, name: bench.run_once(peers[name], case, lambda server: measure_case(case, server, args, load)),
        )
        markdown, summary = render(results, skipped, machine)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "compare/websocket", ["taskset"], measure, fd_limit=4096)
