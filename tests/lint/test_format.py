"""Every C file in the tree is formatted as .clang-format says, by the
clang-format that Debian 12 ships (version 14; other versions format some
constructs differently). Reformat with: clang-format-14 -i FILE."""

import os
import shutil
import subprocess
import unittest

SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
FOLDERS = ("include", "src", "tests", "bench", "examples", "arena")


def c_files():
    for folder in FOLDERS:
        for root, _, files in os.walk(os.path.join(SOURCE_DIR, folder)):
            for name in sorted(files):
                if name.endswith((".c", ".h")):
                    yield os.path.join(root, name)


class FormatTest(unittest.TestCase):
    def test_c_sources_match_clang_format(self):
        tool = shutil.which("clang-format-14")
        self.assertIsNotNone(tool, "clang-format-14 is missing: run scripts/install-deps.sh")
        files = list(c_files())
        self.assertGreater(len(files), 50)
        done = subprocess.run([tool, "--dry-run", "--Werror", *files], capture_output=True, text=True)
        unformatted = sorted({line.split(":")[0] for line in done.stderr.splitlines() if ": error:" in line})
        self.assertEqual(
            done.returncode,
            0,
            "not formatted (clang-format-14 -i):\n" + "\n".join(os.path.relpath(f, SOURCE_DIR) for f in unformatted),
        )


if __name__ == "__main__":
    unittest.main()
