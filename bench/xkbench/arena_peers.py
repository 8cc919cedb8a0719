"""The servers of `xkbench arena`, all on the arena's four ports (ARENA_PORTS: h1+h2c, TLS
http/1.1, h2c only, TLS h2): xKit's entry (arena/main.c) and Go's arena_server, which take
ARENA_PORTS themselves; h2o as the arena's h2o entry is built, a C program on libh2o
(bench/peers/h2o/arena_h2o.c, compiled here against Debian's libh2o-evloop-dev 2.2.5), which
takes ARENA_PORTS too; and nginx from Debian's packages, configured as the arena's nginx entry
is (bench/peers/nginx/arena.conf.in). For the HTTP/3 profiles, which neither Debian's h2o nor
its nginx speaks, Caddy (Debian's caddy 2.6) as a plain file server on the TLS h2 port's UDP.

Those two are "infrastructure" entries in the arena: each is run on the profiles its
meta.json lists and on no other, and here too. The nginx entry is a C module; Debian's binary
answers the same from configuration: the sums through njs, the files through its file
handler. Where Debian lacks a piece (libh2o, njs), the profiles that need it are not served,
and the report says why.
"""

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .parsing import last_line
from .paths import PEERS_DIR
from .servers import Peer, find_tool

# The profiles the arena's h2o and nginx entries are entered in (frameworks/*/meta.json),
# among those `xkbench arena` measures (HttpArena frameworks/h2o and frameworks/nginx/meta.json,
# 2026: both added json-tls when their handlers became C, nginx baseline-h2c too).
ENTERED = {
    "h2o": {"baseline", "limited-conn", "pipelined", "json-tls", "baseline-h2", "static-h2"},
    "nginx": {"baseline", "limited-conn", "pipelined", "json-tls", "baseline-h2", "static-h2", "baseline-h2c"},
    # Not an arena entry here: the HTTP/3 peer issue 27 measures xKit against (compare h3).
    "caddy": {"baseline-h3", "static-h3"},
}
# The profiles that need HTTP/3, which Go's arena_server (net/http) does not speak.
HTTP3_PROFILES = {"baseline-h3", "static-h3"}
# What answers each profile's requests in nginx: the sums need njs; /pipeline and /static/
# need nothing more. /json is the arena entry's C module, which Debian's nginx lacks: njs could
# write it, but would price nginx as mruby priced h2o, so nginx does not run json-tls here.
NEEDS_SCRIPT = {"baseline", "limited-conn", "baseline-h2", "baseline-h2c"}
WITHOUT = {
    "nginx": {
        "json-tls": "the arena's nginx answers /json from its own C module (ngx_http_httparena_module), "
        "which Debian's nginx lacks; a script would overstate its cost"
    },
    "caddy": {
        "baseline-h3": "Caddy's configuration has placeholders but no arithmetic: it cannot answer "
        "/baseline2's sum without a plugin (Debian's caddy has none)"
    },
}
H2O_SOURCE = PEERS_DIR / "h2o" / "arena_h2o.c"
H2O_LIBRARY = "libh2o-evloop"
# -Werror as the project builds; H2O_USE_LIBUV=0 selects libh2o's own event loop.
H2O_CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror", "-DH2O_USE_LIBUV=0")
H2O_LIBS = ("-lssl", "-lcrypto", "-lz", "-lm")
NGINX_TEMPLATE = PEERS_DIR / "nginx" / "arena.conf.in"
NGINX_BASELINE = PEERS_DIR / "nginx" / "arena_baseline.js"
NGINX_MODULES = Path("/usr/lib/nginx/modules")
NJS_MODULE = NGINX_MODULES / "ngx_http_js_module.so"
BROTLI_STATIC_MODULE = NGINX_MODULES / "ngx_http_brotli_static_module.so"
# /baseline11 (GET and POST) answers from njs; /baseline2, which baseline-h2 only GETs, is
# nginx's own `return` of the query's sum that njs computes (see arena_baseline.js for why).
NGINX_BASELINE_LOCATIONS = """location = /baseline11 {
            js_content baseline.sum;
        }
        location = /baseline2 {
            return 200 $baseline_sum;
        }"""
PROBE_PIPELINE = "/pipeline"
PROBE_BASELINE = "/baseline11?a=1&b=1"


@dataclass
class ArenaSetup:
    """What every arena server is started with: the data (dataset.json and static/, readable
    by the unprivileged workers of h2o and nginx), the certificate and its directory
    (server.crt, server.key), and the workers each server gets."""

    data_dir: Path
    certs_dir: Path
    workers: int


def fill(template, values):
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", str(value))
    return text


def build_h2o_peer(directory):
    """Compiles bench/peers/h2o/arena_h2o.c against libh2o-evloop into directory; returns
    (binary, None), or (None, why) when it cannot (no compiler, no libh2o-evloop-dev)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    pkg_config = shutil.which("pkg-config")
    if cc is None or pkg_config is None:
        return None, "no C compiler or pkg-config to build the h2o peer (apt-get install gcc pkg-config)"
    flags = subprocess.run([pkg_config, "--cflags", "--libs", H2O_LIBRARY], capture_output=True, text=True)
    if flags.returncode != 0:
        return None, f"no {H2O_LIBRARY} to build the h2o peer on (apt-get install libh2o-evloop-dev)"
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "arena_h2o"
    argv = [cc, *H2O_CFLAGS, str(H2O_SOURCE), "-o", str(binary), *flags.stdout.split(), *H2O_LIBS]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return None, "the h2o peer did not build: " + last_line(done.stderr)
    return binary, None


def not_served(name, profile, tools):
    """Why the peer `name` does not serve profile here, or None when it does. tools is what
    setup found: {"nginx_njs": bool, ...}."""
    if name == "go" and profile in HTTP3_PROFILES:
        return "net/http has no HTTP/3"
    if name not in ENTERED:
        return None
    if profile not in ENTERED[name]:
        if name == "caddy":
            return "runs the HTTP/3 profiles only"
        return f"not among the profiles the arena's {name} entry is entered in"
    if profile in WITHOUT.get(name, {}):
        return WITHOUT[name][profile]
    if profile in NEEDS_SCRIPT and name == "nginx" and not tools.get("nginx_njs"):
        return f"no njs module ({NJS_MODULE}; apt-get install libnginx-mod-http-js) to answer the sums"
    return None


def ports_line(port, extra_ports):
    return ",".join(str(p) for p in (port, *extra_ports))


def entry_peer(name, binary, setup, extra_ports, env=None):
    """A server of the arena's contract (xkit-arena, arena_server) whose first port comes
    from the picker; the other three, taken beforehand, go with it into ARENA_PORTS."""

    def command(port, _dir):
        return [
            "env",
            f"ARENA_PORTS={ports_line(port, extra_ports)}",
            f"DATA_DIR={setup.data_dir}",
            f"CERTS_DIR={setup.certs_dir}",
            str(binary),
        ]

    return Peer(name, command, env or {}, probe_path=PROBE_BASELINE)


def port_values(port, extra_ports):
    tls_h1, h2c, tls_h2 = extra_ports
    return {"H1": port, "TLS_H1": tls_h1, "H2C": h2c, "TLS_H2": tls_h2}


def nginx_peer(nginx, setup, extra_ports, tools):
    """nginx with worker_processes = workers on the four ports; its workers serve, its
    master sleeps. The sums are njs when Debian's module is there; brotli_static too."""

    def command(port, run_dir):
        values = {
            "WORKERS": setup.workers,
            "RUNDIR": run_dir,
            "DATA": setup.data_dir,
            "CERT": setup.certs_dir / "server.crt",
            "KEY": setup.certs_dir / "server.key",
            **port_values(port, extra_ports),
            "JS_MODULE": "",
            "JS_IMPORT": "",
            "BASELINE": "",
            "BROTLI_MODULE": "",
            "BROTLI_STATIC": "",
        }
        if tools.get("nginx_njs"):
            (run_dir / "baseline.js").write_text(NGINX_BASELINE.read_text())
            values.update(
                JS_MODULE=f"load_module {NJS_MODULE};",
                JS_IMPORT=f"js_import baseline from {run_dir / 'baseline.js'};\n"
                "    js_set $baseline_sum baseline.queryText;",
                BASELINE=NGINX_BASELINE_LOCATIONS,
            )
        if tools.get("nginx_brotli"):
            values.update(BROTLI_MODULE=f"load_module {BROTLI_STATIC_MODULE};", BROTLI_STATIC="brotli_static on;")
        (run_dir / "nginx.conf").write_text(fill(NGINX_TEMPLATE, values))
        return [nginx, "-c", str(run_dir / "nginx.conf"), "-p", str(run_dir), "-e", "stderr"]

    return Peer("nginx", command, probe_path=PROBE_PIPELINE, workers_are_children=True)


def caddy_peer(caddy, setup, extra_ports, probe):
    """Caddy serving DATA_DIR (its /static/ with the .br and .gz twins) over TLS h2 and HTTP/3 on
    the TLS h2 port, no logs, GOMAXPROCS = workers; probe(port) is the HTTP/3 readiness check of
    that port (Caddy does not listen on the first one)."""
    tls_h2 = extra_ports[-1]

    def command(_port, run_dir):
        config = run_dir / "Caddyfile"
        config.write_text(
            "{\n  admin off\n  auto_https off\n  servers {\n    protocols h1 h2 h3\n  }\n}\n"
            f"https://127.0.0.1:{tls_h2} {{\n"
            f"  tls {setup.certs_dir / 'server.crt'} {setup.certs_dir / 'server.key'}\n"
            f"  root * {setup.data_dir}\n"
            "  file_server {\n    precompressed br gzip\n  }\n}\n"
        )
        return [caddy, "run", "--config", str(config), "--adapter", "caddyfile"]

    return Peer(
        "caddy",
        command,
        {"GOMAXPROCS": str(setup.workers)},
        probe=lambda _port: probe(tls_h2),
    )


def find_infrastructure(names, work_dir):
    """({name: binary}, {name: why skipped}, tools) for h2o, nginx and caddy among names: h2o is
    built into work_dir/h2o; tools says which optional pieces (nginx's njs and
    brotli_static) are there."""
    binaries, skipped, tools = {}, {}, {}
    if "h2o" in names:
        binary, why = build_h2o_peer(work_dir / "h2o")
        if binary is None:
            skipped["h2o"] = why
        else:
            binaries["h2o"] = binary
    if "nginx" in names:
        nginx = find_tool("nginx", "/usr/sbin/nginx")
        if nginx is None:
            skipped["nginx"] = "nginx not installed (apt-get install nginx-light)"
        else:
            binaries["nginx"] = nginx
            tools["nginx_njs"] = os.access(NJS_MODULE, os.R_OK)
            tools["nginx_brotli"] = os.access(BROTLI_STATIC_MODULE, os.R_OK)
    if "caddy" in names:
        caddy = find_tool("caddy", "/usr/bin/caddy")
        if caddy is None:
            skipped["caddy"] = "caddy not installed (apt-get install caddy)"
        else:
            binaries["caddy"] = caddy
    return binaries, skipped, tools


def make_peer(name, binary, setup, extra_ports, tools):
    """The Peer for one run of server `name` with its three extra ports."""
    if name == "nginx":
        return nginx_peer(binary, setup, extra_ports, tools)
    env = {"GOMAXPROCS": str(setup.workers)} if name == "go" else None
    return entry_peer(name, binary, setup, extra_ports, env)
