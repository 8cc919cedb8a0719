"""What a run needs besides the servers: a self-signed certificate, the Go peers, request bodies."""

import os
import shutil
import subprocess

from .parsing import last_line
from .paths import PEERS_DIR
from .servers import find_tool

GO_MODULE = PEERS_DIR / "go"
# The Debian package of each tool a subcommand may need.
PACKAGES = {
    "taskset": "util-linux",
    "wrk": "wrk",
    "h2load": "nghttp2-client",
    "openssl": "openssl",
    "curl": "curl",
    "valgrind": "valgrind",
    "callgrind_control": "valgrind",
}
KEY_SPECS = {"rsa": ["-newkey", "rsa:2048"], "ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]}
GO_BUILD_TIMEOUT = 300
GO_PACKAGES = ("http_bench_server", "h2c_bench_server", "https_bench_server")


class SetupFailed(Exception):
    """Something a run needs could not be made; the message says what and why, in one line."""


def check_tools(tools):
    """Raises SetupFailed naming every tool missing and its package."""
    missing = [f"{tool} (apt-get install {PACKAGES[tool]})" for tool in tools if shutil.which(tool) is None]
    if missing:
        raise SetupFailed("missing: " + ", ".join(missing) + "; `make bench` installs them")


def make_certificate(directory, kind="rsa"):
    """A self-signed certificate for localhost (and 127.0.0.1), RSA-2048 or ECDSA P-256
    (kind "rsa" or "ecdsa"), made with the openssl command. Returns (cert, key). Both are
    world-readable: h2o and nginx's workers run as nobody."""
    openssl = find_tool("openssl", "/usr/bin/openssl")
    if openssl is None:
        raise SetupFailed("openssl is not installed (apt-get install openssl)")
    cert, key = directory / f"{kind}-cert.pem", directory / f"{kind}-key.pem"
    argv = [
        openssl,
        "req",
        "-x509",
        *KEY_SPECS[kind],
        "-nodes",
        "-sha256",
        "-days",
        "7",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        str(key),
        "-out",
        str(cert),
    ]
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
    """Builds bench/peers/go's peers into directory (Go's build cache makes a rebuild quick);
    returns directory. The module's dependencies come from Go's module cache or proxy."""
    go = find_tool("go", "/usr/local/go/bin/go")
    if go is None:
        raise SetupFailed("Go is not installed (not on PATH, not /usr/local/go/bin/go); get it from https://go.dev/dl/")
    directory.mkdir(parents=True, exist_ok=True)
    argv = [go, "build", "-o", str(directory) + os.sep] + [f"./{package}" for package in packages]
    try:
        done = subprocess.run(argv, cwd=GO_MODULE, capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT)
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
