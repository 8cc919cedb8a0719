"""wrk's and h2load's reports, read by the bench tool's own parsers (bench/xkbench/parsing.py,
tested on captured outputs in tests/bench), so the tests and the benchmark reports judge a run
alike: any socket error, timeout, failed stream or status >= 400 is a problem."""

import signal
import subprocess
import sys
import time
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


def start_wrk(test, args, timeout=30):
    """wrk with args, running until the caller's SIGINT ends it (stop_wrk): returned once wrk
    has installed its SIGINT handler, its connections under way. wrk starts its threads
    before it takes SIGINT, and a slow start on a loaded machine would otherwise see the
    signal kill it, or pass unnoticed while its start ignores it."""
    wrk = subprocess.Popen(["wrk", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    test.addCleanup(lambda: wrk.poll() is None and wrk.kill())
    caught = 1 << (signal.SIGINT - 1)
    deadline = time.monotonic() + timeout
    while wrk.poll() is None and time.monotonic() < deadline:
        with open(f"/proc/{wrk.pid}/status") as status:
            masks = dict(line.split(":", 1) for line in status if line.startswith("SigCgt"))
        if int(masks.get("SigCgt", "0"), 16) & caught:
            return wrk
        time.sleep(0.01)
    test.fail(f"wrk did not start within {timeout} s (exit status {wrk.poll()})")


def stop_wrk(wrk):
    """Ends a start_wrk run: (LoadResult, stdout)."""
    wrk.send_signal(signal.SIGINT)
    stdout, stderr = wrk.communicate(timeout=30)
    return wrk_report(subprocess.CompletedProcess(wrk.args, wrk.returncode, stdout, stderr))
