"""Every Go module in the tree (the bench peers, the tests' HTTP/2 client) is formatted as gofmt
says and passes go vet. Fix with: gofmt -w . in the module, then what go vet ./... reports.
go vet needs the modules' dependencies: from Go's module cache (no network then), else from
its proxy, as the tests' and the bench's `go build` get them."""

import os
import shutil
import subprocess
import unittest

SOURCE_DIR = os.path.abspath(os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", ".."))


def go_binary():
    """Go as the tests and the bench find it: on PATH, else where go.dev's tarball puts it."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    return go if os.path.exists(go) else None


def go_modules():
    """The folders holding a go.mod, build folders and .git left out."""
    modules = []
    for root, dirs, files in os.walk(SOURCE_DIR):
        dirs[:] = sorted(d for d in dirs if not (d.startswith(".") or d == "build" or d.startswith("build-")))
        if "go.mod" in files:
            modules.append(root)
    return modules


class GoTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.go = go_binary()
        cls.modules = go_modules()

    def run_go(self, module, *args):
        self.assertIsNotNone(self.go, "Go is missing (not on PATH, not /usr/local/go/bin/go): get it from go.dev/dl")
        return subprocess.run([self.go, *args], cwd=module, capture_output=True, text=True, timeout=280)

    def test_every_module_is_found(self):
        found = {os.path.relpath(m, SOURCE_DIR) for m in self.modules}
        self.assertLessEqual({"bench/peers/go", "tests/integration/support/h2goclient"}, found)

    def test_go_is_formatted_by_gofmt(self):
        goroot = self.run_go(SOURCE_DIR, "env", "GOROOT").stdout.strip()
        gofmt = os.path.join(goroot, "bin", "gofmt")  # the one that comes with this go
        self.assertTrue(os.path.exists(gofmt), f"no gofmt beside go at {gofmt}")
        for module in self.modules:
            with self.subTest(module=os.path.relpath(module, SOURCE_DIR)):
                done = subprocess.run([gofmt, "-l", "."], cwd=module, capture_output=True, text=True)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(done.stdout, "", "not formatted (gofmt -w):\n" + done.stdout)

    def test_go_passes_go_vet(self):
        for module in self.modules:
            with self.subTest(module=os.path.relpath(module, SOURCE_DIR)):
                # go vet ./... is content with matching no package: make sure it has some to vet.
                listed = self.run_go(module, "list", "./...")
                self.assertEqual(listed.returncode, 0, listed.stderr)
                self.assertNotEqual(listed.stdout.split(), [], "go list ./... found no package")
                done = self.run_go(module, "vet", "./...")
                self.assertEqual(done.returncode, 0, "go vet ./...:\n" + done.stderr + done.stdout)


if __name__ == "__main__":
    unittest.main()
