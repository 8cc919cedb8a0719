"""The HTTP/3 rows of `xkbench arena` (baseline-h3, static-h3) run for one second against this build's
xkit-arena on a small dataset: h3load asks over QUIC on the TLS h2 port's UDP, every answer is 2xx,
and the row carries req/s and the server's CPU per request, as the report and --score read them."""

import gzip
import json
import os
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.arena_peers import ArenaSetup, entry_peer
from xkbench.cli import build_parser
from xkbench.commands import arena
from xkbench.prepare import make_certificate
from xkbench.servers import PortPicker, running

XK_ARENA = os.environ.get("XK_ARENA")
XK_H3LOAD = os.environ.get("XK_H3LOAD")
APP_JS = b"export function sum(a, b) { return a + b; }\n" * 200


def make_data(root):
    """dataset.json (the contract's shape) and static/ with a text file and its gzip twin."""
    items = [
        {"id": i, "name": f"Item {i}", "category": "tools", "price": 10 + i, "quantity": i, "active": True,
         "tags": ["a"], "rating": {"score": 40, "count": i}}
        for i in range(1, 4)
    ]  # fmt: skip
    (root / "static").mkdir(parents=True)
    (root / "dataset.json").write_text(json.dumps(items))
    (root / "static" / "app.js").write_bytes(APP_JS)
    (root / "static" / "app.js.gz").write_bytes(gzip.compress(APP_JS))
    (root / "static" / "reset.css").write_bytes(b"* { margin: 0; }\n")


class ArenaH3RowsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not XK_ARENA or not XK_H3LOAD:
            raise AssertionError("XK_ARENA and XK_H3LOAD name the binaries (ctest sets them)")
        cls.tmp = tempfile.TemporaryDirectory(prefix="xk-arena-h3-")
        work = Path(cls.tmp.name)
        make_data(work / "data")
        cert, key = make_certificate(work)
        certs = work / "certs"
        certs.mkdir()
        (certs / "server.crt").symlink_to(cert)
        (certs / "server.key").symlink_to(key)
        cls.setup = ArenaSetup(work / "data", certs, 1)
        cls.work = work
        cls.ports = PortPicker(27700)
        cls.args = build_parser().parse_args(["arena", "--duration", "1", "--client-cpus", "0", "--server-cpus", "0"])
        cls.inputs = arena.Inputs({}, work, work / "data", {"h3load": XK_H3LOAD})

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def measure(self, name):
        extra = [self.ports.take() for _ in arena.PORTS[1:]]
        peer = entry_peer("xkit", XK_ARENA, self.setup, extra)
        with running(peer, self.ports, self.work, {0}, name) as server:
            return arena.measure_profile(arena.PROFILES[name], server, extra, self.args, self.inputs)

    def test_baseline_h3_answers_over_quic_with_cpu_per_request(self):
        record = self.measure("baseline-h3")
        self.assertGreater(record["requests"], 100)
        self.assertGreater(record["req_per_s"], 100)
        self.assertGreater(record["cpu_us_per_request"], 0)

    def test_static_h3_asks_the_files_in_turn_and_gets_the_twin_the_encoding_asks_for(self):
        record = self.measure("static-h3")
        self.assertGreater(record["requests"], 100)
        self.assertGreater(record["cpu_us_per_request"], 0)
        self.assertEqual(record["sent"], f"gzip, {len(gzip.compress(APP_JS)):,} B")


if __name__ == "__main__":
    unittest.main()
