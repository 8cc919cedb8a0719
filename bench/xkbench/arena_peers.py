"""The servers of `xkbench arena`, all on the arena's four ports (ARENA_PORTS: h1+h2c, TLS
http/1.1, h2c only, TLS h2): xKit's entry (arena/main.c) and Go's arena_server, which take
ARENA_PORTS themselves, and h2o and nginx from Debian's packages, configured as the arena's
own h2o and nginx entries are (bench/peers/h2o/arena.conf.in, bench/peers/nginx/arena.conf.in).

Those two are "infrastructure" entries in the arena: each is run on the profiles its
meta.json lists and on no other, and here too. Their entries are C programs (libh2o, an
nginx module); Debian's binaries answer the same from configuration: h2o's sums through its
mruby handler, nginx's through njs, their files through their file handlers. Where Debian
lacks a piece (mruby, njs), the profiles that need it are not served, and the report says why.
"""

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .paths import PEERS_DIR
from .servers import Peer, find_tool

# The profiles the arena's h2o and nginx entries are entered in (frameworks/*/meta.json),
# among those `xkbench arena` measures.
ENTERED = {
    "h2o": {"baseline", "limited-conn", "pipelined", "baseline-h2", "static-h2"},
    "nginx": {"baseline", "limited-conn", "pipelined", "baseline-h2", "static-h2"},
}
# What answers each profile's requests in the configured peers: the sums need a scripting
# module (mruby in h2o, njs in nginx); /pipeline and /static/ need nothing more.
NEEDS_SCRIPT = {"baseline", "limited-conn", "baseline-h2"}
H2O_TEMPLATE = PEERS_DIR / "h2o" / "arena.conf.in"
H2O_BASELINE = PEERS_DIR / "h2o" / "arena_baseline.rb"
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


def h2o_has_mruby(h2o):
    """Debian builds h2o 2.2 with mruby; `h2o --version` says "mruby: YES" when it has it."""
    try:
        done = subprocess.run([h2o, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "mruby: YES" in done.stdout + done.stderr


def not_served(name, profile, tools):
    """Why the peer `name` does not serve profile here, or None when it does. tools is what
    setup found: {"h2o_mruby": bool, "nginx_njs": bool}."""
    if name not in ENTERED:
        return None
    if profile not in ENTERED[name]:
        return f"not among the profiles the arena's {name} entry is entered in"
    if profile in NEEDS_SCRIPT and name == "h2o" and not tools.get("h2o_mruby"):
        return "this h2o has no mruby, which answers /baseline11 and /baseline2 here"
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


def h2o_peer(h2o, setup, extra_ports):
    """h2o with num-threads = workers on the four ports. Over TLS it signs in a child
    (neverbleed), which serves as much as h2o itself does; its perl crash helper sleeps."""

    def command(port, run_dir):
        (run_dir / "baseline.rb").write_text(H2O_BASELINE.read_text())
        conf = fill(
            H2O_TEMPLATE,
            {
                "THREADS": setup.workers,
                "RUNDIR": run_dir,
                "DATA": setup.data_dir,
                "CERT": setup.certs_dir / "server.crt",
                "KEY": setup.certs_dir / "server.key",
                **port_values(port, extra_ports),
            },
        )
        (run_dir / "h2o.conf").write_text(conf)
        return [h2o, "-c", str(run_dir / "h2o.conf")]

    return Peer("h2o", command, probe_path=PROBE_PIPELINE, serving_children_named="h2o")


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


def find_infrastructure(names):
    """({name: binary}, {name: why skipped}, tools) for h2o and nginx among names; tools says
    which optional pieces (h2o's mruby, nginx's njs and brotli_static) are there."""
    binaries, skipped, tools = {}, {}, {}
    if "h2o" in names:
        h2o = find_tool("h2o", "/usr/sbin/h2o")
        if h2o is None:
            skipped["h2o"] = "h2o not installed (apt-get install h2o)"
        else:
            binaries["h2o"] = h2o
            tools["h2o_mruby"] = h2o_has_mruby(h2o)
    if "nginx" in names:
        nginx = find_tool("nginx", "/usr/sbin/nginx")
        if nginx is None:
            skipped["nginx"] = "nginx not installed (apt-get install nginx-light)"
        else:
            binaries["nginx"] = nginx
            tools["nginx_njs"] = os.access(NJS_MODULE, os.R_OK)
            tools["nginx_brotli"] = os.access(BROTLI_STATIC_MODULE, os.R_OK)
    return binaries, skipped, tools


def make_peer(name, binary, setup, extra_ports, tools):
    """The Peer for one run of server `name` with its three extra ports."""
    if name == "h2o":
        return h2o_peer(binary, setup, extra_ports)
    if name == "nginx":
        return nginx_peer(binary, setup, extra_ports, tools)
    env = {"GOMAXPROCS": str(setup.workers)} if name == "go" else None
    return entry_peer(name, binary, setup, extra_ports, env)
