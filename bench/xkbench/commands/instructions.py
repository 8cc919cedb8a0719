"""instructions: instructions executed per request by xKit's bench servers under callgrind,
a count that does not move with the machine's load, for when wall-clock noise hides a change.

Each case runs its server (one worker) under valgrind --tool=callgrind, pinned to
--server-cpus, and h2load -c10 from --client-cpus: a warm-up of WARMUP_REQUESTS requests,
then callgrind_control -z (counters to zero), --requests requests that must all succeed,
callgrind_control -d (a dump). The dump's summary (or totals) line gives Ir, the
instructions the server executed meanwhile, every thread's; Ir ÷ requests is the figure.
Cases: http1 (h2load --h1) and h2c (-m10) on http_bench_server, https1 (--h1) and https2
(-m10) on https_bench_server with a self-signed RSA-2048 certificate; GET /ping each, on a
fresh server per run. h2c-echo4k (not run unless named in --cases) is h2c's with GET
/echo?size=4096, a referenced body framed as DATA. --compare-build measures a second build beside the first, the order
alternating by round, and reports --build-dir's medians ÷ --compare-build's: after ÷ before
when --compare-build holds the code before the change.
"""

import dataclasses
import shlex
import subprocess
from pathlib import Path

from .. import environment
from ..cli import add_common_options
from ..loadgen import unmeasured_load
from ..parsing import last_line, parse_callgrind_events
from ..paths import shown
from ..peers import Missing, PeerContext, make_peer
from ..prepare import make_certificate
from ..rounds import failure_lines
from ..servers import RunFailed
from ..stats import ratio, spread_of
from .compare import run_comparison

HELP = "instructions per request (callgrind's Ir) of xKit's bench servers, deterministic where wall-clock time is noisy"
CASES = ("http1", "h2c", "https1", "https2", "h2c-echo4k")
DEFAULT_CASES = ("http1", "h2c", "https1", "https2")
# What h2load must have spoken in each case, and how it is told to.
PROTOCOLS = {"http1": "http/1.1", "h2c": "h2c", "https1": "http/1.1", "https2": "h2", "h2c-echo4k": "h2c"}
# The server each case runs, where it is not the case's own name, and the path it asks for.
PEER_CASES = {"h2c-echo4k": "h2c"}
PATHS = {"h2c-echo4k": "/echo?size=4096"}
CONNECTIONS = 10
STREAMS = 10
WARMUP_REQUESTS = 500
# h2load gets this long plus a generous time per request under callgrind before it is killed.
LOAD_SECONDS = 60
SECONDS_PER_REQUEST = 0.01
CALLGRIND_CONTROL_TIMEOUT = 60
BUILDS = ("build", "compare")


def add_arguments(parser):
    add_common_options(parser, with_duration=False, first_port=24000, cases=(CASES, DEFAULT_CASES))
    parser.add_argument("--requests", type=int, default=20000, help="measured requests per run (default 20000)")
    parser.add_argument(
        "--compare-build",
        type=Path,
        default=None,
        help="a second build (the one before a change) measured beside --build-dir's",
    )
    parser.add_argument("--test-routes", action="store_true", help="start the servers with --test-routes")
    parser.add_argument(
        "--server-args",
        default="",
        help='more flags for --build-dir\'s servers only, e.g. "--access-log /tmp/a.log": '
        "what a feature costs against --compare-build without it",
    )


def h2load_requests_argv(case, port, requests):
    """h2load for a fixed number of requests on CONNECTIONS connections."""
    scheme = "https" if case.startswith("https") else "http"
    speak = ["--h1"] if PROTOCOLS[case] == "http/1.1" else [f"-m{STREAMS}"]
    return [
        "h2load",
        "-t1",
        f"-c{CONNECTIONS}",
        "-n",
        str(requests),
        *speak,
        f"{scheme}://127.0.0.1:{port}{PATHS.get(case, '/ping')}",
    ]


def under_callgrind(peer, test_routes, extra=()):
    """The peer run by valgrind --tool=callgrind, dumping into its private directory,
    with extra flags after its own."""
    flags = (["--test-routes"] if test_routes else []) + list(extra)

    def command(port, run_dir):
        return (
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={run_dir}/callgrind.out.%p"]
            + peer.command(port, run_dir)
            + flags
        )

    return dataclasses.replace(peer, command=command)


def callgrind_control(flag, pid):
    try:
        done = subprocess.run(
            ["callgrind_control", flag, str(pid)], capture_output=True, text=True, timeout=CALLGRIND_CONTROL_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise RunFailed(f"callgrind_control {flag} took over {CALLGRIND_CONTROL_TIMEOUT} s") from None
    if done.returncode != 0:
        raise RunFailed(f"callgrind_control {flag} failed: {last_line(done.stderr + done.stdout)}")


def dumped_ir(run_dir, pid):
    """Ir of the last dump callgrind_control -d made for pid: callgrind.out.PID.N, N counting
    the dumps from 1 (callgrind.out.PID itself is the one written at exit)."""
    dumps = sorted(
        (path for path in Path(run_dir).glob(f"callgrind.out.{pid}.*") if path.suffix[1:].isdigit()),
        key=lambda path: int(path.suffix[1:]),
    )
    if not dumps:
        raise RunFailed("callgrind wrote no dump")
    events = parse_callgrind_events(dumps[-1].read_text(errors="replace"))
    if "Ir" not in events:
        raise RunFailed(f"no Ir in the summary or totals of {dumps[-1].name}")
    return events["Ir"]


def per_request(ir, requests):
    """Ir ÷ requests, or None without requests."""
    return ir / requests if requests else None


def load(case, port, requests, args):
    """h2load for requests that must all succeed, over the case's protocol."""
    argv = h2load_requests_argv(case, port, requests)
    result, _run = unmeasured_load(
        argv, args.client_cpus, LOAD_SECONDS + requests * SECONDS_PER_REQUEST, h2_protocol=PROTOCOLS[case]
    )
    if result.requests != requests:
        raise RunFailed(f"h2load: {result.requests} of {requests} requests succeeded")
    return result


def measure_case(server, case, args):
    pid = server.serving_pids()[0]
    load(case, server.port, WARMUP_REQUESTS, args)
    callgrind_control("-z", pid)
    result = load(case, server.port, args.requests, args)
    callgrind_control("-d", pid)
    ir = dumped_ir(server.log_path.parent, pid)
    return {"requests": result.requests, "ir": ir, "ir_per_request": per_request(ir, result.requests)}


def build_peers(build_dir, cert, args, extra=()):
    """({case: Peer under callgrind}, {case: why not}) for one build, its servers given extra."""
    context = PeerContext(build_dir=build_dir.resolve(), workers=1, cert=cert[0], key=cert[1])
    peers, missing = {}, {}
    for case in args.cases:
        peer = make_peer("xkit", PEER_CASES.get(case, case), context)
        if isinstance(peer, Missing):
            missing[case] = peer.reason
        else:
            peers[case] = under_callgrind(peer, args.test_routes, extra)
    return peers, missing


# --- report ---------------------------------------------------------------------


def summarize(results):
    """{case: {build: {"median", "min", "max"} of Ir/request, or None}}."""
    return {
        case: {build: spread_of(runs, "ir_per_request") for build, runs in by_build.items()}
        for case, by_build in results.items()
    }


def median_ratio(stats, build, base):
    """build's median Ir/request ÷ base's, or None."""
    if not stats.get(build) or not stats.get(base):
        return None
    return ratio(stats[build]["median"], stats[base]["median"])


def runs_text(runs):
    return ", ".join(f"{run['ir_per_request']:,.0f}" if run["ok"] else "failed" for run in runs)


def cell(stats):
    return f"{stats['median']:,.0f}" if stats else "–"


def table(results, summary, builds):
    comparing = "compare" in builds
    headings = ["Case", "after: Ir/req" if comparing else "Ir/req", "runs"]
    if comparing:
        headings += ["before: Ir/req", "runs", "after ÷ before"]
    lines = ["| " + " | ".join(headings) + " |", "|---|" + "---:|---|" * len(builds) + ("---:|" if comparing else "")]
    for case, by_build in results.items():
        row = [case]
        for build in builds:
            row += [cell(summary[case].get(build)), runs_text(by_build.get(build, []))]
        if comparing:
            quotient = median_ratio(summary[case], "build", "compare")
            row.append(f"{quotient:.4f}" if quotient is not None else "–")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def machine_description(args):
    tools = ", ".join(environment.first_line(argv) for argv in (["valgrind", "--version"], ["h2load", "--version"]))
    builds = f"build {shown(args.build_dir)}"
    if args.compare_build:
        builds += f" (after), compared with {shown(args.compare_build)} (before)"
    return (
        f"{environment.host_line()}; {tools}. {builds}. Server: one worker under valgrind "
        f"--tool=callgrind on CPU {environment.cpu_list(args.server_cpus)}"
        f"{', with --test-routes' if args.test_routes else ''}"
        f"{f'; --build-dir servers with {args.server_args}' if args.server_args else ''}; "
        f"h2load -c{CONNECTIONS} (--h1 or -m{STREAMS}) GET /ping (h2c-echo4k: /echo?size=4096) "
        f"on CPU {environment.cpu_list(args.client_cpus)}: {WARMUP_REQUESTS} "
        f"requests of warm-up, counters zeroed, {args.requests:,} measured. Ir/req = instructions the "
        f"server executed (all threads) ÷ requests, the HTTPS cases' {CONNECTIONS} full handshakes "
        f"included; medians of {args.runs} runs."
    )


def render(results, skipped, args, machine):
    builds = [build for build in BUILDS if build == "build" or args.compare_build]
    summary = summarize(results)
    lines = ["## Instructions per request (callgrind)", "", machine, ""] + table(results, summary, builds) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


# --- run ------------------------------------------------------------------------


def run(args):
    if args.compare_build and args.compare_build.resolve() == args.build_dir.resolve():
        args.parser.error("--compare-build names the same build as --build-dir")
    dirs = {"build": args.build_dir, "compare": args.compare_build}

    def measure(bench):
        machine = machine_description(args)
        cert = (None, None)
        if any(case.startswith("https") for case in args.cases):
            cert = make_certificate(bench.work_dir)
        peers, skipped = {}, {}
        for build, build_dir in dirs.items():
            if build_dir is None:
                continue
            extra = shlex.split(args.server_args) if build == "build" else ()
            peers[build], missing = build_peers(build_dir, cert, args, extra)
            skipped.update({f"{build} {case}": reason for case, reason in missing.items()})
        plan = {case: [build for build in peers if case in peers[build]] for case in args.cases}
        by_key = bench.rounds(
            plan,
            lambda case, build: bench.run_once(
                peers[build][case], f"{build}-{case}", lambda server: measure_case(server, case, args)
            ),
        )
        markdown, summary = render(by_key, skipped, args, machine)
        return markdown, {
            "machine": machine,
            "skipped": skipped,
            "results": by_key,
            "summary": summary,
            "medians": {
                case: {build: stats and stats["median"] for build, stats in by_build.items()}
                for case, by_build in summary.items()
            },
        }

    return run_comparison(
        args,
        "instructions",
        ["taskset", "h2load", "valgrind", "callgrind_control"],
        measure,
        at_least_one=("runs", "requests"),
    )
