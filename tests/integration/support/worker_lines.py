"""What the bench server's worker hooks (--worker-hooks, bench/servers/bench_workers.c)
write on stderr as each worker starts and stops, read back for the tests."""

import re

START_RE = re.compile(r"^worker-hooks: start worker=(\d+) tid=(\d+)$", re.M)
STOP_RE = re.compile(
    r"^worker-hooks: stop worker=(\d+) tid=(\d+) start_tid=(\d+) requests=(\d+) blocking_done=(\d+) "
    r"blocking_aborted=(\d+) blocking_cancelled=(\d+) blocking_out=(-?\d+)$",
    re.M,
)
STOP_FIELDS = (
    "worker",
    "tid",
    "start_tid",
    "requests",
    "blocking_done",
    "blocking_aborted",
    "blocking_cancelled",
    "blocking_out",
)


def starts(stderr):
    """[(worker, tid)] of every start line, in order."""
    return [(int(m.group(1)), int(m.group(2))) for m in START_RE.finditer(stderr)]


def stops(stderr):
    """[{field: int}] of every stop line, in order (STOP_FIELDS)."""
    return [dict(zip(STOP_FIELDS, map(int, m.groups()), strict=True)) for m in STOP_RE.finditer(stderr)]
