"""The checked-in HPACK tables (src/xhttp/http2/hpack_tables.c) are what
hpack_gen.py makes from the RFC 7541 text beside it today. The library's build
compiles the checked-in copy, so it needs no Python; this is where a change to
the generator or the RFC text that was not regenerated is caught."""

import os
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
HPACK_DIR = os.path.join(SOURCE_DIR, "src", "xhttp", "http2")


class HpackTablesTest(unittest.TestCase):
    def test_checked_in_tables_match_the_generator(self):
        with tempfile.TemporaryDirectory(prefix="xkit-hpack-") as tmp:
            fresh = os.path.join(tmp, "hpack_tables.c")
            subprocess.run(
                [sys.executable, "hpack_gen.py", "hpack_huffman.txt", "hpack_static.tsv", fresh],
                cwd=HPACK_DIR,
                check=True,
            )
            with open(fresh, "rb") as f:
                generated = f.read()
        with open(os.path.join(HPACK_DIR, "hpack_tables.c"), "rb") as f:
            checked_in = f.read()
        self.assertGreater(len(generated), 10000)
        self.assertTrue(
            generated == checked_in,
            "src/xhttp/http2/hpack_tables.c differs from what hpack_gen.py makes; regenerate it: "
            "cd src/xhttp/http2 && python3 hpack_gen.py hpack_huffman.txt hpack_static.tsv hpack_tables.c",
        )


if __name__ == "__main__":
    unittest.main()
