"""The h2o peer of `xkbench arena` (bench/peers/h2o/arena_h2o.c on libh2o): built as xkbench builds
it, started on four loopback ports, and asked what the arena's validation asks of the profiles it
runs in (sums by GET, POST and chunked POST, /pipeline, /json totals over TLS, h2c by prior
knowledge, TLS h2, a static file's type), so that its figures are those of a server that answers."""

import json
import os
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.arena_peers import build_h2o_peer
from xkbench.prepare import make_certificate

TIMEOUT = 10


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def curl(*args):
    done = subprocess.run(
        ["curl", "-sS", "-k", "--max-time", str(TIMEOUT), *args], capture_output=True, text=True, timeout=TIMEOUT + 5
    )
    if done.returncode != 0:
        raise AssertionError(f"curl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


class H2oPeerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        work = Path(cls.tmp.name)
        data = work / "data"
        (data / "static").mkdir(parents=True)
        cls.items = [
            {
                "id": i,
                "name": f'Item "{i}" \u00e9' if i == 2 else f"Item {i}",
                "category": "tools",
                "price": 10 + i,
                "quantity": i,
                "active": i % 2 == 0,
                "tags": ["a", "b"][: i % 3],
                "rating": {"score": 40 + i, "count": 7 * i},
            }
            for i in range(1, 6)
        ]
        (data / "dataset.json").write_text(json.dumps(cls.items, indent=2))
        (data / "static" / "app.js").write_text("let x = 1;\n")
        certs = work / "certs"
        certs.mkdir()
        cert, key = make_certificate(work)
        os.symlink(cert, certs / "server.crt")
        os.symlink(key, certs / "server.key")
        binary, why = build_h2o_peer(work / "h2o")
        if binary is None:
            raise AssertionError(why)
        cls.ports = free_ports(4)
        env = {
            **os.environ,
            "ARENA_PORTS": ",".join(map(str, cls.ports)),
            "DATA_DIR": str(data),
            "CERTS_DIR": str(certs),
        }
        cls.server = subprocess.Popen([str(binary)], env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", cls.ports[3]), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or cls.server.poll() is not None:
                    cls.tearDownClass()
                    raise AssertionError("the h2o peer did not listen") from None
                time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        cls.server.stderr.close()
        cls.tmp.cleanup()

    def url(self, index, path, scheme="http"):
        return f"{scheme}://127.0.0.1:{self.ports[index]}{path}"

    def test_baseline_sums_the_query_and_a_posted_body(self):
        self.assertEqual(curl(self.url(0, "/baseline11?a=13&b=42")), "55")
        self.assertEqual(curl("-d", "20", self.url(0, "/baseline11?a=13&b=42")), "75")
        chunked = curl("-H", "Transfer-Encoding: chunked", "-d", "-5", self.url(0, "/baseline11?a=1&b=x&c=-3"))
        self.assertEqual(chunked, "-7")
        self.assertEqual(curl("-o", "/dev/null", "-w", "%{content_type}", self.url(0, "/baseline11?a=1")), "text/plain")

    def test_pipeline_answers_ok(self):
        self.assertEqual(curl(self.url(0, "/pipeline")), "ok")

    def test_json_over_tls_http1_keeps_every_field_and_adds_the_total(self):
        body = curl("--http1.1", "-w", " %{http_version}", self.url(1, "/json/3?x=1&m=4", "https"))
        text, version = body.rsplit(" ", 1)
        self.assertEqual(version, "1.1")
        answer = json.loads(text)
        expected = [{**item, "total": item["price"] * item["quantity"] * 4} for item in self.items[:3]]
        self.assertEqual(answer, {"items": expected, "count": 3})
        self.assertEqual(json.loads(curl(self.url(0, "/json/50")))["count"], 5)

    def test_h2c_by_prior_knowledge_and_tls_h2(self):
        self.assertEqual(
            curl("--http2-prior-knowledge", "-w", " %{http_version}", self.url(2, "/baseline2?a=1&b=1")), "2 2"
        )
        self.assertEqual(curl("--http2", "-w", " %{http_version}", self.url(3, "/baseline2?a=2&b=3", "https")), "5 2")

    def test_static_files_come_from_disk_with_their_type(self):
        out = curl("--http2", "-w", "%{content_type}", self.url(3, "/static/app.js", "https"))
        self.assertEqual(out, "let x = 1;\napplication/javascript")
        self.assertEqual(curl("-o", "/dev/null", "-w", "%{http_code}", self.url(0, "/static/nothing.css")), "404")


if __name__ == "__main__":
    unittest.main()
