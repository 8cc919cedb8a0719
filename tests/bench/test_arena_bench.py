"""xkbench arena: the load of the rows beyond wrk and h2load's usual (static-h2's URI file,
ws_load, the paced client), paced_load's JSON, which peer serves which profile, the peers'
configurations, and the report with peers missing, without running a server."""

import json
import tempfile
import unittest
from pathlib import Path

import support  # noqa: F401  (puts bench/ on the path)
from xkbench import arena_peers, arena_stacks
from xkbench.arena_peers import ArenaSetup
from xkbench.cli import build_parser
from xkbench.commands import arena
from xkbench.loadgen import Run
from xkbench.servers import RunFailed

PORTS = {"h1": 8080, "tls-h1": 8081, "h2c": 8082, "tls-h2": 8443}
FILES = {"{grpc_body}": "/tmp/req", "{echo_body}": "/tmp/body", "{static_uris}": "/tmp/uris"}


def parse(*argv):
    return build_parser().parse_args(["arena", *argv])


class LoadTest(unittest.TestCase):
    def test_static_h2_reads_its_uris_from_a_file_with_the_arenas_encodings(self):
        argv = arena.load_argv(arena.PROFILES["static-h2"], PORTS, 5, parse(), FILES)
        self.assertEqual(
            argv,
            [
                "h2load",
                "-t1",
                "-c16",
                "-m32",
                "-D",
                "5",
                "--npn-list=h2",
                "-H",
                "Accept-Encoding: br;q=1, gzip;q=0.8",
                "-i",
                "/tmp/uris",
            ],
        )

    def test_the_uri_file_lists_the_twenty_files_not_their_twins(self):
        with tempfile.TemporaryDirectory() as tmp:
            static = Path(tmp) / "static"
            static.mkdir()
            for name in ("app.js", "app.js.br", "app.js.gz", "hero.webp"):
                (static / name).write_bytes(b"x")
            path = arena.write_static_uris(Path(tmp), Path(tmp), 9443)
            self.assertEqual(
                path.read_text(), "https://127.0.0.1:9443/static/app.js\nhttps://127.0.0.1:9443/static/hero.webp\n"
            )

    def test_h3_rows_drive_h3load_on_the_tls_h2_ports_udp_with_the_arenas_streams(self):
        tools = {"h3load": "/b/bench/h3load"}
        argv = arena.load_argv(arena.PROFILES["baseline-h3"], PORTS, 5, parse(), FILES, tools)
        self.assertEqual(
            argv, ["/b/bench/h3load", "-t1", "-c4", "-m64", "-D", "5", "https://127.0.0.1:8443/baseline2?a=1&b=1"]
        )
        argv = arena.load_argv(arena.PROFILES["static-h3"], PORTS, 5, parse("--scale", "8"), FILES, tools)
        self.assertEqual(
            argv,
            [
                "/b/bench/h3load",
                "-t1",
                "-c8",
                "-m64",
                "-D",
                "5",
                "-H",
                "Accept-Encoding: br;q=1, gzip;q=0.8",
                "-i",
                "/tmp/uris",
            ],
        )

    def test_websocket_rows_drive_ws_load_raw_on_the_h1_port(self):
        argv = arena.load_argv(arena.PROFILES["echo-ws-pipeline"], PORTS, 5, parse(), FILES, {"ws_load": "/go/ws_load"})
        self.assertEqual(
            argv,
            [
                "/go/ws_load",
                "-raw",
                "-url",
                "ws://127.0.0.1:8080/ws",
                "-conns",
                "64",
                "-inflight",
                "16",
                "-reupgrade",
                "0",
                "-duration",
                "5s",
            ],
        )
        argv = arena.load_argv(arena.PROFILES["echo-ws-limited"], PORTS, 5, parse(), FILES)
        self.assertEqual(argv[0], "ws_load")
        self.assertEqual(argv[argv.index("-reupgrade") + 1], "10")

    def test_paced_rows_keep_an_absolute_rate_and_scale_connections(self):
        argv = arena.load_argv(arena.PROFILES["latency-10k"], PORTS, 5, parse(), FILES)
        self.assertEqual(
            argv,
            [
                "paced_load",
                "-url",
                "http://127.0.0.1:8080/baseline11?a=1&b=1",
                "-conns",
                "16",
                "-rate",
                "10000",
                "-duration",
                "5s",
                "-expect",
                "2",
            ],
        )
        argv = arena.load_argv(arena.PROFILES["8gbit"], PORTS, 5, parse("--rate-8gbit", "2000", "--scale", "32"), FILES)
        self.assertEqual(
            argv,
            [
                "paced_load",
                "-url",
                "https://127.0.0.1:8081/echo",
                "-conns",
                "16",
                "-rate",
                "2000",
                "-duration",
                "5s",
                "-body",
                "/tmp/body",
                "-echo",
            ],
        )

    def test_latency_1m_paces_the_arenas_million_divided_by_the_scale(self):
        argv = arena.load_argv(arena.PROFILES["latency-1m"], PORTS, 5, parse(), FILES)
        self.assertEqual(argv[argv.index("-conns") + 1 : argv.index("-rate") + 2], ["16", "-rate", "15625"])
        argv = arena.load_argv(arena.PROFILES["latency-1m"], PORTS, 5, parse("--scale", "32"), FILES)
        self.assertEqual(argv[argv.index("-rate") + 1], "31250")
        argv = arena.load_argv(arena.PROFILES["latency-1m"], PORTS, 5, parse("--rate-1m", "40000"), FILES)
        self.assertEqual(argv[argv.index("-rate") + 1], "40000")

    def test_the_report_shows_placeholders_for_files_and_ports(self):
        shown = arena.shown_argv(arena.PROFILES["8gbit"], parse("--duration", "3"))
        self.assertEqual(
            shown, "paced_load -url https://127.0.0.1:PORT/echo -conns 8 -rate 5000 -duration 3s -body BODY_FILE -echo"
        )


class PacedOutputTest(unittest.TestCase):
    REPORT = {
        "requests": 20000,
        "errors": 0,
        "seconds": 2.001,
        "target_rate": 10000,
        "rate": 9995.0,
        "mean_us": 180.5,
        "p50_us": 150.0,
        "p99_us": 900.0,
        "p999_us": 2000.0,
        "max_us": 3000.0,
    }

    def test_the_json_line_is_read(self):
        report = arena.parse_paced(Run("warming\n" + json.dumps(self.REPORT) + "\n", 0, False))
        self.assertEqual((report["requests"], report["p99_us"], report["rate"]), (20000, 900.0, 9995.0))

    def test_errors_timeouts_and_garbage_fail_the_run(self):
        failed = {**self.REPORT, "errors": 1, "first_error": "answered 3 bytes that differ from the 1 expected"}
        runs = (
            Run(json.dumps(failed), 1, False),
            Run(json.dumps(self.REPORT), 0, True),
            Run("paced_load: -url: an http or https URL is needed\n", 2, False),
            Run("{not json", 0, False),
            Run(json.dumps({**self.REPORT, "requests": 0}), 0, False),
        )
        for run in runs:
            with self.subTest(run.output), self.assertRaises(RunFailed):
                arena.parse_paced(run)
        with self.assertRaisesRegex(RunFailed, "differ"):
            arena.parse_paced(runs[0])


class ServedTest(unittest.TestCase):
    TOOLS = {"nginx_njs": True, "nginx_brotli": True}

    def test_infrastructure_peers_run_the_profiles_their_arena_entries_are_in(self):
        args = parse("--cases", "baseline,async,static-h2,echo-ws,latency-10k")
        binaries = dict.fromkeys(arena.SERVERS, "/bin/true")
        plan, unserved = arena.plan_profiles(args, binaries, self.TOOLS, dict.fromkeys(arena.GO_TOOLS, "/bin/true"))
        self.assertEqual(plan["baseline"], ["xkit", "go", "h2o", "nginx"])
        self.assertEqual(plan["static-h2"], ["xkit", "go", "h2o", "nginx"])
        self.assertEqual(plan["async"], ["xkit", "go"])
        self.assertEqual(plan["latency-10k"], ["xkit", "go"])
        self.assertIn("not among the profiles the arena's nginx entry is entered in", unserved["nginx"]["echo-ws"])
        self.assertNotIn("xkit", unserved)

    def test_h2o_serves_json_tls_with_its_c_handlers(self):
        args = parse("--cases", "json-tls,latency-1m")
        binaries = {"xkit": "x", "h2o": "h", "nginx": "n"}
        plan, unserved = arena.plan_profiles(args, binaries, self.TOOLS, dict.fromkeys(arena.GO_TOOLS, "/bin/true"))
        self.assertEqual(plan, {"json-tls": ["xkit", "h2o"], "latency-1m": ["xkit"]})
        self.assertIn("C module", unserved["nginx"]["json-tls"])

    def test_nginx_runs_baseline_h2c_as_its_entry_does_when_njs_is_there(self):
        args = parse("--cases", "baseline-h2c")
        binaries = {"xkit": "x", "h2o": "h", "nginx": "n"}
        plan, _ = arena.plan_profiles(args, binaries, self.TOOLS, {})
        self.assertEqual(plan, {"baseline-h2c": ["xkit", "nginx"]})
        plan, _ = arena.plan_profiles(args, binaries, {"nginx_njs": False}, {})
        self.assertEqual(plan, {"baseline-h2c": ["xkit"]})

    def test_without_njs_nginx_serves_no_sums_and_without_go_tools_no_ws_rows(self):
        args = parse("--cases", "baseline,pipelined,echo-ws")
        plan, unserved = arena.plan_profiles(args, {"xkit": "x", "h2o": "h", "nginx": "n"}, {"nginx_njs": False}, {})
        self.assertEqual(plan, {"baseline": ["xkit", "h2o"], "pipelined": ["xkit", "h2o", "nginx"]})
        self.assertIn("libnginx-mod-http-js", unserved["nginx"]["baseline"])
        self.assertNotIn("h2o", unserved)

    def test_caddy_runs_static_h3_alone_and_go_no_h3(self):
        args = parse("--cases", "baseline-h3,static-h3,baseline")
        binaries = dict.fromkeys(arena.SERVERS, "/bin/true")
        plan, unserved = arena.plan_profiles(args, binaries, self.TOOLS, {"h3load": "/bin/true"})
        self.assertEqual(
            plan, {"baseline-h3": ["xkit"], "static-h3": ["xkit", "caddy"], "baseline": ["xkit", "go", "h2o", "nginx"]}
        )
        self.assertIn("no arithmetic", unserved["caddy"]["baseline-h3"])
        self.assertEqual(unserved["caddy"]["baseline"], "runs the HTTP/3 profiles only")
        self.assertEqual(unserved["go"]["static-h3"], "net/http has no HTTP/3")

    def test_without_h3load_no_h3_rows(self):
        args = parse("--cases", "baseline-h3,static-h3")
        plan, _ = arena.plan_profiles(args, {"xkit": "x", "caddy": "c"}, self.TOOLS, {})
        self.assertEqual(plan, {})


class PeerConfigurationTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = Path(self.tmp.name)
        self.setup = ArenaSetup(Path("/srv/data"), Path("/srv/certs"), 1)

    def tearDown(self):
        self.tmp.cleanup()

    def test_h2o_is_the_c_peer_on_arena_ports(self):
        peer = arena_peers.make_peer("h2o", Path("/w/h2o/arena_h2o"), self.setup, (9001, 9002, 9003), {})
        self.assertEqual(
            peer.command(9000, self.run_dir),
            [
                "env",
                "ARENA_PORTS=9000,9001,9002,9003",
                "DATA_DIR=/srv/data",
                "CERTS_DIR=/srv/certs",
                "/w/h2o/arena_h2o",
            ],
        )
        self.assertEqual(peer.probe_path, "/baseline11?a=1&b=1")

    def test_caddy_is_a_file_server_of_the_data_on_the_tls_h2_port_with_its_twins(self):
        asked = []
        peer = arena_peers.caddy_peer("/usr/bin/caddy", self.setup, (9001, 9002, 9003), lambda port: asked.append(port))
        argv = peer.command(9000, self.run_dir)
        self.assertEqual(
            argv, ["/usr/bin/caddy", "run", "--config", str(self.run_dir / "Caddyfile"), "--adapter", "caddyfile"]
        )
        config = (self.run_dir / "Caddyfile").read_text()
        self.assertIn("https://127.0.0.1:9003 {", config)
        self.assertIn("tls /srv/certs/server.crt /srv/certs/server.key", config)
        self.assertIn("root * /srv/data", config)
        self.assertIn("precompressed br gzip", config)
        self.assertIn("protocols h1 h2 h3", config)
        self.assertEqual(peer.env, {"GOMAXPROCS": "1"})
        self.assertIsNone(peer.probe(9000))
        self.assertEqual(asked, [9003])

    def test_nginx_has_njs_sums_only_when_the_module_is_there(self):
        tools = {"nginx_njs": True, "nginx_brotli": True}
        arena_peers.nginx_peer("nginx", self.setup, (9001, 9002, 9003), tools).command(9000, self.run_dir)
        conf = (self.run_dir / "nginx.conf").read_text()
        self.assertNotIn("@", conf.split("\nworker_processes")[1])
        self.assertIn(f"load_module {arena_peers.NJS_MODULE};", conf)
        self.assertIn("js_content baseline.sum;", conf)
        self.assertIn("return 200 $baseline_sum;", conf)
        self.assertIn("brotli_static on;", conf)
        for listen in (
            "9000 backlog=4096;",
            "9001 backlog=4096 ssl;",
            "9002 backlog=4096 http2;",
            "9003 backlog=4096 ssl http2;",
        ):
            self.assertIn(f"listen 127.0.0.1:{listen}", conf)
        arena_peers.nginx_peer("nginx", self.setup, (9001, 9002, 9003), {}).command(9000, self.run_dir)
        conf = (self.run_dir / "nginx.conf").read_text()
        self.assertNotIn("js_", conf.split("\nworker_processes")[1])
        self.assertNotIn("brotli", conf.split("\nworker_processes")[1])
        self.assertIn('location = /pipeline {\n            return 200 "ok";', conf)


class StackTest(unittest.TestCase):
    """gateway-64: the edges in front of xKit's server, their load and their rows."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run_dir = Path(self.tmp.name)
        self.setup = ArenaSetup(Path("/srv/data"), Path("/srv/certs"), 1)

    def tearDown(self):
        self.tmp.cleanup()

    def test_the_load_is_the_arenas_twenty_uris_at_32_streams(self):
        names = ["app.js", "bold.woff2", "hero.webp", "index.html", "logo.svg", "manifest.json", "reset.css"]
        uris = arena_stacks.uris(Path("/srv/data"), names, 9443)
        self.assertEqual(len(uris), 20)
        paths = [uri.removeprefix("https://127.0.0.1:9443") for uri in uris]
        self.assertEqual(sum(p.startswith("/static/") for p in paths), 6)
        self.assertEqual(sum(p.startswith("/baseline2?") for p in paths), 4)
        self.assertEqual([p for p in paths if p.startswith("/json/")][::6], ["/json/1", "/json/50"])
        self.assertEqual([p[-2:] for p in paths if p.startswith("/async-db")], ["10", "25", "50"])
        stack = arena_stacks.STACKS["gateway-64"]
        argv = arena_stacks.load_argv(stack, "/tmp/uris", 5, parse())
        self.assertEqual(argv[:4], ["h2load", "-t1", "-c8", "-m32"])
        self.assertEqual(argv[-5:], ["--npn-list=h2", "-H", "Accept-Encoding: br;q=1, gzip;q=0.8", "-i", "/tmp/uris"])

    def test_gateway_h3_drives_h3load_over_the_same_uris_against_xkit_edge_and_caddy(self):
        stack = arena_stacks.STACKS["gateway-h3"]
        argv = arena_stacks.load_argv(stack, "/tmp/uris", 5, parse(), "/b/bench/h3load")
        self.assertEqual(
            argv,
            [
                "/b/bench/h3load",
                "-t1",
                "-c4",
                "-m32",
                "-D",
                "5",
                "-H",
                "Accept-Encoding: br;q=1, gzip;q=0.8",
                "-i",
                "/tmp/uris",
            ],
        )
        self.assertEqual(stack.dynamic, arena_stacks.STACKS["gateway-64"].dynamic)
        plan, _ = arena.plan_profiles(parse("--cases", "gateway-h3"), {"xkit": "x", "caddy": "c"}, {}, {"h3load": "h"})
        self.assertEqual(plan, {"gateway-h3": ["xkit", "caddy"]})
        plan, _ = arena.plan_profiles(parse("--cases", "gateway-h3"), {"xkit": "x", "caddy": "c"}, {}, {})
        self.assertEqual(plan, {})
        xkit = arena_stacks.edge_peer("xkit", Path("/b/xkit-edge"), self.setup, 7000, {}, http3=True)
        self.assertEqual(xkit.env["EDGE_HTTP3"], "1")
        self.assertNotIn("EDGE_HTTP3", arena_stacks.edge_peer("xkit", Path("/b/xkit-edge"), self.setup, 7000, {}).env)
        caddy = arena_stacks.edge_peer("caddy", "/usr/bin/caddy", self.setup, 7000, {}, http3=True)
        caddy.command(9000, self.run_dir)
        config = (self.run_dir / "Caddyfile").read_text()
        self.assertIn("https://127.0.0.1:9000 {", config)
        self.assertIn(
            "handle /static/* {\n    root * /srv/data\n    file_server {\n      precompressed br gzip", config
        )
        self.assertIn("reverse_proxy 127.0.0.1:7000 {", config)
        self.assertIn("protocols h1 h2 h3", config)
        self.assertTrue(caddy.tls)
        self.assertEqual(caddy.probe_path, "/static/reset.css")
        stack_cpu = {"server_cpu_us_per_request": 20.0, "pg_cpu_us_per_request": 5.0}
        results = {
            "gateway-h3": {
                "xkit": RenderTest.runs(7000.0, 30.0, stack_cpu_us_per_request=50.0, **stack_cpu),
                "caddy": RenderTest.runs(1500.0, 150.0, stack_cpu_us_per_request=170.0, **stack_cpu),
            }
        }
        markdown, _, _ = arena.render(results, {}, parse(), "m")
        self.assertIn("gateway-h3, CPU per request of xKit's edge ÷ Caddy's: edge 0.20×, stack 0.29×.", markdown)
        self.assertIn("`h3load -t1 -c4 -m32 -D 5 -H 'Accept-Encoding: br;q=1, gzip;q=0.8' -i URI_FILE`", markdown)

    def test_both_edges_point_at_the_same_server(self):
        xkit = arena_stacks.edge_peer("xkit", Path("/b/xkit-edge"), self.setup, 7000, {})
        self.assertEqual(xkit.command(9000, self.run_dir), ["env", "EDGE_PORT=9000", "/b/xkit-edge"])
        self.assertEqual(xkit.env["UPSTREAM"], "http://127.0.0.1:7000")
        self.assertTrue(xkit.tls)
        self.assertEqual(xkit.env["UPSTREAM_PROTOCOL"], "http/1.1")
        h2c = arena_stacks.edge_peer("xkit-h2c", Path("/b/xkit-edge"), self.setup, 7000, {})
        self.assertEqual(h2c.env["UPSTREAM_PROTOCOL"], "h2c")
        nginx = arena_stacks.edge_peer("nginx", "/usr/sbin/nginx", self.setup, 7000, {"nginx_brotli": True})
        nginx.command(9000, self.run_dir)
        conf = (self.run_dir / "nginx.conf").read_text()
        body = conf.split("\nworker_processes")[1]
        self.assertNotIn("@", body)
        self.assertIn("listen 127.0.0.1:9000 backlog=4096 ssl http2;", conf)
        self.assertIn("server 127.0.0.1:7000;", conf)
        self.assertIn("root /srv/data;", conf)
        self.assertIn("brotli_static on;", conf)
        server = arena_stacks.upstream_peer(Path("/b/xkit-arena"), self.setup, "postgres://db")
        self.assertEqual(server.command(7000, self.run_dir), ["env", "ARENA_PORTS=7000,0,0,0", "/b/xkit-arena"])
        self.assertEqual(server.env["DATABASE_URL"], "postgres://db")

    def test_the_production_stack_asks_the_auth_service_and_writes_beside_the_reads(self):
        stack = arena_stacks.STACKS["production-stack"]
        xkit = arena_stacks.edge_peer("xkit", Path("/b/xkit-edge"), self.setup, 7000, {}, auth_port=7100)
        self.assertEqual(xkit.env["AUTH_URL"], "http://127.0.0.1:7100")
        nginx = arena_stacks.edge_peer("nginx", "/usr/sbin/nginx", self.setup, 7000, {}, auth_port=7100)
        nginx.command(9000, self.run_dir)
        conf = (self.run_dir / "nginx.conf").read_text()
        self.assertNotIn("@", conf.split("\nworker_processes")[1])
        self.assertIn("server 127.0.0.1:7100;", conf)
        self.assertIn("auth_request /_auth;", conf)
        self.assertIn("proxy_set_header X-User-Id $user_id;", conf)
        gateway = arena_stacks.edge_peer("nginx", "/usr/sbin/nginx", self.setup, 7000, {})
        gateway.command(9000, self.run_dir)
        self.assertNotIn("auth_request ", (self.run_dir / "nginx.conf").read_text().split("\nworker_processes")[1])
        paths = [u.removeprefix("https://127.0.0.1:1") for u in arena_stacks.uris(None, ["a"] * 6, 1, stack.dynamic)]
        self.assertEqual(sum(p.startswith("/api/items/") for p in paths), 10)
        self.assertEqual(paths.count("/api/me"), 2)
        reads = arena_stacks.load_argv(stack, "/tmp/r", 5, parse())
        self.assertEqual(reads[:4], ["h2load", "-t1", "-c4", "-m16"])
        self.assertIn(f"Authorization: Bearer {arena_stacks.arena_token()}", reads)
        writes = arena_stacks.writes_argv(stack, "/tmp/w", "/tmp/b", 5, parse())
        self.assertEqual(writes[:4], ["h2load", "-t1", "-c1", "-m8"])
        self.assertEqual(writes[writes.index("-d") + 1], "/tmp/b")
        head, body, _ = arena_stacks.arena_token().split(".")
        self.assertEqual(json.loads(arena_stacks.base64.urlsafe_b64decode(body + "==="))["sub"], "42")

    def test_gateway_rows_compare_the_edges_and_leave_the_score_alone(self):
        args = parse("--cases", "gateway-64,baseline")
        plan, _ = arena.plan_profiles(args, dict.fromkeys(arena.SERVERS, "/bin/true"), {"nginx_njs": True}, {})
        self.assertEqual(plan["gateway-64"], ["xkit", "xkit-h2c", "nginx"])
        stack = {"server_cpu_us_per_request": 20.0, "pg_cpu_us_per_request": 5.0}
        results = {
            "gateway-64": {
                "xkit": RenderTest.runs(9000.0, 30.0, stack_cpu_us_per_request=50.0, **stack),
                "nginx": RenderTest.runs(6000.0, 60.0, stack_cpu_us_per_request=80.0, **stack),
            },
            "baseline": {"xkit": RenderTest.runs(40000.0, 8.0)},
        }
        markdown, summary, stacks = arena.render(results, {}, args, "m")
        self.assertIn("| gateway-64 | 8 | xKit | 9,000 | 30.00 | 20.00 | – | 50.00 | 5.00 |", markdown)
        self.assertIn("| gateway-64 | 8 | nginx | 6,000 | 60.00 | 20.00 | – | 80.00 | 5.00 |", markdown)
        self.assertIn("gateway-64, CPU per request of xKit's edge ÷ nginx's: edge 0.50×, stack 0.62×.", markdown)
        self.assertNotIn("h2c upstream's edge", markdown)
        self.assertNotIn("gateway-64", summary)
        self.assertEqual(stacks["gateway-64"]["xkit"]["cpu_us_per_request"]["median"], 30.0)


class RenderTest(unittest.TestCase):
    @staticmethod
    def runs(rate, us, **extra):
        return [
            {
                "ok": True,
                "req_per_s": rate,
                "cpu_us_per_request": us,
                "server_busy": 1.0,
                "client_busy": 1.0,
                "others_busy": 0.1,
                **extra,
            }
        ] * 3

    def test_missing_peers_are_dashes_with_the_reason_and_paced_rows_show_latency(self):
        args = parse()
        results = {
            "baseline": {
                "xkit": self.runs(40000.0, 8.0),
                "go": self.runs(10000.0, 40.0),
                "h2o": self.runs(20000.0, 50.0),
                "nginx": self.runs(16000.0, 30.0),
            },
            "latency-10k": {
                "xkit": self.runs(9990.0, 10.0, p99_us=1500.0, mean_us=400.0, target_rate=10000),
                "go": self.runs(9980.0, 35.0, p99_us=4200.0, mean_us=900.0, target_rate=10000),
            },
        }
        unserved = {
            "h2o": {"latency-10k": "not among the profiles the arena's h2o entry is entered in"},
            "nginx": {"latency-10k": "not among the profiles the arena's nginx entry is entered in"},
        }
        markdown, summary, _ = arena.render(results, {}, args, "m", unserved)
        self.assertIn(
            "| baseline | 64 | 40,000 | 10,000 | 20,000 | 16,000 | 2.00× h2o | 8.00 | 40.00 | 50.00 "
            "| 30.00 | 0.27× nginx |",
            markdown,
        )
        self.assertIn(
            "| latency-10k | 16 | 9,990 | 9,980 | – | – | 1.00× Go | 10.00 | 35.00 | – | – | 0.29× Go |", markdown
        )
        self.assertIn("| latency-10k | 16 | 10,000 | 1.50 | 4.20 | – | – | 0.40 | 0.90 | – | – |", markdown)
        self.assertIn("- h2o: – in latency-10k: not among the profiles the arena's h2o entry is entered in", markdown)
        self.assertEqual(summary["latency-10k"]["xkit"]["p99_us"]["median"], 1500.0)

    def test_caddy_has_columns_only_when_it_ran(self):
        results = {"static-h3": {"xkit": self.runs(8000.0, 50.0), "caddy": self.runs(2000.0, 250.0)}}
        markdown, summary, _ = arena.render(results, {}, parse(), "m")
        self.assertIn("| nginx req/s | Caddy req/s | req/s xKit ÷ best peer |", markdown)
        self.assertIn(
            "| static-h3 | 4 | 8,000 | – | – | – | 2,000 | 4.00× Caddy | 50.00 | – | – | – | 250.00 | 0.20× Caddy |",
            markdown,
        )
        self.assertIn("h3load -t1 -c4 -m64 -D 5 -H 'Accept-Encoding: br;q=1, gzip;q=0.8' -i URI_FILE", markdown)
        self.assertNotIn("- static-h3:", markdown.split("### Not measured here")[1].split("Load per profile")[0])
        scored = arena.render_score(summary, parse())[1]
        self.assertEqual(scored["profiles"]["static-h3"], {"xkit": 100.0, "caddy": 25.0})
        markdown, _, _ = arena.render({"baseline": {"xkit": self.runs(40000.0, 8.0)}}, {}, parse(), "m")
        self.assertNotIn("Caddy", markdown.split("Best peer")[0])

    def test_a_row_without_xkit_or_peers_has_no_ratio(self):
        markdown, _, _ = arena.render({"async": {"go": self.runs(15000.0, 40.0)}}, {}, parse(), "m")
        self.assertIn("| async | 500 | – | 15,000 | – | – | – | – | 40.00 | – | – | – |", markdown)
        self.assertNotIn("### Paced profiles", markdown)


if __name__ == "__main__":
    unittest.main()
