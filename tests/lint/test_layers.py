"""The source tree's layers, checked: every file under src/ includes only its
own folder, the layers above it, and the public headers its layer may use; and
every file opens with a comment that names it and says what it is for.

LAYERS is the architecture as data, top to bottom (README.md, "Architecture",
describes it). A folder may include its own files and any folder with a
smaller rank; folders of equal rank (HTTP/1.1 and HTTP/2) may not include each
other."""

import os
import re
import unittest

SOURCE_DIR = os.environ.get("XK_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
SRC = os.path.join(SOURCE_DIR, "src")

# folder under src/ -> (rank, public header folders it may include)
LAYERS = {
    "xbase/text": (0, ("xbase",)),
    "xbase/mem": (1, ("xbase",)),
    "xbase/io": (2, ("xbase",)),
    "xbase/loop": (3, ("xbase",)),
    "xnet": (4, ("xbase",)),
    "xdb": (4, ("xbase", "xdb")),
    # TLS settings and the info a handler reads are public types in <xhttp/tls_conf.h>,
    # which names nothing of the HTTP server.
    "xnet/tls": (5, ("xbase", "xhttp/tls_conf.h")),
    # QUIC (ngtcp2, GnuTLS) beside TLS: no HTTP, and the two do not include each other.
    "xnet/quic": (5, ("xbase", "xhttp/tls_conf.h")),
    "xhttp/core": (6, ("xbase", "xhttp")),
    "xhttp/http1": (7, ("xbase", "xhttp")),
    "xhttp/http2": (7, ("xbase", "xhttp")),
    "xhttp/websocket": (7, ("xbase", "xhttp")),
    # HTTP/3's QPACK reuses HPACK's Huffman code, field type and verdicts, and HTTP/2's
    # request checks: it sits just above http2/ (nothing in http2/ knows it).
    "xhttp/http3": (8, ("xbase", "xhttp")),
    "xhttp/upgrade": (8, ("xbase", "xhttp")),
    "xhttp/grpc": (8, ("xbase", "xhttp")),
    "xhttp/observe": (8, ("xbase", "xhttp")),
    "xhttp/filter": (8, ("xbase", "xhttp")),
    "xhttp/handler": (8, ("xbase", "xhttp")),
    # The upstream client reads responses with HTTP/1.1's parser; the proxy is a handler on it.
    "xhttp/client": (8, ("xbase", "xhttp")),
    "xhttp/proxy": (9, ("xbase", "xhttp")),
    "xhttp": (10, ("xbase", "xhttp", "xkit.h")),
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def sources():
    for root, _, files in os.walk(SRC):
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                path = os.path.join(root, name)
                yield path, os.path.relpath(root, SRC)


def violations(rel, folder, text):
    """What text (the file rel, in src/folder) includes that its layer may not."""
    rank, public = LAYERS[folder]
    wrong = []
    for kind, target in INCLUDE.findall(text):
        if kind == '"':
            other = layer_of(target)
            if other not in LAYERS:
                wrong.append(f'{rel}: "{target}" names no layer (write it from src/)')
            elif other != folder and LAYERS[other][0] >= rank:
                wrong.append(f'{rel} ({folder}) includes "{target}" ({other}): not above it')
        elif target.startswith(("xbase/", "xhttp/", "xdb/")) or target == "xkit.h":
            if not any(target == p or target.startswith(p + "/") for p in public):
                wrong.append(f"{rel} ({folder}) includes <{target}>, which its layer may not use")
    return wrong


def layer_of(include):
    """The folder an internal include ("xnet/tls/tls.h") belongs to."""
    return os.path.dirname(include)


class LayerTest(unittest.TestCase):
    def test_every_folder_under_src_is_a_known_layer(self):
        for _, folder in sources():
            self.assertIn(folder, LAYERS, f"src/{folder} is not in LAYERS: add it where it belongs")

    def test_includes_go_only_upwards(self):
        wrong = []
        for path, folder in sources():
            with open(path, encoding="utf-8") as f:
                wrong += violations(os.path.relpath(path, SOURCE_DIR), folder, f.read())
        self.assertEqual(wrong, [], "\n".join(wrong))

    def test_every_file_opens_with_a_comment_naming_it(self):
        missing = []
        for path, _ in sources():
            with open(path, encoding="utf-8") as f:
                first = f.readline()
            if not first.startswith(f"/* {os.path.basename(path)} — "):
                missing.append(os.path.relpath(path, SOURCE_DIR))
        self.assertEqual(missing, [], "files without a '/* name — what it is' opening comment")

    def test_the_check_catches_what_it_should(self):
        self.assertEqual(violations("a.c", "xnet", '#include "xnet/connection.h"\n#include <xbase/log.h>\n'), [])
        self.assertEqual(len(violations("a.c", "xnet", '#include "xhttp/core/context.h"\n')), 1)
        self.assertEqual(len(violations("a.c", "xnet", "#include <xhttp/server.h>\n")), 1)
        self.assertEqual(len(violations("a.c", "xhttp/http1", '#include "xhttp/http2/http2.h"\n')), 1)
        self.assertEqual(len(violations("a.c", "xhttp/http1", '#include "xhttp/upgrade/upgrade.h"\n')), 1)
        self.assertEqual(len(violations("a.c", "xhttp/core", '#include "context.h"\n')), 1)
        self.assertEqual(len(violations("a.c", "xnet", "#include <xdb/redis.h>\n")), 1)
        self.assertEqual(violations("a.c", "xdb", '#include <xdb/redis.h>\n#include "xbase/mem/sized.h"\n'), [])


if __name__ == "__main__":
    unittest.main()
