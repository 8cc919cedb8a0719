"""Shared by xkbench's tests: puts bench/ on the import path and reads the fixtures."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
sys.path.insert(0, str(REPO_ROOT / "bench"))

FIXTURES = HERE / "fixtures"
INDEX = json.loads((FIXTURES / "index.json").read_text())["fixtures"]


def fixture(name):
    """(stdout, stderr, returncode) of a captured run."""
    entry = INDEX[name]
    return (FIXTURES / f"{name}.out").read_text(), entry["stderr"], entry["returncode"]


def run(rate, cpu, latency=1.5, ok=True, problem="wrk Socket errors: connect 0, read 3, write 0, timeout 0"):
    """One run's record as the runner keeps it; p50 and p99 are 0.8 and 4 times the mean."""
    return {
        "ok": ok,
        "problems": [] if ok else [problem],
        "requests": int(rate * 2),
        "req_per_s": rate,
        "latency_ms": latency,
        "latency_p50_ms": latency * 0.8,
        "latency_p99_ms": latency * 4,
        "cpu_us_per_request": cpu,
        "others_busy": 0.05,
    }


def sample_report():
    """A report as cli.build makes it: HTTP/1.1 ping (two points, Go failing at 500) and
    POST (nginx n/a), HTTPS/2 ping with xKit's server not built; xKit, Go and nginx."""
    from xkbench import matrix, report, stats

    points = matrix.Points(connections=(50, 500), sizes=(64,), bodies=(1024, 65536), pipeline_connections=(100,))
    sections = matrix.build_sections(["http1", "https2"], ["ping", "post"], points)
    ok = lambda rate, cpu: stats.summarize([run(rate, cpu), run(rate * 1.1, cpu * 0.9), run(rate * 0.9, cpu)])  # noqa: E731
    failed = stats.summarize([run(10000, 20.0), run(9000, 21.0, ok=False)])
    not_built = {"status": "not built", "error": "build/bench/https_bench_server not built"}
    n_a = {"status": "n/a", "error": "nginx does not serve POST /echo here"}
    results = {
        "http1.ping.c50": {"xkit": ok(100000, 8.0), "go": ok(50000, 20.0), "nginx": ok(90000, 10.0)},
        "http1.ping.c500": {"xkit": ok(120000, 7.5), "go": failed, "nginx": ok(95000, 9.5)},
        "http1.post.1KiB": {"xkit": ok(80000, 9.0), "go": ok(40000, 30.0), "nginx": n_a},
        "http1.post.64KiB": {"xkit": ok(15000, 50.0), "go": ok(4000, 230.0), "nginx": n_a},
        "https2.ping.c50": {"xkit": not_built, "go": ok(20000, 45.0), "nginx": ok(40000, 11.0)},
        "https2.ping.c500": {"xkit": not_built, "go": ok(19000, 47.0), "nginx": ok(41000, 10.5)},
        "https2.post.1KiB": {"xkit": not_built, "go": ok(15000, 60.0), "nginx": n_a},
        "https2.post.64KiB": {"xkit": not_built, "go": ok(3000, 250.0), "nginx": n_a},
    }
    entries = []
    for section in sections:
        rows = [
            {
                "case": case.id,
                "x": case.x,
                "label": case.x_label,
                "connections": case.connections,
                "size": case.size,
                "results": results[case.id],
            }
            for case in section.cases
        ]
        entries.append(report.section_entry(section, rows, f"tool for {section.id}"))
    peers = ["xkit", "go", "nginx"]
    return {
        "schema": report.SCHEMA,
        "mode": "quick",
        "date": "2026-11-22",
        "started_at": "2026-11-22T05:00:00+00:00",
        "elapsed_s": 312.4,
        "command": "python3 bench/xkbench suite --peers go,nginx",
        "settings": {
            "duration_s": 2,
            "warmup_s": 1,
            "runs": 3,
            "server_cpus": "1",
            "client_cpus": "0",
            "workers": 1,
            "client_threads": 1,
        },
        "environment": {
            "CPU": "AMD EPYC (2 cores online)",
            "Kernel": "Linux 6.1.0 (x86_64)",
            "Go": "go1.26.8 linux/amd64",
        },
        "servers": [
            {"name": "xkit", "label": "xKit"},
            {"name": "go", "label": "Go"},
            {"name": "nginx", "label": "nginx"},
        ],
        "notes": [],
        "sections": entries,
        "summary": report.summary_entries(entries, peers),
    }
