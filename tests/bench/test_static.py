"""xkbench static: its cases and options, and the /static/ location each peer's
configuration gets (and only then), without running a server."""

import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench.cli import build_parser
from xkbench.commands import static
from xkbench.peers import (
    H2O_STATIC,
    H2O_TEMPLATE,
    NGINX_STATIC,
    NGINX_TEMPLATE,
    PeerContext,
    fill_template,
    make_peer,
    static_block,
)


class StaticOptionsTest(unittest.TestCase):
    def test_cases_cover_both_files_over_every_protocol(self):
        self.assertEqual(static.CASES, ("http1-6k", "http1-120k", "h2c-6k", "h2c-120k", "https2-6k", "https2-120k"))
        self.assertEqual(static.split("https2-120k"), ("https2", "header.html"))
        args = build_parser().parse_args(["static"])
        self.assertEqual((args.connections, args.h2_connections, args.streams), (100, 16, 32))
        self.assertEqual(args.servers, ["xkit", "nginx", "h2o"])
        self.assertEqual(args.static_dir.parts[-4:], ("shared", "arena", "data", "static"))

    def test_text_cases_ask_for_a_file_without_twins_with_every_tool(self):
        self.assertEqual(
            static.TEXT_CASES,
            ("http1-text25k", "http1-text120k", "h2c-text25k", "h2c-text120k", "https2-text25k", "https2-text120k"),
        )
        self.assertEqual(static.split("h2c-text25k"), ("h2c", "plain/layout.css"))
        args = build_parser().parse_args(["static", "--cases", "http1-text120k,h2c-6k", "--servers", "xkit_compress"])
        self.assertEqual((sorted(args.cases), args.servers), (["h2c-6k", "http1-text120k"], ["xkit_compress"]))
        server = type("Server", (), {"port": 8080})()
        argv = static.load_argv("http1-text120k", server, args, 5)
        self.assertEqual(argv[0], "wrk")
        self.assertIn("Accept-Encoding: br;q=1, gzip;q=0.8", argv)
        self.assertEqual(argv[-1], "http://127.0.0.1:8080/static/plain/header.html")
        self.assertNotIn("-H", static.load_argv("http1-120k", server, args, 5))

    def test_text_files_are_copied_without_their_twins(self):
        with tempfile.TemporaryDirectory() as tmp:
            source, work = Path(tmp) / "source", Path(tmp) / "work"
            source.mkdir()
            work.mkdir()
            for name in ("thumb2.webp", "header.html", "header.html.br", "layout.css", "layout.css.gz"):
                (source / name).write_bytes(name.encode())
            target = static.copy_files(source, work)
            self.assertEqual(sorted(p.name for p in (target / "plain").iterdir()), ["header.html", "layout.css"])
            self.assertEqual((target / "plain" / "layout.css").read_bytes(), b"layout.css")
            self.assertEqual((target / "plain").stat().st_mode & 0o777, 0o755)
            self.assertTrue((target / "header.html.br").is_file())

    def test_h2load_asks_for_the_arenas_encodings(self):
        args = build_parser().parse_args(["static", "--h2-connections", "4"])
        server = type("Server", (), {"port": 8443})()
        argv = static.load_argv("https2-6k", server, args, 5)
        self.assertEqual(argv[:4], ["h2load", "-t1", "-c4", "-m32"])
        self.assertIn("Accept-Encoding: br;q=1, gzip;q=0.8", argv)
        self.assertIn("--npn-list=h2", argv)
        self.assertEqual(argv[-1], "https://127.0.0.1:8443/static/thumb2.webp")
        argv = static.load_argv("http1-120k", server, args, 5)
        self.assertEqual(argv[0], "wrk")
        self.assertEqual(argv[-1], "http://127.0.0.1:8443/static/header.html")


class PeerConfigurationTest(unittest.TestCase):
    def conf(self, template, block, static_dir):
        context = PeerContext(build_dir=Path("/nonexistent"), workers=1, static_dir=static_dir)
        values = {
            "WORKERS": "1",
            "THREADS": "1",
            "PORT": "9999",
            "RUNDIR": "/run",
            "LISTEN_FLAGS": "",
            "TLS": "",
            "STATIC": static_block(block, context),
        }
        return fill_template(template, values)

    def test_xkit_is_given_the_directory(self):
        context = PeerContext(build_dir=Path("/nonexistent"), workers=1, static_dir=Path("/srv/files"))
        self.assertEqual(make_peer("xkit", "http1", context).status, "not built")

    def test_the_compressing_xkits_are_given_their_options(self):
        with tempfile.TemporaryDirectory() as tmp:
            bench = Path(tmp) / "bench"
            bench.mkdir()
            for name in ("http_bench_server", "https_bench_server"):
                (bench / name).write_text("")
                (bench / name).chmod(0o755)
            context = PeerContext(build_dir=Path(tmp), workers=1, static_dir=Path("/srv/files"))
            argv = make_peer("xkit_compress", "h2c", context).command(9000, None)
            self.assertEqual(argv[1:], ["9000", "--workers", "1", "--compress", "--static", "/srv/files"])
            argv = make_peer("xkit_compress_uncached", "http1", context).command(9000, None)
            self.assertIn("--static-compress-cache", argv)
            self.assertEqual(argv[argv.index("--static-compress-cache") + 1], "0")
            self.assertNotIn("--compress", make_peer("xkit", "http1", context).command(9000, None))

    def test_nginx_and_h2o_serve_the_directory_with_their_file_tuning(self):
        conf = self.conf(NGINX_TEMPLATE, NGINX_STATIC, Path("/srv/files"))
        self.assertIn("location /static/ {", conf)
        self.assertIn("alias /srv/files/;", conf)
        self.assertIn("open_file_cache_valid 1s;", conf)
        self.assertIn("gzip_static on;", conf)
        plain = self.conf(NGINX_TEMPLATE, NGINX_STATIC, None)
        self.assertNotIn("location /static/", plain)
        self.assertNotIn("@", plain)
        conf = self.conf(H2O_TEMPLATE, H2O_STATIC, Path("/srv/files"))
        self.assertIn("      /static:\n        file.dir: /srv/files\n", conf)
        self.assertIn("file.send-compressed: ON", conf)
        self.assertNotIn("@", self.conf(H2O_TEMPLATE, H2O_STATIC, None))


if __name__ == "__main__":
    unittest.main()
