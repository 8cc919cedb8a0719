#!/usr/bin/env python3
"""Reproduce xKit's HTTPS performance claims against h2o, nginx and Go on one machine.

Every server runs with one worker pinned to --server-cpus while the load generator (-t1)
and this script run pinned to --client-cpus, so each side owns a core. TLS 1.3 with a
self-signed RSA-2048 certificate; each server keeps its own cipher-suite preference. Cases:
  h1         wrk -c100, GET /ping over HTTPS/1.1 keep-alive connections
  h2         h2load -c100 -m10, GET /ping over HTTPS/2
  handshake  wrk -c20 -H "Connection: close", GET /ping: a new connection, so a handshake,
             per request; twice: "resumed" (each server's defaults: wrk offers the ticket its
             last connection received) and "full" (resumption off on every server)
  idle       the server's resident memory per idle TLS keep-alive connection
Before the rounds each server is started once per handshake variant to check what it
negotiates (`openssl s_client`) and whether it resumes sessions. Servers are measured in
turn, round after round (in reverse order every other round), and the median of each is
reported, so background load on a shared machine hits every server alike. Processes, /proc
accounting, the peers, the certificate and the wrk and h2load parsers come from xkbench/,
the report's pieces from compare_http1.py.
"""

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare_http1 import (
    WARMUP_SECONDS, count_closed, failure_lines, host_description, measure_client_run,
    median_of, name_list, raise_fd_limit, response_complete, runs_cell, spread_of, write_json)
from xkbench import environment
from xkbench.loadgen import Client, run_load
from xkbench.matrix import PROTOCOLS, STREAMS_PER_CONNECTION, Case
from xkbench.parsing import parse_wrk
from xkbench.peers import GO_PEER_FOR, Missing, PeerContext, make_peer
from xkbench.prepare import SetupFailed, build_go_peers, make_certificate
from xkbench.servers import (PING_REQUEST, PortPicker, RunFailed, Server, child_pids,
                             children_cpu_seconds, client_tls_context, find_tool, parse_cpu_list,
                             wait_until_serving)

SERVERS = ("xkit", "h2o", "nginx", "go")
CASES = ("h1", "h2", "handshake", "idle")
VARIANTS = ("resumed", "full")
H1_CONNECTIONS = 100
H2_CONNECTIONS = 100
HANDSHAKE_CONNECTIONS = 20
# The short wrk run whose CPU and requests are taken off the long run's, handshakes and all.
SHORT_RUN_SECONDS = 1
WRK_GRACE_SECONDS = 30
IDLE_OPENERS = 16           # client threads opening the idle connections
RESUMPTION_LOG = "resumption.log"
# What nginx's $ssl_session_reused and h2o's %{ssl.session-reused}x log for a resumed session.
LOGGED = {"nginx": "r", "h2o": "1"}

RESUMPTION_LUA = """\
-- Tallies GET /tls answers by their "resumed" flag over all of wrk's threads.
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) resumed = 0; full = 0 end
function response(status, headers, body)
  if body and string.find(body, '"resumed":true', 1, true) then resumed = resumed + 1
  else full = full + 1 end
end
function done(summary, latency, requests)
  local r, f = 0, 0
  for _, t in ipairs(threads) do r = r + t:get("resumed"); f = f + t:get("full") end
  io.write(string.format("tls-answers resumed %d full %d\\n", r, f))
end
"""

# --- peers ------------------------------------------------------------------


def find_peers(names, build_dir, work_dir):
    """Returns ({name: Peer}, {name: skip reason}, cert): xkbench's HTTPS peers, one worker each,
    sharing one certificate. One peer serves both HTTPS/1.1 and HTTPS/2 (by ALPN)."""
    context = PeerContext(build_dir=build_dir, workers=1)
    try:
        context.cert, context.key = make_certificate(work_dir)
    except SetupFailed as error:
        context.cert_problem = str(error)
    if "go" in names:
        try:
            context.go_bin = build_go_peers(work_dir / "go", (GO_PEER_FOR["https1"],))
        except SetupFailed as error:
            context.go_problem = str(error)
    peers, skipped = {}, {}
    for name in names:
        peer = make_peer(name, "https1", context)
        if isinstance(peer, Missing):
            skipped[name] = peer.reason
        else:
            peers[name] = peer
    return peers, skipped


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
        text, found = re.subn(r"(ssl_certificate_key [^;]*;)",
                              lambda match: match.group(1) + "\n        " + settings, text)
        if logged:
            text, logs = re.subn(r"access_log off;", lambda _: (
                f"log_format resumption $ssl_session_reused;\n"
                f"    access_log {start_log(run_dir)} resumption;"), text)
            found = found and logs
        if not found:
            raise RunFailed("nginx.conf is not laid out as compare_https.py expects")
        return text
    return edit


def h2o_edit(full, logged, max_connections):
    def edit(text, run_dir):
        extra = f"max-connections: {max_connections}\n"
        if full:
            extra += "ssl-session-resumption:\n  mode: off\n"
        if logged:
            extra += (f"access-log:\n  path: {start_log(run_dir)}\n"
                      "  format: \"%{ssl.session-reused}x\"\n")
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
    session was resumed, into RESUMPTION_LOG in their run directory."""
    full = variant == "full"
    if peer.name == "xkit":
        if not full:
            return peer
        return dataclasses.replace(peer, command=lambda port, run_dir: peer.command(
            port, run_dir) + ["--no-tickets", "--session-cache", "0"])
    if peer.name == "go":
        return dataclasses.replace(peer, env={**peer.env, "BENCH_TLS_NO_RESUMPTION": "1"}) if full else peer
    if peer.name == "nginx":
        return edit_config(peer, "nginx.conf", nginx_edit(full, logged))
    return edit_config(peer, "h2o.conf", h2o_edit(full, logged, max_connections))


class HttpsServer(Server):
    """h2o signs with its private key in a child process (neverbleed: a fork of h2o that keeps
    the key out of the process that parses requests), so full handshakes cost CPU there too.
    Its serving processes are itself and its children named h2o; its perl helper, which
    annotates crash backtraces, sleeps and is left out."""

    def find_serving_pids(self):
        if self.peer.name != "h2o":
            return super().find_serving_pids()
        return [self.process.pid] + [pid for pid in child_pids(self.process.pid)
                                     if process_name(pid) == "h2o"]


def process_name(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


# --- load generators ----------------------------------------------------------


def run_wrk(url, seconds, connections, args, extra=()):
    """Runs wrk once; returns its counts plus wrk's own CPU seconds and output, or raises RunFailed."""
    argv = (["taskset", "-c", args.client_cpus, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
            + list(extra) + [url])
    before = children_cpu_seconds()
    limit = seconds + WRK_GRACE_SECONDS
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"wrk did not finish within {limit} s") from None
    parsed = parse_wrk(done.stdout, done.stderr, done.returncode)
    if not parsed.ok:
        raise RunFailed(parsed.problems[0])
    return {"requests": parsed.requests, "req_per_s": parsed.req_per_s,
            "wrk_cpu_seconds": children_cpu_seconds() - before, "output": done.stdout}


def ping_url(port):
    return f"https://127.0.0.1:{port}/ping"


def wrk_record(result):
    """measure_client_run's record without wrk's report, with the client's share named as h2load's is."""
    result.pop("output", None)
    result["client_busy"] = result.pop("wrk_busy")
    return result


# --- cases --------------------------------------------------------------------


def measure_h1(server, args):
    """wrk opens its 100 connections, so 100 full handshakes, inside every run. A short run and
    a long one against the same warmed-up server carry the same handshakes, so the difference
    of their CPU over the difference of their requests is the cost of a request alone."""
    url = ping_url(server.port)
    run_wrk(url, WARMUP_SECONDS, H1_CONNECTIONS, args)
    short = wrk_record(measure_client_run(server, args, "wrk", lambda: run_wrk(
        url, SHORT_RUN_SECONDS, H1_CONNECTIONS, args)))
    long = wrk_record(measure_client_run(server, args, "wrk", lambda: run_wrk(
        url, args.duration, H1_CONNECTIONS, args)))
    extra_requests = long["requests"] - short["requests"]
    if extra_requests <= 0:
        raise RunFailed(f"the {args.duration}-s run completed no more requests than the "
                        f"{SHORT_RUN_SECONDS}-s one")
    steady = (long["server_cpu_seconds"] - short["server_cpu_seconds"]) * 1e6 / extra_requests
    return {**long, "whole_run_cpu_us_per_request": long["cpu_us_per_request"],
            "cpu_us_per_request": steady, "short_run": short}


def measure_h2(server, args):
    """h2load opens its connections during --warm-up-time; the CPU window is its main duration."""
    client = Client(parse_cpu_list(args.client_cpus), threads=1, bodies={})
    record = run_load(Case(PROTOCOLS["https2"], "ping", H2_CONNECTIONS), server,
                      args.duration, WARMUP_SECONDS, client)
    if not record.pop("ok"):
        raise RunFailed(record["problems"][0])
    return record


def measure_handshakes(server, args):
    """Every request on a new connection: CPU per request is CPU per handshake (plus one GET)."""
    url, close = ping_url(server.port), ("-H", "Connection: close")
    run_wrk(url, WARMUP_SECONDS, HANDSHAKE_CONNECTIONS, args, close)
    return wrk_record(measure_client_run(server, args, "wrk", lambda: run_wrk(
        url, args.duration, HANDSHAKE_CONNECTIONS, args, close)))


def measure_idle(server, args):
    """RSS growth per TLS connection that has been served once and then sits idle."""
    run_wrk(ping_url(server.port), WARMUP_SECONDS, H1_CONNECTIONS, args)
    time.sleep(0.5)  # let the warm-up connections close
    rss_before = server.rss_bytes()
    started = time.monotonic()
    connections = open_served_connections(server.port, args.idle_connections)
    opened_in = time.monotonic() - started
    try:
        time.sleep(args.idle_seconds)
        rss_after = server.rss_bytes()
        closed = count_closed(connections)
    finally:
        for sock in connections:
            sock.close()
    if closed:
        raise RunFailed(f"server closed {closed} of {len(connections)} connections while idle")
    return {"connections": len(connections), "rss_before": rss_before, "rss_after": rss_after,
            "bytes_per_connection": (rss_after - rss_before) / len(connections),
            "open_seconds": round(opened_in, 1)}


def open_served_connections(port, count):
    """Opens `count` TLS connections from IDLE_OPENERS threads, each served one GET /ping over
    HTTPS/1.1, and returns them open. Any failure closes them all and raises RunFailed."""
    context = client_tls_context()
    with concurrent.futures.ThreadPoolExecutor(IDLE_OPENERS) as pool:
        futures = [pool.submit(open_served_connection, port, context) for _ in range(count)]
        done = [future.exception() or future.result() for future in futures]
    opened = [item for item in done if not isinstance(item, BaseException)]
    errors = [item for item in done if isinstance(item, BaseException)]
    if errors:
        for sock in opened:
            sock.close()
        raise RunFailed(f"{len(errors)} of {count} connections failed: {errors[0]}")
    return opened


def open_served_connection(port, context, session=None):
    """A TLS connection (offering session, if given) that has been answered one GET /ping."""
    sock = context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30),
                               server_hostname="localhost", session=session)
    try:
        sock.sendall(PING_REQUEST)
        response = b""
        while not response_complete(response):
            chunk = sock.recv(4096)
            if not chunk:
                raise RunFailed("server closed a connection before answering")
            response += chunk
    except BaseException:
        sock.close()
        raise
    return sock


MEASURES = {"h1": measure_h1, "h2": measure_h2, "handshake-resumed": measure_handshakes,
            "handshake-full": measure_handshakes, "idle": measure_idle}


def started_server(peer, args, ports, work_dir, label):
    run_dir = Path(tempfile.mkdtemp(prefix=f"{peer.name}-{label}-", dir=work_dir))
    run_dir.chmod(0o755)  # nginx's and h2o's unprivileged processes read and write in here
    server = HttpsServer(peer, ports.take(), run_dir, args.server_cpus)
    try:
        wait_until_serving(server)
    except BaseException:
        server.stop()
        raise
    return server


def measure(peer, case, args, ports, work_dir):
    """One run of one case against a fresh server; returns a result dict, never raises RunFailed."""
    server = None
    try:
        server = started_server(peer, args, ports, work_dir, case)
        return {"ok": True, **MEASURES[case](server, args)}
    except (RunFailed, OSError) as error:
        return {"ok": False, "error": str(error)}
    finally:
        if server is not None:
            server.stop()


# --- checks -------------------------------------------------------------------


def negotiated(port, alpn):
    """What `openssl s_client` (OpenSSL's default client offer, as wrk's and h2load's) gets:
    {"version", "cipher", "group", "alpn"}; values it did not print are None."""
    openssl = find_tool("openssl", "/usr/bin/openssl")
    argv = [openssl, "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
            "-alpn", alpn]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RunFailed(f"openssl s_client: {error}") from None
    patterns = {"version": r"New, (\S+), Cipher is", "cipher": r"New, \S+, Cipher is (\S+)",
                "group": r"Server Temp Key: ([^,\n]+)", "alpn": r"ALPN protocol: (\S+)"}
    found = {key: re.search(pattern, done.stdout) for key, pattern in patterns.items()}
    return {key: match.group(1) if match else None for key, match in found.items()}


def resumes(port):
    """Whether a second connection that offers the session (TLS 1.3: the ticket) the first one
    received, after its GET /ping was answered, is resumed."""
    context = client_tls_context()
    with open_served_connection(port, context) as first:
        session = first.session
    with open_served_connection(port, context, session) as second:
        return second.session_reused


def wrk_resumption(server, args, work_dir):
    """(resumed, total) of wrk's reconnections in 1 s of the handshake case's load, or None for
    a server that cannot tell: xKit's GET /tls answers say, tallied by a wrk script; nginx and
    h2o write it to RESUMPTION_LOG (read once the server has stopped)."""
    url, close = f"https://127.0.0.1:{server.port}", ("-H", "Connection: close")
    if server.peer.name == "xkit":
        script = work_dir / "resumption.lua"
        script.write_text(RESUMPTION_LUA)
        result = run_wrk(url + "/tls", 1, HANDSHAKE_CONNECTIONS, args, close + ("-s", str(script)))
        tally = re.search(r"tls-answers resumed (\d+) full (\d+)", result["output"])
        if not tally:
            raise RunFailed("the wrk script counted no /tls answers")
        resumed, full = map(int, tally.groups())
        return resumed, resumed + full
    if server.peer.name not in LOGGED:
        return None
    run_wrk(url + "/ping", 1, HANDSHAKE_CONNECTIONS, args, close)
    server.stop()
    flags = (server.log_path.parent / RESUMPTION_LOG).read_text().split()
    return sum(flag == LOGGED[server.peer.name] for flag in flags), len(flags)


def check(peer, variant, args, ports, work_dir):
    """Starts the peer once for a variant and records what it negotiates and resumes; "problem"
    says why its handshake runs for that variant would not measure what they claim to."""
    server = None
    record = {"variant": variant, "problem": None}
    try:
        server = started_server(peer, args, ports, work_dir, f"check-{variant}")
        if variant == "resumed":
            record["h1"] = negotiated(server.port, "http/1.1")
            record["h2"] = negotiated(server.port, "h2")
        record["resumes"] = resumes(server.port)
        tally = wrk_resumption(server, args, work_dir)
        if tally:
            record["wrk_resumed"], record["wrk_reconnections"] = tally
        record["problem"] = resumption_problem(record, variant)
    except (RunFailed, OSError) as error:
        record["problem"] = str(error)
    finally:
        if server is not None:
            server.stop()
    return record


def resumption_problem(record, variant):
    """A "full" run must resume nothing; a "resumed" one must resume, but how often is the
    server's own business (it is reported)."""
    if record["resumes"] != (variant == "resumed"):
        return f"resumption is {'on' if record['resumes'] else 'off'}, not what \"{variant}\" needs"
    resumed = record.get("wrk_resumed")
    if variant == "full" and resumed:
        return f"{resumed} of {record['wrk_reconnections']} wrk reconnections were resumed"
    if variant == "resumed" and resumed == 0:
        return "wrk's reconnections were never resumed"
    return None


def run_checks(peers, args, ports, work_dir):
    """{variant: {server: check record}} for the variants the cases use."""
    variants = VARIANTS if "handshake" in args.cases else ("resumed",)
    checks = {variant: {} for variant in variants}
    for variant in variants:
        for name, peer in peers.items():
            print(f"checking {name} ({variant})", file=sys.stderr, flush=True)
            checks[variant][name] = check(tuned(peer, variant, fd_limit(args), logged=True), variant,
                                          args, ports, work_dir)
            if checks[variant][name]["problem"]:
                print(f"  {checks[variant][name]['problem']}", file=sys.stderr, flush=True)
    return checks


# --- rounds -------------------------------------------------------------------


def case_keys(cases):
    keys = []
    for case in cases:
        keys += [f"handshake-{variant}" for variant in VARIANTS] if case == "handshake" else [case]
    return keys


def run_rounds(peers, checks, args, work_dir, ports):
    """Round after round, each case, each server (the order reversed every other round), so
    drift hits everyone alike. A server whose check failed for a handshake variant sits it out."""
    results, excluded = {}, {}
    for key in case_keys(args.cases):
        variant = key.removeprefix("handshake-") if key.startswith("handshake-") else "resumed"
        results[key] = {}
        for name in peers:
            problem = checks.get(variant, {}).get(name, {}).get("problem")
            if problem and key.startswith("handshake-"):
                excluded[f"{name} {key}"] = f"check failed: {problem}"
            else:
                results[key][name] = []
    for round_number in range(1, args.runs + 1):
        for key, by_server in results.items():
            variant = "full" if key == "handshake-full" else "resumed"
            names = list(by_server) if round_number % 2 else list(reversed(by_server))
            for name in names:
                print(f"round {round_number}/{args.runs}: {key} on {name}", file=sys.stderr, flush=True)
                result = measure(tuned(peers[name], variant, fd_limit(args)), key, args, ports, work_dir)
                if not result["ok"]:
                    print(f"  failed: {result['error']}", file=sys.stderr, flush=True)
                by_server[name].append(result)
    return results, excluded


# --- report -------------------------------------------------------------------

THROUGHPUT_KEYS = ("req_per_s", "cpu_us_per_request", "server_busy", "client_busy", "others_busy")
TITLES = {
    "h1": f"HTTPS/1.1 GET /ping — `wrk -t1 -c{H1_CONNECTIONS}`",
    "h2": f"HTTPS/2 GET /ping — `h2load -t1 -c{H2_CONNECTIONS} -m{STREAMS_PER_CONNECTION}`",
    "handshake-resumed": f"Handshakes, resumed (each server's defaults) — `wrk -t1 -c{HANDSHAKE_CONNECTIONS} "
                         f"-H \"Connection: close\"`, GET /ping",
    "handshake-full": f"Handshakes, full (resumption off everywhere) — `wrk -t1 -c{HANDSHAKE_CONNECTIONS} "
                      f"-H \"Connection: close\"`, GET /ping",
}


def summarize(results):
    summary = {}
    for case, by_server in results.items():
        keys = ("bytes_per_connection", "open_seconds") if case == "idle" else THROUGHPUT_KEYS + (
            ("whole_run_cpu_us_per_request",) if case == "h1" else ()) + (
            ("softirq_us_per_request",) if case != "h2" else ())
        summary[case] = {server: {key: spread_of(runs, key) for key in keys}
                         for server, runs in by_server.items()}
    return summary


def throughput_table(case, by_server, summary):
    unit = "handshake" if case.startswith("handshake") else "req"
    client = "h2load" if case == "h2" else "wrk"
    whole = case == "h1"  # the long run's figure with its handshakes, beside the steady one
    lines = [f"### {TITLES[case]}", "",
             f"| Server | {'Handshakes' if unit == 'handshake' else 'Req'}/s (median) "
             f"| CPU µs/{unit} (median) |" + (" CPU µs/req, whole run |" if whole else "")
             + f" runs | spread | + softirq µs/{unit} | busy: server / {client} / others |",
             "|---|---:|---:|" + ("---:|" if whole else "") + "---|---|---:|---|"]
    for server, runs in by_server.items():
        stats = summary[case][server]
        if stats["req_per_s"] is None:
            lines.append(f"| {server} | – | – |" + (" – |" if whole else "")
                         + f" {runs_cell(runs)} | | | |")
            continue
        rates, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
        softirq = stats.get("softirq_us_per_request")
        cells = [server, f"{rates['median']:,.0f}", f"{cpu['median']:.2f}"]
        if whole:
            cells.append(f"{stats['whole_run_cpu_us_per_request']['median']:.2f}")
        cells += [runs_cell(runs),
                  f"{rates['min']:,.0f}–{rates['max']:,.0f}/s; {cpu['min']:.2f}–{cpu['max']:.2f} µs",
                  f"{softirq['median']:.2f}" if softirq else "n/a",
                  " / ".join(f"{stats[key]['median']:.0%}"
                             for key in ("server_busy", "client_busy", "others_busy"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def idle_table(by_server, summary, connections):
    lines = [f"### Idle TLS keep-alive connections ({connections:,}, each served one HTTPS/1.1 "
             "GET /ping, then idle)", "",
             "| Server | RSS bytes/conn (median) | runs | spread | seconds to open them |",
             "|---|---:|---|---|---:|"]
    for server, runs in by_server.items():
        stats = summary["idle"][server]
        if stats["bytes_per_connection"] is None:
            lines.append(f"| {server} | – | {runs_cell(runs)} | | |")
            continue
        rss = stats["bytes_per_connection"]
        lines.append(f"| {server} | {rss['median']:,.0f} | {runs_cell(runs)} "
                     f"| {rss['min']:,.0f}–{rss['max']:,.0f} | {stats['open_seconds']['median']:.1f} |")
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

    lines = ["### What each server negotiates and resumes", "",
             "Suites: `openssl s_client` (OpenSSL's default offer, as wrk's and h2load's). "
             "Resumption: a second Python connection offering the first one's ticket (resumed "
             "or full), and how many of wrk's reconnections in 1 s of the handshake load were "
             "resumed (xKit: its `GET /tls` answers; nginx and h2o: their access logs).", "",
             "| Server | HTTPS/1.1 | HTTPS/2 | resumption, defaults | resumption off |",
             "|---|---|---|---|---|"]
    for name, record in checks.get("resumed", {}).items():
        lines.append(f"| {name} | {suite(record.get('h1'))} | {suite(record.get('h2'))} "
                     f"| {resumption(record)} | {resumption(checks.get('full', {}).get(name))} |")
    return lines


RATIO_ROWS = (("h1", "cpu_us_per_request", "HTTPS/1.1 CPU µs/req"),
              ("h1", "req_per_s", "HTTPS/1.1 req/s"),
              ("h2", "cpu_us_per_request", "HTTPS/2 CPU µs/req"),
              ("h2", "req_per_s", "HTTPS/2 req/s"),
              ("handshake-resumed", "cpu_us_per_request", "resumed handshake CPU µs"),
              ("handshake-full", "cpu_us_per_request", "full handshake CPU µs"),
              ("idle", "bytes_per_connection", "idle RSS bytes/conn"))


def ratios(summary):
    """{row label: {peer: xKit's median ÷ the peer's, or None}} for the cases measured."""
    table = {}
    for case, key, label in RATIO_ROWS:
        if case not in summary:
            continue
        ours = median_of(summary, case, "xkit", key)
        table[label] = {}
        for peer in SERVERS[1:]:
            theirs = median_of(summary, case, peer, key)
            table[label][peer] = ours / theirs if ours and theirs else None
    return table


def ratio_table(table):
    lines = ["### xKit ÷ each peer (of medians; below 1 is less CPU or memory, above 1 more req/s)", "",
             "| Figure | " + " | ".join(f"xkit ÷ {peer}" for peer in SERVERS[1:]) + " |",
             "|---|" + "---:|" * len(SERVERS[1:])]
    for label, by_peer in table.items():
        cells = [f"{value:.2f}×" if value else "n/a" for value in by_peer.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def versions_line(env):
    names = ("xKit", "OpenSSL", "nginx", "h2o", "Go", "wrk", "h2load")
    return "Versions: " + "; ".join(f"{name}: {env[name]}" for name in names if name in env) + "."


def machine_description(args):
    return (f"{host_description()}. Servers on CPU {args.server_cpus} with one worker or thread "
            f"(xKit --workers 1, h2o num-threads 1, nginx worker_processes 1, Go GOMAXPROCS=1); "
            f"wrk -t1 and h2load -t1 on CPU {args.client_cpus}; TLS 1.3, self-signed RSA-2048 "
            f"certificate; {args.duration} s per run after {WARMUP_SECONDS} s warm-up, "
            f"{args.runs} runs, medians.")


def method_lines(args):
    return [
        "### How to read it", "",
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
        f"which leaves the handshakes out. \"Whole run\" is the long run's CPU ÷ its requests, "
        f"handshakes included. Req/s is the long run's.",
        "- HTTPS/2: h2load connects during `--warm-up-time`; the CPU window is its main "
        "duration, read off its output as it runs.",
        "- Handshakes: every request is on a new connection, so CPU µs/handshake includes one "
        "TCP connection and one GET /ping. Resumed: the servers' defaults; wrk keeps a "
        "connection's session when it reconnects and offers the last ticket it received. "
        "Full: xKit `--no-tickets --session-cache 0`, Go `BENCH_TLS_NO_RESUMPTION=1`, nginx "
        "`ssl_session_tickets off; ssl_session_cache off;`, h2o `ssl-session-resumption: mode: "
        "off`. The check table says what each server actually did. OpenSSL's client (wrk's) uses "
        "a TLS 1.3 ticket once: a server that sends no fresh ticket after a resumed handshake "
        "resumes only every other reconnection, and its \"resumed\" figure is that mix.",
        "- Idle: `VmRSS` (nginx: its worker) with the connections open and idle for "
        f"{args.idle_seconds:g} s, minus `VmRSS` before they were opened (after a 1-s wrk "
        "warm-up), ÷ the connections. User-space memory only: kernel socket buffers are not "
        "in RSS.",
        "- busy: share of one core used by the server and by the load generator, and the CPU "
        "time of everything else on both cores; large \"others\" mean a noisy run.",
    ]


def render(results, excluded, skipped, checks, args, machine, env):
    summary = summarize(results)
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
            f"- {what}: skipped — {why}" for what, why in excluded.items()]
    lines += failures
    return "\n".join(lines).rstrip() + "\n", {"cases": summary, "ratios": table, "checks": checks}


# --- main ---------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where bench/https_bench_server is")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument("--runs", type=int, default=3, help="rounds over all servers")
    parser.add_argument("--servers", type=name_list(SERVERS), default=list(SERVERS))
    parser.add_argument("--cases", type=name_list(CASES), default=list(CASES))
    parser.add_argument("--idle-connections", type=int, default=5000)
    parser.add_argument("--idle-seconds", type=float, default=2.0)
    parser.add_argument("--server-cpus", default="1", help="taskset list for the servers")
    parser.add_argument("--client-cpus", default="0", help="taskset list for the load generators and this script")
    parser.add_argument("--first-port", type=int, default=24000)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.duration <= SHORT_RUN_SECONDS or args.runs < 1 or args.idle_connections < 1:
        parser.error(f"--duration must be over {SHORT_RUN_SECONDS}; --runs and "
                     "--idle-connections at least 1")
    try:
        parse_cpu_list(args.server_cpus), parse_cpu_list(args.client_cpus)
    except ValueError:
        parser.error("--server-cpus and --client-cpus take taskset lists such as 1 or 2-3,5")
    return args


def fd_limit(args):
    """Open files for this script and the servers, which inherit its limit: the idle case's
    connections and then some."""
    return args.idle_connections + 1024


def check_tools(cases):
    needed = ["taskset", "openssl", "wrk"] + (["h2load"] if "h2" in cases else [])
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    check_tools(args.cases)
    os.sched_setaffinity(0, parse_cpu_list(args.client_cpus))  # off the servers' cores
    raise_fd_limit(fd_limit(args))
    machine = machine_description(args)
    env = environment.capture(args.build_dir.resolve(), parse_cpu_list(args.server_cpus),
                              parse_cpu_list(args.client_cpus), args.servers)
    with tempfile.TemporaryDirectory(prefix="compare_https-") as work_dir:
        work = Path(work_dir)
        work.chmod(0o711)  # h2o and nginx's workers, no longer root, reach their files through it
        peers, skipped = find_peers(args.servers, args.build_dir.resolve(), work)
        for name, reason in skipped.items():
            print(f"skipping {name}: {reason}", file=sys.stderr)
        ports = PortPicker(args.first_port)
        checks = run_checks(peers, args, ports, work)
        results, excluded = run_rounds(peers, checks, args, work, ports)
    report, summary = render(results, excluded, skipped, checks, args, machine, env)
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    if args.json:
        summary["environment"] = env
        write_json(args, machine, {**skipped, **excluded}, results, summary)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)  # servers were already stopped on the way out
