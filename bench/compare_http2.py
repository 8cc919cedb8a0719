#!/usr/bin/env python3
"""Reproduce xKit's cleartext HTTP/2 performance claims against h2o and Go on one machine.

Every server runs with one worker pinned to --server-cpus while h2load (-t1, prior
knowledge) runs pinned to --client-cpus, so each side owns a core. Cases:
  ping     GET /ping, 100 connections × 10 concurrent streams
  echo4k   GET /echo?size=4096, 100 × 10 (h2o serves a 4096-byte file and ignores the query)
  post64k  POST /echo with a 64 KiB body echoed back, 20 × 10 (xkit and go: h2o has no echo)
Servers are measured in turn, round after round, and the median of each is reported,
so background load on a shared machine hits every server alike. Processes, /proc
accounting, the peers and h2load's parser come from xkbench/, the report's pieces from
compare_http1.py.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from compare_http1 import (
    WARMUP_SECONDS, failure_lines, find_peers, host_description, measure_client_run,
    median_of, name_list, runs_cell, spread_of, write_json)
from xkbench.parsing import parse_h2load
from xkbench.servers import (PortPicker, RunFailed, Server, children_cpu_seconds, find_tool,
                             parse_cpu_list, wait_until_serving)

SERVERS = ("xkit", "h2o", "go")
STREAMS_PER_CONNECTION = 10
POST_BODY_BYTES = 64 << 10
# h2load stops issuing requests at -D but waits for those in flight; allow it that long.
H2LOAD_GRACE_SECONDS = 30


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
    "echo4k": Case("GET /echo?size=4096 (h2o: a static 4096-byte file)", "/echo?size=4096",
                   100, False, SERVERS),
    "post64k": Case("POST /echo, 64 KiB body echoed back", "/echo", 20, True, ("xkit", "go")),
}

# Ratios of median CPU µs/req that the claims bound from above: (case, peer) -> bound.
CLAIMS = {("ping", "h2o"): 0.85, ("ping", "go"): 0.10, ("echo4k", "h2o"): 0.85,
          ("post64k", "go"): 0.67}


# --- h2load -------------------------------------------------------------------


def run_h2load(port, case, seconds, args, body_path):
    """Runs h2load once; returns its counts plus h2load's own CPU seconds, or raises RunFailed."""
    argv = ["taskset", "-c", args.client_cpus, "h2load", "-t1", f"-c{case.connections}",
            f"-m{STREAMS_PER_CONNECTION}", "-D", str(seconds)]
    if case.posts_body:
        argv += ["-d", str(body_path)]
    argv.append(f"http://127.0.0.1:{port}{case.path}")
    before = children_cpu_seconds()
    limit = seconds + H2LOAD_GRACE_SECONDS
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"h2load did not finish within {limit} s") from None
    parsed = parse_h2load(done.stdout, done.stderr, done.returncode, protocol="h2c")
    if not parsed.ok:
        raise RunFailed(parsed.problems[0])
    return {"requests": parsed.requests, "req_per_s": parsed.req_per_s,
            "h2load_cpu_seconds": children_cpu_seconds() - before}


# --- cases --------------------------------------------------------------------


def measure(peer, case_name, args, ports, work_dir, body_path):
    """One run of one case against a fresh server; returns a result dict, never raises RunFailed.
    The start check speaks HTTP/1.1; the warm-up run is the first to speak HTTP/2 and fails
    the run as any h2load run does."""
    case = CASES[case_name]
    run_dir = Path(tempfile.mkdtemp(prefix=f"{peer.name}-{case_name}-", dir=work_dir))
    run_dir.chmod(0o755)
    server = None
    try:
        server = Server(peer, ports.take(), run_dir, args.server_cpus)
        wait_until_serving(server)
        run_h2load(server.port, case, WARMUP_SECONDS, args, body_path)
        result = measure_client_run(
            server, args, "h2load",
            lambda: run_h2load(server.port, case, args.duration, args, body_path))
        return {"ok": True, **result}
    except (RunFailed, OSError) as error:
        return {"ok": False, "error": str(error)}
    finally:
        if server is not None:
            server.stop()


def run_rounds(peers, args, work_dir, body_path):
    """Round after round, each case, each of its servers in order: drift hits everyone alike."""
    results = {case: {name: [] for name in peers if name in CASES[case].servers}
               for case in args.cases}
    ports = PortPicker(args.first_port)
    for round_number in range(1, args.runs + 1):
        for case, by_server in results.items():
            for name, runs in by_server.items():
                print(f"round {round_number}/{args.runs}: {case} on {name}", file=sys.stderr, flush=True)
                result = measure(peers[name], case, args, ports, work_dir, body_path)
                if not result["ok"]:
                    print(f"  failed: {result['error']}", file=sys.stderr, flush=True)
                runs.append(result)
    return results


# --- report -------------------------------------------------------------------


SUMMARY_KEYS = ("req_per_s", "cpu_us_per_request", "softirq_us_per_request",
                "server_busy", "h2load_busy", "others_busy")


def summarize(results):
    return {case: {server: {key: spread_of(runs, key) for key in SUMMARY_KEYS}
                   for server, runs in by_server.items()}
            for case, by_server in results.items()}


def case_table(case_name, by_server, summary):
    case = CASES[case_name]
    lines = [f"### {case.title} — `h2load -c{case.connections} -m{STREAMS_PER_CONNECTION}`", "",
             "| Server | Req/s (median) | CPU µs/req (median) | runs | spread "
             "| + softirq µs/req | busy: server / h2load / others |",
             "|---|---:|---:|---|---|---:|---|"]
    for server, runs in by_server.items():
        stats = summary[case_name][server]
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – | – | {runs_cell(runs)} | | | |")
            continue
        rate, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
        busy = " / ".join(f"{stats[key]['median']:.0%}"
                          for key in ("server_busy", "h2load_busy", "others_busy"))
        lines.append(
            f"| {server} | {rate['median']:,.0f} | {cpu['median']:.2f} | {runs_cell(runs)} "
            f"| {rate['min']:,.0f}–{rate['max']:,.0f} req/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs "
            f"| {stats['softirq_us_per_request']['median']:.2f} | {busy} |")
    return lines


def ratio_table(summary):
    """xKit's median CPU µs/req over each peer's, with the claimed bound where there is one."""
    peers = [peer for peer in SERVERS if peer != "xkit"]
    lines = ["### xKit's CPU µs/req ÷ each peer's (of medians)", "",
             "| Case | " + " | ".join(f"xkit ÷ {peer}" for peer in peers) + " |",
             "|---|" + "---|" * len(peers)]
    for case in summary:
        cells = [ratio_cell(summary, case, peer) for peer in peers]
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def ratio_cell(summary, case, peer):
    if peer not in CASES[case].servers:
        return "–"
    ours = median_of(summary, case, "xkit", "cpu_us_per_request")
    theirs = median_of(summary, case, peer, "cpu_us_per_request")
    if not ours or not theirs:
        return "n/a"
    ratio = ours / theirs
    bound = CLAIMS.get((case, peer))
    if bound is None:
        return f"{ratio:.2f}×"
    verdict = "met" if ratio <= bound else "not met"
    return f"{ratio:.2f}× (claim ≤ {bound:.2f}×: {verdict})"


def tool_version(argv):
    """The first line a tool prints about its version, or "unknown"."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else "unknown"


def machine_description(args):
    versions = ", ".join(tool_version(argv) for argv in (
        ["h2load", "--version"],
        [find_tool("h2o", "/usr/sbin/h2o") or "h2o", "--version"],
        [find_tool("go", "/usr/local/go/bin/go") or "go", "version"]))
    return (f"{host_description()}; {versions}. Servers on CPU {args.server_cpus} with one worker, h2load -t1 "
            f"(cleartext HTTP/2, prior knowledge) on CPU {args.client_cpus}; {args.duration} s "
            f"per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians.")


def render(results, skipped, machine):
    summary = summarize(results)
    lines = ["## HTTP/2 (h2c) comparison", "", machine, ""]
    for case, by_server in results.items():
        lines += case_table(case, by_server, summary) + [""]
    lines += ratio_table(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


# --- main ---------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where bench/http_bench_server is")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured h2load run")
    parser.add_argument("--runs", type=int, default=3, help="rounds over all servers")
    parser.add_argument("--servers", type=name_list(SERVERS), default=list(SERVERS))
    parser.add_argument("--cases", type=name_list(tuple(CASES)), default=list(CASES))
    parser.add_argument("--server-cpus", default="1", help="taskset list for the servers")
    parser.add_argument("--client-cpus", default="0", help="taskset list for h2load and this script")
    parser.add_argument("--first-port", type=int, default=22000)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    if args.duration < 1 or args.runs < 1:
        parser.error("--duration and --runs must be at least 1")
    try:
        parse_cpu_list(args.server_cpus), parse_cpu_list(args.client_cpus)
    except ValueError:
        parser.error("--server-cpus and --client-cpus take taskset lists such as 1 or 2-3,5")
    return args


def check_tools():
    missing = [tool for tool in ("taskset", "h2load") if shutil.which(tool) is None]
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    check_tools()
    os.sched_setaffinity(0, parse_cpu_list(args.client_cpus))  # off the server's core
    machine = machine_description(args)
    with tempfile.TemporaryDirectory(prefix="compare_http2-") as work_dir:
        Path(work_dir).chmod(0o711)  # h2o, no longer root, reaches its files through it
        body_path = Path(work_dir) / "body64k"
        body_path.write_bytes(os.urandom(POST_BODY_BYTES))
        peers, skipped = find_peers(args.servers, args.build_dir.resolve(), Path(work_dir), "h2c")
        for name, reason in skipped.items():
            print(f"skipping {name}: {reason}", file=sys.stderr)
        results = run_rounds(peers, args, Path(work_dir), body_path)
    report, summary = render(results, skipped, machine)
    print(report)
    if args.json:
        write_json(args, machine, skipped, results, summary)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)  # servers were already stopped on the way out
