"""What the interop tests share: the C programs in tests/interop/ (built with
the tests, each linking a library from elsewhere), free loopback ports, and
servers of other projects started in temporary folders and always stopped.

A program or tool that is missing fails the test with what to install: they
come from scripts/install-deps.sh, so a missing one is a broken setup."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

from support.harness import MISSING_TOOL
from support.ports import free_port  # noqa: F401  (this module's callers import it from here)

START_TIMEOUT = 30.0
RUN_TIMEOUT = 120


def program_path(name, package):
    build = os.environ.get("XK_BUILD_DIR")
    if not build:
        raise AssertionError("XK_BUILD_DIR is not set; run this test through ctest")
    path = os.path.join(build, "tests", name)
    if not os.access(path, os.X_OK):
        raise AssertionError(
            f"{path} was not built: CMake found no {package} through pkg-config "
            "(scripts/install-deps.sh installs it); configure again after installing"
        )
    return path


def tool_path(name, also=()):
    """The command `name` on PATH or in one of the folders `also`."""
    path = shutil.which(name)
    for folder in also:
        if path is None and os.access(os.path.join(folder, name), os.X_OK):
            path = os.path.join(folder, name)
    if path is None:
        raise AssertionError(MISSING_TOOL.format(name))
    return path


def wait_for_port(port, proc, what, log_path=None):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = open(log_path).read()[-3000:] if log_path and os.path.exists(log_path) else ""
            raise AssertionError(f"{what} exited with {proc.returncode} before listening:\n{log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT:.0f} s")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def temp_folder(test, owner=None):
    """A temporary folder removed after test; owned by the user owner where given."""
    path = tempfile.mkdtemp(prefix="xk-interop-")
    test.addCleanup(shutil.rmtree, path, ignore_errors=True)
    if owner is not None:
        entry = pwd.getpwnam(owner)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def run_program(test, argv, backend_env):
    """Runs a C program on the backend the test runs under, failing test with
    its output unless it exits 0; returns its output."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=backend_env)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{argv[0]} hung for {RUN_TIMEOUT} s:\n{e.stdout or ''}{e.stderr or ''}") from None
    output = done.stdout + done.stderr
    test.assertEqual(done.returncode, 0, f"{os.path.basename(argv[0])} failed:\n{output[-4000:]}")
    test.assertNotIn("Sanitizer", output)
    test.assertNotIn("runtime error:", output)
    return output
