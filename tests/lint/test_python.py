"""Every Python file in the tree (tests, the bench tool, scripts) passes `ruff check` and is
formatted as `ruff format` leaves it, under ruff.toml at the root and the ruff it pins
(other versions format some constructs differently; scripts/install-deps.sh installs it).
Fix with: ruff format . && ruff check --fix . (what remains, by hand)."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
import unittest

SOURCE_DIR = os.path.abspath(os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG = os.path.join(SOURCE_DIR, "ruff.toml")
INSTALL_DEPS = os.path.join(SOURCE_DIR, "scripts", "install-deps.sh")


def pinned_version():
    """The version ruff.toml's required-version names (ruff itself refuses to run under another)."""
    with open(CONFIG, "rb") as f:
        return tomllib.load(f)["required-version"].removeprefix("==")


def ruff_command():
    """How to run ruff: the module beside this Python (where pip puts it), else ruff on PATH."""
    done = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True)
    if done.returncode == 0:
        return [sys.executable, "-m", "ruff"]
    tool = shutil.which("ruff")
    return [tool] if tool else None


class RuffTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ruff = ruff_command()

    def run_ruff(self, *args):
        self.assertIsNotNone(self.ruff, "ruff is missing: run scripts/install-deps.sh (pip install ruff==...)")
        # --no-cache: no .ruff_cache left in the source tree.
        return subprocess.run([*self.ruff, *args, "--no-cache", "."], cwd=SOURCE_DIR, capture_output=True, text=True)

    def test_install_deps_installs_the_pinned_ruff(self):
        with open(INSTALL_DEPS) as f:
            pins = re.findall(r"^RUFF_VERSION=(\S+)$", f.read(), re.M)
        self.assertEqual(pins, [pinned_version()], "scripts/install-deps.sh's RUFF_VERSION differs from ruff.toml's")

    def test_ruff_is_the_pinned_version(self):
        self.assertIsNotNone(self.ruff, "ruff is missing: run scripts/install-deps.sh (pip install ruff==...)")
        version = subprocess.run([*self.ruff, "--version"], capture_output=True, text=True).stdout.split()[-1]
        self.assertEqual(
            version, pinned_version(), f"ruff {version} is not the pinned one: run scripts/install-deps.sh"
        )

    def test_ruff_sees_every_python_file(self):
        done = self.run_ruff("check", "--show-files")
        self.assertEqual(done.returncode, 0, done.stderr)
        seen = {os.path.relpath(line, SOURCE_DIR) for line in done.stdout.splitlines() if line.endswith(".py")}
        self.assertGreater(len(seen), 80)
        for expected in ("bench/xkbench/cli.py", "tests/integration/support/harness.py", "tests/lint/test_python.py"):
            self.assertIn(expected, seen)
        self.assertFalse([path for path in seen if path.startswith("build")], "a build folder was linted")

    def test_python_passes_ruff_check(self):
        done = self.run_ruff("check", "--output-format", "concise")
        self.assertEqual(done.returncode, 0, "ruff check (fix: ruff check --fix .):\n" + done.stdout + done.stderr)

    def test_python_is_formatted_by_ruff(self):
        done = self.run_ruff("format", "--check", "--output-format", "concise")
        self.assertEqual(done.returncode, 0, "not formatted (ruff format .):\n" + done.stdout + done.stderr)


if __name__ == "__main__":
    unittest.main()
