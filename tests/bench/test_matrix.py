"""The suite's matrices and the command lines they turn into: quick and full points, case
paths, wrk scripts for POST and pipelining, h2load's streams, warm-up and ALPN."""

import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench import matrix
from xkbench.loadgen import LATENCY_RUN_SECONDS, POST_SCRIPT, Client, describe, load_argv, logged_h2load_argv

ALL = list(matrix.PROTOCOLS)


def client():
    return Client({0}, 1, {1024: Path("/tmp/body-1024"), 65536: Path("/tmp/body-65536")})


def case(protocol, kind, connections=100, size=0):
    return matrix.Case(matrix.PROTOCOLS[protocol], kind, connections, size)


class MatrixTest(unittest.TestCase):
    def test_full_suite_has_the_reports_matrices(self):
        sections = matrix.build_sections(ALL, matrix.KINDS, matrix.FULL)
        self.assertEqual([s.id for s in sections][:3], ["http1-ping", "http1-echo", "http1-post"])
        self.assertEqual(len(sections), 4 * 3 + 1)  # pipelined: GET /ping only
        by_id = {s.id: s for s in sections}
        self.assertEqual([c.connections for c in by_id["h2c-ping"].cases], [50, 100, 200, 500])
        self.assertEqual([c.size for c in by_id["https1-echo"].cases], [64, 256, 1024, 4096])
        self.assertEqual([c.size for c in by_id["https2-post"].cases], [1024, 4096, 16384, 65536])

    def test_quick_suite_has_fewer_points(self):
        sections = matrix.build_sections(ALL, matrix.KINDS, matrix.QUICK)
        self.assertEqual(sum(len(s.cases) for s in sections), 4 * 6 + 1)

    def test_selection_by_protocol_and_kind(self):
        sections = matrix.build_sections(["h2c", "pipeline"], ["post"], matrix.QUICK)
        self.assertEqual([s.id for s in sections], ["h2c-post"])

    def test_cases_name_their_request(self):
        self.assertEqual(case("http1", "ping", 500).path, "/ping")
        self.assertEqual(case("http1", "echo", size=4096).path, "/echo?size=4096")
        post = case("https2", "post", size=65536)
        self.assertEqual(
            (post.method, post.path, post.id, post.x_label), ("POST", "/echo", "https2.post.64KiB", "64 KiB")
        )
        self.assertEqual(case("h2c", "echo", size=64).x_label, "64 B")


class CommandTest(unittest.TestCase):
    def test_wrk_get_over_tls(self):
        self.assertEqual(
            load_argv(case("https1", "echo", size=256), 9000, 2, 1, client()),
            ["wrk", "-t1", "-c100", "-d2s", "--latency", "https://127.0.0.1:9000/echo?size=256"],
        )

    def test_wrk_post_sends_the_body_file_through_post_lua(self):
        argv = load_argv(case("http1", "post", size=1024), 9000, 2, 1, client())
        self.assertEqual(
            argv,
            [
                "wrk",
                "-t1",
                "-c100",
                "-d2s",
                "--latency",
                "-s",
                str(POST_SCRIPT),
                "http://127.0.0.1:9000/echo",
                "--",
                "/tmp/body-1024",
            ],
        )
        self.assertTrue(POST_SCRIPT.is_file())

    def test_wrk_pipelined_uses_pipeline_lua(self):
        argv = load_argv(case("pipeline", "ping", 100), 9000, 2, 1, client())
        self.assertEqual(argv[5:7], ["-s", str(POST_SCRIPT.with_name("pipeline.lua"))])

    def test_h2load_streams_warm_up_and_h2_only_over_tls(self):
        argv = load_argv(case("https2", "post", size=65536), 9000, 2, 1, client())
        self.assertEqual(
            argv,
            [
                "h2load",
                "-t1",
                "-c100",
                "-m10",
                "-D",
                "2",
                "--warm-up-time=1",
                "--npn-list=h2",
                "-d",
                "/tmp/body-65536",
                "https://127.0.0.1:9000/echo",
            ],
        )
        self.assertEqual(
            load_argv(case("h2c", "ping", 50), 9000, 2, 0, client()),
            ["h2load", "-t1", "-c50", "-m10", "-D", "2", "http://127.0.0.1:9000/ping"],
        )

    def test_the_logged_h2load_run_for_percentiles_is_the_same_load_shorter_with_its_log(self):
        argv = load_argv(case("https2", "ping", 100), 9000, 2, 1, client())
        self.assertEqual(
            logged_h2load_argv(argv, "/tmp/requests.log"),
            [
                "h2load",
                "-t1",
                "-c100",
                "-m10",
                "-D",
                str(LATENCY_RUN_SECONDS),
                "--warm-up-time=1",
                "--npn-list=h2",
                "--log-file=/tmp/requests.log",
                "https://127.0.0.1:9000/ping",
            ],
        )

    def test_the_report_shows_commands_with_placeholders(self):
        sections = {s.id: s for s in matrix.build_sections(ALL, matrix.KINDS, matrix.QUICK)}
        self.assertEqual(
            describe(sections["http1-ping"], 2, 1, client()), "wrk -t1 -cN -d2s --latency http://127.0.0.1:PORT/ping"
        )
        self.assertEqual(
            describe(sections["h2c-echo"], 2, 1, client()),
            "h2load -t1 -c100 -m10 -D 2 --warm-up-time=1 http://127.0.0.1:PORT/echo?size=N",
        )
        self.assertEqual(
            describe(sections["https1-post"], 2, 1, client()),
            "wrk -t1 -c100 -d2s --latency -s bench/xkbench/wrk/post.lua https://127.0.0.1:PORT/echo -- BODY_FILE",
        )


if __name__ == "__main__":
    unittest.main()
