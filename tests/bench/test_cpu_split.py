"""A server's CPU per request split into user and system time: read from /proc/PID/stat's utime
and stime, taken over the measured run (or h2load's main duration), kept per run and as medians,
and shown as "user / sys µs/req" beside CPU µs/req in the comparisons' tables."""

import argparse
import os
import stat
import tempfile
import unittest
from pathlib import Path

import support
from xkbench.commands import arena, compare_db, compare_proxy
from xkbench.loadgen import H2LOAD_OVER, H2LOAD_STARTED, run_measured
from xkbench.servers import process_cpu_seconds, process_cpu_times
from xkbench.stats import summarize_rounds


class ProcessCpuTimesTest(unittest.TestCase):
    def test_utime_and_stime_are_this_processs_user_and_system_time(self):
        user0, system0 = process_cpu_times(os.getpid())
        sum(i * i for i in range(3_000_000))  # user time only, however loaded the machine: a swap shows
        user, system = process_cpu_times(os.getpid())
        times = os.times()
        self.assertAlmostEqual(user, times.user, delta=0.05)
        self.assertAlmostEqual(system, times.system, delta=0.05)
        self.assertGreater(user - user0, 0.1)
        self.assertLess(system - system0, 0.1)
        self.assertAlmostEqual(process_cpu_seconds(os.getpid()), user + system, delta=0.05)


class FakeServer:
    """What run_measured reads of a server: its cores and (user, system) readings in turn."""

    def __init__(self, readings):
        self.cores = set()
        self.readings = iter(readings)

    def cpu_times(self):
        return next(self.readings)


def own_cpus():
    return {min(os.sched_getaffinity(0))}


class RunMeasuredTest(unittest.TestCase):
    def test_a_runs_user_and_system_time_are_kept_apart_and_per_request(self):
        server = FakeServer([(1.0, 2.0), (1.5, 5.0)])
        run = run_measured(["true"], own_cpus(), 5, server)
        self.assertEqual((run.usage["server_user_s"], run.usage["server_system_s"]), (0.5, 3.0))
        self.assertEqual(run.usage["server_cpu_s"], 3.5)
        usage = run.per_request(1000)
        self.assertAlmostEqual(usage["cpu_us_per_request"], 3500)
        self.assertAlmostEqual(usage["user_us_per_request"], 500)
        self.assertAlmostEqual(usage["system_us_per_request"], 3000)

    def test_over_h2loads_main_duration_the_split_is_the_windows(self):
        with tempfile.TemporaryDirectory() as directory:
            h2load = Path(directory) / "h2load"
            h2load.write_text(
                f"#!/bin/sh\necho '{H2LOAD_STARTED} for thread #0.'\necho '{H2LOAD_OVER} for thread #0.'\n"
            )
            h2load.chmod(h2load.stat().st_mode | stat.S_IXUSR)
            # before, window start, window end, after
            server = FakeServer([(0.0, 0.0), (1.0, 1.0), (2.0, 4.0), (9.0, 9.0)])
            run = run_measured([str(h2load), "-t1"], own_cpus(), 5, server)
        self.assertEqual((run.usage["server_user_s"], run.usage["server_system_s"]), (1.0, 3.0))
        self.assertEqual(run.usage["server_cpu_s"], 4.0)


def proxy_run(rate, cpu, user=None):
    """A compare proxy run's record; user µs/req given, the rest of cpu is system time."""
    record = {**support.run(rate, cpu), "softirq_us_per_request": 0.5, "server_busy": 1.0, "client_busy": 0.6}
    if user is not None:
        record |= {"user_us_per_request": user, "system_us_per_request": cpu - user}
    return record


class ProxyReportTest(unittest.TestCase):
    def setUp(self):
        results = {
            "get": {
                "xkit": [proxy_run(50000, 10.0, 2.0), proxy_run(48000, 11.0, 2.5), proxy_run(52000, 9.0, 1.5)],
                "nginx": [proxy_run(30000, 20.0, 6.0)],
                "h2o": [proxy_run(30000, 18.0)],  # a run recorded before the split
            }
        }
        args = argparse.Namespace(idle_connections=0)
        self.markdown, self.summary = compare_proxy.render(results, {}, args, "A machine.")
        self.table = support_table(self.markdown, "### HTTP/1.1 front, GET proxied")

    def test_the_table_has_user_and_sys_beside_cpu_per_request(self):
        self.assertIn("| CPU µs/req (median) | user / sys µs/req | runs |", self.table[0])
        self.assertTrue(self.table[2].startswith("| xkit | 50,000 | "), self.table[2])
        self.assertIn(" | 10.00 | 2.00 / 8.00 | 3/3 ok |", self.table[2])
        self.assertIn(" | 20.00 | 6.00 / 14.00 | 1/1 ok |", self.table[3])
        self.assertIn(" | 18.00 | – | 1/1 ok |", self.table[4])

    def test_the_medians_are_in_the_summary_beside_the_total(self):
        xkit = self.summary["get"]["xkit"]
        self.assertEqual(xkit["cpu_us_per_request"]["median"], 10.0)
        self.assertEqual(xkit["user_us_per_request"], {"median": 2.0, "min": 1.5, "max": 2.5})
        self.assertEqual(xkit["system_us_per_request"]["median"], 8.0)
        self.assertIsNone(self.summary["get"]["h2o"]["system_us_per_request"])

    def test_the_report_says_what_the_split_is(self):
        self.assertIn("**user / sys µs/req** splits it", self.markdown)
        self.assertIn("receiver's TCP path", self.markdown)


class DbAndArenaTablesTest(unittest.TestCase):
    def test_compare_dbs_table_has_the_servers_user_and_sys(self):
        results = {"row": {"xkit": [{**proxy_run(20000, 30.0, 12.0), "pg_cpu_us_per_request": 40.0}]}}
        summary = summarize_rounds(results, lambda case: compare_db.KEYS)
        table = compare_db.case_table("row", results["row"], summary)
        self.assertIn("| server CPU µs/req | server user / sys µs/req | PostgreSQL CPU µs/req |", table[2])
        self.assertIn("| 30.0 | 12.0 / 18.0 | 40.0 |", table[4])

    def test_the_arenas_table_has_each_servers_sys_per_request(self):
        results = {"baseline": {"xkit": [proxy_run(90000, 5.0, 1.0)], "go": [proxy_run(60000, 12.0, 4.0)]}}
        summary = summarize_rounds(results, lambda profile: arena.KEYS)
        header, _rule, row = arena.throughput_lines(results, summary, argparse.Namespace(scale=1))
        self.assertIn("| CPU xKit ÷ best peer | xKit sys µs/req | Go sys µs/req | h2o sys µs/req |", header)
        self.assertIn("| 4.00 | 8.00 | – | – |", row)


def support_table(markdown, heading):
    """The markdown table that follows a heading."""
    lines = markdown.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


if __name__ == "__main__":
    unittest.main()
