"""Running wrk or h2load against one server from the client's cores, and what the server,
the load generator and everything else spent meanwhile."""

import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .matrix import STREAMS_PER_CONNECTION, Case
from .parsing import parse_h2load, parse_wrk
from .servers import children_cpu_seconds, core_seconds

BENCH_DIR = Path(__file__).resolve().parent.parent
PIPELINE_SCRIPT = BENCH_DIR / "wrk" / "pipeline.lua"
POST_SCRIPT = BENCH_DIR / "wrk" / "post.lua"
# h2load stops issuing requests at -D but waits for those in flight; allow it that long.
GRACE_SECONDS = 30
H2LOAD_STARTED = "Main benchmark duration is started"
H2LOAD_OVER = "Main benchmark duration is over"


@dataclass
class Client:
    """The load generator's side: its cores, one thread per core, the POST bodies by size."""

    cpus: set
    threads: int
    bodies: dict

    @property
    def cpu_list(self):
        return ",".join(str(cpu) for cpu in sorted(self.cpus))


def url(case, port):
    scheme = "https" if case.protocol.tls else "http"
    return f"{scheme}://127.0.0.1:{port}{case.path}"


def load_argv(case, port, seconds, warmup, client):
    """wrk opens its connections inside the measured time, h2load during --warm-up-time.
    h2load over TLS offers only h2, so a server without it fails instead of falling back."""
    target = url(case, port)
    if case.protocol.tool == "wrk":
        argv = ["wrk", f"-t{client.threads}", f"-c{case.connections}", f"-d{seconds}s"]
        if case.protocol.pipelined:
            return argv + ["-s", str(PIPELINE_SCRIPT), target]
        if case.kind == "post":
            return argv + ["-s", str(POST_SCRIPT), target, "--", str(client.bodies[case.size])]
        return argv + [target]
    argv = ["h2load", f"-t{client.threads}", f"-c{case.connections}",
            f"-m{STREAMS_PER_CONNECTION}", "-D", str(seconds)]
    if warmup:
        argv.append(f"--warm-up-time={warmup}")
    if case.protocol.tls:
        argv.append("--npn-list=h2")
    if case.kind == "post":
        argv += ["-d", str(client.bodies[case.size])]
    return argv + [target]


def describe(section, seconds, warmup, client):
    """The section's command line as the report shows it, with N for what varies along its
    axis, PORT for the server's port and BODY_FILE for a file of N bytes."""
    first = section.cases[0]
    generic = (Case(first.protocol, first.kind, "N") if first.kind == "ping"
               else Case(first.protocol, first.kind, first.connections, "N"))
    shown = Client(client.cpus, client.threads, {"N": "BODY_FILE"})
    argv = load_argv(generic, "PORT", seconds, warmup, shown)
    scripts = {str(PIPELINE_SCRIPT), str(POST_SCRIPT)}
    return " ".join(str(Path(arg).relative_to(BENCH_DIR.parent)) if arg in scripts else arg
                    for arg in argv)


def run_load(case, server, seconds, warmup, client):
    """Runs the case's load generator once against server and returns the run's record: the
    load generator's counts and problems, and the server's CPU µs per request over the
    measured window (h2load's main duration; the whole of wrk's run). Raises RunFailed (or
    OSError) only when a serving process is gone."""
    h2load = case.protocol.tool == "h2load"
    argv = ["taskset", "-c", client.cpu_list] + load_argv(case, server.port, seconds, warmup, client)
    limit = seconds + warmup + GRACE_SECONDS
    cores = client.cpus | server.cores
    started = time.monotonic()
    (busy_before, softirq_before), client_before = core_seconds(cores), children_cpu_seconds()
    server_before = server.cpu_seconds()
    output, returncode, window, timed_out = stream(
        argv, limit, client.threads if h2load else 0, server.cpu_seconds)
    server_after = server.cpu_seconds()
    elapsed = time.monotonic() - started
    (busy_after, softirq_after), client_after = core_seconds(cores), children_cpu_seconds()
    if h2load:
        result = parse_h2load(output, returncode=returncode,
                              protocol="h2" if case.protocol.tls else "h2c")
    else:
        result = parse_wrk(output, returncode=returncode)
    if timed_out:
        result.problems.insert(0, f"{case.protocol.tool} did not finish within {limit} s")
    window_start, window_end = window or (server_before, server_after)
    window_cpu = window_end - window_start
    server_cpu, client_cpu = server_after - server_before, client_after - client_before
    # Softirq is left out: loopback charges it to whichever core sends, to no process.
    others = (busy_after - busy_before) - (softirq_after - softirq_before) - server_cpu - client_cpu
    return {
        "ok": result.ok,
        "problems": result.problems,
        "requests": result.requests,
        "req_per_s": result.req_per_s,
        "latency_ms": result.latency_ms,
        "server_cpu_s": round(window_cpu, 4),
        "cpu_us_per_request": window_cpu * 1e6 / result.requests if result.requests else None,
        "server_busy": round(server_cpu / elapsed, 3),
        "client_busy": round(client_cpu / elapsed, 3),
        "others_busy": round(max(others, 0.0) / elapsed, 3),
        "elapsed_s": round(elapsed, 2),
    }


def stream(argv, limit, markers, server_cpu):
    """Runs argv, reading its output as it comes, killing it after limit seconds. With
    markers (h2load's thread count), samples server_cpu() when the last thread starts its
    main duration and when the first one ends it. Returns (output, returncode,
    (cpu at start, cpu at end) or None, whether it was killed for taking too long)."""
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
    fired = threading.Event()

    def kill():
        fired.set()
        process.kill()

    watchdog = threading.Timer(limit, kill)
    watchdog.start()
    lines, started, window = [], 0, [None, None]
    try:
        for line in process.stdout:
            lines.append(line)
            if markers and line.startswith(H2LOAD_STARTED):
                started += 1
                if started == markers:
                    window[0] = server_cpu()
            elif markers and line.startswith(H2LOAD_OVER) and window[1] is None:
                window[1] = server_cpu()
        returncode = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
    complete = None not in window
    return "".join(lines), returncode, tuple(window) if complete else None, fired.is_set()
