"""An application's own metrics and the request duration histograms on the real
bench server (--user-metrics, --request-durations) with two workers: /metrics
parsed as a scraper would (every sample under a HELP and a TYPE, histograms
with cumulative buckets whose +Inf is their _count), counters, gauges and
histograms updated on both workers and summed, a counter updated from timers
after the responses; durations by route pattern and status class, never by raw
path; and the access log's microsecond durations and the handler's own fields,
escaped so that no client can forge one."""

import json
import math
import os
import re
import shutil
import tempfile
import time
import unittest
import urllib.parse

from support.h2client import H2Conn
from support.harness import Conn, start_server
from test_observe import CLF_ESCAPED, CLF_TIME, JSON_KEYS, clf_unescape, wait_for_lines

# name{labels} value, labels optional; values as Prometheus writes them.
SAMPLE_RE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_]*)(?:\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
VALUE_BUCKETS = (1, 5, 10, 50)  # bench_metrics.c's bench_value
DURATION = "xkit_request_duration_seconds"


def parse_labels(text):
    labels, at = {}, 0
    while at < len(text):
        m = LABEL_RE.match(text, at)
        assert m, f"bad labels at {text[at:]!r}"
        value = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        assert m.group(1) not in labels, f"label {m.group(1)} twice in {text!r}"
        labels[m.group(1)] = value
        at = m.end()
    return labels


def parse_exposition(text):
    """{family: {"type", "help", "samples": [(sample name, labels, value)]}}, checked:
    each family described once by HELP then TYPE before its samples, each sample
    under the family it names (a histogram's _bucket, _sum and _count), no sample
    twice."""
    families, seen, current = {}, set(), None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in families, f"{name} described twice"
            families[name] = current = {"help": help_text, "type": None, "samples": []}
            current["name"] = name
            continue
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert current and current["name"] == name and current["type"] is None, line
            assert kind in ("counter", "gauge", "histogram"), line
            current["type"] = kind
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), parse_labels(m.group(2) or ""), float(m.group(3))
        family = name
        if current and current["type"] == "histogram" and name.endswith(HISTOGRAM_SUFFIXES):
            family = name[: name.rindex("_")]
        assert current and current["name"] == family and current["type"], f"{line!r} is under no TYPE"
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, f"{line!r} twice"
        seen.add(key)
        current["samples"].append((name, labels, value))
    return families


def scrape(port):
    with Conn(port) as conn:
        conn.request("GET", "/metrics")
        resp = conn.read_response()
    assert resp.status == 200, resp
    assert resp.header("Content-Type").startswith("text/plain; version=0.0.4"), resp.headers
    return parse_exposition(resp.body.decode())


def value(families, name, **labels):
    """The one sample name{labels} (a histogram's _sum or _count too), or None."""
    family = families.get(name) or families[name[: name.rindex("_")]]
    found = [v for n, lab, v in family["samples"] if n == name and lab == labels]
    assert len(found) <= 1, found
    return found[0] if found else None


def histogram(families, name, **labels):
    """A histogram series as ([(le, cumulative count)...], sum, count), checked:
    its buckets rise with le and never fall, and +Inf is its count."""
    buckets = [
        (float(lab["le"]), v)
        for n, lab, v in families[name]["samples"]
        if n == name + "_bucket" and {k: x for k, x in lab.items() if k != "le"} == labels
    ]
    count, total = value(families, name + "_count", **labels), value(families, name + "_sum", **labels)
    if not buckets:
        assert count is None and total is None, (name, labels)
        return None
    bounds = [le for le, _ in buckets]
    counts = [c for _, c in buckets]
    assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds) and bounds[-1] == math.inf, buckets
    assert counts == sorted(counts), f"{name}{labels}: buckets fall: {buckets}"
    assert counts[-1] == count, f"{name}{labels}: +Inf {counts[-1]} is not _count {count}"
    return buckets, total, count


class UserMetricsTest(unittest.TestCase):
    def setUp(self):
        self.server = start_server(
            self, ["--workers", "2", "--metrics", "--user-metrics", "--request-durations", "--test-routes"]
        )

    def get(self, target, h2=False):
        """One request on a new connection (so SO_REUSEPORT spreads them over the
        workers): (status, the worker that served it)."""
        if h2:
            with H2Conn(self.server.port) as conn:
                resp = conn.fetch("GET", target)
        else:
            with Conn(self.server.port) as conn:
                conn.request("GET", target)
                resp = conn.read_response()
        m = re.match(rb"^worker=(\d+)\n$", resp.body)
        return resp.status, int(m.group(1)) if m else None

    def on_both_workers(self, targets):
        """Requests each of targets in turn, round after round, until both workers
        have served one; returns what each served [(target, worker)]."""
        served = []
        for i in range(400):
            target = targets[i % len(targets)]
            status, worker = self.get(target, h2=i % 3 == 2)
            self.assertEqual(status, 200, target)
            served.append((target, worker))
            if i + 1 >= len(targets) and {w for _, w in served} == {0, 1}:
                return served
        self.fail(f"400 connections never reached both workers: {served[:10]}")

    def test_counters_gauges_and_histograms_sum_over_both_workers(self):
        values = [0.5, 1, 3, 7.25, 20, 60, -2]
        targets = []
        for i, v in enumerate(values):
            targets.append(f"/observe?kind={'ab'[i % 2]}&value={v}&set={i + 1}")
        served = self.on_both_workers(targets)
        families = scrape(self.server.port)

        for name, kind in [
            ("bench_requests_total", "counter"),
            ("bench_value", "histogram"),
            ("bench_level", "gauge"),
            ("bench_setting", "gauge"),
            ("bench_ticks_total", "counter"),
        ]:
            self.assertEqual(families[name]["type"], kind, name)
            self.assertTrue(families[name]["help"], name)
        sent = {"a": [], "b": []}
        last_set = {}
        for target, worker in served:
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
            sent[q["kind"][0]].append(float(q["value"][0]))
            last_set[worker] = float(q["set"][0])
        for kind, observed in sent.items():
            self.assertEqual(value(families, "bench_requests_total", kind=kind), len(observed), kind)
            buckets, total, count = histogram(families, "bench_value", kind=kind)
            self.assertEqual(count, len(observed))
            self.assertAlmostEqual(total, sum(observed))
            want = [(float(b), sum(1 for v in observed if v <= b)) for b in VALUE_BUCKETS]
            self.assertEqual(buckets, [*want, (math.inf, len(observed))], kind)
        # Each worker adds to its own part of a gauge, or sets it: /metrics sums them.
        self.assertAlmostEqual(value(families, "bench_level"), sum(sent["a"]) + sum(sent["b"]))
        self.assertEqual(value(families, "bench_setting"), sum(last_set.values()))
        self.assertEqual(value(families, "bench_ticks_total"), 0)
        self.server.stop_and_check()

    def test_timers_on_the_workers_count_after_the_responses(self):
        served = self.on_both_workers(["/observe/tick?n=5&ms=2", "/observe/tick?n=3&ms=0"])
        want = sum(5 if "n=5" in t else 3 for t, _ in served)
        deadline = time.monotonic() + 10
        while value(scrape(self.server.port), "bench_ticks_total") != want:
            self.assertLess(time.monotonic(), deadline, f"ticks never reached {want}")
            time.sleep(0.05)
        self.server.stop_and_check()

    def test_durations_by_route_pattern_and_status_class(self):
        port = self.server.port
        with Conn(port) as conn:
            for target in ["/ping", "/ping", "/text?size=3&status=503", "/nowhere/1", "/nowhere/2", "/delay?ms=30"]:
                conn.request("GET", target)
                conn.read_response()
            conn.request("HEAD", "/ping")
            conn.read_response(head_only=True)
            conn.request("POST", "/ping", body=b"")
            self.assertEqual(conn.read_response().status, 405)
        with H2Conn(port) as conn:
            self.assertEqual(conn.fetch("GET", "/ping").status, 200)
        families = scrape(port)
        self.assertEqual(families[DURATION]["type"], "histogram")
        routes = {lab["route"] for _, lab, _ in families[DURATION]["samples"]}
        self.assertEqual(routes, {"GET /ping", "GET /text", "GET /delay", "unmatched"})
        # HEAD is the GET route's; a route's label is its pattern, never a path.
        self.assertEqual(histogram(families, DURATION, route="GET /ping", status="2xx")[2], 4)
        self.assertEqual(histogram(families, DURATION, route="GET /text", status="5xx")[2], 1)
        self.assertIsNone(histogram(families, DURATION, route="GET /text", status="2xx"))
        self.assertEqual(histogram(families, DURATION, route="unmatched", status="4xx")[2], 3)
        buckets, total, count = histogram(families, DURATION, route="GET /delay", status="2xx")
        self.assertEqual(count, 1)
        self.assertGreaterEqual(total, 0.030)
        self.assertEqual(dict(buckets)[0.025], 0)
        self.assertEqual([le for le, _ in buckets][:4], [0.0001, 0.00025, 0.0005, 0.001])
        # The scrape is counted once it has ended, under its own route.
        later = scrape(port)
        self.assertEqual(histogram(later, DURATION, route="GET /metrics", status="2xx")[2], 1)
        self.server.stop_and_check()


class LogFieldsAndMicrosecondsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="xk-metrics-user-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.log = os.path.join(self.dir, "access.log")

    def start(self, fmt):
        self.server = start_server(
            self,
            ["--access-log", self.log, "--log-format", fmt, "--workers", "1", "--user-metrics", "--test-routes"],
        )

    def requests(self, targets):
        with Conn(self.server.port) as conn:
            for target in targets:
                conn.request("GET", target)
                self.assertEqual(conn.read_response().status, 200, target)
        lines = wait_for_lines(self.log, len(targets))
        self.assertEqual(len(lines), len(targets), lines)
        return lines

    HOSTILE = 'x" status="500\n1.2.3.4 - - \\ é'

    def test_json_lines_carry_microseconds_and_the_handlers_fields(self):
        self.start("json")
        user = urllib.parse.quote(self.HOSTILE)
        lines = self.requests([*["/ping"] * 8, "/delay?ms=30", f"/observe?kind=b&value=1&user={user}"])
        recs = [json.loads(line.encode("latin-1").decode()) for line in lines]
        for rec in recs:
            self.assertEqual(rec["duration_ms"], rec["duration_us"] // 1000)
        # Microseconds, not milliseconds times 1000: eight fast requests cannot all be whole ms.
        self.assertTrue(any(r["duration_us"] % 1000 for r in recs[:8]), [r["duration_us"] for r in recs])
        self.assertGreaterEqual(recs[8]["duration_us"], 30000)
        self.assertEqual(list(recs[0]), JSON_KEYS)
        self.assertEqual(list(recs[9]), [*JSON_KEYS, "kind", "user"])
        self.assertEqual((recs[9]["kind"], recs[9]["user"], recs[9]["status"]), ("b", self.HOSTILE, 200))
        self.server.stop_and_check()

    def test_common_and_combined_lines_end_with_the_fields_escaped(self):
        for fmt in ("common", "combined"):
            with self.subTest(fmt=fmt):
                self.start(fmt)
                user = urllib.parse.quote(self.HOSTILE)
                lines = self.requests(["/ping", f"/observe?kind=a&value=1&user={user}"])
                tail = rf' "({CLF_ESCAPED})" "({CLF_ESCAPED})"' if fmt == "combined" else ""
                line_re = re.compile(
                    rf'^(\S+) - - {CLF_TIME} "({CLF_ESCAPED})" (\d{{3}}) (\d+){tail}'
                    rf'(?: kind="({CLF_ESCAPED})" user="({CLF_ESCAPED})")?$'
                )
                plain, fields = (line_re.match(line) for line in lines)
                self.assertIsNotNone(plain, lines[0])
                self.assertIsNone(plain.group(plain.re.groups - 1))
                self.assertIsNotNone(fields, lines[1])
                self.assertEqual(fields.group(4), "200")
                self.assertEqual(fields.group(fields.re.groups - 1), "a")
                self.assertEqual(clf_unescape(fields.group(fields.re.groups)), self.HOSTILE.encode())
                self.server.stop_and_check()
                os.unlink(self.log)


if __name__ == "__main__":
    unittest.main()
