"""wrk's and h2load's reports, read by the bench tool's own parsers (bench/xkbench/parsing.py,
tested on captured outputs in tests/bench), so the tests and the benchmark reports judge a run
alike: any socket error, timeout, failed stream or status >= 400 is a problem."""

import sys
from pathlib import Path

# The bench tool is a package in bench/, as tests/bench/support.py also puts it on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from xkbench.parsing import parse_h2load, parse_wrk  # noqa: E402


def _texts(completed):
    return completed.stdout.decode("utf-8", "replace"), completed.stderr.decode("utf-8", "replace")


def wrk_report(completed):
    """(LoadResult, stdout) of a finished wrk run (harness.run_client's CompletedProcess)."""
    stdout, stderr = _texts(completed)
    return parse_wrk(stdout, stderr, completed.returncode), stdout


def h2load_report(completed):
    """(LoadResult, stdout) of a finished h2load run; LoadResult.statuses counts its
    responses by class, .tls is (TLS version, cipher, ALPN) over TLS."""
    stdout, stderr = _texts(completed)
    return parse_h2load(stdout, stderr, completed.returncode), stdout
