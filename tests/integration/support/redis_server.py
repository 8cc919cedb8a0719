"""A redis-server of Debian's package for a test: started in a temporary
folder on a free loopback port (and a Unix socket in the folder), with nothing
saved to disk, and always stopped.
It can be killed and started again on the same port, as a restart under use."""

import os
import signal
import socket
import subprocess

from support.interop import free_port, stop, temp_folder, tool_path, wait_for_port


class RedisServer:
    def __init__(self, test):
        self.binary = tool_path("redis-server")
        self.folder = temp_folder(test)
        self.port = free_port()
        self.log_path = os.path.join(self.folder, "redis.log")
        self.unix_path = os.path.join(self.folder, "redis.sock")
        self.proc = None
        test.addCleanup(self.stop)
        self.start()

    def start(self):
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder]
        argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", self.log_path]
        argv += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc, "redis-server", self.log_path)

    def kill(self):
        """Kills it at once (SIGKILL): its connections end without a goodbye."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def command(self, *args):
        """Sends one command (str or bytes arguments) and returns the reply's first line, as bytes
        (b":1", b"+OK", b"$5" for a bulk string): enough for a test to check what is stored."""
        parts = [arg.encode() if isinstance(arg, str) else arg for arg in args]
        request = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as conn:
            conn.sendall(request)
            reply = b""
            while b"\r\n" not in reply:
                piece = conn.recv(4096)
                if not piece:
                    break
                reply += piece
        return reply.split(b"\r\n", 1)[0]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is not None:
            stop(self.proc)
