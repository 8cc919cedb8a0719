"""static: xKit's static files (<xhttp/static.h>) against nginx and h2o serving the same
directory, the arena's files (../shared/arena/data/static by default, copied privately).

Every server runs with one worker pinned to --server-cpus while the load generator runs
pinned to --client-cpus. Cases, each for a 6 KiB and a 120 KiB file (thumb2.webp,
header.html):
  http1-*   wrk -t1 -c100, keep-alive, no Accept-Encoding: the file itself
  h2c-*     h2load -t1 -c16 -m32, prior knowledge, Accept-Encoding: br;q=1, gzip;q=0.8
  https2-*  the same over TLS 1.3 (ALPN h2)
nginx serves files as a tuned nginx does (sendfile, open_file_cache valid for 1 s,
gzip_static: Debian's nginx has no brotli, so it sends the .gz twin where the others send
.br; the report says what each sent). A fresh server per run, round after round (the order
reversed every other round); medians.

Compression on the fly (--cases with text, not run by default): a 25 KiB and a 120 KiB text
file without twins (copies of layout.css and header.html under plain/), asked for with the
same Accept-Encoding over every protocol (wrk too). The servers to compare there:
  xkit                    no --compress: the file as it is (sendfile on HTTP/1.1)
  xkit_compress           --compress: compressed once per worker and kept
  xkit_compress_uncached  --compress --static-compress-cache 0: compressed per request
"""

import shutil
from pathlib import Path

from .. import environment
from ..cli import add_common_options
from ..loadgen import h2load_argv, measured_load, unmeasured_load, wrk_argv
from ..paths import REPO_ROOT
from ..probes import what_curl_gets
from ..rounds import failure_lines
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, prepare_peers, run_comparison
from .compare_http1 import CPU_SPLIT_NOTE, THROUGHPUT_KEYS, cpu_table

HELP = "static files: xKit, nginx and h2o serving the arena's files over HTTP/1.1, h2c and HTTPS/2"
SERVERS = ("xkit", "nginx", "h2o")
XKIT_COMPRESSING = ("xkit_compress", "xkit_compress_uncached")
FILES = {"6k": "thumb2.webp", "120k": "header.html"}
TEXT_FILES = {"text25k": "layout.css", "text120k": "header.html"}  # served from plain/, no twins
PROTOCOLS = ("http1", "h2c", "https2")
CASES = tuple(f"{protocol}-{size}" for protocol in PROTOCOLS for size in FILES)
TEXT_CASES = tuple(f"{protocol}-{size}" for protocol in PROTOCOLS for size in TEXT_FILES)
ACCEPT = "Accept-Encoding: br;q=1, gzip;q=0.8"
DEFAULT_STATIC_DIR = REPO_ROOT.parent / "shared" / "arena" / "data" / "static"
# xKit's median CPU µs/req over the peer's, bounded from above by issue 14.
CLAIMS = {"nginx": (0.85, ("http1",)), "h2o": (0.85, PROTOCOLS)}


def add_arguments(parser):
    add_common_options(
        parser, first_port=23000, servers=(SERVERS + XKIT_COMPRESSING, SERVERS), cases=(CASES + TEXT_CASES, CASES)
    )
    parser.add_argument(
        "--static-dir",
        type=Path,
        default=DEFAULT_STATIC_DIR,
        help="the files served (default: ../shared/arena/data/static from the repository)",
    )
    parser.add_argument("--connections", type=int, default=100, help="wrk connections (HTTP/1.1)")
    parser.add_argument("--h2-connections", type=int, default=16, help="h2load connections")
    parser.add_argument("--streams", type=int, default=32, help="h2load streams per connection")


def split(case):
    """(protocol, the file's path under the served directory)."""
    protocol, size = case.split("-")
    return protocol, FILES[size] if size in FILES else f"plain/{TEXT_FILES[size]}"


def is_text(case):
    return case.split("-")[1] in TEXT_FILES


def load_argv(case, server, args, seconds):
    protocol, name = split(case)
    scheme = "https" if protocol == "https2" else "http"
    url = f"{scheme}://127.0.0.1:{server.port}/static/{name}"
    if protocol == "http1":
        return wrk_argv(url, args.connections, seconds, options=["-H", ACCEPT] if is_text(case) else ())
    options = ["-H", ACCEPT] + (["--npn-list=h2"] if protocol == "https2" else [])
    return h2load_argv(url, args.h2_connections, seconds, streams=args.streams, options=options)


def what_is_sent(case, server):
    """The Content-Encoding and size of the answer the load asks for, as curl sees it."""
    protocol, name = split(case)
    scheme = "https" if protocol == "https2" else "http"
    flags = {
        "http1": ["-H", ACCEPT] if is_text(case) else [],
        "h2c": ["--http2-prior-knowledge", "-H", ACCEPT],
        "https2": ["--http2", "-H", ACCEPT],
    }[protocol]
    coding, size = what_curl_gets(f"{scheme}://127.0.0.1:{server.port}/static/{name}", flags)
    return f"{coding}, {size} B"


def measure_case(case, server, args):
    protocol, _ = split(case)
    h2 = {"http1": None, "h2c": "h2c", "https2": "h2"}[protocol]
    sent = what_is_sent(case, server)
    unmeasured_load(load_argv(case, server, args, WARMUP_SECONDS), args.client_cpus, WARMUP_SECONDS, h2_protocol=h2)
    result, run = measured_load(
        load_argv(case, server, args, args.duration),
        args.client_cpus,
        args.duration,
        server,
        h2_protocol=h2,
        h2load_window=False,
    )
    return {
        "sent": sent,
        "requests": result.requests,
        "req_per_s": result.req_per_s,
        **run.per_request(result.requests),
    }


# --- report -------------------------------------------------------------------


def case_title(case, args):
    protocol, name = split(case)
    if protocol == "http1":
        tool = f"wrk -c{args.connections}" + (f", {ACCEPT}" if is_text(case) else "")
    else:
        tool = f"h2load -c{args.h2_connections} -m{args.streams}, {ACCEPT}"
    return f"### {protocol}: GET /static/{name} — `{tool}`"


def sent_line(by_server):
    seen = {server: next((run["sent"] for run in runs if run.get("ok")), None) for server, runs in by_server.items()}
    return "Sent: " + "; ".join(f"{server} {sent}" for server, sent in seen.items() if sent)


def ratio_table(summary):
    peers = list(CLAIMS)
    lines = [
        "### xKit's CPU µs/req ÷ each peer's (of medians)",
        "",
        "| Case | " + " | ".join(f"xkit ÷ {peer}" for peer in peers) + " |",
        "|---|" + "---|" * len(peers),
    ]
    for case in summary:
        cells = []
        for peer in peers:
            ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
            theirs = summary_median(summary, case, peer, "cpu_us_per_request")
            bound, protocols = CLAIMS[peer]
            if not ours or not theirs:
                cells.append("n/a")
            elif split(case)[0] in protocols:
                verdict = "met" if ours / theirs <= bound else "not met"
                cells.append(f"{ours / theirs:.2f}× (claim ≤ {bound:.2f}×: {verdict})")
            else:
                cells.append(f"{ours / theirs:.2f}×")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return lines


def machine_description(args):
    return (
        f"{environment.host_line()}; servers on CPU {environment.cpu_list(args.server_cpus)} with one "
        f"worker, the load generator (one thread) on CPU {environment.cpu_list(args.client_cpus)}; "
        f"{args.duration} s per run after {WARMUP_SECONDS} s warm-up, {args.runs} runs, medians. "
        f"Files: {args.static_dir}."
    )


def render(results, skipped, machine, args):
    summary = summarize_rounds(results, lambda case: THROUGHPUT_KEYS)
    lines = ["## Static files comparison", "", machine, "", CPU_SPLIT_NOTE, ""]
    for case, by_server in results.items():
        tool = "wrk" if case.startswith("http1") else "h2load"
        lines += [case_title(case, args), "", sent_line(by_server), ""]
        lines += cpu_table(by_server, summary[case], tool) + [""]
    lines += ratio_table(summary) + [""]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def copy_files(source, work_dir):
    """The files in a directory the peers (h2o and nginx drop root) can read, with plain/
    holding TEXT_FILES' copies without their twins."""
    missing = sorted({name for name in (*FILES.values(), *TEXT_FILES.values()) if not (source / name).is_file()})
    if missing:
        raise SystemExit(f"xkbench static: {source} lacks {', '.join(missing)} (see --static-dir)")
    target = work_dir / "static"
    shutil.copytree(source, target)
    target.chmod(0o755)
    for path in target.iterdir():
        path.chmod(0o644)
    plain = target / "plain"
    plain.mkdir(mode=0o755)
    for name in TEXT_FILES.values():
        shutil.copyfile(source / name, plain / name)
        (plain / name).chmod(0o644)
    return target


def run(args):
    def measure(bench):
        machine = machine_description(args)
        static_dir = copy_files(args.static_dir.resolve(), bench.work_dir)
        peers, skipped = {}, {}
        for protocol in {split(case)[0] for case in args.cases}:
            peers[protocol], missing = prepare_peers(
                args, bench.work_dir, protocol, tls=protocol == "https2", static_dir=static_dir
            )
            skipped.update({f"{name} ({protocol})": why for name, why in missing.items()})
        plan = {case: list(peers[split(case)[0]]) for case in args.cases}
        results = bench.rounds(
            plan,
            lambda case, name: bench.run_once(
                peers[split(case)[0]][name], case, lambda server: measure_case(case, server, args)
            ),
        )
        markdown, summary = render(results, skipped, machine, args)
        return markdown, {"machine": machine, "skipped": skipped, "results": results, "summary": summary}

    return run_comparison(args, "static", ["taskset", "wrk", "h2load", "curl"], measure)
