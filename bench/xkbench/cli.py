"""run_bench.py's options and the whole run: set up, measure, write the report."""

import argparse
import datetime
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from . import environment, matrix, report
from .loadgen import Client, describe
from .peers import LABELS, PeerContext
from .prepare import SetupFailed, build_go_peers, make_certificate, write_bodies
from .runner import Progress, Settings, format_duration, run_sections
from .servers import parse_cpu_list

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
OPTIONAL_PEERS = ("go", "nginx", "h2o")


def name_list(choices, allow_empty=False):
    def parse(text):
        names = [name.strip() for name in text.split(",") if name.strip() and name.strip() != "none"]
        unknown = [name for name in names if name not in choices]
        if unknown or (not names and not allow_empty):
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return [name for name in choices if name in names]  # the canonical order
    return parse


def size_list(text):
    """"64,4k" -> (64, 4096): bytes, k for KiB."""
    try:
        sizes = tuple(int(item[:-1]) * matrix.KIB if item.lower().endswith("k") else int(item)
                      for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("sizes are bytes, or KiB with a k: 64,256,1k,4k") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be at least 1")
    return sizes


def count_list(text):
    try:
        counts = tuple(int(item) for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("give whole numbers: 50,100") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("counts must be at least 1")
    return counts


def default_cpus():
    """(server, client) CPU sets: the cores this process may use, split in two halves, the
    load generator taking the larger; one core is shared (and numbers mean little)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) == 1:
        return set(cpus), set(cpus)
    half = (len(cpus) + 1) // 2
    return set(cpus[half:]), set(cpus[:half])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="run_bench.py",
        description="xKit against Go (and nginx, h2o) over HTTP/1.1, h2c, HTTPS/1.1 and HTTPS/2 "
                    "with wrk and h2load; writes bench/results/latest.md and .json, a dated copy "
                    "and SVG charts. Quick suite by default.")
    parser.add_argument("--full", action="store_true",
                        help="the reports' full matrices and 10-s runs (about an hour on 2 cores)")
    parser.add_argument("--only", type=name_list(tuple(matrix.PROTOCOLS)), default=list(matrix.PROTOCOLS),
                        help="protocols: " + ",".join(matrix.PROTOCOLS))
    parser.add_argument("--cases", type=name_list(matrix.KINDS), default=list(matrix.KINDS),
                        help="kinds of case: ping,echo,post")
    parser.add_argument("--peers", type=name_list(OPTIONAL_PEERS, allow_empty=True), default=["go"],
                        help="servers besides xKit: go,nginx,h2o (default go; none for xKit alone)")
    parser.add_argument("--runs", type=int, help="runs per case and server (default 3)")
    parser.add_argument("--duration", type=int, help="seconds per run (quick 2, full 10)")
    parser.add_argument("--warmup", type=int, help="warm-up seconds (default 1; 0 for none)")
    parser.add_argument("--connections", type=count_list, help="GET /ping connection counts")
    parser.add_argument("--sizes", type=size_list, help="GET /echo response sizes")
    parser.add_argument("--bodies", type=size_list, help="POST /echo body sizes")
    parser.add_argument("--server-cpus", help="taskset list for the servers (default: half the cores)")
    parser.add_argument("--client-cpus", help="taskset list for wrk, h2load and this script")
    parser.add_argument("--build-dir", type=Path, default=REPO_ROOT / "build",
                        help="xKit's build, with bench/http_bench_server and bench/https_bench_server")
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "bench" / "results")
    parser.add_argument("--first-port", type=int, default=21000)
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    points = matrix.FULL if args.full else matrix.QUICK
    args.custom = any(value is not None for value in (args.connections, args.sizes, args.bodies))
    args.points = matrix.Points(
        connections=args.connections or points.connections, sizes=args.sizes or points.sizes,
        bodies=args.bodies or points.bodies,
        pipeline_connections=args.connections or points.pipeline_connections)
    args.runs = 3 if args.runs is None else args.runs
    args.duration = (10 if args.full else 2) if args.duration is None else args.duration
    args.warmup = 1 if args.warmup is None else args.warmup
    if args.runs < 1 or args.duration < 1 or args.warmup < 0:
        parser.error("--runs and --duration must be at least 1, --warmup at least 0")
    server_cpus, client_cpus = default_cpus()
    try:
        args.server_cpus = parse_cpu_list(args.server_cpus) if args.server_cpus else server_cpus
        args.client_cpus = parse_cpu_list(args.client_cpus) if args.client_cpus else client_cpus
    except ValueError:
        parser.error("--server-cpus and --client-cpus take taskset lists such as 1 or 2-3,5")
    allowed = os.sched_getaffinity(0)
    if not (args.server_cpus | args.client_cpus) <= allowed:
        parser.error(f"CPUs {sorted((args.server_cpus | args.client_cpus) - allowed)} are not "
                     f"available here (available: {sorted(allowed)})")
    return args


def check_tools(protocols):
    tools = {"taskset": "util-linux"}
    if any(matrix.PROTOCOLS[key].tool == "wrk" for key in protocols):
        tools["wrk"] = "wrk"
    if any(matrix.PROTOCOLS[key].tool == "h2load" for key in protocols):
        tools["h2load"] = "nghttp2-client"
    missing = [f"{tool} (apt-get install {package})" for tool, package in tools.items()
               if shutil.which(tool) is None]
    if missing:
        raise SetupFailed("missing: " + ", ".join(missing) + "; `make bench` installs them")


def say(line):
    print(line, file=sys.stderr, flush=True)


def prepare_context(args, sections, work_dir):
    """The certificate and the Go peers; what cannot be made is reported and its servers skipped."""
    context = PeerContext(build_dir=args.build_dir.resolve(), workers=len(args.server_cpus),
                          echo_sizes=args.points.sizes)
    if any(section.protocol.tls for section in sections):
        try:
            context.cert, context.key = make_certificate(work_dir)
        except SetupFailed as error:
            context.cert_problem = str(error)
            say(f"HTTPS servers will be skipped: {error}")
    if "go" in args.peers:
        say("building the Go peers (bench/go)…")
        try:
            context.go_bin = build_go_peers(work_dir / "go")
        except SetupFailed as error:
            context.go_problem = str(error)
            say(f"the Go peers will be skipped: {error}")
    for name in ("http_bench_server", "https_bench_server"):
        if not os.access(context.build_dir / "bench" / name, os.X_OK):
            say(f"xKit: {context.build_dir}/bench/{name} is not built; its cases will say so")
    return context


def setup_notes(context, sections, peers):
    notes = []
    if context.cert is None and any(section.protocol.tls for section in sections):
        notes.append(f"HTTPS servers skipped: {context.cert_problem}")
    if "go" in peers and context.go_bin is None:
        notes.append(f"Go peers skipped: {context.go_problem}")
    return notes


def check_writable(out_dir):
    """Fails before minutes of measuring, not after, when the report cannot be written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir):
            pass
    except OSError as error:
        raise SetupFailed(f"cannot write the report to {out_dir}: {error.strerror or error}") from None


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so servers get stopped
    check_tools(args.only)
    check_writable(args.out_dir)
    os.sched_setaffinity(0, args.client_cpus)  # keep this script off the servers' cores
    if args.server_cpus & args.client_cpus:
        say("warning: servers and load generator share CPUs; numbers will mean little")
    sections = matrix.build_sections(args.only, args.cases, args.points)
    if not sections:
        raise SetupFailed("nothing to run: no case of " + ",".join(args.cases) + " in " + ",".join(args.only))
    peer_names = ["xkit"] + args.peers
    started, started_at = time.monotonic(), datetime.datetime.now(datetime.timezone.utc)
    with tempfile.TemporaryDirectory(prefix="xkbench-") as work:
        work_dir = Path(work)
        work_dir.chmod(0o711)  # h2o and nginx, no longer root, reach their files through it
        context = prepare_context(args, sections, work_dir)
        client = Client(args.client_cpus, len(args.client_cpus),
                        write_bodies(work_dir, args.points.bodies))
        settings = Settings(args.duration, args.warmup, args.runs, args.server_cpus, client,
                            args.first_port)
        env = environment.capture(args.build_dir.resolve(), args.server_cpus, args.client_cpus,
                                  args.peers)
        progress = Progress(sections, peer_names, settings)
        say(f"{progress.total} cases, about {format_duration(progress.remaining_seconds())}")
        measured = run_sections(sections, peer_names, context, settings, work_dir, progress)
        commands = {section.id: describe(section, args.duration, args.warmup, client)
                    for section, _rows in measured}
        notes = setup_notes(context, sections, args.peers)
    env["Load average at end"] = environment.load_average()
    result = build(args, env, measured, commands, notes, peer_names, started_at,
                   time.monotonic() - started)
    report.write_report(result, args.out_dir)
    print("\n".join(report.summary_table(result)))
    failed = sum(entry["failed"] for entry in result["summary"])
    if failed:
        say(f"warning: {failed} measurement(s) failed; the report says which and why")
    say(f"report: {args.out_dir / 'latest.md'} (dated copy: {args.out_dir / result['date']}/); "
        f"took {format_duration(result['elapsed_s'])}")
    return 0


def build(args, env, measured, commands, notes, peer_names, started_at, elapsed):
    sections = [report.section_entry(section, rows, commands[section.id]) for section, rows in measured]
    mode = "full" if args.full else "quick"
    return {
        "schema": report.SCHEMA,
        "mode": mode + (", custom points" if args.custom or args.cases != list(matrix.KINDS) else ""),
        "date": started_at.strftime("%Y-%m-%d"),
        "started_at": started_at.isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "command": shlex.join(["python3", "bench/run_bench.py"] + args.argv),
        "settings": {
            "duration_s": args.duration, "warmup_s": args.warmup, "runs": args.runs,
            "server_cpus": ",".join(map(str, sorted(args.server_cpus))),
            "client_cpus": ",".join(map(str, sorted(args.client_cpus))),
            "workers": len(args.server_cpus), "client_threads": len(args.client_cpus),
            "streams_per_connection": matrix.STREAMS_PER_CONNECTION,
            "pipeline_depth": matrix.PIPELINE_DEPTH,
            "protocols": args.only, "cases": args.cases,
            "points": {"connections": args.points.connections, "sizes": args.points.sizes,
                       "bodies": args.points.bodies,
                       "pipeline_connections": args.points.pipeline_connections}},
        "environment": env,
        "servers": [{"name": name, "label": LABELS[name]} for name in peer_names],
        "notes": notes,
        "sections": sections,
        "summary": report.summary_entries(sections, peer_names),
    }
