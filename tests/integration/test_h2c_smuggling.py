"""h2c smuggling through a proxy in front of the real bench server: HAProxy
(Debian's, default HTTP mode) and nginx (a proxy_pass that forwards Upgrade and
Connection, as WebSocket setups do), each with a rule that denies /echo.

A client asks the proxy for GET / with "Upgrade: h2c". If the server answers
101, the proxy turns the connection into a tunnel it no longer reads, and the
HTTP/2 requests that follow (here one for /echo) pass its rules by. xKit's h2c
Upgrade is off by default (xHttpServerConf.h2c_upgrade): the request is served
over HTTP/1.1 and /echo never is. With --h2c-upgrade the hole is shown open
through both proxies, which is the risk the setting's documentation names; and
directly, with no proxy, the Upgrade still works when asked for."""

import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import h2.config
import h2.connection
import h2.events

from support import haproxy
from support.harness import Conn, require_tool, start_server
from support.ports import free_port

ECHO_SIZE = 7777  # /echo?size=N answers N bytes of "x": what would show it was served
ECHO_BODY = b"x" * ECHO_SIZE


def sbin_tool(test, name):
    """A daemon's path: on PATH, or in /usr/sbin, which a user's PATH may leave out."""
    path = shutil.which(name) or f"/usr/sbin/{name}"
    return path if os.path.exists(path) else require_tool(test, name)


def wait_listening(port, proc, what, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} is not listening on {port} after {timeout} s")


def start_proxy(test, argv, port, what):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop():
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()

    test.addCleanup(stop)
    wait_listening(port, proc, what)
    return port


def start_haproxy(test, backend_port):
    """HAProxy in HTTP mode denying /echo; its port."""
    return haproxy.start_haproxy(
        test,
        [f"server xkit 127.0.0.1:{backend_port}"],
        frontend=["http-request deny if { path_beg /echo }"],
        defaults=["timeout tunnel 10s"],
    ).port


def start_nginx(test, backend_port):
    """nginx's proxy_pass with Upgrade and Connection forwarded, /echo denied; its port."""
    nginx = sbin_tool(test, "nginx")
    top = tempfile.mkdtemp(prefix="xk-nginx-")
    test.addCleanup(shutil.rmtree, top, True)
    port = free_port()
    conf = os.path.join(top, "nginx.conf")
    temps = "".join(
        f"    {kind}_temp_path {top}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    with open(conf, "w") as f:
        f.write(
            ("user root;\n" if os.geteuid() == 0 else "") + "daemon off;\n"
            "worker_processes 1;\n"
            f"pid {top}/nginx.pid;\n"
            f"error_log {top}/error.log;\n"
            "events { worker_connections 64; }\n"
            "http {\n"
            "    access_log off;\n" + temps + "    server {\n"
            f"        listen 127.0.0.1:{port};\n"
            "        location /echo { return 403; }\n"
            "        location / {\n"
            f"            proxy_pass http://127.0.0.1:{backend_port};\n"
            "            proxy_http_version 1.1;\n"
            "            proxy_set_header Upgrade $http_upgrade;\n"
            '            proxy_set_header Connection "upgrade";\n'
            "        }\n"
            "    }\n"
            "}\n"
        )
    return start_proxy(test, [nginx, "-p", top, "-c", conf, "-e", f"{top}/error.log"], port, "nginx")


def smuggle(port):
    """Asks port for GET / with Upgrade: h2c, then sends HTTP/2's preface and a
    HEADERS for /echo as if the switch was made. Returns (the status of the
    answer to GET /, [(status, body) of what came back on stream 3 over HTTP/2],
    every byte received after the first head)."""
    h2conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    settings = h2conn.initiate_upgrade_connection()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: " + settings + b"\r\n\r\n"
        )
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = sock.recv(65536)
            if not data:
                raise AssertionError(f"closed before an answer to the Upgrade: {buf!r}")
            buf += data
        head, rest = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        h2conn.send_headers(
            3,
            [
                (":method", "GET"),
                (":path", f"/echo?size={ECHO_SIZE}"),
                (":scheme", "http"),
                (":authority", "localhost"),
            ],
            end_stream=True,
        )
        sock.sendall(h2conn.data_to_send())
        received = bytearray(rest)
        answers, stream3 = [], {"status": None, "body": b""}
        deadline = time.monotonic() + 5
        sock.settimeout(1)
        events = h2conn.receive_data(rest) if status == 101 else []
        while time.monotonic() < deadline:
            for event in events:
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == 3:
                    stream3["status"] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == 3:
                    stream3["body"] += event.data
                    h2conn.acknowledge_received_data(event.flow_controlled_length, 3)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == 3:
                    answers.append((stream3["status"], stream3["body"]))
            if answers:
                break
            if status == 101:
                sock.sendall(h2conn.data_to_send())
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
            events = h2conn.receive_data(data) if status == 101 else []
        return status, answers, bytes(received)


class SmugglingThroughProxiesTest(unittest.TestCase):
    def check_proxy(self, start_proxy_fn, h2c_upgrade):
        server = start_server(self, ["--workers", "1"] + (["--h2c-upgrade"] if h2c_upgrade else []))
        port = start_proxy_fn(self, server.port)
        # The proxy's rule holds for plain requests, and the rest passes.
        with Conn(port) as conn:
            conn.request("GET", f"/echo?size={ECHO_SIZE}")
            self.assertEqual(conn.read_response().status, 403)
        with Conn(port) as conn:
            conn.request("GET", "/ping")
            self.assertEqual(conn.read_response().body, b"pong")
        status, answers, received = smuggle(port)
        server.stop_and_check()
        return status, answers, received

    def assert_not_smuggled(self, start_proxy_fn):
        status, answers, received = self.check_proxy(start_proxy_fn, h2c_upgrade=False)
        self.assertEqual(status, 200, "the Upgrade: h2c request is served over HTTP/1.1, without a 101")
        self.assertEqual(answers, [], "an HTTP/2 answer came through the proxy")
        self.assertNotIn(ECHO_BODY, received, "/echo was served past the proxy's rule")

    def assert_smuggled(self, start_proxy_fn):
        status, answers, _ = self.check_proxy(start_proxy_fn, h2c_upgrade=True)
        self.assertEqual(status, 101)
        self.assertEqual(answers, [(200, ECHO_BODY)], "with h2c Upgrade on, /echo passes the proxy's rule by")

    def test_haproxy_cannot_be_walked_past_by_default(self):
        self.assert_not_smuggled(start_haproxy)

    def test_nginx_cannot_be_walked_past_by_default(self):
        self.assert_not_smuggled(start_nginx)

    def test_haproxy_is_walked_past_with_h2c_upgrade_on_the_documented_risk(self):
        self.assert_smuggled(start_haproxy)

    def test_nginx_is_walked_past_with_h2c_upgrade_on_the_documented_risk(self):
        self.assert_smuggled(start_nginx)


class DirectUpgradeTest(unittest.TestCase):
    def test_with_the_setting_h2c_upgrade_still_works_directly(self):
        server = start_server(self, ["--workers", "1", "--h2c-upgrade"])
        # The same attempt straight at the server: 101, then stream 3 served over HTTP/2.
        status, answers, _ = smuggle(server.port)
        self.assertEqual((status, answers), (101, [(200, ECHO_BODY)]))
        server.stop_and_check()


if __name__ == "__main__":
    unittest.main()
