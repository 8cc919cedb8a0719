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
        for argv in (
            ["suite", "--full", "--only", "h2c", "--peers", "go,nginx,h2o"],
            ["compare", "http1", "--cases", "ping"],
            ["compare", "h2c", "--servers", "xkit"],
            ["compare", "https", "--runs", "1"],
            ["compare", "websocket", "--cases", "hello"],
            ["compare", "db", "--cases", "row,pipelining", "--servers", "xkit"],
            ["compare", "proxy", "--servers", "xkit,floor", "--cases", "get,idle"],
            ["ciphers", "--certs", "rsa"],
            ["instructions", "--cases", "h2c"],
            ["compress", "--cases", "gzip,br"],
            ["arena", "--cases", "baseline,unary-grpc", "--scale", "32"],
            ["static", "--cases", "h2c-6k", "--servers", "xkit"],
            ["soak", "--minutes", "5"],
        ):
            with self.subTest(argv):
                args = parser.parse_args(argv)
                self.assertTrue(callable(args.run))
                self.assertEqual(args.out_dir.name, "results")

    def test_the_tables_name_every_subcommand(self):
        self.assertEqual(
            list(COMMANDS), ["suite", "compare", "ciphers", "instructions", "compress", "arena", "static", "soak"]
        )
        self.assertEqual(list(COMPARISONS), ["http1", "h2c", "https", "websocket", "db", "proxy", "h3"])

    def test_instructions_takes_requests_runs_cases_builds_and_test_routes(self):
        args = build_parser().parse_args(["instructions"])
        self.assertEqual((args.requests, args.runs, args.cases), (20000, 3, ["http1", "h2c", "https1", "https2"]))
        self.assertEqual((args.build_dir.name, args.compare_build, args.test_routes), ("build", None, False))
        self.assertFalse(hasattr(args, "duration"))
        args = build_parser().parse_args(
            [
                "instructions",
                "--requests",
                "2000",
                "--runs",
                "1",
                "--cases",
                "https2,http1",
                "--compare-build",
                "build-main",
                "--test-routes",
                "--build-dir",
                "b",
                "--out-dir",
                "/tmp/x",
            ]
        )
        self.assertEqual((args.requests, args.runs, args.cases), (2000, 1, ["http1", "https2"]))
        self.assertEqual(
            (str(args.compare_build), str(args.build_dir), str(args.out_dir)), ("build-main", "b", "/tmp/x")
        )
        self.assertTrue(args.test_routes)

    def test_soak_runs_an_hour_by_default_and_judges_flatness_after_the_warm_up(self):
        from xkbench.commands import soak

        args = build_parser().parse_args(["soak"])
        self.assertEqual((args.minutes, args.round, args.sample), (60.0, 20, 5.0))
        self.assertEqual(build_parser().parse_args(["soak", "--minutes", "5"]).minutes, 5.0)
        samples = [
            {"t": t, "rss_kib": 100000 + (t if t < 60 else 0), "fds": 12, "idle": t % 20 == 0} for t in range(0, 300, 5)
        ]
        flat = soak.flatness(samples, 60)
        self.assertTrue(flat["rss_flat"] and flat["fds_flat"], flat)
        growing = [dict(s, rss_kib=s["rss_kib"] + 100 * s["t"], fds=12 + s["t"] // 100) for s in samples]
        flat = soak.flatness(growing, 60)
        self.assertFalse(flat["rss_flat"] or flat["fds_flat"], flat)

    def test_comparisons_pin_the_server_to_cpu_1_and_the_load_to_cpu_0(self):
        for argv in (["compare", "http1"], ["compress"], ["arena"]):
            args = build_parser().parse_args(argv)
            self.assertEqual((args.server_cpus, args.client_cpus), ({1}, {0}))

    def test_compress_reports_xkit_over_the_library_alone_from_medians(self):
        from xkbench.commands import compress

        args = build_parser().parse_args(["compress"])
        self.assertEqual(args.cases, ["gzip", "br", "identity"])
        server = [
            {
                "ok": True,
                "req_per_s": 9000.0,
                "cpu_us_per_request": us,
                "server_busy": 1.0,
                "client_busy": 0.2,
                "others_busy": 0.0,
            }
            for us in (110.0, 105.0, 130.0)
        ]
        library = [
            {"ok": True, "line": "gzip level 6: 100 ops, 100.00 us/op, 8126 -> 1281 bytes", "cpu_us_per_request": us}
            for us in (100.0, 90.0, 120.0)
        ]
        markdown, _summary = compress.render({"gzip": {"xkit": server, "library": library}}, {}, args, "m")
        self.assertIn("| gzip | 9,000 | 110.00 | 100.00 | 1.10× | xkit 3/3 ok / library 3/3 ok |", markdown)

    def test_arena_scales_the_arenas_connections_and_reports_xkit_over_go(self):
        from xkbench.commands import arena

        args = build_parser().parse_args(["arena", "--cases", "async,baseline-h2"])
        self.assertEqual(args.cases, ["async", "baseline-h2"])
        self.assertEqual([arena.connections(arena.PROFILES[name], args) for name in args.cases], [500, 16])
        self.assertEqual(
            arena.connections(arena.PROFILES["baseline"], build_parser().parse_args(["arena", "--scale", "4096"])),
            arena.MIN_CONNECTIONS,
        )
        argv = arena.load_argv(arena.PROFILES["unary-grpc-tls"], {"tls-h2": 8443}, 5, args, {"{grpc_body}": "/tmp/req"})
        self.assertEqual(
            argv,
            [
                "h2load",
                "-t1",
                "-c16",
                "-m100",
                "-D",
                "5",
                "--npn-list=h2",
                "-d",
                "/tmp/req",
                "-H",
                "content-type: application/grpc",
                "-H",
                "te: trailers",
                "https://127.0.0.1:8443/benchmark.BenchmarkService/GetSum",
            ],
        )

        def runs(rate, us):
            return [
                {
                    "ok": True,
                    "req_per_s": rate,
                    "cpu_us_per_request": us,
                    "system_us_per_request": us * 0.75,
                    "server_busy": 1.0,
                    "client_busy": 1.0,
                    "others_busy": 0.1,
                }
            ] * 3

        markdown, _summary, _stacks = arena.render(
            {"async": {"xkit": runs(30000.0, 10.0), "go": runs(15000.0, 40.0)}}, {}, args, "m"
        )
        self.assertIn(
            "| async | 500 | 30,000 | 15,000 | – | – | 2.00× Go | 10.00 | 40.00 | – | – | 0.25× Go "
            "| 7.50 | 30.00 | – | – | xKit 3/3 ok / Go 3/3 ok |",
            markdown,
        )


class WebSocketLoadTest(unittest.TestCase):
    """compare websocket reads ws_load's last line; a run with a wrong echo is a failed run."""

    def test_messages_and_rate_are_read_and_errors_fail_the_run(self):
        from xkbench.commands.compare_websocket import parse
        from xkbench.loadgen import Run
        from xkbench.servers import RunFailed

        self.assertEqual(parse(Run("messages=1200 seconds=2.000 rate=600 errors=0\n", 0, False)), (1200, 600.0))
        for run in (
            Run("messages=10 seconds=1.000 rate=10 errors=1\n", 1, False),
            Run("connection 3: echo 0 differs\n", 1, False),
            Run("messages=10 seconds=1.000 rate=10 errors=0\n", 0, True),
        ):
            with self.subTest(run.output), self.assertRaises(RunFailed):
                parse(run)


class WebSocketFloorTest(unittest.TestCase):
    """compare websocket measures xKit on each backend beside the floor of that backend (the
    baselines with --websocket) and reports each ratio against the 1.15× bound."""

    def test_the_baselines_serve_websocket_with_their_flag_probed_by_a_connection(self):
        from xkbench.peers import PeerContext, find_peers

        with tempfile.TemporaryDirectory() as tmp:
            build = Path(tmp)
            (build / "bench").mkdir()
            for name in ("baseline_responder", "baseline_uring"):
                (build / "bench" / name).touch(mode=0o755)
            context = PeerContext(build_dir=build, workers=1)
            peers, skipped = find_peers(["baseline", "baseline_uring"], "websocket", context)
            self.assertEqual(skipped, {})
            for name, binary in (("baseline", "baseline_responder"), ("baseline_uring", "baseline_uring")):
                argv = peers[name].command(23000, build)
                self.assertEqual(argv, [str(build / "bench" / binary), "23000", "--websocket"])
                self.assertFalse(peers[name].http1_probe)
            http = find_peers(["baseline"], "http1", context)[0]["baseline"]
            self.assertEqual(http.command(23000, build), [str(build / "bench" / "baseline_responder"), "23000"])
            self.assertTrue(http.http1_probe)
            self.assertIn("baseline", find_peers(["baseline"], "h2c", context)[1])

    def test_each_xkit_is_divided_by_the_floor_of_its_backend(self):
        from xkbench.commands.compare_websocket import SERVERS, render

        self.assertEqual(SERVERS, ("xkit", "xkit_epoll", "baseline", "baseline_uring", "go"))

        def runs(cpu):
            return [
                {
                    "ok": True,
                    "req_per_s": 1000.0,
                    "cpu_us_per_request": cpu,
                    "softirq_us_per_request": 0.0,
                    "server_busy": 0.5,
                    "client_busy": 0.5,
                    "others_busy": 0.0,
                }
            ]

        cpu = {"xkit": 2.2, "xkit_epoll": 2.4, "baseline": 2.0, "baseline_uring": 2.0, "go": 4.0}
        results = {case: {name: runs(value) for name, value in cpu.items()} for case in ("hello", "reupgrade")}
        markdown, _summary = render(results, {}, "machine")
        self.assertIn("| Case | xkit ÷ baseline_uring | xkit_epoll ÷ baseline | xkit ÷ go |", markdown)
        self.assertIn(
            "| hello | 1.10× (target ≤ 1.15×: met) | 1.20× (target ≤ 1.15×: not met) "
            "| 0.55× (target ≤ 0.33×: not met) |",
            markdown,
        )
        # A re-upgrade pays a handshake the floor barely does: its ratio has no bound.
        self.assertIn("| reupgrade | 1.10× | 1.20× | 0.55× (target ≤ 0.50×: not met) |", markdown)


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
