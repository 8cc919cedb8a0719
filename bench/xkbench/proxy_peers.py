"""The reverse proxies `xkbench compare proxy` measures, each in front of one upstream (the
least-work responder) with one worker: xKit's bench servers with --upstream, the least-work
proxy (bench/servers/floor_proxy.c), nginx proxy_pass, h2o proxy.reverse.url, HAProxy and Go's
httputil.ReverseProxy. A front is "http1" (cleartext HTTP/1.1), "h2tls" (HTTPS, HTTP/2 by
ALPN) or "http1auth" (cleartext HTTP/1.1, each request first checked by an auth subrequest to the
same upstream: xKit's --upstream-auth, nginx's auth_request; the others have none of their own);
every proxy speaks HTTP/1.1 with keep-alive to the upstream."""

from dataclasses import dataclass
from pathlib import Path

from .paths import PEERS_DIR
from .peers import Missing, fill_template, server_binary
from .servers import Peer, find_tool

NGINX_TEMPLATE = PEERS_DIR / "nginx" / "proxy.conf.in"
H2O_TEMPLATE = PEERS_DIR / "h2o" / "proxy.conf.in"
HAPROXY_TEMPLATE = PEERS_DIR / "haproxy" / "proxy.cfg.in"
# Asked of every proxy: a path none of them routes itself (xKit's bench server answers /ping on its
# own), which the upstream answers like any other.
PROXIED_PATH = "/proxied"
# The auth subrequest's target on the upstream (which answers it 200, letting every request by).
AUTH_PATH = "/auth"
AUTH_PROXIES = ("xkit", "nginx")
LABELS = {
    "xkit": "xKit",
    "floor": "least-work proxy",
    "nginx": "nginx",
    "h2o": "h2o",
    "haproxy": "HAProxy",
    "go": "Go",
}


@dataclass
class Context:
    build_dir: Path


@dataclass
class ProxyContext:
    """What the proxies are made from: the build, the upstream's address (IP:PORT), how many idle
    upstream connections each may keep, the certificate (None without one) and the Go peer.
    xKit's servers come from xkit_build_dir (another branch's build, say); the rest from build_dir."""

    build_dir: Path
    xkit_build_dir: Path
    upstream: str
    pool: int
    cert: Path | None = None
    key: Path | None = None
    cert_problem: str = "no certificate"
    go_bin: Path | None = None
    go_problem: str = "the Go peer was not built"


def find_proxies(names, front, context):
    """({name: Peer}, {name: why it is skipped}) for the proxies asked for, on front."""
    peers, skipped = {}, {}
    for name in names:
        if front == "h2tls" and context.cert is None:
            peer = Missing("skipped", context.cert_problem)
        elif front == "http1auth" and name not in AUTH_PROXIES:
            peer = Missing("n/a", "no auth subrequest of its own")
        else:
            peer = MAKERS[name](front, context)
        if isinstance(peer, Missing):
            skipped[name] = peer.reason
        else:
            peers[name] = peer
    return peers, skipped


def xkit_proxy(front, context):
    """xKit's bench server proxying what it does not route (--upstream), one worker, its pool of
    upstream connections as large as the others' (--upstream-pool: idle and total). Uploads go on
    a streaming route (--upstream-stream), so a large request body is spliced from the client's
    socket to the upstream's (conf.splice_min) instead of read whole first; GETs through the
    fallback, which costs them less."""
    tls = front == "h2tls"
    binary = server_binary(
        Context(build_dir=context.xkit_build_dir), "https_bench_server" if tls else "http_bench_server"
    )
    if isinstance(binary, Missing):
        return binary
    options = ["--workers", "1", "--upstream", f"http://{context.upstream}", "--upstream-pool", str(context.pool)]
    options.append("--upstream-stream")
    if front == "http1auth":
        options += ["--upstream-auth", f"http://{context.upstream}", "--upstream-auth-target", AUTH_PATH]
    tls_args = [str(context.cert), str(context.key)] if tls else []
    return Peer(
        "xkit", lambda port, _dir: [str(binary), str(port), *tls_args, *options], tls=tls, probe_path=PROXIED_PATH
    )


def floor_proxy(front, context):
    if front != "http1":
        return Missing("n/a", "the least-work proxy speaks cleartext HTTP/1.1 only")
    binary = server_binary(context, "floor_proxy")
    if isinstance(binary, Missing):
        return binary
    return Peer("floor", lambda port, _dir: [str(binary), str(port), context.upstream], probe_path=PROXIED_PATH)


def nginx_proxy(front, context):
    nginx = find_tool("nginx", "/usr/sbin/nginx")
    if nginx is None:
        return Missing("skipped", "nginx not installed (apt-get install nginx-light)")
    tls = front == "h2tls"
    tls_lines = (
        f"ssl_certificate {context.cert};\n        ssl_certificate_key {context.key};"
        "\n        ssl_protocols TLSv1.2 TLSv1.3;"
        if tls
        else ""
    )

    def command(port, run_dir):
        values = {
            "PORT": str(port),
            "RUNDIR": str(run_dir),
            "UPSTREAM": context.upstream,
            "KEEPALIVE": str(context.pool),
            "LISTEN_FLAGS": "ssl http2" if tls else "",
            "TLS": tls_lines,
            "AUTH": f"auth_request {AUTH_PATH};" if front == "http1auth" else "",
            "AUTH_PATH": AUTH_PATH,
        }
        (run_dir / "nginx.conf").write_text(fill_template(NGINX_TEMPLATE, values))
        return [nginx, "-c", str(run_dir / "nginx.conf"), "-p", str(run_dir), "-e", "stderr"]

    return Peer("nginx", command, tls=tls, workers_are_children=True, probe_path=PROXIED_PATH)


def h2o_proxy(front, context):
    h2o = find_tool("h2o", "/usr/bin/h2o")
    if h2o is None:
        return Missing("skipped", "h2o not installed (apt-get install h2o)")
    tls = front == "h2tls"
    tls_lines = f"  ssl:\n    certificate-file: {context.cert}\n    key-file: {context.key}" if tls else ""

    def command(port, run_dir):
        values = {"PORT": str(port), "UPSTREAM": context.upstream, "TLS": tls_lines}
        (run_dir / "h2o.conf").write_text(fill_template(H2O_TEMPLATE, values))
        return [h2o, "-c", str(run_dir / "h2o.conf")]

    # Over TLS h2o signs in a child (neverbleed), which serves as much as h2o itself does.
    return Peer("h2o", command, tls=tls, serving_children_named="h2o" if tls else None, probe_path=PROXIED_PATH)


def haproxy_proxy(front, context):
    haproxy = find_tool("haproxy", "/usr/sbin/haproxy")
    if haproxy is None:
        return Missing("skipped", "HAProxy not installed (apt-get install haproxy)")
    tls = front == "h2tls"

    def command(port, run_dir):
        bind_tls = ""
        if tls:  # HAProxy takes the certificate and its key in one file
            pem = run_dir / "cert-and-key.pem"
            pem.write_text(Path(context.cert).read_text() + Path(context.key).read_text())
            bind_tls = f" ssl crt {pem} alpn h2,http/1.1"
        values = {"PORT": str(port), "UPSTREAM": context.upstream, "BIND_TLS": bind_tls}
        (run_dir / "haproxy.cfg").write_text(fill_template(HAPROXY_TEMPLATE, values))
        return [haproxy, "-f", str(run_dir / "haproxy.cfg"), "-db"]

    return Peer("haproxy", command, tls=tls, probe_path=PROXIED_PATH)


def go_proxy(front, context):
    if context.go_bin is None:
        return Missing("skipped", context.go_problem)
    binary = context.go_bin / "reverse_proxy"
    tls = front == "h2tls"
    tls_args = [str(context.cert), str(context.key)] if tls else []
    return Peer(
        "go",
        lambda port, _dir: [str(binary), str(port), f"http://{context.upstream}", *tls_args],
        {"GOMAXPROCS": "1"},
        tls=tls,
        probe_path=PROXIED_PATH,
    )


def upstream_peer(build_dir):
    """The upstream every proxy passes requests to: the least-work responder, which answers any
    request with xKit's pong (bench/servers/baseline_responder.c), with --bodies only once the
    request's body has come: an answer in the middle of an upload would make a careful proxy
    close that upstream connection rather than reuse it."""
    binary = build_dir / "bench" / "baseline_responder"
    return Peer("upstream", lambda port, _dir: [str(binary), str(port), "--bodies"])


MAKERS = {
    "xkit": xkit_proxy,
    "floor": floor_proxy,
    "nginx": nginx_proxy,
    "h2o": h2o_proxy,
    "haproxy": haproxy_proxy,
    "go": go_proxy,
}
