"""The servers measured, per protocol: xKit's bench servers (and its HTTP/1.1 baselines), the
Go peers, and on request nginx and h2o from Debian's packages. Every one gets the same
number of cores."""

import os
from dataclasses import dataclass
from pathlib import Path

from .paths import PEERS_DIR
from .servers import Peer, find_tool

NGINX_TEMPLATE = PEERS_DIR / "nginx" / "nginx.conf.in"
H2O_TEMPLATE = PEERS_DIR / "h2o" / "h2o.conf.in"
H2O_ECHO_BYTES = 4096  # h2o's /echo is one file of this size (bench/peers/h2o/h2o.conf.in)

LABELS = {
    "xkit": "xKit",
    "xkit_epoll": "xKit on epoll",
    "go": "Go",
    "nginx": "nginx",
    "h2o": "h2o",
    "baseline": "baseline",
    "baseline_uring": "io_uring baseline",
}
# What each peer serves: nginx answers GET /echo?size=N from files named by the size and
# cannot echo a body; h2o's file handler ignores the query string, so it serves /ping only.
KINDS = {
    "xkit": {"ping", "echo", "post"},
    "xkit_epoll": {"ping", "echo", "post"},
    "go": {"ping", "echo", "post"},
    "nginx": {"ping", "echo"},
    "h2o": {"ping"},
}
GO_PEER_FOR = {
    "http1": "http_bench_server",
    "pipeline": "http_bench_server",
    "h2c": "h2c_bench_server",
    "https1": "https_bench_server",
    "https2": "https_bench_server",
    "websocket": "ws_echo_server",
}


@dataclass
class Missing:
    """Why a peer cannot run: status is "not built" (xKit) or "skipped" (anything else)."""

    status: str
    reason: str


@dataclass
class PeerContext:
    """What the peers are made from. go_bin is where the Go peers were built (None, with
    go_problem, when they could not be); cert and key are None without a certificate."""

    build_dir: Path
    workers: int
    echo_sizes: tuple = ()
    cert: Path | None = None
    key: Path | None = None
    cert_problem: str = "no certificate"
    go_bin: Path | None = None
    go_problem: str = "the Go peers were not built"
    static_dir: Path | None = None  # served at /static/ by every peer (xkbench static)


def make_peer(name, protocol, context):
    """The peer `name` set up for a protocol key (http1, h2c, https1, https2, pipeline), or Missing."""
    if protocol.startswith("https") and context.cert is None:
        return Missing("skipped", context.cert_problem)
    return MAKERS[name](protocol, context)


def find_peers(names, protocol, context):
    """({name: Peer}, {name: why it is skipped}) for the servers asked for."""
    peers, skipped = {}, {}
    for name in names:
        peer = make_peer(name, protocol, context)
        if isinstance(peer, Missing):
            skipped[name] = peer.reason
        else:
            peers[name] = peer
    return peers, skipped


def server_binary(context, name):
    """One of xKit's bench servers in the build, or Missing when it is not built."""
    binary = context.build_dir / "bench" / name
    return binary if os.access(binary, os.X_OK) else Missing("not built", f"{binary} not built")


def xkit_peer(protocol, context, name="xkit", xk_io=None, flags=()):
    """xKit's bench server on its default I/O backend (io_uring where the kernel allows it, or
    what XK_IO in the environment asks for), or on the one xk_io names; flags are more of its
    options."""
    tls = protocol.startswith("https")
    binary = server_binary(context, "https_bench_server" if tls else "http_bench_server")
    if isinstance(binary, Missing):
        return binary
    options = ["--workers", str(context.workers), *flags]
    if context.static_dir:
        options += ["--static", str(context.static_dir)]
    env = {"XK_IO": xk_io} if xk_io else {}
    if tls:
        return Peer(
            name,
            lambda port, _dir: [str(binary), str(port), str(context.cert), str(context.key)] + options,
            env,
            tls=True,
        )
    return Peer(name, lambda port, _dir: [str(binary), str(port)] + options, env)


def xkit_epoll_peer(protocol, context):
    """xKit on epoll (XK_IO=epoll): what the io_uring backend is measured against."""
    return xkit_peer(protocol, context, "xkit_epoll", "epoll")


def xkit_compress_peer(protocol, context):
    """xKit compressing on the fly (--compress): a static file without a twin is compressed
    once per worker and kept (xkbench static's text cases)."""
    return xkit_peer(protocol, context, "xkit_compress", flags=("--compress",))


def xkit_compress_uncached_peer(protocol, context):
    """The same with nothing kept (--static-compress-cache 0): compressed per request."""
    return xkit_peer(protocol, context, "xkit_compress_uncached", flags=("--compress", "--static-compress-cache", "0"))


def baseline_peer(protocol, context, name="baseline", binary_name="baseline_responder"):
    """The floor for HTTP/1.1: one epoll thread that counts requests and answers pong. For
    websocket, the same with --websocket: a 101, then an echo per 11 bytes of ws_load -raw's
    "hello" frames (bench/servers/floor_websocket.h); it answers no GET /ping, so readiness
    is an accepted connection."""
    if protocol not in ("http1", "pipeline", "websocket"):
        return Missing("n/a", "the baseline speaks HTTP/1.1 and ws_load -raw's WebSocket only")
    binary = server_binary(context, binary_name)
    if isinstance(binary, Missing):
        return binary
    if protocol == "websocket":
        return Peer(name, lambda port, _dir: [str(binary), str(port), "--websocket"], http1_probe=False)
    return Peer(name, lambda port, _dir: [str(binary), str(port)])


def baseline_uring_peer(protocol, context):
    """The same floor on io_uring (multishot accept and recv, a provided buffer ring); built
    only where CMake found liburing (Debian: liburing-dev)."""
    peer = baseline_peer(protocol, context, "baseline_uring", "baseline_uring")
    if isinstance(peer, Missing) and peer.status == "not built":
        peer.reason += " (CMake builds it only with liburing: apt-get install liburing-dev)"
    return peer


def go_peer(protocol, context):
    if context.go_bin is None:
        return Missing("skipped", context.go_problem)
    binary = context.go_bin / GO_PEER_FOR[protocol]
    env = {"GOMAXPROCS": str(context.workers)}
    if protocol.startswith("https"):
        return Peer(
            "go", lambda port, _dir: [str(binary), str(port), str(context.cert), str(context.key)], env, tls=True
        )
    return Peer("go", lambda port, _dir: [str(binary), str(port)], env)


# The /static/ location of `xkbench static` in each peer's configuration, as the peer's
# own documentation tunes it for files: nginx sends them with sendfile and keeps their
# descriptors and metadata for a second (open_file_cache, as the arena rules allow), and
# gzip_static serves .gz twins (Debian's nginx has no brotli); h2o serves .br and .gz twins.
NGINX_STATIC = """location /static/ {
            alias @DIR@/;
            sendfile on;
            tcp_nopush on;
            open_file_cache max=1000 inactive=20s;
            open_file_cache_valid 1s;
            gzip_static on;
            gzip_vary on;
            etag on;
        }"""
H2O_STATIC = """      /static:
        file.dir: @DIR@
        file.send-compressed: ON"""


def static_block(template, context):
    return template.replace("@DIR@", str(context.static_dir)) if context.static_dir else ""


def fill_template(template, values):
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def nginx_peer(protocol, context):
    """nginx with worker_processes = workers. Its cleartext HTTP/2 port (listen ... http2)
    speaks HTTP/2 only, so readiness there is an accepted connection."""
    nginx = find_tool("nginx", "/usr/sbin/nginx")
    if nginx is None:
        return Missing("skipped", "nginx not installed (apt-get install nginx-light)")
    tls = protocol.startswith("https")
    flags = {"h2c": "http2", "https1": "ssl http2", "https2": "ssl http2"}.get(protocol, "")
    # nginx 1.22 offers TLS 1.3 only when asked (its default became 1.2 and 1.3 in 1.23.4):
    # without this line every HTTPS row would compare TLS 1.3 with nginx's TLS 1.2.
    tls_lines = (
        f"ssl_certificate {context.cert};\n        ssl_certificate_key {context.key};"
        "\n        ssl_protocols TLSv1.2 TLSv1.3;"
        if tls
        else ""
    )

    def command(port, run_dir):
        (run_dir / "echo").mkdir()
        for size in context.echo_sizes:
            (run_dir / "echo" / str(size)).write_bytes(b"x" * size)
        conf = fill_template(
            NGINX_TEMPLATE,
            {
                "WORKERS": str(context.workers),
                "PORT": str(port),
                "RUNDIR": str(run_dir),
                "LISTEN_FLAGS": flags,
                "TLS": tls_lines,
                "STATIC": static_block(NGINX_STATIC, context),
            },
        )
        (run_dir / "nginx.conf").write_text(conf)
        return [nginx, "-c", str(run_dir / "nginx.conf"), "-p", str(run_dir), "-e", "stderr"]

    return Peer("nginx", command, tls=tls, http1_probe=protocol != "h2c", workers_are_children=True)


def h2o_peer(protocol, context):
    """h2o with num-threads = workers; one port speaks HTTP/1.1 and HTTP/2 (by prior
    knowledge in clear, by ALPN over TLS). It serves files: /ping is the 4 bytes "pong"."""
    h2o = find_tool("h2o", "/usr/sbin/h2o")
    if h2o is None:
        return Missing("skipped", "h2o not installed (apt-get install h2o)")
    tls = protocol.startswith("https")
    tls_lines = f"  ssl:\n    certificate-file: {context.cert}\n    key-file: {context.key}" if tls else ""

    def command(port, run_dir):
        # h2o drops root for "nobody", which must read these files: run_dir is 0755.
        (run_dir / "pong").write_bytes(b"pong")
        (run_dir / "echo4k").write_bytes(b"x" * H2O_ECHO_BYTES)
        conf = fill_template(
            H2O_TEMPLATE,
            {
                "THREADS": str(context.workers),
                "PORT": str(port),
                "RUNDIR": str(run_dir),
                "TLS": tls_lines,
                "STATIC": static_block(H2O_STATIC, context),
            },
        )
        (run_dir / "h2o.conf").write_text(conf)
        return [h2o, "-c", str(run_dir / "h2o.conf")]

    # Over TLS h2o signs in a child (neverbleed), which serves as much as h2o itself does.
    return Peer("h2o", command, tls=tls, serving_children_named="h2o" if tls else None)


MAKERS = {
    "xkit": xkit_peer,
    "xkit_epoll": xkit_epoll_peer,
    "xkit_compress": xkit_compress_peer,
    "xkit_compress_uncached": xkit_compress_uncached_peer,
    "go": go_peer,
    "nginx": nginx_peer,
    "h2o": h2o_peer,
    "baseline": baseline_peer,
    "baseline_uring": baseline_uring_peer,
}
