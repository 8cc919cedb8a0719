"""Static files (<xhttp/static.h>) as clients see them: the bench servers'
--static DIR serves a directory this module builds at /static/*, over
HTTP/1.1 (raw sockets and curl), h2c (our client, curl and nghttp) and TLS.

Checked: types, lengths and bytes; validators and 304; ranges (206, 416,
several ranges answered whole, If-Range); .br/.gz twins chosen by
Accept-Encoding q-values and decoded by curl to the original; index files and
the directory redirect; traversal attempts (raw, percent-encoded, symbolic
links out of the root) that all end in 404/403/400 without a byte from
outside; files replaced on disk served new within a second (at once without
the open-file cache), or replaced or cut short during a download; 0-byte and
100 MiB files by hash; a slow reader of a large file costing the server no
memory; and no file descriptor left open once the cache lets go."""

import email.utils
import gzip
import hashlib
import os
import shutil
import socket
import tempfile
import time
import unittest

from support.h2client import H2Conn, curl
from support.harness import Conn, ServerProcess, ServerTestCase, require_tool, run_client
from support.tls_fixtures import TlsConn, client_context, shared_certs, start_https

CERTS = None
setUpModule, tearDownModule = shared_certs(__name__)

SECRET = b"outside-the-root secret 7f3a\n"
BIG_SIZE = 100 << 20


def make_text(size, seed):
    """Compressible text of size bytes, different per seed."""
    line = f"/* {seed} */ .rule-{seed} {{ color: #{seed:06x}; margin: 0 auto; }}\n".encode()
    return (line * (size // len(line) + 1))[:size]


def brotli(path):
    """path + ".br", made by the brotli command (scripts/install-deps.sh installs it)."""
    done = run_client(["brotli", "-f", "-k", "-o", path + ".br", path])
    if done.returncode != 0:
        raise AssertionError(f"brotli failed: {done.stderr!r}")


def build_tree(top):
    """top/outside.txt (the secret) and top/root/, the directory served."""
    root = os.path.join(top, "root")
    os.makedirs(os.path.join(root, "sub", "deeper"))
    os.makedirs(os.path.join(root, "noindex"))
    with open(os.path.join(top, "outside.txt"), "wb") as f:
        f.write(SECRET)
    files = {
        "index.html": b"<h1>root index</h1>\n",
        "page.css": make_text(6000, 1),
        "app.js": make_text(120 * 1024, 2),
        "only-gz.txt": make_text(3000, 3),
        "empty.txt": b"",
        "photo.webp": os.urandom(6144),
        "font.woff2": os.urandom(2000),
        "data.json": b'{"a": 1}\n',
        "UPPER.SVG": b"<svg/>\n",
        "no-extension": b"plain bytes\n",
        "sub/index.html": b"<h1>sub index</h1>\n",
        "sub/deeper/note.txt": b"deep note\n",
        "stale.css": make_text(5000, 4),
        "replaced.txt": b"first version\n",
    }
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    for name in ("app.js", "stale.css"):
        with open(os.path.join(root, name + ".gz"), "wb") as f:
            f.write(gzip.compress(files[name]))
        brotli(os.path.join(root, name))
    with open(os.path.join(root, "only-gz.txt.gz"), "wb") as f:
        f.write(gzip.compress(files["only-gz.txt"]))
    # stale.css was edited after its twins were made: they must not hide it.
    later = time.time() + 5
    os.utime(os.path.join(root, "stale.css"), (later, later))
    os.symlink("../outside.txt", os.path.join(root, "escape.txt"))
    os.symlink(os.path.join(top, "outside.txt"), os.path.join(root, "escape-absolute.txt"))
    os.symlink("..", os.path.join(root, "up"))
    os.symlink("page.css", os.path.join(root, "inner-link.css"))
    os.mkfifo(os.path.join(root, "pipe"))
    # 100 MiB, sparse, with random blocks so the hash says the bytes are right.
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.truncate(BIG_SIZE)
        for offset in range(0, BIG_SIZE, 7 << 20):
            f.seek(offset)
            f.write(os.urandom(4096))
    return root, files


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class StaticTestCase(ServerTestCase):
    extra_args = ()

    @classmethod
    def start_shared_server(cls):
        cls.top = tempfile.mkdtemp(prefix="xk-static-")
        cls.root, cls.files = build_tree(cls.top)
        return ServerProcess(["--static", cls.root, "--workers", "1", *cls.extra_args]).start()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.top, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.root, name)

    def get(self, target, headers=None, method="GET"):
        return self.fetch(method, target, headers=headers or {})

    def url(self, target):
        return self.server.url(target)

    def served_within(self, target, expected, seconds, key=lambda resp: resp.body):
        """How long GET target took to show expected (key of the response), failing
        after seconds."""
        start = time.monotonic()
        while True:
            got = key(self.get(target))
            if got == expected:
                return time.monotonic() - start
            if time.monotonic() - start > seconds:
                self.fail(f"{target} still gave {got!r} after {seconds} s, not {expected!r}")
            time.sleep(0.05)


class FilesTest(StaticTestCase):
    def test_files_come_with_their_type_length_and_bytes(self):
        types = {
            "page.css": "text/css",
            "app.js": "application/javascript",
            "index.html": "text/html",
            "photo.webp": "image/webp",
            "font.woff2": "font/woff2",
            "data.json": "application/json",
            "UPPER.SVG": "image/svg+xml",
            "no-extension": "application/octet-stream",
            "sub/deeper/note.txt": "text/plain",
            "empty.txt": "text/plain",
        }
        for name, media_type in types.items():
            with self.subTest(name=name):
                resp = self.get("/static/" + name)
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.header("Content-Type"), media_type)
                self.assertEqual(resp.header("Content-Length"), str(len(self.files[name])))
                self.assertEqual(resp.body, self.files[name])
                self.assertEqual(resp.header("Accept-Ranges"), "bytes")
                st = os.stat(self.path(name))
                self.assertEqual(resp.header("Last-Modified"), email.utils.formatdate(int(st.st_mtime), usegmt=True))
                self.assertRegex(resp.header("ETag"), r'^"[0-9a-f]+-[0-9a-f]+\.[0-9a-f]+"$')

    def test_a_percent_encoded_name_is_decoded(self):
        resp = self.get("/static/sub/deeper/%6eote.txt")
        self.assertEqual((resp.status, resp.body), (200, b"deep note\n"))
        resp = self.get("/static/sub%2Fdeeper%2Fnote.txt")
        self.assertEqual((resp.status, resp.body), (200, b"deep note\n"))

    def test_head_has_the_length_and_no_body(self):
        resp = self.fetch("HEAD", "/static/app.js")
        self.assertEqual(resp.status, 200)
        self.assertEqual(resp.header("Content-Length"), str(len(self.files["app.js"])))
        self.assertEqual(resp.body, b"")
        with Conn(self.server.port) as conn:  # the connection goes on after it
            conn.request("HEAD", "/static/big.bin")
            self.assertEqual(conn.read_response(head_only=True).header("Content-Length"), str(BIG_SIZE))
            conn.request("GET", "/static/data.json")
            self.assertEqual(conn.read_response().body, self.files["data.json"])

    def test_other_methods_are_405_with_allow(self):
        resp = self.fetch("POST", "/static/page.css", body=b"x")
        self.assertEqual(resp.status, 405)
        self.assertEqual(resp.tokens("Allow"), {"get", "head"})

    def test_missing_files_are_404_and_say_nothing_more(self):
        for target in ("/static/nope.css", "/static/sub/nope", "/static/page.css/x", "/static/noindex/"):
            with self.subTest(target=target):
                resp = self.get(target)
                self.assertEqual(resp.status, 404)
                self.assertEqual(resp.body, b"Not Found\n")

    def test_what_is_not_a_regular_file_is_403(self):
        resp = self.get("/static/pipe")
        self.assertEqual((resp.status, resp.body), (403, b"Forbidden\n"))

    def test_directories_redirect_to_their_slash_and_serve_their_index(self):
        resp = self.get("/static/sub?x=1")
        self.assertEqual(resp.status, 301)
        self.assertEqual(resp.header("Location"), "/static/sub/?x=1")
        resp = self.get("/static/sub/")
        self.assertEqual((resp.status, resp.body), (200, b"<h1>sub index</h1>\n"))
        self.assertEqual(resp.header("Content-Type"), "text/html")
        self.assertEqual(self.get("/static/").body, b"<h1>root index</h1>\n")

    def test_a_symbolic_link_inside_the_root_is_followed(self):
        resp = self.get("/static/inner-link.css")
        self.assertEqual((resp.status, resp.body), (200, self.files["page.css"]))

    def test_the_empty_file(self):
        resp = self.get("/static/empty.txt")
        self.assertEqual((resp.status, resp.header("Content-Length"), resp.body), (200, "0", b""))

    def test_a_file_replaced_on_disk_is_served_new_within_a_second(self):
        target = self.path("replaced.txt")
        self.assertEqual(self.get("/static/replaced.txt").body, b"first version\n")
        fresh = target + ".new"
        with open(fresh, "wb") as f:
            f.write(b"second version, longer\n")
        os.replace(fresh, target)
        self.assertLess(self.served_within("/static/replaced.txt", b"second version, longer\n", 3), 1.5)
        created = self.path("created.txt")
        self.assertEqual(self.get("/static/created.txt").status, 404)
        with open(created, "wb") as f:
            f.write(b"new file\n")
        self.assertLess(self.served_within("/static/created.txt", b"new file\n", 3), 1.5)
        os.unlink(created)
        self.assertLess(self.served_within("/static/created.txt", 404, 3, key=lambda r: r.status), 1.5)

    def test_a_small_file_rewritten_in_place_is_served_new_within_a_second(self):
        # A small file's bytes are kept in memory with its open descriptor:
        # a rewrite in place (same inode, same length) shows within cache_ms,
        # and one cut short meanwhile never cuts a response short.
        target = self.path("inplace.txt")
        with open(target, "wb") as f:
            f.write(b"alpha version\n")
        self.assertLess(self.served_within("/static/inplace.txt", b"alpha version\n", 3), 1.5)
        with open(target, "r+b") as f:
            f.write(b"omega")
        self.assertLess(self.served_within("/static/inplace.txt", b"omega version\n", 3), 1.5)
        with open(target, "r+b") as f:
            f.truncate(5)
        resp = self.get("/static/inplace.txt")
        self.assertEqual(resp.status, 200)
        self.assertIn(resp.body, (b"omega version\n", b"omega"))
        self.assertEqual(int(resp.header("Content-Length")), len(resp.body))
        self.assertLess(self.served_within("/static/inplace.txt", b"omega", 3), 1.5)
        os.unlink(target)

    def test_files_kept_open_are_closed_once_their_time_is_over(self):
        baseline = self.server.settle_fd_baseline()
        for target in (
            "/static/page.css",
            "/static/app.js",
            "/static/nope",
            "/static/sub",
            "/static/pipe",
            "/static/big.bin",
        ):
            self.fetch("HEAD" if "big" in target else "GET", target, head_only="big" in target)
        time.sleep(1.2)
        self.assertEqual(self.get("/static/nope.txt").status, 404)  # a missing file keeps no descriptor
        self.server.wait_fd_count(baseline)


class UncachedTest(StaticTestCase):
    """--static-cache-ms 0: every request opens its file."""

    extra_args = ("--static-cache-ms", "0")

    def test_a_file_replaced_on_disk_is_served_new_at_once(self):
        target = self.path("replaced.txt")
        self.assertEqual(self.get("/static/replaced.txt").body, b"first version\n")
        with open(target + ".new", "wb") as f:
            f.write(b"second version, longer\n")
        os.replace(target + ".new", target)
        self.assertEqual(self.get("/static/replaced.txt").body, b"second version, longer\n")
        with open(target, "wb") as f:  # rewritten in place, same length
            f.write(b"third  version, longer\n")
        self.assertEqual(self.get("/static/replaced.txt").body, b"third  version, longer\n")

    def test_no_file_descriptor_stays_open(self):
        baseline = self.server.settle_fd_baseline()
        for target in (
            "/static/page.css",
            "/static/app.js",
            "/static/nope",
            "/static/sub",
            "/static/pipe",
            "/static/big.bin",
        ):
            self.fetch("HEAD" if "big" in target else "GET", target, head_only="big" in target)
        conn = self.connect()
        conn.request("GET", "/static/page.css", headers={"Range": "bytes=0-9"})
        self.assertEqual(conn.read_response().status, 206)
        conn.close()
        self.server.wait_fd_count(baseline)

    def test_twins_and_ranges_work_uncached(self):
        resp = self.get("/static/app.js", {"Accept-Encoding": "br;q=1, gzip;q=0.8", "Range": "bytes=0-9"})
        with open(self.path("app.js.br"), "rb") as f:
            self.assertEqual((resp.status, resp.header("Content-Encoding"), resp.body), (206, "br", f.read(10)))


class SettingsTest(StaticTestCase):
    """The settings a bench server passes on: Cache-Control, media types over
    the built-in ones, and twins turned off."""

    extra_args = (
        "--static-cache-control",
        "public, max-age=60",
        "--static-type",
        "CSS=text/x-css",
        "--static-type",
        "md=text/markdown; charset=utf-8",
        "--static-no-twins",
    )

    def test_cache_control_and_types_come_from_the_settings(self):
        with open(self.path("notes.md"), "wb") as f:
            f.write(b"# notes\n")
        resp = self.get("/static/notes.md")
        self.assertEqual(resp.header("Content-Type"), "text/markdown; charset=utf-8")
        self.assertEqual(resp.header("Cache-Control"), "public, max-age=60")
        self.assertEqual(self.get("/static/page.css").header("Content-Type"), "text/x-css")
        self.assertEqual(self.get("/static/app.js").header("Content-Type"), "application/javascript")
        etag = resp.header("ETag")
        resp = self.get("/static/notes.md", {"If-None-Match": etag})
        self.assertEqual(
            (resp.status, resp.header("Cache-Control"), resp.header("Content-Type")), (304, "public, max-age=60", None)
        )

    def test_without_twins_the_file_itself_is_sent_with_no_vary(self):
        resp = self.get("/static/app.js", {"Accept-Encoding": "br, gzip"})
        self.assertIsNone(resp.header("Content-Encoding"))
        self.assertIsNone(resp.header("Vary"))
        self.assertEqual(resp.body, self.files["app.js"])

    def test_a_bad_setting_stops_the_server_from_starting(self):
        done = run_client([self.server.argv[0], "0", "--static", self.root, "--static-type", "x=bad\x01type"])
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(b"--static", done.stderr)
        done = run_client([self.server.argv[0], "0", "--static", os.path.join(self.root, "page.css")])
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(b"--static", done.stderr)


class TraversalTest(StaticTestCase):
    ATTEMPTS = [
        "/static/../outside.txt",
        "/static/..%2foutside.txt",
        "/static/..%2Foutside.txt",
        "/static/%2e%2e/outside.txt",
        "/static/%2E%2E/outside.txt",
        "/static/%2e%2e%2foutside.txt",
        "/static/.%2e/outside.txt",
        "/static/%2e./outside.txt",
        "/static/sub/../../outside.txt",
        "/static/sub/%2e%2e/%2e%2e/outside.txt",
        "/static/sub%2f..%2f..%2foutside.txt",
        "/static/%252e%252e/outside.txt",
        "/static/..%5coutside.txt",
        "/static/..\\outside.txt",
        "/static/%5c..%5coutside.txt",
        "/static//outside.txt",
        "/static/%2foutside.txt",
        "/static/%2f%2e%2e%2foutside.txt",
        "/static/./../outside.txt",
        "/static/%2e/page.css",
        "/static/sub//note.txt",
        "/static/outside.txt%00.css",
        "/static/page.css%00",
        "/static/%00",
        "/static/escape.txt",
        "/static/escape-absolute.txt",
        "/static/up/outside.txt",
        "/static/up/root/page.css",
        "/static/up%2foutside.txt",
        "/static/..;/outside.txt",
        "/static/...",
        "/static/%c0%ae%c0%ae/outside.txt",
        "/static/%e0%80%ae%e0%80%ae/outside.txt",
        "/static/.%00./outside.txt",
        "/static/%2e%2e%5c%2e%2e%5coutside.txt",
        "/static/..",
        "/static/sub/..",
        "/static/%",
        "/static/%2",
    ]

    def test_nothing_outside_the_root_is_ever_served(self):
        self.assertGreaterEqual(len(self.ATTEMPTS), 30)
        for target in self.ATTEMPTS:
            with self.subTest(target=target):
                resp = self.get(target)
                self.assertIn(resp.status, (400, 403, 404), resp)
                self.assertNotIn(b"secret", resp.body)
                self.assertNotIn(SECRET, resp.body)
        self.assert_serves_ping()
        self.assertEqual(self.get("/static/page.css").status, 200)

    def test_curl_with_path_as_is_gets_nothing_either(self):
        for target in ("/static/../outside.txt", "/static/../../etc/passwd", "/static/up/outside.txt"):
            done = curl("--path-as-is", "-o", "-", "-w", "\n%{http_code}", self.url(target))
            self.assertIn(done.stdout.rsplit(b"\n", 1)[1], (b"400", b"403", b"404"))
            self.assertNotIn(b"secret", done.stdout)
            self.assertNotIn(b"root:", done.stdout)


class ConditionalTest(StaticTestCase):
    def validators(self, name):
        resp = self.get("/static/" + name)
        return resp.header("ETag"), resp.header("Last-Modified")

    def test_if_none_match_answers_304_with_the_validators(self):
        etag, modified = self.validators("page.css")
        for value in (etag, "W/" + etag, f'"nope", {etag}', "*"):
            with self.subTest(value=value):
                resp = self.get("/static/page.css", {"If-None-Match": value})
                self.assertEqual(resp.status, 304)
                self.assertEqual(resp.body, b"")
                self.assertIsNone(resp.header("Content-Length"))
                self.assertEqual((resp.header("ETag"), resp.header("Last-Modified")), (etag, modified))
                self.assertEqual(resp.header("Vary"), "Accept-Encoding")
        self.assertEqual(self.get("/static/page.css", {"If-None-Match": '"other"'}).status, 200)

    def test_if_modified_since_answers_304_on_the_date_given(self):
        _, modified = self.validators("page.css")
        self.assertEqual(self.get("/static/page.css", {"If-Modified-Since": modified}).status, 304)
        self.assertEqual(
            self.get("/static/page.css", {"If-Modified-Since": "Sat, 01 Jan 2000 00:00:00 GMT"}).status, 200
        )
        # If-None-Match decides when both are there (RFC 9110 §13.2.2).
        resp = self.get("/static/page.css", {"If-Modified-Since": modified, "If-None-Match": '"other"'})
        self.assertEqual(resp.status, 200)

    def test_curl_revalidates_with_its_etag(self):
        etag, _ = self.validators("data.json")
        done = curl(
            "-o", "/dev/null", "-w", "%{http_code}", "-H", f"If-None-Match: {etag}", self.url("/static/data.json")
        )
        self.assertEqual(done.stdout, b"304")

    def test_a_replaced_file_has_a_new_etag(self):
        target = self.path("replaced.txt")
        etag, _ = self.validators("replaced.txt")
        with open(target + ".new", "wb") as f:
            f.write(b"other content\n")
        os.replace(target + ".new", target)
        self.served_within("/static/replaced.txt", b"other content\n", 3)
        self.assertNotEqual(self.validators("replaced.txt")[0], etag)
        self.assertEqual(self.get("/static/replaced.txt", {"If-None-Match": etag}).status, 200)


class RangeTest(StaticTestCase):
    def test_one_range_is_206_with_its_content_range(self):
        data = self.files["app.js"]
        size = len(data)
        cases = {
            "bytes=0-99": (0, 99),
            "bytes=100-": (100, size - 1),
            "bytes=-500": (size - 500, size - 1),
            f"bytes=10-{size + 100}": (10, size - 1),
            "bytes=-999999999": (0, size - 1),
            "BYTES = 5-5": None,
        }
        for value, span in cases.items():
            with self.subTest(range=value):
                resp = self.get("/static/app.js", {"Range": value})
                if span is None:
                    self.assertEqual(resp.status, 200)  # not a Range we read: the whole file
                    self.assertEqual(resp.body, data)
                    continue
                first, last = span
                self.assertEqual(resp.status, 206)
                self.assertEqual(resp.header("Content-Range"), f"bytes {first}-{last}/{size}")
                self.assertEqual(resp.body, data[first : last + 1])

    def test_a_range_beyond_the_end_is_416(self):
        size = len(self.files["page.css"])
        for value in (f"bytes={size}-", "bytes=-0", f"bytes={size + 5}-{size + 10}"):
            with self.subTest(range=value):
                resp = self.get("/static/page.css", {"Range": value})
                self.assertEqual(resp.status, 416)
                self.assertEqual(resp.header("Content-Range"), f"bytes */{size}")
        resp = self.get("/static/empty.txt", {"Range": "bytes=0-"})
        self.assertEqual((resp.status, resp.header("Content-Range")), (416, "bytes */0"))

    def test_several_ranges_or_nonsense_get_the_whole_file(self):
        data = self.files["page.css"]
        for value in ("bytes=0-1,5-6", "bytes=5-1", "bytes=x-y", "items=0-5", "bytes=0-1, -3"):
            with self.subTest(range=value):
                resp = self.get("/static/page.css", {"Range": value})
                self.assertEqual((resp.status, resp.body), (200, data))

    def test_if_range_holds_the_range_to_the_version_it_names(self):
        resp = self.get("/static/page.css")
        etag, modified = resp.header("ETag"), resp.header("Last-Modified")
        for validator, status in ((etag, 206), (modified, 206), ('"stale"', 200), ("W/" + etag, 200)):
            with self.subTest(if_range=validator):
                got = self.get("/static/page.css", {"Range": "bytes=0-9", "If-Range": validator})
                self.assertEqual(got.status, status)

    def test_curl_fetches_ranges(self):
        data = self.files["app.js"]
        done = curl("-r", "1000-1999", self.url("/static/app.js"))
        self.assertEqual(done.stdout, data[1000:2000])
        done = curl("--http2-prior-knowledge", "-r", "-100", self.url("/static/app.js"))
        self.assertEqual(done.stdout, data[-100:])

    def test_a_range_of_the_big_file_is_sent_from_the_middle(self):
        with open(self.path("big.bin"), "rb") as f:
            f.seek(7 << 20)
            expected = f.read(1 << 20)
        first = 7 << 20
        resp = self.get("/static/big.bin", {"Range": f"bytes={first}-{first + (1 << 20) - 1}"})
        self.assertEqual((resp.status, resp.body), (206, expected))


class TwinsTest(StaticTestCase):
    # Accept-Encoding → the coding served for app.js (which has .br and .gz)
    CHOICES = [
        ("br", "br"),
        ("gzip", "gzip"),
        ("br;q=1, gzip;q=0.8", "br"),
        ("gzip;q=1, br;q=0.5", "gzip"),
        ("gzip, br", "br"),
        ("br;q=0, gzip", "gzip"),
        ("br;q=0, gzip;q=0", None),
        ("*", "br"),
        ("*;q=0", None),
        ("identity", None),
        ("", None),
        ("gzip;q=0.5, identity;q=1", None),
        ("BR", "br"),
        ("deflate", None),
        ("gzip;q=0.001", "gzip"),
        ("br;q=1.5, gzip", "gzip"),
        ("br;q=0.0, *;q=0.3", "gzip"),
        (" gzip ; q=0.9 , br ; q=0.8 ", "gzip"),
        ("x-gzip", None),
    ]

    def body_of(self, coding, name="app.js"):
        suffix = {"br": ".br", "gzip": ".gz", None: ""}[coding]
        with open(self.path(name + suffix), "rb") as f:
            return f.read()

    def test_accept_encoding_picks_the_twin(self):
        for accept, coding in self.CHOICES:
            with self.subTest(accept_encoding=accept):
                resp = self.get("/static/app.js", {"Accept-Encoding": accept})
                self.assertEqual(resp.status, 200)
                self.assertEqual(resp.header("Content-Encoding"), coding)
                self.assertEqual(resp.header("Vary"), "Accept-Encoding")
                self.assertEqual(resp.header("Content-Type"), "application/javascript")
                self.assertEqual(resp.body, self.body_of(coding))

    def test_a_file_with_one_twin_and_one_without(self):
        resp = self.get("/static/only-gz.txt", {"Accept-Encoding": "br, gzip"})
        self.assertEqual(resp.header("Content-Encoding"), "gzip")
        self.assertEqual(gzip.decompress(resp.body), self.files["only-gz.txt"])
        resp = self.get("/static/photo.webp", {"Accept-Encoding": "br, gzip"})
        self.assertIsNone(resp.header("Content-Encoding"))
        self.assertEqual(resp.body, self.files["photo.webp"])

    def test_twins_older_than_their_file_are_not_served(self):
        resp = self.get("/static/stale.css", {"Accept-Encoding": "br, gzip"})
        self.assertIsNone(resp.header("Content-Encoding"))
        self.assertEqual(resp.body, self.files["stale.css"])

    def test_twins_have_their_own_validators_and_ranges(self):
        plain = self.get("/static/app.js")
        br = self.get("/static/app.js", {"Accept-Encoding": "br"})
        self.assertNotEqual(plain.header("ETag"), br.header("ETag"))
        resp = self.get("/static/app.js", {"Accept-Encoding": "br", "If-None-Match": br.header("ETag")})
        self.assertEqual(resp.status, 304)
        resp = self.get("/static/app.js", {"Accept-Encoding": "br", "Range": "bytes=0-9"})
        self.assertEqual((resp.status, resp.body), (206, self.body_of("br")[:10]))

    def test_curl_decodes_each_twin_to_the_original(self):
        for accept in ("br", "gzip", "br;q=1, gzip;q=0.8"):
            with self.subTest(accept_encoding=accept):
                done = curl("--compressed", "-H", f"Accept-Encoding: {accept}", self.url("/static/app.js"))
                self.assertEqual(done.stdout, self.files["app.js"])
        done = curl("--http2-prior-knowledge", "--compressed", self.url("/static/app.js"))
        self.assertEqual(done.stdout, self.files["app.js"])


class HTTP2Test(StaticTestCase):
    def test_h2_serves_files_twins_and_ranges(self):
        with H2Conn(self.server.port) as conn:
            resp = conn.fetch("GET", "/static/app.js", headers=[("accept-encoding", "br;q=1, gzip;q=0.8")])
            self.assertEqual(resp.status, 200)
            self.assertEqual(resp.header("content-encoding"), "br")
            with open(self.path("app.js.br"), "rb") as f:
                self.assertEqual(resp.body, f.read())
            resp = conn.fetch("GET", "/static/page.css", headers=[("range", "bytes=10-19")])
            self.assertEqual((resp.status, resp.body), (206, self.files["page.css"][10:20]))
            resp = conn.fetch("HEAD", "/static/app.js")
            self.assertEqual((resp.header("content-length"), resp.body), (str(len(self.files["app.js"])), b""))
            resp = conn.fetch("GET", "/static/empty.txt")
            self.assertEqual((resp.status, resp.body), (200, b""))

    def test_many_streams_at_once(self):
        names = ["page.css", "app.js", "photo.webp", "data.json", "index.html"] * 8
        with H2Conn(self.server.port) as conn:
            streams = conn.fetch_many([("GET", "/static/" + n) for n in names])
        self.assertEqual([s.response().body for s in streams], [self.files[n] for n in names])

    def test_nghttp_fetches_with_br(self):
        require_tool(self, "nghttp")
        done = run_client(["nghttp", "-v", "-H", "accept-encoding: br", self.url("/static/app.js")])
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(b"recv (stream_id=13) content-encoding: br" in done.stdout, done.stdout[:3000])
        with open(self.path("app.js.br"), "rb") as f:
            self.assertTrue(f.read() in done.stdout, "the .br file's bytes")


class LargeFilesTest(StaticTestCase):
    def test_100_mib_by_hash_over_http1_and_h2c(self):
        expected = sha256_file(self.path("big.bin"))
        for flags in ((), ("--http2-prior-knowledge",)):
            with self.subTest(flags=flags):
                done = curl(*flags, self.url("/static/big.bin"), timeout=120)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(hashlib.sha256(done.stdout).hexdigest(), expected)

    def test_a_slow_reader_costs_the_server_no_memory(self):
        """The file is sent as the client takes it: a reader that stops after
        the head leaves the server with its socket buffers, not 100 MiB."""
        rss = self.server.rss_kib()
        conn = self.connect(rcvbuf=64 * 1024)
        conn.request("GET", "/static/big.bin")
        conn.read_response(head_only=True)
        time.sleep(0.5)
        self.assertLess(self.server.rss_kib() - rss, 32 * 1024)
        h2 = H2Conn(self.server.port, rcvbuf=64 * 1024)
        self.addCleanup(h2.close)
        h2.request("GET", "/static/big.bin")
        time.sleep(0.5)
        self.assertLess(self.server.rss_kib() - rss, 32 * 1024)
        self.assert_serves_ping()

    def test_a_file_replaced_during_a_download_is_sent_as_it_was(self):
        source = self.path("big.bin")
        work = self.path("moving.bin")
        shutil.copyfile(source, work)
        expected = sha256_file(work)
        with socket.create_connection(("127.0.0.1", self.server.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.sendall(b"GET /static/moving.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            first = sock.recv(65536)
            with open(work + ".new", "wb") as f:
                f.write(b"replacement\n")
            os.replace(work + ".new", work)
            data = first + self.read_to(sock, BIG_SIZE + len(first.split(b"\r\n\r\n", 1)[0]) + 4 - len(first))
        head, body = data.split(b"\r\n\r\n", 1)
        self.assertIn(b"Content-Length: %d" % BIG_SIZE, head)
        self.assertEqual(hashlib.sha256(body).hexdigest(), expected)
        self.served_within("/static/moving.bin", b"replacement\n", 3)

    def test_a_file_cut_short_during_a_download_ends_the_connection(self):
        work = self.path("shrinking.bin")
        shutil.copyfile(self.path("big.bin"), work)
        with socket.create_connection(("127.0.0.1", self.server.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.settimeout(10)
            sock.sendall(b"GET /static/shrinking.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            got = len(sock.recv(65536))
            os.truncate(work, 1 << 20)
            while True:
                piece = sock.recv(1 << 20)
                if not piece:
                    break
                got += len(piece)
        self.assertLess(got, BIG_SIZE, "the connection closed before the promised length")
        self.assert_serves_ping()

    @staticmethod
    def read_to(sock, n):
        sock.settimeout(30)
        chunks = []
        while n > 0:
            piece = sock.recv(min(n, 1 << 20))
            if not piece:
                break
            chunks.append(piece)
            n -= len(piece)
        return b"".join(chunks)


class TlsTest(unittest.TestCase):
    """The same files through TLS: xKit's record layer and OpenSSL's."""

    @classmethod
    def setUpClass(cls):
        cls.top = tempfile.mkdtemp(prefix="xk-static-tls-")
        cls.root, cls.files = build_tree(cls.top)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.top, ignore_errors=True)

    def check_server(self, *options):
        server = start_https(self, CERTS.rsa, "--static", self.root, "--workers", "1", *options)
        expected = sha256_file(os.path.join(self.root, "big.bin"))
        for flags in (("--http1.1",), ("--http2",)):
            with self.subTest(options=options, flags=flags):
                done = curl("-k", *flags, f"https://127.0.0.1:{server.port}/static/big.bin", timeout=120)
                self.assertEqual(done.returncode, 0, done.stderr)
                self.assertEqual(hashlib.sha256(done.stdout).hexdigest(), expected)
                done = curl(
                    "-k",
                    *flags,
                    "--compressed",
                    "-H",
                    "Accept-Encoding: br;q=1, gzip;q=0.8",
                    f"https://127.0.0.1:{server.port}/static/app.js",
                )
                self.assertEqual(done.stdout, self.files["app.js"])
                done = curl("-k", *flags, "-r", "70000-89999", f"https://127.0.0.1:{server.port}/static/app.js")
                self.assertEqual(done.stdout, self.files["app.js"][70000:90000])
        with TlsConn(server.port, client_context()) as conn:
            conn.request("GET", "/static/page.css")
            resp = conn.read_response()
            self.assertEqual((resp.status, resp.body), (200, self.files["page.css"]))
        require_tool(self, "nghttp")
        done = run_client(
            ["nghttp", "-v", "-H", "accept-encoding: br", f"https://127.0.0.1:{server.port}/static/app.js"]
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(b"content-encoding: br" in done.stdout, done.stdout[:3000])
        with open(os.path.join(self.root, "app.js.br"), "rb") as f:
            self.assertTrue(f.read() in done.stdout, "the .br file's bytes over HTTPS/2")
        server.stop_and_check()

    def test_xkit_records(self):
        self.check_server()

    def test_openssl_records(self):
        self.check_server("--openssl-records")


if __name__ == "__main__":
    unittest.main()
