"""compare db's pieces that need no database: the load each case sends, the pool's figures read
from the entry's log, and the verdicts against the issue's targets."""

import unittest

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.cli import build_parser
from xkbench.commands import compare_db


class CompareDbTest(unittest.TestCase):
    def setUp(self):
        self.args = build_parser().parse_args(["compare", "db"])

    def test_defaults(self):
        self.assertEqual(self.args.cases, ["async-db", "fortunes", "row", "cache95", "pipelining"])
        self.assertEqual(self.args.servers, ["xkit", "go"])
        self.assertEqual((self.args.connections, self.args.pipeline_connections), (64, 256))

    def test_each_case_asks_for_its_shape(self):
        argv = compare_db.wrk_for("fortunes", 9000, self.args, 5)
        self.assertEqual(argv[-1], "http://127.0.0.1:9000/fortunes")
        self.assertIn("-c64", argv)
        argv = compare_db.wrk_for("async-db", 9000, self.args, 5)
        self.assertTrue(any(arg.endswith("db_async.lua") for arg in argv))
        argv = compare_db.wrk_for("cache95", 9000, self.args, 5)
        self.assertTrue(any(arg.endswith("db_items.lua") for arg in argv))
        self.assertEqual(argv[-3:], ["--", "hot", "95"])
        argv = compare_db.wrk_for("pipelining", 9000, self.args, 5)
        self.assertIn("-c256", argv)
        self.assertNotIn("hot", argv)

    def test_the_pools_figures_are_read_from_the_entrys_log(self):
        line = "arena: worker 0: 73512 queries in 14410 batches, at most 64 in flight on a connection"
        self.assertEqual(compare_db.STATS_LINE.search(line).groups(), ("73512", "14410", "64"))

    def test_verdicts_against_the_targets(self):
        def case(xkit, go):
            return {"xkit": {"cpu_us_per_request": {"median": xkit}}, "go": {"cpu_us_per_request": {"median": go}}}

        summary = {"async-db": case(30.0, 100.0), "fortunes": case(40.0, 100.0), "row": case(30.0, 100.0)}
        lines = "\n".join(compare_db.ratio_lines(summary))
        self.assertIn("async-db: 0.30× (target ≤ 0.35×: met)", lines)
        self.assertIn("fortunes: 0.40× (target ≤ 0.35×: not met)", lines)
        self.assertIn("row: 0.30× (target ≤ 0.3×: met)", lines)


if __name__ == "__main__":
    unittest.main()
