"""compress: on-the-fly compression of GET /json (8 KiB of JSON) by xKit, against what the
compression library alone spends on the same bytes at the same settings.

http_bench_server --compress runs one worker pinned to --server-cpus; wrk -t1 (pinned to
--client-cpus) asks for /json with "Accept-Encoding: gzip", "br" or none (identity, for
the cost of serving without compressing). The server's CPU per response comes from /proc.
bench/compress_bench, pinned to --server-cpus too, compresses the same body in a loop the
way the server does (zlib: one stream reset each time; Brotli: BrotliEncoderCompress) and
reports CPU µs per body. Rounds alternate the two; medians. The claim: xKit's CPU per
compressed response ≤ 1.1× the library's per body.
"""

import subprocess

from .. import environment
from ..cli import add_common_options
from ..loadgen import measured_load, unmeasured_load, wrk_argv
from ..peers import Missing, Peer, server_binary
from ..rounds import failure_lines, runs_cell
from ..servers import RunFailed, pinned
from ..stats import summarize_rounds, summary_median
from .compare import WARMUP_SECONDS, run_comparison

HELP = "on-the-fly gzip and Brotli of an 8 KiB JSON body: xKit's CPU per response beside the library's alone"
CASES = ("gzip", "br", "identity")
TARGET = 1.1
KEYS = ("req_per_s", "cpu_us_per_request", "server_busy", "client_busy", "others_busy")


def add_arguments(parser):
    add_common_options(parser, first_port=25000, cases=(CASES, CASES))
    parser.add_argument("--connections", type=int, default=50, help="wrk connections")


def xkit_peer(build_dir):
    binary = server_binary(type("Context", (), {"build_dir": build_dir}), "http_bench_server")
    if isinstance(binary, Missing):
        raise RunFailed(binary.reason)
    return Peer("xkit", lambda port, _dir: [str(binary), str(port), "--workers", "1", "--compress"])


def measure_server(server, case, args):
    headers = [] if case == "identity" else ["-H", f"Accept-Encoding: {case}"]
    url = f"http://127.0.0.1:{server.port}/json"
    check = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-D", "-", *headers, url], capture_output=True, text=True, timeout=10
    )
    coding = next(
        (
            line.split(":", 1)[1].strip()
            for line in check.stdout.splitlines()
            if line.lower().startswith("content-encoding:")
        ),
        "identity",
    )
    if coding != case:
        raise RunFailed(f"/json came with Content-Encoding {coding!r}, not {case!r}")
    unmeasured_load(wrk_argv(url, args.connections, WARMUP_SECONDS, options=headers), args.client_cpus, WARMUP_SECONDS)
    result, run = measured_load(
        wrk_argv(url, args.connections, args.duration, options=headers), args.client_cpus, args.duration, server
    )
    return {"requests": result.requests, "req_per_s": result.req_per_s, **run.per_request(result.requests)}


def measure_library(case, args):
    """compress_bench's line, e.g. "gzip level 6: 21000 ops, 95.21 us/op, 8126 -> 1281 bytes"."""
    binary = args.build_dir.resolve() / "bench" / "compress_bench"
    try:
        done = subprocess.run(
            pinned([str(binary), case, str(args.duration)], args.server_cpus),
            capture_output=True,
            text=True,
            timeout=args.duration * 10 + 30,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"ok": False, "error": f"compress_bench: {error}"}
    if done.returncode != 0:
        return {"ok": False, "error": f"compress_bench exited {done.returncode}: {done.stderr.strip()}"}
    words = done.stdout.split()
    return {"ok": True, "line": done.stdout.strip(), "cpu_us_per_request": float(words[words.index("us/op,") - 1])}


def render(results, skipped, args, machine):
    summary = summarize_rounds(results, lambda case: KEYS)
    lines = [
        "## On-the-fly compression of GET /json (8 KiB JSON)",
        "",
        machine,
        "",
        "| Case | xKit req/s | xKit CPU µs/response | library alone µs/body | xKit ÷ library | runs |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for case, by_name in results.items():
        ours = summary_median(summary, case, "xkit", "cpu_us_per_request")
        rate = summary_median(summary, case, "xkit", "req_per_s")
        library = summary_median(summary, case, "library", "cpu_us_per_request") if "library" in by_name else None
        runs = " / ".join(f"{name} {runs_cell(r)}" for name, r in by_name.items())
        lines.append(
            f"| {case} | {rate or 0:,.0f} | {ours or 0:.2f} | "
            f"{f'{library:.2f}' if library else '–'} | "
            f"{f'{ours / library:.2f}×' if ours and library else '–'} | {runs} |"
        )
    examples = [run["line"] for by_name in results.values() for run in by_name.get("library", []) if run.get("ok")]
    lines += [
        "",
        f"Target: xKit ≤ {TARGET}× the library alone. compress_bench said, e.g.: "
        + "; ".join(dict.fromkeys(line.split(":")[0] + ":" + line.split(",")[1] for line in examples[:6])),
        "",
    ]
    lines += failure_lines(results, skipped)
    return "\n".join(lines).rstrip() + "\n", summary


def run(args):
    def measure(bench):
        machine = (
            f"{environment.host_line()}; http_bench_server --compress (one worker) and compress_bench "
            f"on CPU {environment.cpu_list(args.server_cpus)}, wrk -t1 -c{args.connections} on CPU "
            f"{environment.cpu_list(args.client_cpus)}; {args.duration} s per run after "
            f"{WARMUP_SECONDS} s warm-up, {args.runs} runs, medians."
        )
        peer = xkit_peer(args.build_dir.resolve())
        plan = {case: ["xkit"] + ([] if case == "identity" else ["library"]) for case in args.cases}

        def once(case, name):
            if name == "library":
                return measure_library(case, args)
            return bench.run_once(peer, case, lambda server: measure_server(server, case, args))

        results = bench.rounds(plan, once)
        markdown, summary = render(results, {}, args, machine)
        return markdown, {"machine": machine, "results": results, "summary": summary}

    return run_comparison(args, "compress", ["taskset", "wrk", "curl"], measure)
