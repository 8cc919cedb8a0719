#!/usr/bin/env python3
"""Which record path costs the server least per request where the kernel has
kTLS: the server's CPU time (user and system, from /proc/PID/stat) per
request, measured inside the qemu guest of
tests/integration/support/ktls_guest.py, whose kernel has the `tls` module.

    python3 bench/ktls_paths.py --server build/bench/https_bench_server [--runs 3]

Paths (https_bench_server's flags):
  ktls          kernel send; receive by the kernel on TLS 1.2, by OpenSSL on
                TLS 1.3 (OpenSSL 3.0 has no TLS 1.3 kTLS receive); the default
  xkit          --no-ktls: xKit's record layer both ways (the default where the
                kernel has no `tls` module)
  openssl       --no-ktls --openssl-records: OpenSSL's records both ways
Kernel send with xKit's own receive does not exist (xTlsHandOver leaves a
connection with kTLS in either direction to OpenSSL).

The guest runs under TCG, an emulator: its times are not a real machine's,
and it has no hardware counters, so what is compared is emulated CPU time,
the same emulation for every path. Run on the host, the script boots the
guest and runs itself inside (--inside).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PATHS = {"ktls": [], "xkit": ["--no-ktls"], "openssl": ["--no-ktls", "--openssl-records"]}
# (name, h2load arguments, requests): small answers, where the per-record and per-call costs
# show, and 64 KiB ones, where the cost of sealing bytes does.
LOADS = (
    ("h1 /ping", ["--h1", "-c", "8"], "/ping", 6000),
    ("h2 /ping", ["-c", "8", "-m", "16"], "/ping", 6000),
    ("h1 64KiB", ["--h1", "-c", "8"], "/echo?size=65536", 600),
    ("h2 64KiB", ["-c", "8", "-m", "4"], "/echo?size=65536", 600),
)
TICK = os.sysconf("SC_CLK_TCK")
REQUEST_SCALE = 1.0


def cpu_seconds(pid):
    """(user, system, total) CPU seconds of the whole process: user and system
    from /proc/PID/stat (clock ticks), the total from every thread's
    schedstat (nanoseconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return int(fields[11]) / TICK, int(fields[12]) / TICK, total / 1e9


def make_cert(folder):
    key, cert = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"]
        + ["-subj", "/CN=localhost", "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )
    return cert, key


def start_server(server, cert, key, flags):
    proc = subprocess.Popen(
        [server, "0", cert, key, "--workers", "1", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    port = re.search(r"^listening on \S+:(\d+) ", line)
    if not port:
        proc.kill()
        raise RuntimeError(f"no listening line from the server: {line!r} {proc.stderr.read()}")
    return proc, int(port.group(1))


def measure(server, cert, key, path, version, load, runs):
    name, h2load_args, target, requests = load
    requests = max(100, int(requests * REQUEST_SCALE))
    flags = PATHS[path] + ["--tls-max", version]
    proc, port = start_server(server, cert, key, flags)
    try:
        samples = []
        for _ in range(runs):
            user0, sys0, total0 = cpu_seconds(proc.pid)
            done = subprocess.run(
                ["h2load", "-n", str(requests), *h2load_args, f"https://127.0.0.1:{port}{target}"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            user1, sys1, total1 = cpu_seconds(proc.pid)
            ok = re.search(r"(\d+) succeeded", done.stdout)
            if not ok or int(ok.group(1)) != requests:
                raise RuntimeError(f"h2load failed on {path} {version} {name}:\n{done.stdout[-2000:]}{done.stderr}")
            per_request = [(b - a) / requests * 1e6 for a, b in ((user0, user1), (sys0, sys1), (total0, total1))]
            samples.append(per_request)
        return samples
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def inside(args):
    global REQUEST_SCALE
    REQUEST_SCALE = args.requests
    with open("/proc/sys/net/ipv4/tcp_available_ulp") as f:
        if "tls" not in f.read().split():
            sys.exit("ktls_paths: this kernel has no tls module (run without --inside: the guest has one)")
    folder = tempfile.mkdtemp(prefix="xk-ktls-paths-")
    cert, key = make_cert(folder)
    clock = "1 µs = 1000 guest instructions (qemu -icount)" if args.icount else "TCG's clock (host load shows)"
    print(f"server CPU µs per request: total (user + system), median of {args.runs}; {clock}")
    print(
        f"kernel {os.uname().release}; loads: "
        + ", ".join(f"{n} x{max(100, int(r * REQUEST_SCALE))}" for n, _, _, r in LOADS)
    )
    print(f"{'load':10} {'TLS':4} " + " ".join(f"{p:>22}" for p in PATHS))
    for load in LOADS:
        for version in ("1.3", "1.2"):
            cells = []
            for path in PATHS:
                samples = measure(args.server, cert, key, path, version, load, args.runs)
                user, system, total = (statistics.median(s[i] for s in samples) for i in range(3))
                cells.append(f"{total:7.1f} ({user:5.1f}+{system:5.1f})")
            print(f"{load[0]:10} {version:4} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    shutil.rmtree(folder)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="https_bench_server (a Release build)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--requests", type=float, default=1.0, help="scale the requests of every load")
    parser.add_argument("--no-icount", dest="icount", action="store_false", help="time by TCG's clock instead")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.server = os.path.abspath(args.server)
    if args.inside:
        return inside(args)
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
    from support.ktls_guest import run_in_guest

    started = time.monotonic()
    result = run_in_guest(
        [sys.executable, os.path.abspath(__file__), "--inside", "--server", args.server, "--runs", str(args.runs)]
        + ["--requests", str(args.requests)]
        + ([] if args.icount else ["--no-icount"]),
        timeout=3600,
        icount=args.icount,
        cpus=1 if args.icount else 2,  # two emulated CPUs on one emulating thread did not boot
    )
    sys.stdout.write(result.output)
    print(f"(guest: {time.monotonic() - started:.0f} s, exit {result.status})")
    return result.status


if __name__ == "__main__":
    sys.exit(main())
