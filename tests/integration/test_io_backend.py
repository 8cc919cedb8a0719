"""The I/O backend picked at start: io_uring by default, epoll when XK_IO=epoll
asks for it or when the kernel refuses io_uring (here: a seccomp filter, as
Docker's default profile sets, through support/without_io_uring.c), one log
line naming it and, for epoll, why; and a server on either backend serving
requests and stopping cleanly.

io_uring is not skipped where it is missing: this project's machines run it,
so a refusal fails the default test with the reason the server logged."""

import os
import re
import time
import unittest

from support.harness import Conn, ServerProcess, http_request

PING = http_request("GET", "/ping")
IO_LINE = re.compile(r"\bio: (.*)$", re.M)


def without_io_uring_path():
    path = os.environ.get("XK_WITHOUT_URING")
    if not path or not os.access(path, os.X_OK):
        raise AssertionError("XK_WITHOUT_URING is not set to tests/integration/support/without_io_uring "
                             "(built with the tests); run this test through ctest")
    return path


class IoBackendTest(unittest.TestCase):
    def start(self, xk_io="", refused=False):
        # XK_IO empty is the default: this file also runs in the suite's epoll pass.
        server = ServerProcess(["--workers", "2"], env={"XK_IO": xk_io})
        if refused:
            server.argv = [without_io_uring_path(), *server.argv]
        self.addCleanup(server.close)
        return server.start()

    def assert_says(self, server, line):
        """Serves, then finds the one line: the first worker whose loop runs logs it, maybe
        a moment after another worker served."""
        self.serve(server)
        deadline = time.monotonic() + 5
        while not IO_LINE.search(server.stderr_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(IO_LINE.findall(server.stderr_text()), [line], server.stderr_tail())
        server.stop_and_check()

    def serve(self, server):
        with Conn(server.port, server.connect_host) as conn:
            for _ in range(3):
                conn.send(PING * 4)
                for _ in range(4):
                    self.assertEqual(conn.read_response().status, 200)

    def test_the_default_is_io_uring_said_once_for_all_workers(self):
        server = self.start()
        self.assert_says(server, "io_uring")

    def test_xk_io_epoll_forces_epoll_and_says_so(self):
        server = self.start("epoll")
        self.assert_says(server, "epoll (XK_IO=epoll)")

    def test_xk_io_io_uring_forces_io_uring(self):
        server = self.start("io_uring")
        self.assert_says(server, "io_uring")

    def test_an_unknown_xk_io_value_is_named_and_the_default_runs(self):
        server = self.start("kqueue")
        self.assert_says(server, "io_uring (XK_IO=kqueue is neither io_uring nor epoll; ignored)")

    def test_io_uring_refused_by_seccomp_falls_back_to_epoll_with_the_reason(self):
        server = self.start(refused=True)
        self.assert_says(server, "epoll (io_uring_setup: Operation not permitted)")

    def test_io_uring_asked_for_but_refused_still_serves_on_epoll(self):
        server = self.start("io_uring", refused=True)
        self.assert_says(server, "epoll (io_uring_setup: Operation not permitted)")


if __name__ == "__main__":
    unittest.main()
