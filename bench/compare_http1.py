#!/usr/bin/env python3
"""Reproduce xKit's HTTP/1.1 performance claims against its peers on one machine.

Every server runs with one worker pinned to --server-cpus while wrk runs pinned to
--client-cpus, so each side owns a core. Cases:
  ping      wrk, one GET /ping in flight per connection
  pipeline  wrk with bench/wrk/pipeline.lua, 16 pipelined GET /ping per write
  idle      the server's resident memory per idle keep-alive connection
Servers are measured in turn, round after round, and the median of each is reported,
so background load on a shared machine hits every server alike.
"""

import argparse
import json
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xkbench.loadgen import PIPELINE_SCRIPT
from xkbench.parsing import parse_wrk
from xkbench.peers import GO_PEER_FOR, Missing, PeerContext, make_peer
from xkbench.prepare import SetupFailed, build_go_peers
from xkbench.servers import (PING_REQUEST, Peer, PortPicker, RunFailed, Server,
                             children_cpu_seconds, core_seconds, parse_cpu_list,
                             wait_until_serving)

SERVERS = ("xkit", "baseline", "nginx", "go")
CASES = ("ping", "pipeline", "idle")
WARMUP_SECONDS = 1
# Connections the idle case keeps mid-handshake at once: below every peer's listen
# backlog, so no SYN is dropped and retried a second later.
IDLE_OPEN_WINDOW = 256

# --- peers ------------------------------------------------------------------


def find_peers(names, build_dir, work_dir, protocol="http1"):
    """Returns ({name: Peer}, {name: skip reason}) for the servers asked for, each with one
    worker; the baseline is this script's, the others xkbench's peers for `protocol`."""
    context = PeerContext(build_dir=build_dir, workers=1)
    if "go" in names:
        try:
            context.go_bin = build_go_peers(work_dir / "go", (GO_PEER_FOR[protocol],))
        except SetupFailed as error:
            context.go_problem = str(error)
    peers, skipped = {}, {}
    for name in names:
        peer = baseline_peer(build_dir) if name == "baseline" else make_peer(name, protocol, context)
        if isinstance(peer, Missing):
            skipped[name] = peer.reason
        else:
            peers[name] = peer
    return peers, skipped


def baseline_peer(build_dir):
    binary = build_dir / "bench" / "baseline_responder"
    if not os.access(binary, os.X_OK):
        return Missing("not built", f"{binary} not built")
    return Peer("baseline", lambda port, _dir: [str(binary), str(port)])


# --- wrk ----------------------------------------------------------------------


def run_wrk(port, seconds, pipelined, args):
    """Runs wrk once; returns its counts plus wrk's own CPU seconds, or raises RunFailed."""
    argv = ["taskset", "-c", args.client_cpus, "wrk", "-t1", f"-c{args.connections}", f"-d{seconds}s"]
    if pipelined:
        argv += ["-s", str(PIPELINE_SCRIPT)]
    argv.append(f"http://127.0.0.1:{port}/ping")
    before = children_cpu_seconds()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"wrk did not finish within {seconds + 30} s") from None
    parsed = parse_wrk(done.stdout, done.stderr, done.returncode)
    if not parsed.ok:
        raise RunFailed(parsed.problems[0])
    return {"requests": parsed.requests, "req_per_s": parsed.req_per_s,
            "wrk_cpu_seconds": children_cpu_seconds() - before}


# --- cases --------------------------------------------------------------------


def measure_throughput(server, args, pipelined):
    """Rates from wrk, CPU from /proc."""
    run_wrk(server.port, WARMUP_SECONDS, pipelined, args)
    return measure_client_run(server, args, "wrk",
                              lambda: run_wrk(server.port, args.duration, pipelined, args))


def measure_client_run(server, args, client, run_client):
    """Calls run_client(), which returns the load generator's counts with "requests" and
    "<client>_cpu_seconds", and adds what the server and both cores spent meanwhile.
    Loopback delivery runs in softirq on the sending CPU and is charged to no process,
    so the softirq time of the server's cores is reported apart."""
    server_cores, client_cores = parse_cpu_list(args.server_cpus), parse_cpu_list(args.client_cpus)

    def sample():
        return (server.cpu_seconds(), *core_seconds(server_cores), *core_seconds(client_cores))

    before, started = sample(), time.monotonic()
    result = run_client()
    after, elapsed = sample(), time.monotonic() - started
    cpu, server_busy, server_softirq, client_busy, client_softirq = (
        end - start for start, end in zip(before, after))
    client_cpu = result[f"{client}_cpu_seconds"]
    others = server_busy + client_busy - cpu - client_cpu - server_softirq - client_softirq
    result.update({
        "server_cpu_seconds": cpu,
        "cpu_us_per_request": cpu * 1e6 / result["requests"],
        "softirq_us_per_request": server_softirq * 1e6 / result["requests"],
        "server_busy": cpu / elapsed,
        f"{client}_busy": client_cpu / elapsed,
        "others_busy": max(others, 0.0) / elapsed,
    })
    return result


def measure_idle(server, args):
    """RSS growth per connection that has been served once and then sits idle."""
    run_wrk(server.port, WARMUP_SECONDS, False, args)
    time.sleep(0.5)  # let the warm-up connections close
    rss_before = server.rss_bytes()
    connections = open_served_connections(server.port, args.idle_connections)
    try:
        time.sleep(args.idle_seconds)
        rss_after = server.rss_bytes()
        closed = count_closed(connections)
    finally:
        for sock in connections:
            sock.close()
    if closed:
        raise RunFailed(f"server closed {closed} of {len(connections)} connections while idle")
    return {
        "connections": len(connections),
        "rss_before": rss_before,
        "rss_after": rss_after,
        "bytes_per_connection": (rss_after - rss_before) / len(connections),
    }


def open_served_connections(port, count, timeout=120.0):
    """Opens `count` non-blocking connections and completes one GET /ping on each,
    keeping at most IDLE_OPEN_WINDOW in progress. Returns the open sockets."""
    selector = selectors.DefaultSelector()
    served, opened = [], 0
    deadline = time.monotonic() + timeout
    try:
        while len(served) < count:
            while opened < count and len(selector.get_map()) < IDLE_OPEN_WINDOW:
                selector.register(start_connect(port), selectors.EVENT_WRITE)
                opened += 1
            if time.monotonic() > deadline:
                raise RunFailed(f"only {len(served)} of {count} connections served in {timeout:.0f} s")
            for key, _events in selector.select(timeout=1.0):
                if advance_connection(selector, key):
                    selector.unregister(key.fileobj)
                    served.append(key.fileobj)
    except BaseException:
        for sock in served + [key.fileobj for key in selector.get_map().values()]:
            sock.close()
        raise
    finally:
        selector.close()
    return served


def start_connect(port):
    sock = socket.socket()
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    return sock


def advance_connection(selector, key):
    """Moves one connection along: connected -> request sent -> response read.
    Returns True once its whole response has arrived."""
    sock = key.fileobj
    if key.data is None:
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise RunFailed(f"connect failed: {os.strerror(error)}")
        if sock.send(PING_REQUEST) != len(PING_REQUEST):
            raise RunFailed("short send of a 40-byte request")
        selector.modify(sock, selectors.EVENT_READ, bytearray())
        return False
    chunk = sock.recv(4096)
    if not chunk:
        raise RunFailed("server closed a connection before answering")
    key.data.extend(chunk)
    return response_complete(bytes(key.data))


def response_complete(data):
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return False
    status_line = head.split(b"\r\n", 1)[0]
    if not status_line.startswith(b"HTTP/1.1 200"):
        raise RunFailed(f"GET /ping answered {status_line[:60]!r}")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if not length:
        raise RunFailed("GET /ping response has no Content-Length")
    return len(body) >= int(length.group(1))


def count_closed(connections):
    """A connection the server hung up on reads as ready (EOF) without our asking."""
    with selectors.DefaultSelector() as selector:
        for sock in connections:
            selector.register(sock, selectors.EVENT_READ)
        return len(selector.select(timeout=0))


def measure(peer, case, args, ports, work_dir):
    """One run of one case against a fresh server; returns a result dict, never raises RunFailed."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{peer.name}-{case}-", dir=work_dir))
    run_dir.chmod(0o755)  # nginx's unprivileged worker makes its temp dirs in here
    server = None
    try:
        server = Server(peer, ports.take(), run_dir, args.server_cpus)
        wait_until_serving(server)
        if case == "idle":
            result = measure_idle(server, args)
        else:
            result = measure_throughput(server, args, pipelined=case == "pipeline")
        return {"ok": True, **result}
    except (RunFailed, OSError) as error:
        return {"ok": False, "error": str(error)}
    finally:
        if server is not None:
            server.stop()


# --- report -------------------------------------------------------------------


def spread_of(runs, key):
    values = [run[key] for run in runs if run["ok"]]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results):
    summary = {}
    for case, by_server in results.items():
        keys = ("bytes_per_connection",) if case == "idle" else (
            "req_per_s", "cpu_us_per_request", "softirq_us_per_request",
            "server_busy", "wrk_busy", "others_busy")
        summary[case] = {server: {key: spread_of(runs, key) for key in keys}
                         for server, runs in by_server.items()}
    return summary


def runs_cell(runs):
    return f"{sum(run['ok'] for run in runs)}/{len(runs)} ok"


def throughput_table(case, by_server, summary):
    title = {"ping": "GET /ping, one request in flight per connection",
             "pipeline": "GET /ping, 16 pipelined requests per write"}[case]
    lines = [f"### {title}", "",
             "| Server | Req/s (median) | CPU µs/req (median) | runs | spread "
             "| + softirq µs/req | busy: server / wrk / others |",
             "|---|---:|---:|---|---|---:|---|"]
    for server, runs in by_server.items():
        stats = summary[case][server]
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – | – | {runs_cell(runs)} | | | |")
            continue
        rate, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
        lines.append(
            f"| {server} | {rate['median']:,.0f} | {cpu['median']:.2f} | {runs_cell(runs)} "
            f"| {rate['min']:,.0f}–{rate['max']:,.0f} req/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs "
            f"| {stats['softirq_us_per_request']['median']:.2f} | {busy_cell(stats)} |")
    return lines


def busy_cell(stats):
    """Share of a core used by the server and by wrk, and by everything else on both cores
    but softirq: a server under 100% was waiting for wrk; large 'others' mean a noisy run."""
    return " / ".join(f"{stats[key]['median']:.0%}" for key in ("server_busy", "wrk_busy", "others_busy"))


def idle_table(by_server, summary, connections):
    lines = [f"### Idle keep-alive connections ({connections:,} served once, then idle)", "",
             "| Server | RSS bytes/conn (median) | runs | spread |", "|---|---:|---|---|"]
    for server, runs in by_server.items():
        stats = summary["idle"][server]["bytes_per_connection"]
        if stats is None:
            lines.append(f"| {server} | – | {runs_cell(runs)} | |")
        else:
            lines.append(f"| {server} | {stats['median']:,.0f} | {runs_cell(runs)} "
                         f"| {stats['min']:,.0f}–{stats['max']:,.0f} |")
    return lines


def median_of(summary, case, server, key):
    stats = summary.get(case, {}).get(server, {}).get(key)
    return stats["median"] if stats else None


def ratio_lines(summary):
    """The claims: xKit's CPU per request against the floor and nginx, and its pipelined rate."""
    claims = [
        ("xkit CPU/req ÷ baseline", "cpu_us_per_request", "baseline", ("ping", "pipeline")),
        ("xkit CPU/req ÷ nginx", "cpu_us_per_request", "nginx", ("ping", "pipeline")),
        ("xkit req/s ÷ nginx", "req_per_s", "nginx", ("pipeline",)),
    ]
    lines = ["### Ratios (of medians)", ""]
    for label, key, peer, cases in claims:
        parts = []
        for case in cases:
            ours, theirs = median_of(summary, case, "xkit", key), median_of(summary, case, peer, key)
            parts.append(f"{case} {ours / theirs:.2f}×" if ours and theirs else f"{case} n/a")
        lines.append(f"- {label}: " + ", ".join(parts))
    return lines


def failure_lines(results, skipped):
    lines = [f"- {server}: skipped — {reason}" for server, reason in skipped.items()]
    for case, by_server in results.items():
        for server, runs in by_server.items():
            lines += [f"- {server} {case} run {index}: failed — {run['error']}"
                      for index, run in enumerate(runs, 1) if not run["ok"]]
    return ["### Skipped and failed", ""] + lines if lines else []


def host_description():
    with open("/proc/cpuinfo") as cpuinfo:
        cpu_model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), "unknown CPU")
    with open("/proc/loadavg") as loadavg:
        load = " ".join(loadavg.read().split()[:3])
    return f"{os.cpu_count()} × {cpu_model}, Linux {os.uname().release}, load {load} at start"


def machine_description(args):
    return (f"{host_description()}; "
            f"servers on CPU {args.server_cpus} with one worker, wrk -t1 -c{args.connections} "
            f"on CPU {args.client_cpus}; {args.duration} s per run after {WARMUP_SECONDS} s warm-up, "
            f"{args.runs} runs, medians.")


def render(results, skipped, args, machine):
    summary = summarize(results)
    lines = ["## HTTP/1.1 comparison", "", machine, ""]
    for case, by_server in results.items():
        if case == "idle":
            lines += idle_table(by_server, summary, args.idle_connections) + [""]
        else:
            lines += throughput_table(case, by_server, summary) + [""]
    if "ping" in results or "pipeline" in results:
        lines += ratio_lines(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


# --- main ---------------------------------------------------------------------


def name_list(choices):
    def parse(text):
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return [name for name in choices if name in names]  # keep the canonical order
    return parse


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where bench/http_bench_server and bench/baseline_responder are")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured wrk run")
    parser.add_argument("--runs", type=int, default=3, help="rounds over all servers")
    parser.add_argument("--servers", type=name_list(SERVERS), default=list(SERVERS))
    parser.add_argument("--cases", type=name_list(CASES), default=list(CASES))
    parser.add_argument("--connections", type=int, default=100, help="wrk connections")
    parser.add_argument("--idle-connections", type=int, default=10000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)
    parser.add_argument("--server-cpus", default="1", help="taskset list for the servers")
    parser.add_argument("--client-cpus", default="0", help="taskset list for wrk and this script")
    parser.add_argument("--first-port", type=int, default=21000)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args()
    if args.duration < 1 or args.runs < 1 or args.idle_connections < 1:
        parser.error("--duration, --runs and --idle-connections must be at least 1")
    try:
        parse_cpu_list(args.server_cpus), parse_cpu_list(args.client_cpus)
    except ValueError:
        parser.error("--server-cpus and --client-cpus take taskset lists such as 1 or 2-3,5")
    return args


def raise_fd_limit(needed):
    """Servers inherit this limit, so raising ours covers the idle case on both sides.
    Raising the hard limit needs CAP_SYS_RESOURCE; without it the soft limit goes up to it."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, needed),) * 2)
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        if hard < needed:
            sys.exit(f"the idle case needs {needed} open files but the hard limit is {hard}")


def check_tools():
    missing = [tool for tool in ("taskset", "wrk") if shutil.which(tool) is None]
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))


def run_rounds(peers, args, work_dir):
    """Round after round, each case, each server in order: drift hits everyone alike."""
    results = {case: {name: [] for name in peers} for case in args.cases}
    ports = PortPicker(args.first_port)
    for round_number in range(1, args.runs + 1):
        for case in args.cases:
            for name, peer in peers.items():
                print(f"round {round_number}/{args.runs}: {case} on {name}", file=sys.stderr, flush=True)
                result = measure(peer, case, args, ports, work_dir)
                if not result["ok"]:
                    print(f"  failed: {result['error']}", file=sys.stderr, flush=True)
                results[case][name].append(result)
    return results


def write_json(args, machine, skipped, results, summary):
    """The raw numbers behind a report, with the options that produced them."""
    raw = {"config": {key: str(value) if isinstance(value, Path) else value
                      for key, value in vars(args).items()},
           "machine": machine, "skipped": skipped,
           "results": results, "summary": summary}
    args.json.write_text(json.dumps(raw, indent=2) + "\n")


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    check_tools()
    # The idle case's client is this script: keep it off the server's core like wrk.
    os.sched_setaffinity(0, parse_cpu_list(args.client_cpus))
    if "idle" in args.cases:
        raise_fd_limit(args.idle_connections + 1024)
    machine = machine_description(args)
    with tempfile.TemporaryDirectory(prefix="compare_http1-") as work_dir:
        peers, skipped = find_peers(args.servers, args.build_dir.resolve(), Path(work_dir))
        for name, reason in skipped.items():
            print(f"skipping {name}: {reason}", file=sys.stderr)
        results = run_rounds(peers, args, Path(work_dir))
    report, summary = render(results, skipped, args, machine)
    print(report)
    if args.json:
        write_json(args, machine, skipped, results, summary)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)  # servers were already stopped on the way out
