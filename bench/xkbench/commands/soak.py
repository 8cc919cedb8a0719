"""soak: one xKit server under mixed, changing load for a long time (default an hour), its
RSS and descriptor count sampled every few seconds.

https_bench_server --plain-port serves every protocol from one process: wrk on HTTP/1.1
(plain port), h2load on h2c (plain port) and on HTTPS/2 (TLS port), and ws_load (bench/peers/go)
on WebSocket. The load comes in rounds of --round seconds; each round every generator starts
afresh with a connection count and response size drawn from a fixed-seed sequence, so
clients keep connecting and leaving. The report says whether RSS and the descriptor count
stay flat after the warm-up (the first fifth of the run) and every error the clients saw.
"""

import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from .. import environment, results
from ..cli import add_common_options, check_at_least_one, command_line, say
from ..parsing import parse_h2load, parse_wrk
from ..peers import Missing, server_binary
from ..prepare import SetupFailed, build_go_peers, check_tools, make_certificate
from ..servers import Peer, Server, pinned, wait_until_serving

HELP = "a long mixed-protocol run (HTTP/1.1, h2c, HTTPS/2, WebSocket): RSS and fds flat, zero errors"
SIZES = (0, 64, 1024, 16384, 131072)
CONNECTIONS = (4, 16, 32, 64)
# Flat: the peak after warm-up may exceed the warm-up's peak by this much at most.
RSS_SLACK_KIB = 8 * 1024
RSS_SLACK_FRACTION = 0.10


def add_arguments(parser):
    add_common_options(parser, first_port=26000, runs=1, with_duration=False, server_cpus="1", client_cpus="0")
    parser.add_argument("--minutes", type=float, default=60.0, help="how long to run (default 60)")
    parser.add_argument("--round", type=int, default=20, help="seconds per round of load (default 20)")
    parser.add_argument("--sample", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--workers", type=int, default=1, help="server workers (default 1)")


def proc_sample(pid):
    with open(f"/proc/{pid}/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss, len(list(Path(f"/proc/{pid}/fd").iterdir()))


def round_loads(number, ports, seconds, ws_load):
    """The generators of one round: (name, argv, parser)."""
    pick = random.Random(number)
    size = lambda: pick.choice(SIZES)  # noqa: E731
    conns = lambda: pick.choice(CONNECTIONS)  # noqa: E731
    plain, tls = ports
    loads = [
        (
            "http1",
            ["wrk", "-t1", f"-c{conns()}", f"-d{seconds}s", f"http://127.0.0.1:{plain}/echo?size={size()}"],
            parse_wrk,
        ),
        (
            "h2c",
            ["h2load", "-t1", f"-c{conns()}", "-m8", f"-D{seconds}", f"http://127.0.0.1:{plain}/echo?size={size()}"],
            parse_h2load,
        ),
        (
            "https2",
            ["h2load", "-t1", f"-c{conns()}", "-m8", f"-D{seconds}", f"https://127.0.0.1:{tls}/echo?size={size()}"],
            parse_h2load,
        ),
    ]
    if ws_load:
        loads.append(
            (
                "websocket",
                [
                    str(ws_load),
                    "-url",
                    f"ws://127.0.0.1:{plain}/ws",
                    "-conns",
                    str(conns()),
                    "-size",
                    str(min(size(), 16384)),
                    "-duration",
                    f"{seconds}s",
                    "-reupgrade",
                    "200",
                ],
                parse_ws_load,
            )
        )
    return loads


def parse_ws_load(stdout, stderr="", returncode=0):
    """ws_load's last line: messages=N seconds=S rate=R errors=E."""
    line = next((line for line in reversed(stdout.splitlines()) if line.startswith("messages=")), None)
    if returncode != 0 or line is None:
        return {"requests": 0, "problems": [f"ws_load exited with {returncode}: {(stderr or stdout)[-200:]}"]}
    fields = dict(part.split("=", 1) for part in line.split())
    problems = [f"ws_load: {fields['errors']} errors"] if int(fields["errors"]) else []
    return {"requests": int(fields["messages"]), "problems": problems}


def run_round(number, ports, seconds, ws_load, client_cpus, tally):
    procs = [
        (
            name,
            parse,
            subprocess.Popen(pinned(argv, client_cpus), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        )
        for name, argv, parse in round_loads(number, ports, seconds, ws_load)
    ]
    for name, parse, proc in procs:
        try:
            out, err = proc.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        found = parse(out, err, proc.returncode)
        requests, problems = (
            (found["requests"], found["problems"]) if isinstance(found, dict) else (found.requests, found.problems)
        )
        entry = tally.setdefault(name, {"requests": 0, "rounds": 0, "errors": []})
        entry["requests"] += requests
        entry["rounds"] += 1
        entry["errors"] += [f"round {number}: {problem}" for problem in problems]


def flatness(samples, warmup_until):
    after = [s for s in samples if s["t"] >= warmup_until]
    warm = [s for s in samples if s["t"] < warmup_until]
    if not after or not warm:
        return {"rss_flat": None, "fds_flat": None}
    warm_rss, late_rss = max(s["rss_kib"] for s in warm), max(s["rss_kib"] for s in after)
    idle_fds = [s["fds"] for s in after if s["idle"]]
    allowed = max(RSS_SLACK_KIB, warm_rss * RSS_SLACK_FRACTION)
    return {
        "warmup_peak_rss_kib": warm_rss,
        "peak_rss_kib": late_rss,
        "rss_growth_kib": late_rss - warm_rss,
        "rss_allowed_growth_kib": int(allowed),
        "rss_flat": late_rss - warm_rss <= allowed,
        "idle_fds": sorted(set(idle_fds)),
        "fds_flat": len(set(idle_fds)) <= 1,
        "peak_fds": max(s["fds"] for s in after),
    }


def render(data, args):
    f, lines = data["flatness"], []
    lines += [
        f"# Soak: {args.minutes:g} minutes of mixed load",
        "",
        f"`{data['command']}` on {data['machine']}.",
        "",
        f"One https_bench_server ({args.workers} worker, CPUs {data['server_cpus']}) served HTTP/1.1 "
        f"(wrk), h2c and HTTPS/2 (h2load -m8) and WebSocket (ws_load) at once, in "
        f"{data['rounds']} rounds of {args.round} s with fresh connections, counts from "
        f"{CONNECTIONS} and response sizes from {SIZES} bytes. RSS and fds sampled every "
        f"{args.sample:g} s ({len(data['samples'])} samples); warm-up: the first fifth.",
        "",
    ]
    if data.get("note"):
        lines += [data["note"], ""]
    lines += [
        "| | Warm-up peak | Peak after | Verdict |",
        "|---|---|---|---|",
        f"| RSS (KiB) | {f.get('warmup_peak_rss_kib')} | {f.get('peak_rss_kib')} | "
        f"{'flat' if f['rss_flat'] else 'GROWING'} (allowed +{f.get('rss_allowed_growth_kib')}) |",
        f"| fds between rounds | | {f.get('idle_fds')} | {'flat' if f['fds_flat'] else 'CHANGING'} |",
        "",
        "| Load | Rounds | Requests / messages | Errors |",
        "|---|---|---|---|",
    ]
    for name, entry in data["loads"].items():
        lines.append(f"| {name} | {entry['rounds']} | {entry['requests']} | {len(entry['errors'])} |")
    errors = [e for entry in data["loads"].values() for e in entry["errors"]]
    lines += ["", f"Server exit: {data['server_exit']}.", ""]
    if errors:
        lines += ["Errors:", ""] + [f"- {e}" for e in errors[:50]] + [""]
    return "\n".join(lines)


def run(args):
    check_at_least_one(args, "round", "workers")
    results.check_writable(args.out_dir)
    check_tools(["wrk", "h2load"])
    binary = server_binary(type("Context", (), {"build_dir": args.build_dir}), "https_bench_server")
    if isinstance(binary, Missing):
        raise SetupFailed(binary.reason)
    with tempfile.TemporaryDirectory(prefix="xkbench-soak-") as work:
        work = Path(work)
        cert, key = make_certificate(work, "ecdsa")
        note = ""
        try:
            ws_load = build_go_peers(work / "go", ["ws_load"]) / "ws_load"
        except SetupFailed as error:
            ws_load, note = None, f"**WebSocket load left out**: {error}"
            say(note)
        plain_port = args.first_port + 1
        peer = Peer(
            "xkit",
            lambda port, _dir: [
                str(binary),
                str(port),
                str(cert),
                str(key),
                "--workers",
                str(args.workers),
                "--plain-port",
                str(plain_port),
            ],
            tls=True,
        )
        server = Server(peer, args.first_port, work, args.server_cpus)
        try:
            wait_until_serving(server)
        except BaseException:
            server.stop()
            raise
        samples, tally, busy = [], {}, threading.Event()
        started = time.monotonic()
        end = started + args.minutes * 60
        done = threading.Event()

        def sample():
            while not done.wait(args.sample):
                rss, fds = proc_sample(server.process.pid)
                samples.append(
                    {"t": round(time.monotonic() - started, 1), "rss_kib": rss, "fds": fds, "idle": not busy.is_set()}
                )

        rounds = 0
        try:
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            while time.monotonic() + args.round < end:
                rounds += 1
                busy.set()
                run_round(rounds, (plain_port, args.first_port), args.round, ws_load, args.client_cpus, tally)
                busy.clear()
                time.sleep(args.sample * 1.5)  # an idle sample between rounds: fds back to the baseline
                say(f"soak: round {rounds}, {int(time.monotonic() - started)} s, last sample {samples[-1:]}")
        finally:
            done.set()
            server.stop()
        exit_status = server.process.returncode
    data = {
        "command": command_line(args),
        "machine": environment.host_line(),
        "server_cpus": environment.cpu_list(args.server_cpus),
        "rounds": rounds,
        "note": note,
        "options": results.options_record(args),
        "loads": tally,
        "samples": samples,
        "flatness": flatness(samples, args.minutes * 60 / 5),
        "server_exit": exit_status,
    }
    markdown = render(data, args)
    stamp, md_path, _ = results.write(args.out_dir, "soak", markdown, data)
    say(f"soak: report in {md_path}")
    errors = sum(len(entry["errors"]) for entry in tally.values())
    ok = errors == 0 and data["flatness"]["rss_flat"] and data["flatness"]["fds_flat"]
    return 0 if ok else 1
