"""What a run needs besides the servers: a self-signed certificate, the Go peers, request bodies."""

import os
import subprocess
from pathlib import Path

from .parsing import last_line
from .servers import find_tool

GO_MODULE = Path(__file__).resolve().parent.parent / "go"
GO_BUILD_TIMEOUT = 300
GO_PACKAGES = ("http_bench_server", "h2c_bench_server", "https_bench_server")


class SetupFailed(Exception):
    """Something a run needs could not be made; the message says what and why, in one line."""


def make_certificate(directory):
    """A self-signed RSA-2048 certificate for localhost (and 127.0.0.1), made with the
    openssl command. Returns (cert, key). Both are world-readable: h2o and nginx's workers
    run as nobody."""
    openssl = find_tool("openssl", "/usr/bin/openssl")
    if openssl is None:
        raise SetupFailed("openssl is not installed (apt-get install openssl)")
    cert, key = directory / "cert.pem", directory / "key.pem"
    argv = [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "7",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SetupFailed(f"openssl could not make a certificate: {error}") from None
    if done.returncode != 0:
        raise SetupFailed(f"openssl could not make a certificate: {last_line(done.stderr)}")
    for path in (cert, key):
        path.chmod(0o644)
    return cert, key


def build_go_peers(directory, packages=GO_PACKAGES):
    """Builds bench/go's peers into directory (Go's build cache makes a rebuild quick);
    returns directory. The module's dependencies come from Go's module cache or proxy."""
    go = find_tool("go", "/usr/local/go/bin/go")
    if go is None:
        raise SetupFailed("Go is not installed (not on PATH, not /usr/local/go/bin/go); "
                          "get it from https://go.dev/dl/")
    directory.mkdir(parents=True, exist_ok=True)
    argv = [go, "build", "-o", str(directory) + os.sep] + [f"./{package}" for package in packages]
    try:
        done = subprocess.run(argv, cwd=GO_MODULE, capture_output=True, text=True,
                              timeout=GO_BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SetupFailed(f"go build took over {GO_BUILD_TIMEOUT} s") from None
    if done.returncode != 0:
        raise SetupFailed("go build failed: " + last_line(done.stderr))
    return directory


def write_bodies(directory, sizes):
    """POST bodies of each size, random bytes; returns {size: path}."""
    bodies = {}
    for size in sizes:
        bodies[size] = directory / f"body-{size}"
        bodies[size].write_bytes(os.urandom(size))
    return bodies
