"""Starts a server on listening sockets made here, as systemd's socket activation does:
binds and listens on each --listen HOST:PORT, moves the sockets to descriptors 3, 4, ...
(SD_LISTEN_FDS_START on), sets LISTEN_FDS, LISTEN_PID (this process's id, which exec
keeps) and LISTEN_FDNAMES, then execs the server's command line after "--".

  python3 launcher.py --listen 127.0.0.1:8080 [--listen ...] [--names a:b]
                      [--pid-of-another] [--no-env] [--bound-only] -- SERVER ARGS...

--pid-of-another names another process in LISTEN_PID (the server must ignore the
sockets), --no-env passes the sockets without the variables (for --listen-fd 3), and
--bound-only leaves them bound but not listening (the server must listen)."""

import argparse
import os
import socket
import sys

FIRST_FD = 3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", action="append", default=[])
    parser.add_argument("--names")
    parser.add_argument("--pid-of-another", action="store_true")
    parser.add_argument("--no-env", action="store_true")
    parser.add_argument("--bound-only", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    sockets = []
    for where in args.listen:
        host, port = where.rsplit(":", 1)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host.strip("[]"), int(port)))
        if not args.bound_only:
            s.listen(128)
        sockets.append(s)
    # Moved up in order; none of ours sits at 3 or above before the first dup2 (the
    # sockets were made after stdin/out/err, so a later one is never overwritten).
    moved = [os.dup(s.fileno()) for s in sockets]
    for s in sockets:
        s.close()
    for i, fd in enumerate(moved):
        os.dup2(fd, FIRST_FD + i, inheritable=True)
    for fd in moved:
        if fd >= FIRST_FD + len(moved):
            os.close(fd)
    env = dict(os.environ)
    if not args.no_env:
        env["LISTEN_FDS"] = str(len(sockets))
        env["LISTEN_PID"] = str(os.getppid() if args.pid_of_another else os.getpid())
        if args.names is not None:
            env["LISTEN_FDNAMES"] = args.names
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
