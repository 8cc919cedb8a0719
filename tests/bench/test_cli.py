"""The command line: one table of subcommands, each with its options; a report folder that
cannot be written stops a run with a message before any measuring, not a stack trace after it."""

import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench import results
from xkbench.cli import COMMANDS, build_parser
from xkbench.commands.compare import COMPARISONS
from xkbench.prepare import SetupFailed
from xkbench.results import check_writable


class SubcommandTableTest(unittest.TestCase):
    def test_every_subcommand_and_comparison_parses_its_options(self):
        parser = build_parser()
        for argv in (["suite", "--full", "--only", "h2c", "--peers", "go,nginx,h2o"],
                     ["compare", "http1", "--cases", "ping"], ["compare", "h2c", "--servers", "xkit"],
                     ["compare", "https", "--runs", "1"], ["ciphers", "--certs", "rsa"],
                     ["instructions", "--cases", "h2c"], ["static", "--cases", "h2c-6k", "--servers", "xkit"]):
            with self.subTest(argv):
                args = parser.parse_args(argv)
                self.assertTrue(callable(args.run))
                self.assertEqual(args.out_dir.name, "results")

    def test_the_tables_name_every_subcommand(self):
        self.assertEqual(list(COMMANDS), ["suite", "compare", "ciphers", "instructions", "static"])
        self.assertEqual(list(COMPARISONS), ["http1", "h2c", "https"])

    def test_instructions_takes_requests_runs_cases_builds_and_test_routes(self):
        args = build_parser().parse_args(["instructions"])
        self.assertEqual((args.requests, args.runs, args.cases), (20000, 3, ["http1", "h2c", "https1", "https2"]))
        self.assertEqual((args.build_dir.name, args.compare_build, args.test_routes), ("build", None, False))
        self.assertFalse(hasattr(args, "duration"))
        args = build_parser().parse_args(["instructions", "--requests", "2000", "--runs", "1", "--cases",
                                          "https2,http1", "--compare-build", "build-main", "--test-routes",
                                          "--build-dir", "b", "--out-dir", "/tmp/x"])
        self.assertEqual((args.requests, args.runs, args.cases), (2000, 1, ["http1", "https2"]))
        self.assertEqual((str(args.compare_build), str(args.build_dir), str(args.out_dir)), ("build-main", "b", "/tmp/x"))
        self.assertTrue(args.test_routes)

    def test_comparisons_pin_the_server_to_cpu_1_and_the_load_to_cpu_0(self):
        args = build_parser().parse_args(["compare", "http1"])
        self.assertEqual((args.server_cpus, args.client_cpus), ({1}, {0}))


class ReportNamesTest(unittest.TestCase):
    def test_a_days_second_report_is_numbered(self):
        with tempfile.TemporaryDirectory() as tmp:
            first = results.write(tmp, "compare/h2c", "# one\n", {"n": 1}, date="2026-11-23")
            second = results.write(tmp, "compare/h2c", "# two\n", {"n": 2}, date="2026-11-23")
            self.assertEqual(first[0], "2026-11-23")
            self.assertEqual(second[0], "2026-11-23-2")
            self.assertEqual(second[1], Path(tmp) / "compare" / "h2c" / "2026-11-23-2.md")
            self.assertEqual(second[2].read_text(), '{\n "n": 2\n}\n')


class ReportFolderTest(unittest.TestCase):
    def test_a_folder_that_can_be_made_is_made(self):
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = Path(tmp) / "results" / "here"
            check_writable(out_dir)
            self.assertTrue(out_dir.is_dir())
            self.assertEqual(list(out_dir.iterdir()), [])  # the probe file is gone

    def test_a_folder_under_a_file_is_refused_with_its_reason(self):
        with tempfile.NamedTemporaryFile() as file:
            with self.assertRaises(SetupFailed) as refused:
                check_writable(Path(file.name) / "results")
            self.assertIn("cannot write the report to", str(refused.exception))
            self.assertIn("Not a directory", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
