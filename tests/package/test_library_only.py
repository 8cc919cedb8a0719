"""xKit as a user installs it, on a system that has neither Python nor Go.

In a minimal Debian root with nothing but gcc, make, cmake, pkg-config and the
library's -dev packages, a library-only build (-DXK_BUILD_TESTS=OFF
-DXK_BUILD_BENCHMARKS=OFF) of the library's sources builds, builds no bench
server, and installs into /usr/local, a standard prefix. Then
examples/hello_server.c is built against the installed package four ways:
pkg-config and find_package, each shared (the default) and static (on request);
each links as asked, runs with neither LD_LIBRARY_PATH nor an RPATH, and serves.

The root is Debian of the host's release made by debootstrap --variant=minbase.
Making it needs root, debootstrap (scripts/install-deps.sh installs it) and
Debian's package mirror (XK_DEBIAN_MIRROR, default http://deb.debian.org/debian),
about a minute: the first run makes it once and keeps it as a tarball in the
build folder (package-root/), and every run unpacks a fresh copy of that (a few
seconds), so nothing installed by one run is seen by the next. Where the root
cannot be made, the test fails and says why.
"""

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.request

from support.harness import ServerProcess

BUILD_DIR = os.environ.get("XK_BUILD_DIR", "")
SOURCE_DIR = os.environ.get("XK_SOURCE_DIR", "")
MIRROR = os.environ.get("XK_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# What building and using the library needs; nothing else goes into the root.
PACKAGES = tuple(
    "gcc libc6-dev make cmake pkg-config libssl-dev zlib1g-dev libbrotli-dev liburing-dev".split()
    + "libpq-dev libhiredis-dev libngtcp2-dev libngtcp2-crypto-gnutls-dev libgnutls28-dev libc-ares-dev".split()
)
ROOT_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
# What the library needs from the source tree: tests/, bench/ and the rest stay out of the root.
LIBRARY_SOURCES = ("CMakeLists.txt", "cmake", "include", "src")
CONSUMER_CMAKE = """cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(xkit 0.3 REQUIRED)
add_executable(hello_find_package hello_server.c)
target_link_libraries(hello_find_package PRIVATE xkit::xkit)
add_executable(hello_find_package_static hello_server.c)
target_link_libraries(hello_find_package_static PRIVATE xkit::xkit_static)
"""


def run(argv, timeout=600, **kw):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if done.returncode != 0:
        raise AssertionError(f"{argv} exited with {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def remove_tree(path):
    """Removes a root made or unpacked here, refusing where anything is mounted beneath it (a
    /dev bound in, say), which rmtree would walk into."""
    with open("/proc/self/mountinfo") as f:
        mounted = [line.split()[4] for line in f]
    inside = [m for m in mounted if m == path or m.startswith(path.rstrip("/") + "/")]
    if inside:
        raise AssertionError(f"not removing {path}: mounted beneath it: {inside}")
    shutil.rmtree(path, ignore_errors=True)


def host_release():
    with open("/etc/os-release") as f:
        fields = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    name, codename = fields.get("ID", "").strip('"'), fields.get("VERSION_CODENAME", "").strip('"')
    if name != "debian" or not codename:
        raise AssertionError(f"the root is made with debootstrap from Debian's mirror; this host is {name!r}")
    return codename


def root_tarball():
    """The root's tarball in the build folder, made by debootstrap the first time."""
    codename = host_release()
    key = hashlib.sha256(" ".join((codename, MIRROR, *PACKAGES)).encode()).hexdigest()[:12]
    cache = os.path.join(BUILD_DIR, "package-root")
    tarball = os.path.join(cache, f"debian-{codename}-{key}.tar")
    if os.path.exists(tarball):
        return tarball
    if os.geteuid() != 0:
        raise AssertionError("making the Debian root (debootstrap) and entering it (chroot) need root")
    debootstrap = shutil.which("debootstrap") or shutil.which("debootstrap", path="/usr/sbin:/sbin")
    if debootstrap is None:
        raise AssertionError("debootstrap is missing: scripts/install-deps.sh installs it (Debian's debootstrap)")
    os.makedirs(cache, exist_ok=True)
    for stale in glob.glob(os.path.join(cache, "debian-*.tar")):
        os.remove(stale)  # made for another release, mirror or package list
    staging = tempfile.mkdtemp(prefix="making-", dir=cache)
    try:
        root = os.path.join(staging, "root")
        # In a mount namespace of its own, so what debootstrap mounts in the root (/proc, and
        # /dev's nodes inside a container) is gone when it ends, whatever happens.
        run(
            ["unshare", "--mount", "--", debootstrap, "--variant=minbase", "--include=" + ",".join(PACKAGES)]
            + [codename, root, MIRROR],
            timeout=900,
        )
        for deb in glob.glob(os.path.join(root, "var/cache/apt/archives/*.deb")):
            os.remove(deb)
        run(["tar", "-C", root, "-cf", tarball + ".part", "."])
        os.replace(tarball + ".part", tarball)
    finally:
        remove_tree(staging)
    return tarball


class LibraryOnlyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not (BUILD_DIR and SOURCE_DIR):
            raise RuntimeError("XK_BUILD_DIR and XK_SOURCE_DIR are not set; run through ctest")
        tarball = root_tarball()
        cls.tmp = tempfile.mkdtemp(prefix="run-", dir=os.path.dirname(tarball))
        try:
            cls.root = os.path.join(cls.tmp, "root")
            os.mkdir(cls.root)
            run(["tar", "-C", cls.root, "-xf", tarball])
            for name in LIBRARY_SOURCES:
                source, target = os.path.join(SOURCE_DIR, name), os.path.join(cls.root, "usr/src/xkit", name)
                if os.path.isdir(source):
                    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copy(source, target)
            consumer = os.path.join(cls.root, "usr/src/consumer")
            os.makedirs(consumer)
            shutil.copy(os.path.join(SOURCE_DIR, "examples", "hello_server.c"), consumer)
            with open(os.path.join(consumer, "CMakeLists.txt"), "w") as f:
                f.write(CONSUMER_CMAKE)
            cls.build_output = cls.in_root(
                "cmake -S /usr/src/xkit -B /usr/src/xkit-build -DXK_BUILD_TESTS=OFF -DXK_BUILD_BENCHMARKS=OFF\n"
                f"nice cmake --build /usr/src/xkit-build --parallel {os.cpu_count() or 2}\n"
                "cmake --install /usr/src/xkit-build\n"
            )
        except BaseException:
            remove_tree(cls.tmp)
            raise

    @classmethod
    def tearDownClass(cls):
        remove_tree(cls.tmp)

    @classmethod
    def in_root(cls, script):
        """Runs a shell script in the root, with a clean environment (no LD_LIBRARY_PATH)."""
        return run(["chroot", cls.root, "/bin/sh", "-ec", script], env=ROOT_ENV)

    def serves_hello(self, program):
        server = ServerProcess(argv=["env", "-i", f"PATH={ROOT_ENV['PATH']}", "chroot", self.root, program, "0"])
        server.start()
        try:
            with urllib.request.urlopen(server.url("/hello/chroot"), timeout=5) as r:
                self.assertEqual(r.read(), b"Hello, chroot!\n")
            server.stop_and_check()
        finally:
            server.close()

    def assert_links(self, program, shared):
        libraries = self.in_root(f"ldd {program}")
        if shared:
            self.assertRegex(libraries, r"libxkit\.so\.0\.3 => /usr/local/lib/libxkit\.so\.0\.3 ")
        else:
            self.assertNotIn("libxkit", libraries)
        dynamic = self.in_root(f"readelf -d {program}")
        self.assertNotRegex(dynamic, r"\((RPATH|RUNPATH)\)", "found through ld.so's cache, not a path in the program")

    def test_root_has_neither_python_nor_go(self):
        found = [
            path
            for folder in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/go/bin")
            for path in glob.glob(os.path.join(self.root, folder, "*"))
            if os.path.basename(path).startswith("python") or os.path.basename(path) in ("go", "gofmt")
        ]
        self.assertEqual(found, [])
        self.assertFalse(os.path.exists(os.path.join(self.root, "usr/include/nghttp2")), "nghttp2's headers")

    def test_library_only_build_needs_no_python_and_builds_no_bench_server(self):
        build = os.path.join(self.root, "usr/src/xkit-build")
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            cache = f.read()
        self.assertNotIn("Python", cache)
        for folder in ("bench", "tests", "examples", "arena"):
            self.assertFalse(os.path.exists(os.path.join(build, folder)), folder)
        # Executables but the library (and CMake's own probes in CMakeFiles/).
        built = [os.path.join(top, name) for top, _, names in os.walk(build) for name in names]
        programs = [
            os.path.relpath(path, build)
            for path in built
            if os.access(path, os.X_OK) and not os.path.islink(path) and ".so" not in os.path.basename(path)
        ]
        self.assertEqual([p for p in programs if not p.startswith("CMakeFiles/")], [])

    def test_install_puts_the_library_in_the_linkers_cache(self):
        # cmake --install ran ldconfig, as installing straight into /usr/local does.
        self.assertIn("Refreshing the dynamic linker's cache", self.build_output)
        self.assertRegex(self.in_root("ldconfig -p"), r"libxkit\.so\.0\.3 \(.*\) => /usr/local/lib/libxkit\.so\.0\.3\n")
        self.assertIn("Library soname: [libxkit.so.0.3]", self.in_root("readelf -d /usr/local/lib/libxkit.so"))

    def test_pkg_config_links_the_shared_library_by_default(self):
        self.in_root("cd /usr/src/consumer && cc hello_server.c -o hello_pkg_config $(pkg-config --cflags --libs xkit)")
        self.assert_links("/usr/src/consumer/hello_pkg_config", shared=True)
        self.serves_hello("/usr/src/consumer/hello_pkg_config")

    def test_pkg_config_links_the_static_library_on_request(self):
        self.in_root(
            "cd /usr/src/consumer && "
            "cc hello_server.c -o hello_pkg_config_static $(pkg-config --cflags --libs xkit-static)"
        )
        self.assert_links("/usr/src/consumer/hello_pkg_config_static", shared=False)
        self.serves_hello("/usr/src/consumer/hello_pkg_config_static")

    def test_find_package_links_shared_by_default_and_static_on_request(self):
        # No RPATH in the programs, so the shared one is found as an installed program finds it.
        self.in_root(
            "cmake -S /usr/src/consumer -B /usr/src/consumer/build -DCMAKE_SKIP_RPATH=ON\n"
            "cmake --build /usr/src/consumer/build\n"
        )
        self.assert_links("/usr/src/consumer/build/hello_find_package", shared=True)
        self.serves_hello("/usr/src/consumer/build/hello_find_package")
        self.assert_links("/usr/src/consumer/build/hello_find_package_static", shared=False)
        self.serves_hello("/usr/src/consumer/build/hello_find_package_static")


if __name__ == "__main__":
    unittest.main()
