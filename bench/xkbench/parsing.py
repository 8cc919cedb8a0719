"""Reading wrk's and h2load's reports. Nothing here raises on odd output: what a run got
wrong is listed in LoadResult.problems, and a run with any problem is a failed run."""

import math
import re
from collections import Counter
from dataclasses import dataclass, field

# wrk and h2load print durations with these suffixes (wrk also m and h, for long runs).
TIME_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
TIME = r"([\d.]+)(us|ms|s|m|h)"


@dataclass
class LoadResult:
    """What one load-generator run measured: requests completed (h2load: succeeded),
    their rate, the mean latency and its 50th and 99th percentiles in milliseconds (wrk
    prints them with --latency; h2load does not, see parse_h2load_log), and everything
    that disqualifies it."""

    requests: int = 0
    req_per_s: float = 0.0
    latency_ms: float | None = None
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    problems: list = field(default_factory=list)
    tls: tuple | None = None  # h2load over TLS: (version, cipher, ALPN) as it reports them
    statuses: dict = field(default_factory=dict)  # h2load: responses by class, {"2xx": N, ...}

    @property
    def ok(self):
        return not self.problems


def to_ms(number, unit):
    return float(number) * TIME_UNITS_MS[unit]


def last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


WRK = {
    "requests": re.compile(r"(\d+) requests in "),
    "req_per_s": re.compile(r"Requests/sec:\s+([\d.]+)"),
    "latency": re.compile(r"Latency\s+" + TIME),
    "socket_errors": re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"),
    "bad_status": re.compile(r"Non-2xx or 3xx responses: (\d+)"),
    # --latency's "Latency Distribution": "     50%  105.00us", then 75, 90 and 99.
    "percentile": re.compile(r"^\s+(50|75|90|99)%\s+" + TIME, re.M),
}


def parse_wrk(stdout, stderr="", returncode=0):
    """wrk prints "Socket errors" and "Non-2xx or 3xx responses" only when they are not zero;
    it exits 1 without a report when it cannot connect at all."""
    result = LoadResult()
    requests, rate = WRK["requests"].search(stdout), WRK["req_per_s"].search(stdout)
    if returncode != 0 or not requests or not rate:
        result.problems.append(
            f"wrk exited with {returncode}: {last_line(stderr + stdout)}"
            if returncode
            else f"unreadable wrk output: {last_line(stdout)}"
        )
        return result
    result.requests, result.req_per_s = int(requests.group(1)), float(rate.group(1))
    latency = WRK["latency"].search(stdout)
    if latency and result.requests:
        result.latency_ms = to_ms(*latency.groups())
        result.latency_p50_ms, result.latency_p99_ms = wrk_percentiles(stdout)
    errors = WRK["socket_errors"].search(stdout)
    if errors and any(int(count) for count in errors.groups()):
        result.problems.append("wrk " + errors.group(0))
    bad_status = WRK["bad_status"].search(stdout)
    if bad_status and int(bad_status.group(1)):
        result.problems.append(f"wrk: {bad_status.group(1)} responses with status >= 400")
    if result.requests == 0:
        result.problems.append("wrk completed no requests")
    return result


def wrk_percentiles(stdout):
    """(p50, p99) in ms from wrk --latency's distribution, or (None, None) without a whole one.
    wrk corrects its histogram for coordinated omission by adding samples at multiples of the
    mean interval between responses; when responses come faster than that (pipelined runs),
    some land below the smallest it recorded, where its percentile walk never looks, and it
    prints 0 for the upper percentiles. A distribution that is not rising gives none."""
    found = [to_ms(number, unit) for _rank, number, unit in WRK["percentile"].findall(stdout)]
    if len(found) != 4 or found[0] <= 0 or found != sorted(found):
        return None, None
    return found[0], found[3]


H2LOAD = {
    "req_per_s": re.compile(r"finished in [\d.]+\w*, ([\d.]+) req/s"),
    "requests": re.compile(
        r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
        r"(\d+) failed, (\d+) errored, (\d+) timeout"
    ),
    "statuses": re.compile(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx"),
    "latency": re.compile(r"time for request:\s+\S+\s+\S+\s+" + TIME),
    "protocol": re.compile(r"Application protocol: (\S+)"),
    "tls_version": re.compile(r"^TLS Protocol: (\S+)", re.M),
    "cipher": re.compile(r"^Cipher: (\S+)", re.M),
}
RESUMPTION = re.compile(r"tls-answers resumed (\d+) full (\d+)")


def parse_h2load(stdout, stderr="", returncode=0, protocol=None):
    """Requests are those h2load counts as succeeded. Its status-code line also counts
    responses that land after -D ends, so it can exceed them; it only has to be all 2xx.
    h2load exits 0 even when it cannot connect, so no request at all is a failure too.
    protocol, when given, is the one the connections must have spoken (h2 or h2c)."""
    result = LoadResult()
    found = {key: pattern.search(stdout) for key, pattern in H2LOAD.items()}
    if returncode != 0 or not (found["req_per_s"] and found["requests"] and found["statuses"]):
        result.problems.append(
            f"h2load exited with {returncode}: {last_line(stderr + stdout)}"
            if returncode
            else f"unreadable h2load output: {last_line(stdout)}"
        )
        return result
    _total, _started, _done, succeeded, failed, errored, timed_out = map(int, found["requests"].groups())
    result.requests, result.req_per_s = succeeded, float(found["req_per_s"].group(1))
    if found["latency"] and succeeded:
        result.latency_ms = to_ms(*found["latency"].groups())
    if failed or errored or timed_out:
        result.problems.append(f"h2load: {failed} failed, {errored} errored, {timed_out} timeout")
    statuses = found["statuses"]
    result.statuses = dict(zip(("2xx", "3xx", "4xx", "5xx"), map(int, statuses.groups()), strict=True))
    if any(int(count) for count in statuses.groups()[1:]):
        result.problems.append(f"h2load saw responses other than 2xx: {statuses.group(0)}")
    spoken = found["protocol"]
    if found["tls_version"] and found["cipher"]:
        result.tls = (found["tls_version"].group(1), found["cipher"].group(1), spoken.group(1) if spoken else None)
    if protocol and spoken and spoken.group(1) != protocol:
        result.problems.append(f"h2load spoke {spoken.group(1)}, not {protocol}")
    if succeeded == 0:
        result.problems.append("h2load completed no requests")
    return result


def parse_h2load_log(text):
    """(p50, p99) in milliseconds of the request times in h2load's --log-file (one line per
    request of the main duration: start µs since the epoch, status, µs until the response
    ended; status -1 for a failed stream, left out), or None when it holds no request.
    h2load prints only min, max, mean and sd, so this is where its percentiles come from."""
    times = Counter()
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and fields[1] != "-1" and fields[2].isdigit():
            times[int(fields[2])] += 1
    if not times:
        return None
    return nearest_rank(times, 0.50) / 1e3, nearest_rank(times, 0.99) / 1e3


def nearest_rank(counts, fraction):
    """The nearest-rank percentile of {value: how many times}: the smallest value with at
    least fraction of all the values at or below it."""
    rank = max(1, math.ceil(fraction * sum(counts.values())))
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise ValueError("no values")


def parse_resumption(stdout):
    """(resumed, total) of the GET /tls answers wrk/resumption.lua tallied, or None."""
    tally = RESUMPTION.search(stdout)
    if not tally:
        return None
    resumed, full = map(int, tally.groups())
    return resumed, resumed + full


def parse_callgrind_events(text):
    """{event: count} from a callgrind dump's "summary:" line (or, without one, its
    "totals:" line), named by its "events:" line; {} when it has neither."""
    names, counts = [], None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "events":
            names = value.split()
        elif key == "summary" or (key == "totals" and counts is None):
            counts = [int(count) for count in value.split()]
    if not names or counts is None:
        return {}
    # Callgrind may leave trailing zero counts off a line: the events past its end are not reported.
    return dict(zip(names, counts, strict=False))
