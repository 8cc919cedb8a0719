"""Running wrk or h2load from the client's cores against one server, and what the server,
the load generator and everything else on those cores spent meanwhile: the one place where
CPU per request is taken, for the suite and every comparison."""

import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .matrix import STREAMS_PER_CONNECTION, Case
from .parsing import parse_h2load, parse_h2load_log, parse_wrk
from .paths import WRK_SCRIPTS, shown
from .servers import RunFailed, children_cpu_seconds, core_seconds, cpu_list, pinned

PIPELINE_SCRIPT = WRK_SCRIPTS / "pipeline.lua"
POST_SCRIPT = WRK_SCRIPTS / "post.lua"
RESUMPTION_SCRIPT = WRK_SCRIPTS / "resumption.lua"
# h2load stops issuing requests at -D but waits for those in flight; allow it that long.
GRACE_SECONDS = 30
H2LOAD_STARTED = "Main benchmark duration is started"
H2LOAD_OVER = "Main benchmark duration is over"
# h2load prints no latency percentiles, only min, max, mean and sd. Its --log-file has each
# request's time, but h2load writes it with one write(2) per request: about 1 µs more of
# h2load's CPU per h2c GET /ping on top of 2.2 µs (measured with /usr/bin/time on the 2-core
# machine that made bench/results), which would slow a load generator that is often the
# bottleneck, and so the req/s measured. The measured run therefore stays unlogged, and p50 and
# p99 come from a logged run of the same command, this long, right after it
# (h2load_percentiles). wrk keeps every latency in any case; --latency only prints them.
LATENCY_RUN_SECONDS = 1


@dataclass
class Client:
    """The load generator's side: its cores, one thread per core, the POST bodies by size."""

    cpus: set
    threads: int
    bodies: dict

    @property
    def cpu_list(self):
        return cpu_list(self.cpus)


def wrk_argv(url, connections, seconds, threads=1, options=(), script_args=()):
    """wrk's command line, with --latency for its percentiles; options (-s SCRIPT, -H HEADER)
    go before the URL, script_args after --."""
    argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", *options, url]
    return argv + ["--", *script_args] if script_args else argv


def h2load_argv(url, connections, seconds, threads=1, streams=STREAMS_PER_CONNECTION, options=()):
    """h2load's command line for -D seconds; options (--warm-up-time, -d BODY) go before the URL."""
    return ["h2load", f"-t{threads}", f"-c{connections}", f"-m{streams}", "-D", str(seconds), *options, url]


def url(case, port):
    scheme = "https" if case.protocol.tls else "http"
    return f"{scheme}://127.0.0.1:{port}{case.path}"


def load_argv(case, port, seconds, warmup, client):
    """wrk opens its connections inside the measured time, h2load during --warm-up-time.
    h2load over TLS offers only h2, so a server without it fails instead of falling back."""
    target = url(case, port)
    if case.protocol.tool == "wrk":
        if case.protocol.pipelined:
            return wrk_argv(target, case.connections, seconds, client.threads, ["-s", str(PIPELINE_SCRIPT)])
        if case.kind == "post":
            return wrk_argv(
                target,
                case.connections,
                seconds,
                client.threads,
                ["-s", str(POST_SCRIPT)],
                [str(client.bodies[case.size])],
            )
        return wrk_argv(target, case.connections, seconds, client.threads)
    options = [f"--warm-up-time={warmup}"] if warmup else []
    if case.protocol.tls:
        options.append("--npn-list=h2")
    if case.kind == "post":
        options += ["-d", str(client.bodies[case.size])]
    return h2load_argv(target, case.connections, seconds, client.threads, options=options)


def describe(section, seconds, warmup, client):
    """The section's command line as the report shows it, with N for what varies along its
    axis, PORT for the server's port and BODY_FILE for a file of N bytes."""
    first = section.cases[0]
    generic = (
        Case(first.protocol, first.kind, "N")
        if first.kind == "ping"
        else Case(first.protocol, first.kind, first.connections, "N")
    )
    shown_client = Client(client.cpus, client.threads, {"N": "BODY_FILE"})
    argv = load_argv(generic, "PORT", seconds, warmup, shown_client)
    scripts = {str(PIPELINE_SCRIPT), str(POST_SCRIPT)}
    return " ".join(shown(arg) if arg in scripts else arg for arg in argv)


@dataclass
class Run:
    """One load-generator run: its output and exit status, whether it was killed for
    overrunning, and (measured runs only) what the server and the cores spent."""

    output: str
    returncode: int
    timed_out: bool
    usage: dict | None = None

    def per_request(self, requests):
        """usage with the server's CPU and softirq µs per request added."""
        usage = dict(self.usage)
        usage["cpu_us_per_request"] = usage["server_cpu_s"] * 1e6 / requests if requests else None
        usage["softirq_us_per_request"] = usage.pop("softirq_s") * 1e6 / requests if requests else None
        usage["user_us_per_request"] = usage["server_user_s"] * 1e6 / requests if requests else None
        usage["system_us_per_request"] = usage["server_system_s"] * 1e6 / requests if requests else None
        return usage


def run_tool(argv, cpus, seconds, env=None):
    """Runs a load generator on cpus, unmeasured (warm-ups, checks)."""
    output, returncode, _window, timed_out = stream(pinned(argv, cpus), seconds + GRACE_SECONDS, 0, None, env)
    return Run(output, returncode, timed_out)


def run_measured(argv, cpus, seconds, server, env=None, h2load_window=True):
    """Runs a load generator on cpus against server and accounts for the CPU time meanwhile.
    The server's CPU is taken over h2load's main duration when its output marks one and
    h2load_window is true, else over the whole run, in total and split into user and system
    time. Softirq is kept apart: loopback
    charges it to whichever core sends, to no process; "softirq_s" is the server cores'.
    Raises RunFailed (or OSError) only when a serving process is gone."""
    client_only = set(cpus) - server.cores
    markers = int(argv[1].removeprefix("-t")) if speaks_h2load(argv) and h2load_window else 0
    started = time.monotonic()
    before = (*server.cpu_times(), children_cpu_seconds(), *core_seconds(server.cores), *core_seconds(client_only))
    output, returncode, window, timed_out = stream(
        pinned(argv, cpus), seconds + GRACE_SECONDS, markers, server.cpu_times, env
    )
    after = (*server.cpu_times(), children_cpu_seconds(), *core_seconds(server.cores), *core_seconds(client_only))
    elapsed = time.monotonic() - started
    server_user, server_system, client_cpu, server_busy, server_softirq, client_busy, client_softirq = (
        end - start for start, end in zip(before, after, strict=True)
    )
    server_cpu = server_user + server_system
    if window:
        server_user, server_system = (end - start for start, end in zip(*window, strict=True))
    window_cpu = server_user + server_system
    others = server_busy + client_busy - server_softirq - client_softirq - server_cpu - client_cpu
    usage = {
        "server_cpu_s": round(window_cpu, 4),
        "server_user_s": round(server_user, 4),
        "server_system_s": round(server_system, 4),
        "softirq_s": server_softirq,
        "server_busy": round(server_cpu / elapsed, 3),
        "client_busy": round(client_cpu / elapsed, 3),
        "others_busy": round(max(others, 0.0) / elapsed, 3),
        "elapsed_s": round(elapsed, 2),
    }
    return Run(output, returncode, timed_out, usage)


def speaks_h2load(argv):
    """h2load, or bench/h3load, which prints h2load's summary lines and duration markers."""
    return Path(argv[0]).name in ("h2load", "h3load")


def check_run(run, argv, h2_protocol=None):
    """The LoadResult of a run of argv (wrk, h2load or h3load), its problems including a timeout."""
    if speaks_h2load(argv):
        result = parse_h2load(run.output, returncode=run.returncode, protocol=h2_protocol)
    else:
        result = parse_wrk(run.output, returncode=run.returncode)
    if run.timed_out:
        result.problems.insert(0, f"{argv[0]} did not finish in time")
    return result


def measured_load(argv, cpus, seconds, server, env=None, h2_protocol=None, h2load_window=True):
    """A measured run that must succeed: its LoadResult and Run, or RunFailed."""
    run = run_measured(argv, cpus, seconds, server, env, h2load_window)
    result = check_run(run, argv, h2_protocol)
    if not result.ok:
        raise RunFailed(result.problems[0])
    return result, run


def unmeasured_load(argv, cpus, seconds, env=None, h2_protocol=None):
    """A warm-up or check run that must succeed: its LoadResult and Run, or RunFailed."""
    run = run_tool(argv, cpus, seconds, env)
    result = check_run(run, argv, h2_protocol)
    if not result.ok:
        raise RunFailed(result.problems[0])
    return result, run


def load_figures(result):
    """A run record's figures from its LoadResult: requests, rate, mean, p50 and p99 latency."""
    return {
        "requests": result.requests,
        "req_per_s": result.req_per_s,
        "latency_ms": result.latency_ms,
        "latency_p50_ms": result.latency_p50_ms,
        "latency_p99_ms": result.latency_p99_ms,
    }


def logged_h2load_argv(argv, log_path):
    """h2load's argv (from h2load_argv) for LATENCY_RUN_SECONDS, writing each request's time
    to log_path (--log-file goes before the URL, which is last)."""
    logged = list(argv)
    if "-D" in logged:
        logged[logged.index("-D") + 1] = str(LATENCY_RUN_SECONDS)
    return logged[:-1] + [f"--log-file={log_path}", logged[-1]]


def h2load_percentiles(argv, cpus, seconds, env=None, h2_protocol=None):
    """(p50, p99) latency in ms of argv, an h2load command run (for seconds) just before, from a
    logged run of it (LATENCY_RUN_SECONDS, see there). Raises RunFailed if that run fails."""
    with tempfile.TemporaryDirectory(prefix="xkbench-h2load-") as directory:
        log_path = Path(directory) / "requests.log"
        unmeasured_load(logged_h2load_argv(argv, log_path), cpus, seconds, env, h2_protocol)
        percentiles = parse_h2load_log(log_path.read_text() if log_path.exists() else "")
    if percentiles is None:
        raise RunFailed("h2load's --log-file holds no request")
    return percentiles


def with_percentiles(result, argv, cpus, seconds, env=None, h2_protocol=None):
    """result with p50 and p99 latency: wrk's own, or h2load's from h2load_percentiles."""
    if argv[0] == "h2load":
        result.latency_p50_ms, result.latency_p99_ms = h2load_percentiles(argv, cpus, seconds, env, h2_protocol)
    return result


def run_load(case, server, seconds, warmup, client):
    """Runs the suite's case once against server and returns the run's record: the load
    generator's counts and problems, and the server's CPU µs per request over the measured
    window, and the latency percentiles (h2load's from a logged run after the measured one).
    Raises RunFailed (or OSError) only when a serving process is gone."""
    argv = load_argv(case, server.port, seconds, warmup, client)
    h2_protocol = "h2" if case.protocol.tls else "h2c"
    run = run_measured(argv, client.cpus, seconds + warmup, server)
    result = check_run(run, argv, h2_protocol)
    if result.ok:
        try:
            with_percentiles(result, argv, client.cpus, seconds + warmup, h2_protocol=h2_protocol)
        except RunFailed as error:
            result.problems.append(f"the logged h2load run for latency percentiles: {error}")
    usage = run.per_request(result.requests)
    return {
        "ok": result.ok,
        "problems": result.problems,
        **load_figures(result),
        "server_cpu_s": usage["server_cpu_s"],
        "cpu_us_per_request": usage["cpu_us_per_request"],
        "server_busy": usage["server_busy"],
        "client_busy": usage["client_busy"],
        "others_busy": usage["others_busy"],
        "elapsed_s": usage["elapsed_s"],
    }


def stream(argv, limit, markers, server_cpu, env=None):
    """Runs argv, reading its output as it comes, killing it after limit seconds. With
    markers (h2load's thread count), samples server_cpu() when the last thread starts its
    main duration and when the first one ends it. Returns (output, returncode,
    (cpu at start, cpu at end) or None, whether it was killed for taking too long)."""
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, **env} if env else None,
    )
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
