#!/usr/bin/env python3
"""What each TLS cipher suite and certificate type costs xKit's HTTPS server.

Every TLS 1.3 suite with an RSA-2048 and an ECDSA P-256 certificate, and the TLS 1.2 ECDHE
suites with the certificate each needs, against https_bench_server with one worker pinned to
--server-cpus while the load generator runs pinned to --client-cpus. Cases:
  h1         HTTPS/1.1 keep-alive: wrk -t1 -c100, GET /ping
  h2         HTTPS/2: h2load -t1 -c100 -m10, GET /ping
  handshake  a full handshake per request: wrk -t1 -c50 -H "Connection: close", GET /ping,
             against a server started with --no-tickets --session-cache 0
  resume     the same against a server with its default tickets and cache: wrk keeps each
             connection's session when it reconnects (SSL_clear), so every handshake after
             a connection's first is a resumption (TLS 1.3: PSK with a fresh X25519 exchange,
             and new tickets; TLS 1.2: abbreviated)
Before the handshake and resume runs on xKit, a short wrk run against GET /tls counts the
answers that say "resumed": none may for handshake, nearly all must for resume.
The suite is fixed at both ends: the server by --ciphersuites / --ciphers / --tls-max, the
client by h2load's --tls13-ciphers / --ciphers or, for wrk, which has no such option, by an
OpenSSL configuration in OPENSSL_CONF. Before each server's runs `openssl s_client` under
that configuration must negotiate the suite and certificate expected, and h2load's own report
of the cipher must name it. Server CPU per request is utime+stime from /proc/PID/stat across
the run. Each round visits every configuration in turn and the median of --runs rounds is
reported, so background load on a shared machine hits every configuration alike.
--servers go adds Go's crypto/tls peer (bench/go/https_bench_server), which cannot be told a
suite: for it only the client's offer picks one. It has no /tls, cannot switch resumption off
(no full-handshake case) and h2load cannot offer TLS 1.2 alone (no TLS 1.2 HTTPS/2 case).
"""

import argparse
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
GO_MODULE = REPO_ROOT / "bench" / "go"

CASES = ("h1", "h2", "handshake", "resume")
SERVERS = ("xkit", "go")
CERTS = ("rsa", "ecdsa")
WARMUP_SECONDS = 1
START_TIMEOUT = 10.0
STOP_TIMEOUT = 5.0
CLIENT_GRACE_SECONDS = 30
GO_BUILD_TIMEOUT = 300
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# The share of /tls answers that must say "resumed" in the resume case's check: each
# connection's first handshake is a full one.
MIN_RESUMED_SHARE = 0.8

# wrk script for the check: tallies /tls answers by their "resumed" flag over all threads.
RESUMPTION_LUA = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) resumed = 0; full = 0 end
function response(status, headers, body)
  if string.find(body, '"resumed":true', 1, true) then resumed = resumed + 1 else full = full + 1 end
end
function done(summary, latency, requests)
  local r, f = 0, 0
  for _, t in ipairs(threads) do r = r + t:get("resumed"); f = f + t:get("full") end
  io.write(string.format("xkit-resumed %d full %d\\n", r, f))
end
"""
PR_SET_PDEATHSIG = 1
LIBC = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Config:
    """One suite with one certificate type."""

    version: str  # "1.3" or "1.2"
    suite: str    # OpenSSL's name
    cert: str     # "rsa" or "ecdsa"

    @property
    def label(self):
        return f"TLS {self.version} {self.suite} {self.cert}"


TLS13_SUITES = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")
TLS12_SUITES = {
    "rsa": ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305"),
    "ecdsa": ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
              "ECDHE-ECDSA-CHACHA20-POLY1305"),
}


def all_configs(certs):
    configs = [Config("1.3", suite, cert) for suite in TLS13_SUITES for cert in certs]
    configs += [Config("1.2", suite, cert) for cert in certs for suite in TLS12_SUITES[cert]]
    return configs


def not_applicable(server, config, case):
    """Why a case cannot be measured on a server, or None."""
    if server != "go":
        return None
    if case == "handshake":
        return "Go's peer keeps session tickets on and wrk resumes: no full-handshake case"
    if case == "h2" and config.version == "1.2":
        return "h2load always offers TLS 1.3 and Go's peer cannot be held to 1.2"
    return None


class RunFailed(Exception):
    """One measurement went wrong; it is recorded as failed and the script goes on."""


# --- setup ----------------------------------------------------------------------


def make_certificates(work_dir):
    """Self-signed localhost certificates: {"rsa": (cert, key), "ecdsa": (cert, key)}."""
    specs = {"rsa": ["-newkey", "rsa:2048"],
             "ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]}
    made = {}
    for name, key_spec in specs.items():
        cert, key = work_dir / f"{name}.pem", work_dir / f"{name}.key"
        done = subprocess.run(["openssl", "req", "-x509", *key_spec, "-nodes", "-keyout", str(key),
                               "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
                               "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            sys.exit(f"openssl could not make the {name} certificate: {last_line(done.stderr)}")
        made[name] = (cert, key)
    return made


def client_openssl_conf(config, work_dir):
    """An OpenSSL configuration that makes any OpenSSL client (wrk, s_client) offer only the
    config's version and suite; the client finds it through OPENSSL_CONF."""
    path = work_dir / f"client-{config.version}-{config.suite}.cnf"
    protocol = f"TLSv{config.version}"
    lines = ["openssl_conf = openssl_init", "[openssl_init]", "ssl_conf = ssl_sect", "[ssl_sect]",
             "system_default = system_default_sect", "[system_default_sect]",
             f"MinProtocol = {protocol}", f"MaxProtocol = {protocol}"]
    lines.append(f"Ciphersuites = {config.suite}" if config.version == "1.3"
                 else f"CipherString = {config.suite}")
    path.write_text("\n".join(lines) + "\n")
    return path


def build_go_peer(work_dir):
    """Builds bench/go/https_bench_server; the binary, or why it could not be built."""
    go = shutil.which("go")
    if go is None and os.access("/usr/local/go/bin/go", os.X_OK):
        go = "/usr/local/go/bin/go"  # where Go's tarball puts it, often not on PATH
    if go is None:
        return None, "go toolchain not found"
    binary = work_dir / "go_https_bench_server"
    try:
        done = subprocess.run([go, "build", "-o", str(binary), "./https_bench_server"], cwd=GO_MODULE,
                              capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"go build took over {GO_BUILD_TIMEOUT} s"
    if done.returncode != 0:
        return None, "go build failed: " + last_line(done.stderr)
    return binary, None


def last_line(text):
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# --- servers --------------------------------------------------------------------


def die_with_parent():
    """Runs in the child before exec: if this script is killed outright, so is the server."""
    LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def server_command(server, binary, port, config, case, certs):
    cert, key = certs[config.cert]
    argv = [str(binary), str(port), str(cert), str(key)]
    if server == "xkit":
        argv += ["--workers", "1"]
        if config.version == "1.3":
            argv += ["--tls-min", "1.3", "--ciphersuites", config.suite]
        else:
            argv += ["--tls-max", "1.2", "--ciphers", config.suite]
        if case == "handshake":
            argv += ["--no-tickets", "--session-cache", "0"]
    return argv


class Server:
    """A started server pinned to its cores; its CPU time from /proc."""

    def __init__(self, argv, cpus, log_path, env):
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(["taskset", "-c", cpus, *argv], stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True, preexec_fn=die_with_parent)

    def cpu_seconds(self):
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def log_tail(self):
        try:
            return last_line(self.log_path.read_text(errors="replace"))
        except OSError:
            return "(no log)"

    def stop(self):
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
                return
            except subprocess.TimeoutExpired:
                continue


def wait_until_serving(server, port):
    """GET /ping over TLS must answer 200 (certificate not checked: it is self-signed)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + START_TIMEOUT
    problem = "never accepted a connection"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RunFailed(f"exited with status {server.process.returncode}: {server.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as raw:
                with context.wrap_socket(raw, server_hostname="localhost") as sock:
                    sock.sendall(b"GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n")
                    status_line = sock.recv(4096).split(b"\r\n", 1)[0]
            if status_line.startswith(b"HTTP/1.1 200"):
                return
            problem = f"answered GET /ping with {status_line[:60]!r}"
        except (OSError, ssl.SSLError) as error:
            problem = str(error)
        time.sleep(0.05)
    raise RunFailed(f"not serving after {START_TIMEOUT:.0f} s: {problem}")


def check_negotiation(port, config, client_conf):
    """s_client under the client configuration wrk gets must land on the config's version,
    suite and certificate type."""
    env = {**os.environ, "OPENSSL_CONF": str(client_conf)}
    argv = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost"]
    done = subprocess.run(argv, input=b"", capture_output=True, env=env, timeout=30)
    out = done.stdout.decode(errors="replace")
    match = re.search(r"^(?:New|Reused), (\S+), Cipher is (\S+)", out, re.MULTILINE)
    if not match:
        raise RunFailed(f"s_client could not connect: {last_line(done.stderr.decode(errors='replace'))}")
    if match.groups() != (f"TLSv{config.version}", config.suite):
        raise RunFailed(f"s_client negotiated {match.group(1)} {match.group(2)}, not {config.label}")
    bits = re.search(r"Server public key is (\d+) bit", out)
    expected_bits = "2048" if config.cert == "rsa" else "256"
    if not bits or bits.group(1) != expected_bits:
        raise RunFailed(f"server key is not the {config.cert} one: {bits and bits.group(0)}")


# --- load generators ------------------------------------------------------------


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_client(argv, seconds, env=None):
    limit = seconds + CLIENT_GRACE_SECONDS
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        raise RunFailed(f"{argv[3]} did not finish within {limit} s") from None
    if done.returncode != 0:
        why = last_line(done.stderr + done.stdout)
        raise RunFailed(f"{argv[3]} exited with {done.returncode}: {why}")
    return done.stdout


WRK_RE = {
    "requests": re.compile(r"(\d+) requests in "),
    "req_per_s": re.compile(r"Requests/sec:\s+([\d.]+)"),
    "socket_errors": re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"),
    "bad_status": re.compile(r"Non-2xx or 3xx responses: (\d+)"),
}


def run_wrk(port, seconds, connections, args, client_conf, close, path="/ping", script=None):
    argv = ["taskset", "-c", args.client_cpus, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
    if close:
        argv += ["-H", "Connection: close"]
    if script:
        argv += ["-s", str(script)]
    argv.append(f"https://127.0.0.1:{port}{path}")
    output = run_client(argv, seconds, {**os.environ, "OPENSSL_CONF": str(client_conf)})
    requests, rate = WRK_RE["requests"].search(output), WRK_RE["req_per_s"].search(output)
    if not requests or not rate:
        raise RunFailed("could not read wrk's output: " + last_line(output))
    errors = WRK_RE["socket_errors"].search(output)
    if errors and any(int(count) for count in errors.groups()):
        raise RunFailed("wrk " + errors.group(0))
    bad = WRK_RE["bad_status"].search(output)
    if bad:
        raise RunFailed(f"wrk saw {bad.group(1)} responses with status >= 400")
    if int(requests.group(1)) == 0:
        raise RunFailed("wrk completed no requests")
    result = {"requests": int(requests.group(1)), "req_per_s": float(rate.group(1))}
    tally = re.search(r"xkit-resumed (\d+) full (\d+)", output)
    if tally:
        result["resumed"], result["full"] = map(int, tally.groups())
    return result


def check_resumption(port, case, args, client_conf, work_dir):
    """wrk against GET /tls with Connection: close, counting the answers that say they came
    over a resumed session: none may in the handshake case, most must in the resume case."""
    script = work_dir / "resumption.lua"
    script.write_text(RESUMPTION_LUA)
    result = run_wrk(port, WARMUP_SECONDS, args.handshake_connections, args, client_conf, close=True,
                     path="/tls", script=script)
    resumed, total = result.get("resumed"), result.get("resumed", 0) + result.get("full", 0)
    if resumed is None or total == 0:
        raise RunFailed("the resumption check counted no /tls answers")
    share = resumed / total
    if case == "handshake" and resumed:
        raise RunFailed(f"{resumed} of {total} handshakes were resumed with resumption off")
    if case == "resume" and share < MIN_RESUMED_SHARE:
        raise RunFailed(f"only {resumed} of {total} handshakes were resumed")
    return share


H2LOAD_RE = {
    "req_per_s": re.compile(r"finished in [\d.]+s, ([\d.]+) req/s"),
    "requests": re.compile(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, "
                           r"(\d+) failed, (\d+) errored, (\d+) timeout"),
    "statuses": re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx"),
    "protocol": re.compile(r"^TLS Protocol: (\S+)", re.MULTILINE),
    "cipher": re.compile(r"^Cipher: (\S+)", re.MULTILINE),
    "alpn": re.compile(r"^Application protocol: (\S+)", re.MULTILINE),
}


def run_h2load(port, seconds, config, args):
    # For TLS 1.2 h2load still offers TLS 1.3 too: the server's --tls-max 1.2 settles it.
    suite_flag = "--tls13-ciphers" if config.version == "1.3" else "--ciphers"
    argv = ["taskset", "-c", args.client_cpus, "h2load", "-t1", f"-c{args.connections}",
            f"-m{args.streams}", "-D", str(seconds), f"{suite_flag}={config.suite}"]
    argv.append(f"https://127.0.0.1:{port}/ping")
    output = run_client(argv, seconds)
    found = {key: pattern.search(output) for key, pattern in H2LOAD_RE.items()}
    if not all(found.values()):
        missing = [key for key, match in found.items() if not match]
        raise RunFailed(f"could not read h2load's output ({', '.join(missing)}): " + last_line(output))
    negotiated = (found["protocol"].group(1), found["cipher"].group(1), found["alpn"].group(1))
    if negotiated != (f"TLSv{config.version}", config.suite, "h2"):
        raise RunFailed(f"h2load negotiated {' '.join(negotiated)}, not {config.label} over h2")
    succeeded, failed, errored, timed_out = map(int, found["requests"].groups())
    if failed or errored or timed_out:
        raise RunFailed(f"h2load: {failed} failed, {errored} errored, {timed_out} timeout")
    if any(int(count) for count in found["statuses"].groups()[1:]):
        raise RunFailed("h2load saw responses other than 2xx: " + found["statuses"].group(0))
    if succeeded == 0:
        raise RunFailed("h2load completed no requests")
    return {"requests": succeeded, "req_per_s": float(found["req_per_s"].group(1))}


def run_case(case, port, seconds, config, args, client_conf):
    if case == "h2":
        return run_h2load(port, seconds, config, args)
    if case == "h1":
        return run_wrk(port, seconds, args.connections, args, client_conf, close=False)
    return run_wrk(port, seconds, args.handshake_connections, args, client_conf, close=True)


def measure_case(server, case, port, config, args, client_conf, work_dir, server_name):
    """A warm-up run (for xKit's handshake cases, the resumption check), then the measured
    one with the server's and the client's CPU time."""
    resumed_share = None
    if server_name == "xkit" and case in ("handshake", "resume"):
        resumed_share = check_resumption(port, case, args, client_conf, work_dir)
    else:
        run_case(case, port, WARMUP_SECONDS, config, args, client_conf)
    cpu_before, client_before, started = server.cpu_seconds(), children_cpu_seconds(), time.monotonic()
    result = run_case(case, port, args.duration, config, args, client_conf)
    elapsed = time.monotonic() - started
    cpu = server.cpu_seconds() - cpu_before
    result.update({
        "server_cpu_seconds": cpu,
        "cpu_us_per_request": cpu * 1e6 / result["requests"],
        "server_busy": cpu / elapsed,
        "client_busy": (children_cpu_seconds() - client_before) / elapsed,
        "resumed_share_checked": resumed_share,
    })
    return {"ok": True, **result}


def measure(server_name, binary, config, case, certs, args, ports, work_dir):
    """One case against a fresh server; a result dict, never raises RunFailed."""
    client_conf = client_openssl_conf(config, work_dir)
    port = ports.take()
    env = {**os.environ, **({"GOMAXPROCS": "1"} if server_name == "go" else {})}
    log = work_dir / f"{server_name}-{config.suite}-{config.cert}-{case}-{port}.log"
    argv = server_command(server_name, binary, port, config, case, certs)
    server = Server(argv, args.server_cpus, log, env)
    try:
        wait_until_serving(server, port)
        check_negotiation(port, config, client_conf)
        return measure_case(server, case, port, config, args, client_conf, work_dir, server_name)
    except (RunFailed, OSError, subprocess.TimeoutExpired) as error:
        return {"ok": False, "error": str(error)}
    finally:
        server.stop()


class PortPicker:
    """Ports below the ephemeral range, never one twice, so no server meets another's
    lingering connections (the handshake case leaves thousands in TIME_WAIT)."""

    def __init__(self, first):
        self.next = first

    def take(self):
        for port in range(self.next, 32768):
            with socket.socket() as sock:
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError:
                    continue
            self.next = port + 1
            return port
        raise RunFailed("no free port left below 32768")


# --- report ---------------------------------------------------------------------


def spread(runs, key):
    values = [run[key] for run in runs if run.get("ok")]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(results):
    keys = ("req_per_s", "cpu_us_per_request", "server_busy", "client_busy")
    return {server: {label: {case: {key: spread(runs, key) for key in keys}
                             for case, runs in cases.items()}
                     for label, cases in by_config.items()}
            for server, by_config in results.items()}


CASE_HEADINGS = {"h1": ("HTTPS/1.1 req/s", "µs/req"), "h2": ("HTTPS/2 req/s", "µs/req"),
                 "handshake": ("full handshakes/s", "µs/handshake"),
                 "resume": ("resumed handshakes/s", "µs/handshake")}


def cell(stats, key, fmt):
    return fmt.format(stats[key]["median"]) if stats.get(key) else "–"


def main_table(configs, summary, args):
    headings = ["Server", "TLS", "Suite", "Cert"]
    for case in args.cases:
        headings += CASE_HEADINGS[case]
    lines = ["| " + " | ".join(headings) + " |",
             "|" + "---|" * 4 + "---:|" * (2 * len(args.cases))]
    for server, by_config in summary.items():
        for config in configs:
            cert = "RSA-2048" if config.cert == "rsa" else "ECDSA P-256"
            row = [server, config.version, config.suite, cert]
            for case in args.cases:
                if not_applicable(server, config, case):
                    row += ["n/a", "n/a"]
                    continue
                stats = by_config[config.label][case]
                row += [cell(stats, "req_per_s", "{:,.0f}"), cell(stats, "cpu_us_per_request", "{:.1f}")]
            lines.append("| " + " | ".join(row) + " |")
    return lines


def detail_table(configs, summary, results, args):
    lines = ["| Server | Config | Case | runs | req/s min–max | µs/req min–max "
             "| busy: server / client |",
             "|---|---|---|---|---|---|---|"]
    for server, by_config in summary.items():
        for config in configs:
            for case in args.cases:
                if not_applicable(server, config, case):
                    continue
                runs = results[server][config.label][case]
                stats = by_config[config.label][case]
                ok = f"{sum(run['ok'] for run in runs)}/{len(runs)} ok"
                if not stats["req_per_s"]:
                    lines.append(f"| {server} | {config.label} | {case} | {ok} | | | |")
                    continue
                rate, cpu = stats["req_per_s"], stats["cpu_us_per_request"]
                busy = f"{stats['server_busy']['median']:.0%} / {stats['client_busy']['median']:.0%}"
                lines.append(f"| {server} | {config.label} | {case} | {ok} "
                             f"| {rate['min']:,.0f}–{rate['max']:,.0f} "
                             f"| {cpu['min']:.1f}–{cpu['max']:.1f} | {busy} |")
    return lines


def failure_lines(results, skipped):
    lines = [f"- {server}: skipped — {reason}" for server, reason in skipped.items()]
    reasons = set()
    for server, by_config in results.items():
        for label, cases in by_config.items():
            for case, runs in cases.items():
                reasons.update(f"- n/a: {server} {case}: {run['na']}" for run in runs if "na" in run)
                lines += [f"- {server} {label} {case} run {index}: failed — {run['error']}"
                          for index, run in enumerate(runs, 1) if "error" in run]
    lines = sorted(reasons) + lines
    return ["### Not measured, skipped and failed", ""] + lines if lines else []


def tool_version(argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def machine_description(args):
    with open("/proc/cpuinfo") as cpuinfo:
        text = cpuinfo.read()
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    cpu = model.group(1).strip() if model else "unknown CPU"
    aes = "AES-NI" if re.search(r"^flags\s*:.*\baes\b", text, re.MULTILINE) else "no AES-NI"
    with open("/proc/loadavg") as loadavg:
        load = " ".join(loadavg.read().split()[:3])
    versions = ", ".join(tool_version(argv) for argv in (["openssl", "version"], ["h2load", "--version"]))
    return (f"{os.cpu_count()} × {cpu} ({aes}), Linux {os.uname().release}, load {load} at start; "
            f"{versions}. Server: one worker on CPU {args.server_cpus}; "
            f"client on CPU {args.client_cpus}: "
            f"wrk -t1 -c{args.connections} (HTTPS/1.1), h2load -t1 -c{args.connections} -m{args.streams} "
            f"(HTTPS/2), wrk -t1 -c{args.handshake_connections} with Connection: close (a handshake per "
            f"request: full with xKit's resumption off, resumed with it on; X25519 key exchange). "
            f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} rounds, medians; "
            f"µs = server CPU (user+system) per request or handshake.")


def render(configs, results, skipped, args, machine):
    summary = summarize(results)
    lines = ["## TLS cipher suites", "", machine, ""]
    lines += main_table(configs, summary, args) + [""]
    lines += ["### Spread and load", ""] + detail_table(configs, summary, results, args) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


# --- main -----------------------------------------------------------------------


def name_list(choices):
    def parse(text):
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return [name for name in choices if name in names]
    return parse


def parse_cpu_list(text):
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    all_suites = TLS13_SUITES + TLS12_SUITES["rsa"] + TLS12_SUITES["ecdsa"]
    parser.add_argument("--build-dir", type=Path, default=Path("build"),
                        help="where bench/https_bench_server is (a Release build)")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    parser.add_argument("--runs", type=int, default=3, help="rounds over every configuration")
    parser.add_argument("--servers", type=name_list(SERVERS), default=["xkit"])
    parser.add_argument("--cases", type=name_list(CASES), default=list(CASES))
    parser.add_argument("--certs", type=name_list(CERTS), default=list(CERTS))
    parser.add_argument("--suites", type=name_list(all_suites), default=list(all_suites),
                        help="OpenSSL names, comma separated (default: all)")
    parser.add_argument("--connections", type=int, default=100, help="keep-alive connections (h1, h2)")
    parser.add_argument("--streams", type=int, default=10, help="h2load -m")
    parser.add_argument("--handshake-connections", type=int, default=50,
                        help="wrk connections in the handshake case")
    parser.add_argument("--server-cpus", default="1", help="taskset list for the server")
    parser.add_argument("--client-cpus", default="0", help="taskset list for wrk, h2load and this script")
    parser.add_argument("--first-port", type=int, default=23000)
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.duration < 1 or args.runs < 1:
        parser.error("--duration and --runs must be at least 1")
    try:
        parse_cpu_list(args.server_cpus), parse_cpu_list(args.client_cpus)
    except ValueError:
        parser.error("--server-cpus and --client-cpus take taskset lists such as 1 or 2-3,5")
    return args


def find_servers(args, work_dir):
    binaries, skipped = {}, {}
    if "xkit" in args.servers:
        binary = args.build_dir.resolve() / "bench" / "https_bench_server"
        if os.access(binary, os.X_OK):
            binaries["xkit"] = binary
        else:
            skipped["xkit"] = f"{binary} not built"
    if "go" in args.servers:
        binary, reason = build_go_peer(work_dir)
        if binary:
            binaries["go"] = binary
        else:
            skipped["go"] = reason
    return binaries, skipped


def run_rounds(binaries, configs, certs, args, work_dir):
    """Round after round, every configuration and case on every server in turn."""
    results = {server: {config.label: {case: [] for case in args.cases} for config in configs}
               for server in binaries}
    ports = PortPicker(args.first_port)
    for round_number in range(1, args.runs + 1):
        for config in configs:
            for case in args.cases:
                for server, binary in binaries.items():
                    reason = not_applicable(server, config, case)
                    if reason:
                        results[server][config.label][case].append({"ok": False, "na": reason})
                        continue
                    print(f"round {round_number}/{args.runs}: {server} {config.label} {case}",
                          file=sys.stderr, flush=True)
                    result = measure(server, binary, config, case, certs, args, ports, work_dir)
                    if not result["ok"]:
                        print(f"  failed: {result['error']}", file=sys.stderr, flush=True)
                    results[server][config.label][case].append(result)
    return results


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    missing = [tool for tool in ("taskset", "wrk", "h2load", "openssl") if shutil.which(tool) is None]
    if missing:
        sys.exit("missing tools: " + ", ".join(missing))
    os.sched_setaffinity(0, parse_cpu_list(args.client_cpus))
    configs = [config for config in all_configs(args.certs) if config.suite in args.suites]
    if not configs:
        sys.exit("no suite in --suites goes with the certificates in --certs")
    machine = machine_description(args)
    with tempfile.TemporaryDirectory(prefix="tls_ciphers-") as tmp:
        work_dir = Path(tmp)
        certs = make_certificates(work_dir)
        binaries, skipped = find_servers(args, work_dir)
        for name, reason in skipped.items():
            print(f"skipping {name}: {reason}", file=sys.stderr)
        results = run_rounds(binaries, configs, certs, args, work_dir)
    report, summary = render(configs, results, skipped, args, machine)
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    if args.json:
        options = {key: str(value) if isinstance(value, Path) else value
                   for key, value in vars(args).items()}
        raw = {"config": options, "machine": machine, "skipped": skipped,
               "configs": [asdict(config) for config in configs], "results": results, "summary": summary}
        args.json.write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
