"""suite: xKit against Go (and nginx, h2o) over HTTP/1.1, h2c, HTTPS/1.1, HTTPS/2 and
pipelined HTTP/1.1 with wrk and h2load; what `make bench` runs. Sets up, measures, writes
the report (results/latest.md and .json, results/suite/STAMP.{md,json} and its charts)."""

import argparse
import datetime
import os
import tempfile
import time
from pathlib import Path

from .. import environment, matrix, report
from ..cli import add_common_options, check_cpus_available, command_line, name_list, say
from ..loadgen import Client, describe
from ..peers import LABELS, PeerContext
from ..prepare import SetupFailed, build_go_peers, check_tools, make_certificate, write_bodies
from ..results import check_writable
from ..runner import Progress, Settings, format_duration, run_sections
from ..servers import pin_self

HELP = "the benchmark suite `make bench` runs: xKit against Go (nginx, h2o) over every protocol"
OPTIONAL_PEERS = ("go", "nginx", "h2o")


def size_list(text):
    """ "64,4k" -> (64, 4096): bytes, k for KiB."""
    try:
        sizes = tuple(
            int(item[:-1]) * matrix.KIB if item.lower().endswith("k") else int(item) for item in text.split(",")
        )
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


def add_arguments(parser):
    parser.add_argument(
        "--full", action="store_true", help="the reports' full matrices and 10-s runs (about an hour on 2 cores)"
    )
    parser.add_argument(
        "--only",
        type=name_list(tuple(matrix.PROTOCOLS)),
        default=list(matrix.PROTOCOLS),
        help="protocols: " + ",".join(matrix.PROTOCOLS),
    )
    parser.add_argument(
        "--cases", type=name_list(matrix.KINDS), default=list(matrix.KINDS), help="kinds of case: ping,echo,post"
    )
    parser.add_argument(
        "--peers",
        type=name_list(OPTIONAL_PEERS, allow_empty=True),
        default=["go"],
        help="servers besides xKit: go,nginx,h2o (default go; none for xKit alone)",
    )
    parser.add_argument("--warmup", type=int, help="warm-up seconds (default 1; 0 for none)")
    parser.add_argument("--connections", type=count_list, help="GET /ping connection counts")
    parser.add_argument("--sizes", type=size_list, help="GET /echo response sizes")
    parser.add_argument("--bodies", type=size_list, help="POST /echo body sizes")
    add_common_options(
        parser,
        runs=None,
        duration=None,
        first_port=21000,
        server_cpus=None,
        client_cpus=None,
        duration_help="seconds per run (quick 2, full 10)",
        cpus_help="(default: half the cores each, the load generator the larger half)",
    )


def settle(args):
    """The defaults that depend on other options, and the checks argparse cannot make."""
    points = matrix.FULL if args.full else matrix.QUICK
    args.custom = any(value is not None for value in (args.connections, args.sizes, args.bodies))
    args.points = matrix.Points(
        connections=args.connections or points.connections,
        sizes=args.sizes or points.sizes,
        bodies=args.bodies or points.bodies,
        pipeline_connections=args.connections or points.pipeline_connections,
    )
    args.runs = 3 if args.runs is None else args.runs
    args.duration = (10 if args.full else 2) if args.duration is None else args.duration
    args.warmup = 1 if args.warmup is None else args.warmup
    if args.runs < 1 or args.duration < 1 or args.warmup < 0:
        args.parser.error("--runs and --duration must be at least 1, --warmup at least 0")
    server_cpus, client_cpus = default_cpus()
    args.server_cpus = args.server_cpus or server_cpus
    args.client_cpus = args.client_cpus or client_cpus
    check_cpus_available(args)


def tools_for(protocols):
    return ["taskset"] + sorted({matrix.PROTOCOLS[key].tool for key in protocols})


def prepare_context(args, sections, work_dir):
    """The certificate and the Go peers; what cannot be made is reported and its servers skipped."""
    context = PeerContext(
        build_dir=args.build_dir.resolve(), workers=len(args.server_cpus), echo_sizes=args.points.sizes
    )
    if any(section.protocol.tls for section in sections):
        try:
            context.cert, context.key = make_certificate(work_dir)
        except SetupFailed as error:
            context.cert_problem = str(error)
            say(f"HTTPS servers will be skipped: {error}")
    if "go" in args.peers:
        say("building the Go peers (bench/peers/go)…")
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


def run(args):
    settle(args)
    check_tools(tools_for(args.only))
    check_writable(args.out_dir)
    pin_self(args.client_cpus)  # keep this script off the servers' cores
    if args.server_cpus & args.client_cpus:
        say("warning: servers and load generator share CPUs; numbers will mean little")
    sections = matrix.build_sections(args.only, args.cases, args.points)
    if not sections:
        raise SetupFailed("nothing to run: no case of " + ",".join(args.cases) + " in " + ",".join(args.only))
    peer_names = ["xkit"] + args.peers
    started, started_at = time.monotonic(), datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="xkbench-") as work:
        work_dir = Path(work)
        work_dir.chmod(0o711)  # h2o and nginx, no longer root, reach their files through it
        context = prepare_context(args, sections, work_dir)
        client = Client(args.client_cpus, len(args.client_cpus), write_bodies(work_dir, args.points.bodies))
        settings = Settings(args.duration, args.warmup, args.runs, args.server_cpus, client, args.first_port)
        env = environment.capture(args.build_dir.resolve(), args.server_cpus, args.client_cpus, args.peers)
        progress = Progress(sections, peer_names, settings)
        say(f"{progress.total} cases, about {format_duration(progress.remaining_seconds())}")
        measured = run_sections(sections, peer_names, context, settings, work_dir, progress)
        commands = {section.id: describe(section, args.duration, args.warmup, client) for section, _rows in measured}
        notes = setup_notes(context, sections, args.peers)
    env["Load average at end"] = environment.load_average()
    result = build(args, env, measured, commands, notes, peer_names, started_at, time.monotonic() - started)
    written = report.write_report(result, args.out_dir)
    print("\n".join(report.summary_table(result)))
    failed = sum(entry["failed"] for entry in result["summary"])
    if failed:
        say(f"warning: {failed} measurement(s) failed; the report says which and why")
    say(f"report: {args.out_dir / 'latest.md'} (kept as {written[-4]}); took {format_duration(result['elapsed_s'])}")
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
        "command": command_line(args),
        "settings": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "runs": args.runs,
            "server_cpus": ",".join(map(str, sorted(args.server_cpus))),
            "client_cpus": ",".join(map(str, sorted(args.client_cpus))),
            "workers": len(args.server_cpus),
            "client_threads": len(args.client_cpus),
            "streams_per_connection": matrix.STREAMS_PER_CONNECTION,
            "pipeline_depth": matrix.PIPELINE_DEPTH,
            "protocols": args.only,
            "cases": args.cases,
            "points": {
                "connections": args.points.connections,
                "sizes": args.points.sizes,
                "bodies": args.points.bodies,
                "pipeline_connections": args.points.pipeline_connections,
            },
        },
        "environment": env,
        "servers": [{"name": name, "label": LABELS[name]} for name in peer_names],
        "notes": notes,
        "sections": sections,
        "summary": report.summary_entries(sections, peer_names),
    }
