"""Running the sections: servers started per section on the server cores, each case checked,
warmed up and measured run after run with the order of servers alternating."""

import http.client
import sys
import time
from dataclasses import dataclass

from . import stats
from .loadgen import LATENCY_RUN_SECONDS, Client, run_load
from .peers import KINDS, LABELS, Missing, make_peer
from .rounds import in_turn
from .servers import PortPicker, RunFailed, client_tls_context, start_server

# Seconds a run costs beyond its measured duration: starting the tool, its connections.
RUN_OVERHEAD = 0.4


@dataclass
class Settings:
    """How each case is measured."""

    duration: int
    warmup: int
    runs: int
    server_cpus: set
    client: Client
    first_port: int = 21000


def case_seconds(case, servers, settings):
    """What a case should take: wrk warms up once per server, h2load inside every run and again
    in the logged run after it (loadgen.h2load_percentiles)."""
    if case.protocol.tool == "wrk":
        per_server = settings.warmup + settings.runs * (settings.duration + RUN_OVERHEAD)
    else:
        logged = LATENCY_RUN_SECONDS + settings.warmup + RUN_OVERHEAD
        per_server = settings.runs * (settings.duration + settings.warmup + RUN_OVERHEAD + logged)
    return servers * per_server


class Progress:
    """One line per case on stderr: which, how many are left, and an estimate of the time left
    that learns from how long the cases so far took against their estimates."""

    def __init__(self, sections, peer_names, settings, out=sys.stderr):
        self.out = out
        self.estimates = {}
        for section in sections:
            servers = sum(section.kind in KINDS[name] for name in peer_names)
            for case in section.cases:
                self.estimates[case.id] = case_seconds(case, servers, settings)
        self.total = len(self.estimates)
        self.done = 0
        self.estimated_done = 0.0
        self.started = time.monotonic()

    def remaining_seconds(self):
        left = sum(list(self.estimates.values())[self.done :])
        if self.estimated_done:
            left *= (time.monotonic() - self.started) / self.estimated_done
        return left

    def start_case(self, section, case):
        left = self.remaining_seconds()
        self.print(
            f"[{self.done + 1:>{len(str(self.total))}}/{self.total}] "
            f"{section.protocol.short} · {section.request} · "
            f"{section.axis.lower()} {case.x_label} · {self.total - self.done} cases "
            f"and about {format_duration(left)} left"
        )

    def end_case(self, case, results):
        self.estimated_done += self.estimates[case.id]
        self.done += 1
        parts = []
        for name in (name for name in LABELS if name in results):
            result = results[name]
            if result["status"] == "ok":
                parts.append(
                    f"{LABELS[name]} {result['req_per_s']['median']:,.0f} req/s "
                    f"{result['cpu_us_per_request']['median']:.2f} µs/req"
                )
            elif result["status"] == "failed":
                parts.append(f"{LABELS[name]} FAILED: {result['error']}")
            else:
                parts.append(f"{LABELS[name]} {result['status']}")
        self.print("      " + " · ".join(parts))

    def print(self, line):
        print(line, file=self.out, flush=True)


def format_duration(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def check_answer(case, server, client):
    """Asks the case's request once over HTTP/1.1 and checks the answer (status 200, "pong",
    N bytes, the body sent); returns what was wrong, or None. Peers that speak no HTTP/1.1
    on the port are left to the load generator's status check."""
    if not server.peer.http1_probe:
        return None
    body = client.bodies[case.size].read_bytes() if case.kind == "post" else None
    if server.peer.tls:
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=10, context=client_tls_context())
    else:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = {"Content-Type": "application/octet-stream"} if body is not None else {}
        connection.request(case.method, case.path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
    except (OSError, http.client.HTTPException) as error:
        return f"{case.method} {case.path}: {error or type(error).__name__}"
    finally:
        connection.close()
    if response.status != 200:
        return f"{case.method} {case.path} answered {response.status}"
    expected = {"ping": b"pong", "post": body}.get(case.kind)
    if case.kind == "echo" and len(data) != case.size:
        return f"GET {case.path} answered {len(data)} bytes"
    if expected is not None and data != expected:
        return f"{case.method} {case.path} answered {len(data)} bytes that differ from the expected"
    return None


def failed_run(problem):
    return {
        "ok": False,
        "problems": [problem],
        "requests": 0,
        "req_per_s": None,
        "latency_ms": None,
        "latency_p50_ms": None,
        "latency_p99_ms": None,
        "server_cpu_s": None,
        "cpu_us_per_request": None,
    }


def measure(case, server, seconds, warmup, client):
    """One run; a server that died, or lost a serving process, during it fails the run."""
    gone = server.exited()
    if gone:
        return failed_run(gone)
    try:
        record = run_load(case, server, seconds, warmup, client)
    except (RunFailed, OSError) as error:
        return failed_run(server.exited() or str(error))
    gone = server.exited()
    return failed_run(gone) if gone else record


def run_case(section, case, servers, unavailable, settings, progress):
    """Measures one case on every running server: answer check, warm-up (wrk: one run of
    settings.warmup seconds; h2load: --warm-up-time in every run), then settings.runs runs,
    the order of servers reversed every other run. A server's first failed run ends its case."""
    progress.start_case(section, case)
    results, runs, active = dict(unavailable), {}, []
    for name, server in servers.items():
        problem = server.exited() or check_answer(case, server, settings.client)
        if problem:
            results[name] = {"status": "failed", "error": problem, "runs": []}
            continue
        if case.protocol.tool == "wrk" and settings.warmup:
            warm = measure(case, server, settings.warmup, 0, settings.client)
            if not warm["ok"]:
                results[name] = {"status": "failed", "error": "warm-up: " + warm["problems"][0], "runs": []}
                continue
        active.append(name)
        runs[name] = []
    warmup = settings.warmup if case.protocol.tool == "h2load" else 0
    for number in range(settings.runs):
        for name in in_turn(active, number):
            if runs[name] and not runs[name][-1]["ok"]:
                continue
            runs[name].append(measure(case, servers[name], settings.duration, warmup, settings.client))
    for name in active:
        results[name] = stats.summarize(runs[name])
    progress.end_case(case, results)
    return results


def run_section(section, peer_names, context, settings, ports, work_dir, progress):
    """Starts the section's servers side by side (each idles while another is measured),
    runs its cases, stops them. Returns the section's rows."""
    servers, unavailable = {}, {}
    try:
        for name in peer_names:
            if section.kind not in KINDS[name]:
                unavailable[name] = {"status": "n/a", "error": f"{LABELS[name]} does not serve {section.request} here"}
                continue
            peer = make_peer(name, section.protocol.key, context)
            if isinstance(peer, Missing):
                unavailable[name] = {"status": peer.status, "error": peer.reason}
                continue
            try:
                servers[name] = start_server(peer, ports, work_dir, settings.server_cpus)
            except (RunFailed, OSError) as error:
                unavailable[name] = {"status": "failed", "error": f"did not start: {error}"}
        rows = []
        for case in section.cases:
            results = run_case(section, case, servers, unavailable, settings, progress)
            rows.append(
                {
                    "case": case.id,
                    "x": case.x,
                    "label": case.x_label,
                    "connections": case.connections,
                    "size": case.size,
                    "results": {name: results[name] for name in peer_names},
                }
            )
        return rows
    finally:
        for server in servers.values():
            server.stop()


def run_sections(sections, peer_names, context, settings, work_dir, progress):
    ports = PortPicker(settings.first_port)
    return [
        (section, run_section(section, peer_names, context, settings, ports, work_dir, progress))
        for section in sections
    ]
