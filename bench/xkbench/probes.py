"""Connections this process opens itself: idle keep-alive connections for the memory cases,
and the TLS checks (what `openssl s_client` negotiates, whether a session resumes)."""

import concurrent.futures
import os
import re
import selectors
import socket
import subprocess
import time

from .parsing import last_line
from .servers import PING_REQUEST, RunFailed, client_tls_context, find_tool

# Plain connections kept mid-handshake at once: below every peer's listen backlog, so no
# SYN is dropped and retried a second later.
IDLE_OPEN_WINDOW = 256
IDLE_OPENERS = 16  # threads opening TLS connections


def measure_idle(server, count, idle_seconds, warm_up, request=PING_REQUEST):
    """RSS growth per connection that has been served one request (GET /ping) and then sits
    idle: warm_up() first, then count connections (TLS ones when the server speaks TLS)."""
    warm_up()
    time.sleep(0.5)  # let the warm-up connections close
    rss_before = server.rss_bytes()
    started = time.monotonic()
    opener = open_tls_connections if server.peer.tls else open_plain_connections
    connections = opener(server.port, count, request=request)
    opened_in = time.monotonic() - started
    try:
        time.sleep(idle_seconds)
        rss_after = server.rss_bytes()
        closed = count_closed(connections)
    finally:
        for sock in connections:
            sock.close()
    if closed:
        raise RunFailed(f"server closed {closed} of {len(connections)} connections while idle")
    return {
        "connections": len(connections),
        "rss_before": rss_before,
        "rss_after": rss_after,
        "bytes_per_connection": (rss_after - rss_before) / len(connections),
        "open_seconds": round(opened_in, 1),
    }


def open_plain_connections(port, count, timeout=120.0, request=PING_REQUEST):
    """Opens count non-blocking connections and completes one request on each, keeping
    at most IDLE_OPEN_WINDOW in progress. Returns the open sockets."""
    selector = selectors.DefaultSelector()
    served, opened = [], 0
    deadline = time.monotonic() + timeout
    try:
        while len(served) < count:
            while opened < count and len(selector.get_map()) < IDLE_OPEN_WINDOW:
                selector.register(start_connect(port), selectors.EVENT_WRITE, request)
                opened += 1
            if time.monotonic() > deadline:
                raise RunFailed(f"only {len(served)} of {count} connections served in {timeout:.0f} s")
            for key, _events in selector.select(timeout=1.0):
                if advance_connection(selector, key):
                    selector.unregister(key.fileobj)
                    served.append(key.fileobj)
    except BaseException:
        for sock in served + [key.fileobj for key in selector.get_map().values()]:
            sock.close()
        raise
    finally:
        selector.close()
    return served


def start_connect(port):
    sock = socket.socket()
    sock.setblocking(False)
    sock.connect_ex(("127.0.0.1", port))
    return sock


def advance_connection(selector, key):
    """Moves one connection along: connected -> request sent -> response read.
    Returns True once its whole response has arrived."""
    sock = key.fileobj
    if isinstance(key.data, bytes):  # the request, not yet sent
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if error:
            raise RunFailed(f"connect failed: {os.strerror(error)}")
        if sock.send(key.data) != len(key.data):
            raise RunFailed(f"short send of a {len(key.data)}-byte request")
        selector.modify(sock, selectors.EVENT_READ, bytearray())
        return False
    chunk = sock.recv(4096)
    if not chunk:
        raise RunFailed("server closed a connection before answering")
    key.data.extend(chunk)
    return response_complete(bytes(key.data))


def response_complete(data):
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return False
    status_line = head.split(b"\r\n", 1)[0]
    if not status_line.startswith(b"HTTP/1.1 200"):
        raise RunFailed(f"the request was answered {status_line[:60]!r}")
    if re.search(rb"(?im)^transfer-encoding:.*chunked", head):  # a proxy may re-frame the answer
        return body.endswith(b"0\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    if not length:
        raise RunFailed("the response has neither Content-Length nor chunked framing")
    return len(body) >= int(length.group(1))


def count_closed(connections):
    """A connection the server hung up on reads as ready (EOF) without our asking."""
    with selectors.DefaultSelector() as selector:
        for sock in connections:
            selector.register(sock, selectors.EVENT_READ)
        return len(selector.select(timeout=0))


def open_tls_connections(port, count, request=PING_REQUEST):
    """Opens count TLS connections from IDLE_OPENERS threads, each served one GET /ping over
    HTTPS/1.1, and returns them open. Any failure closes them all and raises RunFailed."""
    context = client_tls_context()
    with concurrent.futures.ThreadPoolExecutor(IDLE_OPENERS) as pool:
        futures = [pool.submit(open_served_tls_connection, port, context, request=request) for _ in range(count)]
        done = [future.exception() or future.result() for future in futures]
    opened = [item for item in done if not isinstance(item, BaseException)]
    errors = [item for item in done if isinstance(item, BaseException)]
    if errors:
        for sock in opened:
            sock.close()
        raise RunFailed(f"{len(errors)} of {count} connections failed: {errors[0]}")
    return opened


def open_served_tls_connection(port, context, session=None, request=PING_REQUEST):
    """A TLS connection (offering session, if given) that has been answered one request."""
    sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname="localhost", session=session
    )
    try:
        sock.sendall(request)
        response = b""
        while not response_complete(response):
            chunk = sock.recv(4096)
            if not chunk:
                raise RunFailed("server closed a connection before answering")
            response += chunk
    except BaseException:
        sock.close()
        raise
    return sock


def resumes(port):
    """Whether a second connection that offers the session (TLS 1.3: the ticket) the first one
    received, after its GET /ping was answered, is resumed."""
    context = client_tls_context()
    with open_served_tls_connection(port, context) as first:
        session = first.session
    with open_served_tls_connection(port, context, session) as second:
        return second.session_reused


S_CLIENT = {
    "version": r"^(?:New|Reused), (\S+), Cipher is",
    "cipher": r"^(?:New|Reused), \S+, Cipher is (\S+)",
    "group": r"Server Temp Key: ([^,\n]+)",
    "alpn": r"ALPN protocol: (\S+)",
    "key_bits": r"Server public key is (\d+) bit",
}


def negotiated(port, alpn=None, env=None):
    """What `openssl s_client` gets (by default OpenSSL's default offer, as wrk's and
    h2load's; env may hold an OPENSSL_CONF that narrows it): {"version", "cipher", "group",
    "alpn", "key_bits"}, None for what it did not print, and "error", its last line."""
    argv = [
        find_tool("openssl", "/usr/bin/openssl") or "openssl",
        "s_client",
        "-connect",
        f"127.0.0.1:{port}",
        "-servername",
        "localhost",
    ]
    if alpn:
        argv += ["-alpn", alpn]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=10,
            env={**os.environ, **(env or {})},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RunFailed(f"openssl s_client: {error}") from None
    found = {key: re.search(pattern, done.stdout, re.M) for key, pattern in S_CLIENT.items()}
    record = {key: match.group(1) if match else None for key, match in found.items()}
    record["error"] = last_line(done.stderr)
    return record


def what_curl_gets(url, flags):
    """(Content-Encoding, body bytes) of one GET of url, as curl with flags sees it; RunFailed
    unless it answers 200."""
    done = subprocess.run(
        ["curl", "-sk", "-o", "/dev/null", "-D", "-", "-w", "size=%{size_download}", *flags, url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines or " 200" not in lines[0]:
        raise RunFailed(f"{url} did not answer 200: {done.stdout[:200]!r} {done.stderr[:200]!r}")
    coding = next(
        (line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("content-encoding:")), "identity"
    )
    return coding, int(lines[-1].removeprefix("size="))
