"""instructions: a callgrind dump's summary (or totals) read, the dump callgrind_control -d
made found, Ir per request and its median, the report's after ÷ before."""

import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.commands.instructions import dumped_ir, h2load_requests_argv, per_request, render, summarize
from xkbench.parsing import parse_callgrind_events
from xkbench.servers import RunFailed

DUMP = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 16406
cmd:  build/bench/http_bench_server 24900 --workers 1
part: 1

desc: I1 cache:
desc: Timerange: Basic block 2360000 - 2980000
desc: Trigger: Program termination

positions: line
events: Ir
summary: 6037810

ob=(1) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(1) ???
fn=(1) epoll_wait
0 42

totals: 6045175
"""


class CallgrindDumpTest(unittest.TestCase):
    def test_the_summary_line_gives_ir(self):
        self.assertEqual(parse_callgrind_events(DUMP), {"Ir": 6037810})

    def test_without_a_summary_the_totals_line_does(self):
        text = DUMP.replace("summary: 6037810\n", "")
        self.assertEqual(parse_callgrind_events(text), {"Ir": 6045175})

    def test_several_events_are_named_by_the_events_line(self):
        text = DUMP.replace("events: Ir", "events: Ir Dr Dw").replace("summary: 6037810", "summary: 600 200 100")
        self.assertEqual(parse_callgrind_events(text), {"Ir": 600, "Dr": 200, "Dw": 100})

    def test_a_dump_without_events_or_counts_gives_nothing(self):
        self.assertEqual(parse_callgrind_events("events: Ir\n"), {})
        self.assertEqual(parse_callgrind_events("summary: 5\n"), {})

    def test_the_last_numbered_dump_is_read_not_the_one_written_at_exit(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "callgrind.out.77").write_text(DUMP.replace("6037810", "1"))
            (folder / "callgrind.out.77.2").write_text(DUMP)
            (folder / "callgrind.out.77.10").write_text(DUMP.replace("6037810", "9000"))
            (folder / "callgrind.out.78.11").write_text(DUMP.replace("6037810", "5"))
            self.assertEqual(dumped_ir(folder, 77), 9000)

    def test_no_dump_or_no_ir_fails_the_run(self):
        with tempfile.TemporaryDirectory() as tmp:
            with self.assertRaises(RunFailed):
                dumped_ir(tmp, 77)
            (Path(tmp) / "callgrind.out.77.1").write_text("events: Dr\nsummary: 3\n")
            with self.assertRaises(RunFailed):
                dumped_ir(tmp, 77)


def run(ir, requests=2000, ok=True):
    if not ok:
        return {"ok": False, "error": "callgrind wrote no dump"}
    return {"ok": True, "requests": requests, "ir": ir, "ir_per_request": per_request(ir, requests)}


class PerRequestTest(unittest.TestCase):
    def test_ir_is_divided_by_the_requests_that_succeeded(self):
        self.assertEqual(per_request(6037810, 2000), 3018.905)
        self.assertIsNone(per_request(100, 0))

    def test_the_median_of_the_runs_that_succeeded(self):
        results = {"http1": {"build": [run(6_000_000), run(6_200_000), run(0, ok=False), run(6_100_000)]}}
        stats = summarize(results)["http1"]["build"]
        self.assertEqual(stats, {"median": 3050.0, "min": 3000.0, "max": 3100.0})

    def test_h2load_asks_a_fixed_number_of_requests_in_the_cases_protocol(self):
        self.assertEqual(
            h2load_requests_argv("http1", 24000, 500),
            ["h2load", "-t1", "-c10", "-n", "500", "--h1", "http://127.0.0.1:24000/ping"],
        )
        self.assertEqual(h2load_requests_argv("https2", 24001, 20000)[-2:], ["-m10", "https://127.0.0.1:24001/ping"])


class ReportTest(unittest.TestCase):
    def test_the_table_shows_medians_every_run_and_after_over_before(self):
        class Args:
            compare_build = Path("build-main")

        results = {
            "h2c": {
                "build": [run(22_000_000), run(23_000_000), run(24_000_000)],
                "compare": [run(20_000_000), run(20_000_000), run(0, ok=False)],
            }
        }
        markdown, summary = render(results, {}, Args, "machine")
        self.assertEqual(summary["h2c"]["compare"]["median"], 10000.0)
        self.assertIn("| h2c | 11,500 | 11,000, 11,500, 12,000 | 10,000 | 10,000, 10,000, failed | 1.1500 |", markdown)
        self.assertIn("- compare h2c run 3: failed — callgrind wrote no dump", markdown)


if __name__ == "__main__":
    unittest.main()
